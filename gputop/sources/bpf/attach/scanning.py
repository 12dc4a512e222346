"""Scans: every process's executable maps read (discovery.py), the new CUDA objects among them
probed (attaching.py), their code ranges put in for each process that maps them, and what user space
then knows of each process noted in the process table (lifecycle/proctable.py)."""

from __future__ import annotations

import time

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.attach.attaching import Attacher
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.names.naming import Naming
from gputop.sources.bpf.pystacks.sites import CallSites


class Scanner:
    def __init__(self, procs: ProcTable, attacher: Attacher, names: Naming, sites: CallSites | None = None) -> None:
        self._procs = procs          # what user space knows of each process (proctable.py): its methods change it
        self._attacher = attacher
        self._names = names
        self._sites = sites          # call sites: each CUDA process's CPython described to the BPF side

    def scan(self, pids: list[int] | None) -> int:
        """Probe new CUDA objects mapped by ``pids`` (None: all processes); returns how many."""
        with self._procs.scanning():
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
                procs.mark_partial(users)
        for pid, pmaps in maps.items():
            self._names.keep_unmapped(pid, procs.maps.get(pid), pmaps)
        procs.saw_maps(maps)
        procs.update_cuda(list(procs.maps) if new else maps, attacher.objects)
        for pid, pmaps in maps.items():
            procs.scan_done(pid, before_ns)
            attacher.code.add(pid, pmaps)
        if self._sites is not None:
            cuda = attacher.code.pids()
            for pid, pmaps in maps.items():
                if pid in cuda:
                    self._sites.add(pid, procs.scanned(pid), pmaps)
        return new

    def attach_read(self) -> int:
        """Probe the objects whose reads finished after their scan stopped waiting."""
        new = 0
        for ref in self._attacher.finished():
            users = self._procs.users(ref.key)
            if self._attacher.attach(ref, users):
                new += 1
                self._procs.mark_partial(users)
        if new:
            self._procs.update_cuda(list(self._procs.maps), self._attacher.objects)
        return new
