"""Where the CUDA runtime's and driver's code lies in each process, told to the BPF side: the ``code``
trie (a driver call made from CUDA code is the runtime's, not counted twice), the ``tracked`` table
(processes whose exit the kernel reports) and the ``layers`` switch (a driver-level layer is probed:
rule 7 of docs/collector.md, "Each launch counted once"). Only user space writes the trie."""

from __future__ import annotations

import contextlib
import ctypes
from collections import Counter
from collections.abc import Callable
from typing import Any

from gputop.sources.bpf.attach import discovery, symbols
from gputop.sources.bpf.common.abi import CODE_CUDA, CODE_LAYER
from gputop.sources.bpf.common.linux import aligned_blocks
from gputop.sources.bpf.lifecycle.procid import Doomed, ident
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.lifecycle.shares import Tenant, tenant_of_pid


class CodeRanges:
    def __init__(self, table: Callable[[str], Any], procs: ProcTable,
                 probed: Callable[[tuple[int, int]], symbols.ObjectSymbols | None], share: int,
                 tenant_of: Callable[[int], Tenant | None] = tenant_of_pid) -> None:
        self._table = table
        self._procs = procs
        self._probed = probed           # a probed object's symbols (None: not probed, or not read)
        self.done: set[tuple[int, int, tuple[int, int]]] = set()     # (pid, mapping start, object) put in
        self.dropped = 0
        #: a tenant's share of the trie (entries: docs/SECURITY.md, "Fair share"), what each holds, the
        #: tenant of each process with entries, and the mappings each tenant lost to its share or a full trie
        self._share = share
        self.tenant_of = tenant_of        # the tenant of a process (shares.tenant_of_pid)
        self._held: Counter[Tenant] = Counter()
        self._owner: dict[int, Tenant] = {}
        self.lost: Counter[Tenant] = Counter()
        self._layers = False        # the BPF side told a driver-level layer is probed (rule 7)
        #: the keys of the ``code`` trie by process: only user space writes that trie, so a
        #: process's entries are deleted by key, without a walk through everyone's
        self._keys: dict[int, list[bytes]] = {}

    def _layers_on(self) -> None:
        """A driver-level layer's code is in a process: the BPF side checks for its tail calls (rule 7)."""
        if not self._layers:
            with contextlib.suppress(KeyError):     # a program without the map (bench/probe_cost.py --before)
                self._table("layers")[ctypes.c_int(0)] = ctypes.c_uint32(1)
            self._layers = True

    def add(self, pid: int, maps: list[discovery.Mapping]) -> None:
        """Tell the BPF side where the runtime's and driver's code lies in ``pid`` (see code_kind)."""
        code = self._table("code")
        gen = self._procs.scanned(pid)
        me = ident(pid, gen)
        tenant = self._owner.get(me)        # read at the process's first entry
        # the key's owner: tgid and generation, big-endian (tgid alone in a program without generations)
        owner = pid.to_bytes(4, "big") + (gen.to_bytes(4, "big") if len(code.Key().data) == 16 else b"")
        added = False
        for m in maps:
            key = (m.dev, m.inode)
            syms = self._probed(key)
            if syms is None or (pid, m.start, key) in self.done:
                continue
            self.done.add((pid, m.start, key))
            kind = ctypes.c_uint32(CODE_LAYER if syms.driver_layer else CODE_CUDA)
            if kind.value == CODE_LAYER:
                self._layers_on()
            for start, end in syms.cuda_code_runs():
                lo, hi = syms.offset_of_vaddr(start), syms.offset_of_vaddr(end - 1)
                if lo is None or hi is None:
                    continue
                lo, hi = max(lo, m.offset), min(hi + 1, m.offset + (m.end - m.start))
                if lo >= hi:
                    continue
                for addr, bits in aligned_blocks(m.start + lo - m.offset, m.start + hi - m.offset):
                    if tenant is None:
                        tenant = self.tenant_of(pid)
                        if tenant is None:  # gone (or its cgroup): nothing to put in for it
                            return
                    if self._held[tenant] >= self._share:
                        self.lost[tenant] += 1      # its own calls may count twice: its loss, no one else's
                        self.dropped += 1
                        return
                    k = code.Key()
                    k.prefixlen = 8 * len(owner) + 64 - bits
                    for i, byte in enumerate(owner + addr.to_bytes(8, "big")):
                        k.data[i] = byte
                    try:
                        code[k] = kind
                    except Exception:
                        self.lost[tenant] += 1
                        self.dropped += 1
                        return
                    added = True
                    self._keys.setdefault(me, []).append(bytes(k))
                    self._owner[me] = tenant
                    self._held[tenant] += 1
        if added:
            tracked = self._table("tracked")
            try:
                tracked[tracked.Key(me)] = ctypes.c_uint8(1)
            except Exception:           # full: the kernel will not report this process's exit (the sweep does)
                self.dropped += 1

    def pids(self) -> set[int]:
        """Processes whose code ranges were put in."""
        return {p for p, _s, _k in self.done}

    def delete(self, doomed: Doomed) -> None:
        """Delete the ``code`` trie's entries of the processes ``doomed`` names, by the keys put there."""
        table = self._table("code")
        for me in [me for me in self._keys if doomed.hit(me)]:
            keys = self._keys.pop(me)
            for raw in keys:
                with contextlib.suppress(KeyError):
                    del table[table.Key.from_buffer_copy(raw)]
            tenant = self._owner.pop(me, None)
            if tenant is not None:
                self._held[tenant] -= len(keys)
                if self._held[tenant] <= 0:
                    del self._held[tenant]

    def forget(self, pids: set[int]) -> None:
        """The mappings of ``pids`` get their ranges again when next scanned (an exec, a new process)."""
        self.done = {c for c in self.done if c[0] not in pids}
