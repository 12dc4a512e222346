"""User space's side of the launch fast path of bpf/launch.bpf.h: launch slots and capture counters.

A (process, kernel) pair counts its launches in a slot of the direct-mapped array ``kslots`` (an
inlined array lookup instead of a hash lookup per launch); its ``kernels`` entry holds the
launches made while the slot belonged to another pair. A slot keeps the shape (grid and block
sizes) of the pair's first launch and counts the launches of exactly that shape (one atomic add):
their sums are that count times the shape, their buckets the shape's. Other shapes have their own
launch count, sums and log2 buckets, in KS_GRID and KS_BLOCK bucket places; the process record's
histograms hold the rest. So a process's kernel counts are its entries plus its slots, and its
histograms its record's plus its slots'. Every figure is a sum of counters that only grow.

The array is mapped into this process (BPF_F_MMAPABLE): a read is a copy of memory, no system
call per slot. A process's slots are freed when gputop forgets the process: counters zeroed
first, the owner word (the slot's last) last, so the BPF side never claims a half-cleared slot.

Launches look for a graph capture only while the host has one under way: the counters
``capture_n`` (begun, ended, forgotten). The BPF side counts begun and ended; user space counts,
in ``forgotten``, the captures it deletes when a process exited capturing (each counter has one
writer: an update from here would race with the BPF side's atomic adds).
"""

from __future__ import annotations

import ctypes
import mmap
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gputop.sources.bpf.common.abi import CAPTURES_FORGOTTEN, KS_BLOCK, KS_GEN_SHIFT, KS_GRID, NB
from gputop.sources.bpf.common.abi import KS_READY as READY
from gputop.sources.bpf.common.linux import MappedArray
from gputop.sources.bpf.lifecycle.procid import Doomed, gen_of, ident, key_ident, pid_of

# struct kslot_t: its u64 words, the offsets taken from the struct as the program declares it (the
# table's ctypes type, from bcc): WORDS, then the word of each field used here
_FIELDS = ("func", "grid0", "block0", "launches0", "launches", "grid_sum", "block_sum", "grid_bucket",
           "grid_count", "block_bucket", "block_count", "owner")


@dataclass(frozen=True)
class Layout:
    words: int
    at: dict[str, int]          # field -> its first word

    @classmethod
    def of(cls, leaf: Any) -> Layout:
        assert ctypes.sizeof(leaf) % 8 == 0
        return cls(ctypes.sizeof(leaf) // 8, {f: getattr(leaf, f).offset // 8 for f in _FIELDS})


@dataclass(frozen=True)
class KernelCount:
    """Counts of one (process, kernel): its ``kernels`` entry plus its slot."""
    launches: int
    grid_sum: int
    block_sum: int


@dataclass
class SlotCounts:
    """What the slots hold, by process identity (procid: tgid and generation)."""
    #: identity -> [(kernel address, counts)]: entries and slots added up
    kernels: dict[int, list[tuple[int, KernelCount]]] = field(default_factory=dict)
    #: identity -> (grid buckets, block buckets) counted in slots (add the record's histograms)
    hists: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)

    def grid_hist(self, me: int, record: Iterable[int]) -> tuple[int, ...]:
        extra = self.hists.get(me)
        return tuple(int(x) + (extra[0][i] if extra else 0) for i, x in enumerate(record))

    def block_hist(self, me: int, record: Iterable[int]) -> tuple[int, ...]:
        extra = self.hists.get(me)
        return tuple(int(x) + (extra[1][i] if extra else 0) for i, x in enumerate(record))


_U64 = (1 << 64) - 1
_FLAGS = (1 << (KS_GEN_SHIFT - 32)) - 1     # the owner word's flag bits, above the tgid


def owner_of(me: int) -> int:
    """The owner word of a slot that counts for process ``me`` (kslot_of's ``mine``)."""
    return pid_of(me) | gen_of(me) << KS_GEN_SHIFT | READY


def _ready_ident(owner: int) -> int | None:
    """The identity of a slot's owner when the slot counts (set up), else None."""
    if (owner >> 32) & _FLAGS != READY >> 32:
        return None
    return ident(owner & 0xFFFFFFFF, owner >> KS_GEN_SHIFT)


def slot_of(tgid: int, func: int, n: int) -> int:
    """bpf/launch.bpf.h kslot_of's slot of the pair (tgid, func) in an array of ``n`` (a power of two)."""
    return ((((func ^ (tgid << 40)) & _U64) * 0x9E3779B97F4A7C15 & _U64) >> 32) & (n - 1)


def log2_bucket(v: int) -> int:
    """bpf/bits.bpf.h's log2_bucket: floor(log2(v)), 0 for 0, at most NB - 1."""
    return min(max(v.bit_length() - 1, 0), NB - 1)


