"""Scans: every process's executable maps read (discovery.py), the new CUDA objects among them
probed (attaching.py), their code ranges put in for each process that maps them, and what user space
then knows of each process (``ProcMaps``)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.attach.attaching import Attacher, ObjectKey
from gputop.sources.bpf.lifecycle.generations import Generations
from gputop.sources.bpf.names.naming import Naming


class ProcMaps:
    """What user space knows of each process it scanned, by PID."""

    def __init__(self) -> None:
        self.maps: dict[int, list[discovery.Mapping]] = {}   # last known executable maps by pid
        self.cuda_pids: set[int] = set()         # processes whose known maps hold a probed object
        self.partial: set[int] = set()           # processes already running CUDA when gputop attached
        self.scanned_ns: dict[int, int] = {}     # CLOCK_MONOTONIC ns of each process's last scan

    def users(self, key: ObjectKey) -> dict[int, list[discovery.Mapping]]:
        """The processes whose known maps hold the object ``key``, with their maps."""
        return {p: pm for p, pm in self.maps.items() if any((m.dev, m.inode) == key for m in pm)}

    def mapped(self) -> set[ObjectKey]:
        """Every object some known process maps."""
        return {(m.dev, m.inode) for pmaps in self.maps.values() for m in pmaps}

    def drop(self, pid: int) -> None:
        self.maps.pop(pid, None)
        self.cuda_pids.discard(pid)
        self.scanned_ns.pop(pid, None)
        self.partial.discard(pid)


class Scanner:
    def __init__(self, procs: ProcMaps, attacher: Attacher, generations: Generations, names: Naming) -> None:
        self._procs = procs
        self._attacher = attacher
        self._generations = generations
        self._names = names

    def scan(self, pids: list[int] | None) -> int:
        """Probe new CUDA objects mapped by ``pids`` (None: all processes); returns how many."""
        with self._generations.scanning():
            return self._scan_maps(pids)

    def _scan_maps(self, pids: list[int] | None) -> int:
        procs, attacher = self._procs, self._attacher
        known = set(attacher.objects) | set(attacher.rejected)
        new = 0
        maps: dict[int, list[discovery.Mapping]] = {}
        before_ns = time.monotonic_ns()
        # every process's maps first: an object's code ranges go in for each process that maps it
        # before its probes are attached (a runtime's call into the driver never counts twice)
        for ref in list(discovery.scan(pids, skip=known, maps_out=maps)):
            users = {p: pm for p, pm in maps.items() if any((m.dev, m.inode) == ref.key for m in pm)}
            if attacher.attach(ref, users):
                new += 1
                # processes that map it already may have allocated before: their live bytes are unknown
                procs.partial.update(users)
        for pid, pmaps in maps.items():
            self._names.keep_unmapped(pid, procs.maps.get(pid), pmaps)
        procs.maps.update(maps)
        self._update_cuda_pids(procs.maps if new else maps)
        for pid, pmaps in maps.items():
            procs.scanned_ns[pid] = before_ns
            self._generations.hold(pid)
            attacher.code.add(pid, pmaps)
        return new

    def _update_cuda_pids(self, pids: Iterable[int]) -> None:
        """Whether each of ``pids`` maps a probed object, from its last known maps."""
        procs, objects = self._procs, self._attacher.objects
        for pid in pids:
            if any((m.dev, m.inode) in objects for m in procs.maps.get(pid, ())):
                procs.cuda_pids.add(pid)
            else:
                procs.cuda_pids.discard(pid)

    def attach_read(self) -> int:
        """Probe the objects whose reads finished after their scan stopped waiting."""
        new = 0
        for ref in self._attacher.finished():
            users = self._procs.users(ref.key)
            if self._attacher.attach(ref, users):
                new += 1
                self._procs.partial.update(users)
        if new:
            self._update_cuda_pids(self._procs.maps)
        return new
