"""A traced process's identity on the BPF side: (tgid, generation), not the PID alone.

The kernel may give an exited process's PID to a new process before gputop has read the old one's
last counts. The BPF program keeps a generation per PID (``pid_gen``: a byte, bumped when a traced
process under that PID exits; bpf/identity.bpf.h) and puts it in every key of a process's state, so the new process's
calls never reach the old one's counters. An identity packs both as ``tgid | gen << 32``: the key of
``procs`` and ``tracked``, and the first eight bytes (little-endian) of every (process, address) key;
the tries' keys hold tgid and gen big-endian; a launch slot's owner word holds gen from KS_GEN_SHIFT.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputop.sources.bpf.common.abi import GEN_MASK, GEN_SHIFT
from gputop.sources.bpf.common.linux import MappedArray

_PID_MASK = 0xFFFFFFFF
#: when /proc/sys/kernel/pid_max cannot be read: the largest pid_max Linux allows (2^22)
PID_MAX_LIMIT = 1 << 22


def ident(pid: int, gen: int) -> int:
    return pid | (gen & GEN_MASK) << GEN_SHIFT


def pid_of(ident_: int) -> int:
    return ident_ & _PID_MASK


def gen_of(ident_: int) -> int:
    return (ident_ >> GEN_SHIFT) & GEN_MASK


def key_ident(key: Any) -> int:
    """The identity in a (process, address) key (``tkey_t``/``gkey_t``: tgid, gen, ...); gen 0 in a program
    without generations (bench/probe_cost.py --before an older one, whose keys have ``pad``)."""
    return ident(int(key.tgid), int(getattr(key, "gen", 0)))


def pid_gen_words(path: str = "/proc/sys/kernel/pid_max") -> int:
    """Words of the BPF side's ``pid_gen`` array (eight generations a word) for the host's pid_max."""
    try:
        with open(path, "rb") as f:
            pid_max = int(f.read(32).strip() or b"0")
    except (OSError, ValueError):
        pid_max = 0
    pid_max = pid_max if 0 < pid_max <= PID_MAX_LIMIT else PID_MAX_LIMIT
    return (pid_max + 7) // 8


class PidGens:
    """The BPF side's ``pid_gen`` array, mapped into this process (no system call per read): PID p's
    generation is byte p of the array (eight to a little-endian word)."""

    def __init__(self, table: Callable[[str], Any]) -> None:
        self._table = table
        self._array = MappedArray()
        self._absent = False

    def _map(self) -> memoryview | None:
        if self._array.view is None and not self._absent:
            try:
                t = self._table("pid_gen")
            except KeyError:                # a program without generations (bench --before an older one)
                self._absent = True
                return None
            self._array.open(t, 8)
        return self._array.view

    def gen(self, pid: int) -> int:
        """The generation the BPF side gives ``pid`` now (the process that holds it, or the next one;
        0 for a PID above the array: pid_max raised since the load)."""
        view = self._map()
        return view[pid] if view is not None and 0 <= pid < len(view) else 0

    def snapshot(self) -> Callable[[int], int]:
        """Every PID's generation as it is now (a copy: what a scan that follows read maps under)."""
        view = self._map()
        copy = bytes(view) if view is not None else b""
        return lambda pid: copy[pid] if 0 <= pid < len(copy) else 0

    def close(self) -> None:
        self._array.close()


@dataclass(frozen=True)
class Doomed:
    """What to delete: these identities, and every generation of ``pids`` (processes gone without a
    generation to name: the sweep's, or a program without generations)."""
    idents: frozenset[int] = frozenset()
    pids: frozenset[int] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.idents or self.pids)

    def hit(self, ident_: int) -> bool:
        return ident_ in self.idents or pid_of(ident_) in self.pids

    def hit_pid_gen(self, pid: int, gen: int) -> bool:
        return self.hit(ident(pid, gen))

    @property
    def all_pids(self) -> frozenset[int]:
        return self.pids | {pid_of(i) for i in self.idents}
