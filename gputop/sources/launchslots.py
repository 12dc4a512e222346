"""User space's side of the launch fast path of bpf/gputop.bpf.c: launch slots and capture counters.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

#: struct kslot_t in u64 words: func, grid0, block0, launches0, launches, grid_sum, block_sum, grid
#: buckets and counts, block buckets and counts, owner
KS_GRID = 4
KS_BLOCK = 2
WORDS = 7 + 2 * KS_GRID + 2 * KS_BLOCK + 1
_GRID = 7                                    # first grid bucket word
_BLOCK = _GRID + 2 * KS_GRID                 # first block bucket word
_OWNER = WORDS - 1
READY = 1 << 32                              # owner = tgid | READY: the slot counts for (tgid, func)
NB = 32                                      # log2 buckets (bpf/gputop.bpf.c NB)
CAPTURES_FORGOTTEN = 2                       # capture_n[2]


@dataclass(frozen=True)
class KernelCount:
    """Counts of one (process, kernel): its ``kernels`` entry plus its slot."""
    launches: int
    grid_sum: int
    block_sum: int


@dataclass
class SlotCounts:
    """What the slots hold, by process."""
    #: pid -> [(kernel address, counts)]: entries and slots added up
    kernels: dict[int, list[tuple[int, KernelCount]]] = field(default_factory=dict)
    #: pid -> (grid buckets, block buckets) counted in slots (add the record's histograms)
    hists: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)

    def grid_hist(self, pid: int, record: Iterable[int]) -> tuple[int, ...]:
        extra = self.hists.get(pid)
        return tuple(int(x) + (extra[0][i] if extra else 0) for i, x in enumerate(record))

    def block_hist(self, pid: int, record: Iterable[int]) -> tuple[int, ...]:
        extra = self.hists.get(pid)
        return tuple(int(x) + (extra[1][i] if extra else 0) for i, x in enumerate(record))


_U64 = (1 << 64) - 1


def slot_of(tgid: int, func: int, n: int) -> int:
    """bpf/gputop.bpf.c kslot_of's slot of the pair (tgid, func) in an array of ``n`` (a power of two)."""
    return ((((func ^ (tgid << 40)) & _U64) * 0x9E3779B97F4A7C15 & _U64) >> 32) & (n - 1)


def log2_bucket(v: int) -> int:
    """bpf/gputop.bpf.c's log2_bucket: floor(log2(v)), 0 for 0, at most NB - 1."""
    return min(max(v.bit_length() - 1, 0), NB - 1)


class LaunchSlots:
    """The mapped slot array and the capture counters of one loaded program."""

    def __init__(self, table: Callable[[str], Any]) -> None:
        self._table = table
        self._mem: mmap.mmap | None = None
        self._words: memoryview | None = None
        self.forgotten_captures = 0
        #: kernels of processes as read for ``counts(entries, pids)`` (their exit): ``forget`` finds
        #: their slots by these; others' by a walk through every slot
        self._final_funcs: dict[int, set[int]] = {}

    def _map(self) -> memoryview:
        if self._words is None:
            t = self._table("kslots")
            assert ctypes.sizeof(t.Leaf) == 8 * WORDS, "struct kslot_t changed: update launchslots.WORDS"
            size = -(-int(t.max_entries) * 8 * WORDS // mmap.PAGESIZE) * mmap.PAGESIZE
            self._mem = mmap.mmap(t.map_fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._words = memoryview(self._mem).cast("Q")
        return self._words

    def _owned(self, words: memoryview, pids: set[int] | None) -> list[int]:
        """Indices of the slots that count for a process (of ``pids``, when given)."""
        owners = words[_OWNER::WORDS].tolist()
        return [i for i, o in enumerate(owners) if o >> 32 == 1 and (pids is None or o & 0xFFFFFFFF in pids)]

    @staticmethod
    def _owned_of(words: memoryview, funcs: dict[int, set[int]]) -> list[int]:
        """Indices of the slots that count for the processes of ``funcs`` (pid -> its kernels'
        addresses), without a walk through every slot: a pair's slot can only be the one its hash
        names, claimed after its kernels entry was made (bpf/gputop.bpf.c kslot_of)."""
        n = len(words) // WORDS
        out = set()
        for pid, fs in funcs.items():
            for f in fs:
                i = slot_of(pid, f, n)
                if words[i * WORDS + _OWNER] == pid | READY:
                    out.add(i)
        return sorted(out)

    def counts(self, entries: Iterable[tuple[Any, Any]], pids: set[int] | None = None) -> SlotCounts:
        """``entries`` (the ``kernels`` table's items, read first) with the slots added, by process."""
        merged: dict[int, dict[int, list[int]]] = {}
        for k, v in entries:
            pid = int(k.tgid)
            if pids is None or pid in pids:
                merged.setdefault(pid, {})[int(k.addr)] = [int(v.launches), int(v.grid_sum), int(v.block_sum)]
        out = SlotCounts()
        words = self._map()
        if pids is not None:
            funcs = {pid: set(merged.get(pid, ())) for pid in pids}
            self._final_funcs.update(funcs)
        for i in self._owned(words, None) if pids is None else self._owned_of(words, funcs):
            w = words[i * WORDS:(i + 1) * WORDS].tolist()
            pid = w[_OWNER] & 0xFFFFFFFF
            if w[_OWNER] >> 32 != 1:             # freed or claimed again since the owners were read
                continue
            func, grid0, block0, launches0 = w[0], w[1], w[2], w[3]
            c = merged.setdefault(pid, {}).setdefault(func, [0, 0, 0])
            c[0] += launches0 + w[4]
            c[1] += launches0 * grid0 + w[5]
            c[2] += launches0 * block0 + w[6]
            grid, block = out.hists.setdefault(pid, ([0] * NB, [0] * NB))
            grid[log2_bucket(grid0)] += launches0
            block[log2_bucket(block0)] += launches0
            for j in range(KS_GRID):
                if 0 < w[_GRID + j] <= NB:
                    grid[w[_GRID + j] - 1] += w[_GRID + KS_GRID + j]
            for j in range(KS_BLOCK):
                if 0 < w[_BLOCK + j] <= NB:
                    block[w[_BLOCK + j] - 1] += w[_BLOCK + KS_BLOCK + j]
        out.kernels = {pid: [(addr, KernelCount(*c)) for addr, c in ks.items()] for pid, ks in merged.items()}
        return out

    def forget(self, gone: set[int]) -> None:
        """Free the slots of processes that are gone, and count their captures as over."""
        words = self._map()
        known = {pid: self._final_funcs.pop(pid) for pid in gone if pid in self._final_funcs}
        unknown = gone - set(known)
        slots = self._owned_of(words, known) + (self._owned(words, unknown) if unknown else [])
        for i in slots:
            base = i * WORDS
            words[base:base + _OWNER] = memoryview(bytes(8 * _OWNER)).cast("Q")
            words[base + _OWNER] = 0
        table = self._table("capturing")
        deleted = 0
        for k in [k for k in table if int(k.tgid) in gone]:
            try:
                del table[k]
            except KeyError:                    # its end (another thread) deleted it first
                continue
            deleted += 1
        if deleted:
            self.forgotten_captures += deleted
            counters = self._table("capture_n")
            counters[counters.Key(CAPTURES_FORGOTTEN)] = counters.Leaf(self.forgotten_captures)

    def close(self) -> None:
        if self._words is not None:
            self._words.release()
            self._words = None
        if self._mem is not None:
            self._mem.close()
            self._mem = None