class LaunchSlots:
    """The mapped slot array and the capture counters of one loaded program."""

    def __init__(self, table: Callable[[str], Any]) -> None:
        self._table = table
        self._array = MappedArray()
        self._words: memoryview | None = None
        self._layout = Layout(0, {})
        self.forgotten_captures = 0
        #: kernels of processes as read for ``counts(entries, idents)`` (their exit): ``forget`` finds
        #: their slots by these; others' by a walk through every slot
        self._final_funcs: dict[int, set[int]] = {}

    def _map(self) -> memoryview:
        if self._words is None:
            t = self._table("kslots")
            self._layout = Layout.of(t.Leaf)
            self._words = self._array.open(t, 8 * self._layout.words, mmap.PROT_READ | mmap.PROT_WRITE).cast("Q")
        return self._words

    def _owned(self, words: memoryview, doomed: Doomed | None) -> list[int]:
        """Indices of the slots that count for a process (of ``doomed``, when given)."""
        lay = self._layout
        owners = words[lay.at["owner"]::lay.words].tolist()
        # (a free slot's owner word is 0: skipped before the call, most of the array on most hosts)
        return [i for i, o in enumerate(owners)
                if o and (me := _ready_ident(o)) is not None and (doomed is None or doomed.hit(me))]

    def _owned_of(self, words: memoryview, funcs: dict[int, set[int]]) -> list[int]:
        """Indices of the slots that count for the processes of ``funcs`` (identity -> its kernels'
        addresses), without a walk through every slot: a pair's slot can only be the one its hash
        names, claimed after its kernels entry was made (bpf/launch.bpf.h kslot_of)."""
        lay = self._layout
        n = len(words) // lay.words
        out = set()
        for me, fs in funcs.items():
            for f in fs:
                i = slot_of(pid_of(me), f, n)
                if words[i * lay.words + lay.at["owner"]] == owner_of(me):
                    out.add(i)
        return sorted(out)

    def counts(self, entries: Iterable[tuple[Any, Any]], idents: set[int] | None = None) -> SlotCounts:
        """``entries`` (the ``kernels`` table's items, read first) with the slots added, by process
        identity (of ``idents`` only, when given)."""
        merged: dict[int, dict[int, list[int]]] = {}
        for k, v in entries:
            me = key_ident(k)
            if idents is None or me in idents:
                merged.setdefault(me, {})[int(k.addr)] = [int(v.launches), int(v.grid_sum), int(v.block_sum)]
        out = SlotCounts()
        words = self._map()
        lay, at = self._layout, self._layout.at
        if idents is not None:
            funcs = {me: set(merged.get(me, ())) for me in idents}
            self._final_funcs.update(funcs)
        for i in self._owned(words, None) if idents is None else self._owned_of(words, funcs):
            w = words[i * lay.words:(i + 1) * lay.words].tolist()
            owner = _ready_ident(w[at["owner"]])
            if owner is None:                    # freed or claimed again since the owners were read
                continue
            grid0, block0, launches0 = w[at["grid0"]], w[at["block0"]], w[at["launches0"]]
            c = merged.setdefault(owner, {}).setdefault(w[at["func"]], [0, 0, 0])
            c[0] += launches0 + w[at["launches"]]
            c[1] += launches0 * grid0 + w[at["grid_sum"]]
            c[2] += launches0 * block0 + w[at["block_sum"]]
            grid, block = out.hists.setdefault(owner, ([0] * NB, [0] * NB))
            grid[log2_bucket(grid0)] += launches0
            block[log2_bucket(block0)] += launches0
            for hist, bucket, count, n in ((grid, at["grid_bucket"], at["grid_count"], KS_GRID),
                                           (block, at["block_bucket"], at["block_count"], KS_BLOCK)):
                for j in range(n):
                    if 0 < w[bucket + j] <= NB:
                        hist[w[bucket + j] - 1] += w[count + j]
        out.kernels = {me: [(addr, KernelCount(*c)) for addr, c in ks.items()] for me, ks in merged.items()}
        return out

    def forget(self, doomed: Doomed) -> Counter[int]:
        """Free the slots of processes that are gone, and count their captures as over; the captures
        deleted, by process identity."""
        words = self._map()
        known = {me: self._final_funcs.pop(me) for me in doomed.idents if me in self._final_funcs}
        unknown = Doomed(doomed.idents - set(known), doomed.pids)
        slots = self._owned_of(words, known) + (self._owned(words, unknown) if unknown else [])
        lay = self._layout
        owner = lay.at["owner"]
        assert owner == lay.words - 1, "struct kslot_t: the owner word must come last (it is cleared last)"
        for i in slots:
            base = i * lay.words
            words[base:base + owner] = memoryview(bytes(8 * owner)).cast("Q")
            words[base + owner] = 0
        table = self._table("capturing")
        deleted: Counter[int] = Counter()
        for k in [k for k in table if doomed.hit(key_ident(k))]:
            try:
                del table[k]
            except KeyError:                    # its end (another thread) deleted it first
                continue
            deleted[key_ident(k)] += 1
        if deleted:
            self.forgotten_captures += sum(deleted.values())
            counters = self._table("capture_n")
            counters[counters.Key(CAPTURES_FORGOTTEN)] = counters.Leaf(self.forgotten_captures)
        return deleted

    def close(self) -> None:
        if self._words is not None:
            self._words.release()
            self._words = None
        self._array.close()
