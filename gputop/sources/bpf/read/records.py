"""One process record of the ``procs`` table → ``RawProc``: its scalar counters and histograms, plus
its kernels' entries and launch slots (launchslots.py), the top ones named, and the launches each
kernel made inside graph launches (graphs.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gputop import latency
from gputop.counters import BPF_MEMBERS, PROC
from gputop.sources.bpf.common.abi import NB, NDIR
from gputop.sources.bpf.lifecycle.procid import gen_of, pid_of
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.names.naming import Naming
from gputop.sources.bpf.pystacks.sites import CallSites, RawSite
from gputop.sources.bpf.read.graphs import GraphKernels
from gputop.sources.bpf.read.launchslots import SlotCounts
from gputop.sources.bpf.read.readings import RawKernel, RawProc

NAMED_KERNELS = 20    # kernels named per process and refresh (the ones shown)

_SCALARS = BPF_MEMBERS     # the scalar members of struct proc_t read per process (gputop/counters.py)
#: the arrays of struct proc_t the catalogue's paired quantities count in (memcpy_calls, memcpy_bytes,
#: prefetch_..., nccl_...): ``RawProc``'s fields of the same names
_PAIRED_ARRAYS = tuple(f"{q.bpf}_{part}" for q in PROC if q.paired and q.bpf for part in ("calls", "bytes"))


class Records:
    def __init__(self, names: Naming, procs: ProcTable, graph_kernels: GraphKernels,
                 table: Callable[[str], Any] | None = None, sites: CallSites | None = None) -> None:
        self._names = names
        self._procs = procs
        self._graph_kernels = graph_kernels
        self._table = table         # the program's maps (the sync latency histograms: sync_hist)
        self._sites = sites         # call sites (pystacks/sites.py), read once a refresh into _site_rows
        self._site_rows: dict[int, tuple[RawSite, ...]] = {}

    def begin_refresh(self) -> None:
        """A refresh begins: kernel names resolved anew (kernelnames.KernelNamer.begin_refresh), every
        process's call-site samples read."""
        self._names.namer.begin_refresh()
        self._site_rows = self._sites.read() if self._sites is not None else {}

    def read_sites(self, idents: set[int]) -> None:
        """The call-site samples of the processes ``idents`` read again (at their exit, before their
        entries are deleted)."""
        if self._sites is not None:
            self._site_rows.update(self._sites.read(idents))

    def raw(self, me: int, v: Any, kernels: SlotCounts, inflight_ns: int, named: bool = True) -> RawProc:
        """The counters of one process record ``v`` (identity ``me``) and its kernels' entries and launch
        slots."""
        pid = pid_of(me)
        self._names.resolving(me)
        counters = {name: int(getattr(v, name)) for name in _SCALARS}
        counters["sync_ns"] += inflight_ns
        ks = sorted(kernels.kernels.get(me, ()), key=lambda kv: -int(kv[1].launches))
        for _addr, kv in ks:            # the record holds only the kernel table's overflow
            counters["launches"] += int(kv.launches)
            counters["grid_sum"] += int(kv.grid_sum)
            counters["block_sum"] += int(kv.block_sum)
        arrays: dict[str, Any] = {a: tuple(int(x) for x in getattr(v, a)) for a in _PAIRED_ARRAYS}
        return RawProc(
            pid=pid,
            counters=counters,
            **arrays,
            grid_hist=kernels.grid_hist(me, v.grid_hist),
            block_hist=kernels.block_hist(me, v.block_hist),
            copy_hist=tuple(tuple(int(x) for x in v.copy_hist[d * NB:(d + 1) * NB]) for d in range(NDIR)),
            exited=bool(v.exited_ns),
            kernels=tuple(self._kernel(pid, addr, kv, named and i < NAMED_KERNELS) for i, (addr, kv) in enumerate(ks)),
            comm=bytes(v.comm).split(b"\0", 1)[0].decode("utf-8", "replace"),
            complete=pid not in self._procs.partial,
            sync_hist=self.sync_hist(me) if int(v.sync_calls) else {},
            nccl_comm=(int(v.nccl_nranks), int(v.nccl_rank)) if int(v.nccl_comms) else None,
            call_sites=self._site_rows.get(me, ()),
        )

    def sync_hist(self, me: int) -> dict[str, tuple[int, tuple[int, ...]]]:
        """The latency histograms of process ``me``'s syncs, by API: (sum in ns, bucket counts); one lookup
        per API (a process that never synchronised is not asked)."""
        if self._table is None:
            return {}
        table = self._table("sync_hist")
        out: dict[str, tuple[int, tuple[int, ...]]] = {}
        for i, api in enumerate(latency.APIS):
            h = table.get(table.Key(pid_of(me), gen_of(me), i))
            if h is not None and h.count:
                out[api] = (int(h.sum_ns), tuple(int(x) for x in h.bucket))
        return out

    def _kernel(self, pid: int, addr: int, v: Any, named: bool) -> RawKernel:
        name, obj = self._names.namer.name(pid, addr) if named else (None, None)
        return RawKernel(addr, int(v.launches), int(v.grid_sum), int(v.block_sum), name, obj)

    def with_graph_kernels(self, procs: dict[int, RawProc]) -> dict[int, RawProc]:
        """Each process's kernels with the launches they made inside graph launches."""
        graph = self._graph_kernels.read()
        out: dict[int, RawProc] = {}
        for pid, raw in procs.items():
            kept, funcs = self._graph_kernels.kept(pid) if raw.exited and pid not in graph else (False, None)
            if pid in graph:
                funcs = graph[pid]
            elif not kept:
                out[pid] = raw
                continue
            ks = {k.key: k for k in raw.kernels}
            for f, n in (funcs or {}).items():
                k = ks.get(f)
                ks[f] = dataclasses.replace(k, graph_launches=n) if k else RawKernel(f, 0, 0, 0, None, None, n)
            top = sorted(ks.values(), key=lambda k: (-(k.launches + k.graph_launches), k.key))
            named = [self._named(pid, k, kept) if i < NAMED_KERNELS and k.name is None else k
                     for i, k in enumerate(top)]
            out[pid] = dataclasses.replace(raw, kernels=tuple(named), graph_kernels_known=funcs is not None)
        self._graph_kernels.retain({pid for pid, raw in procs.items() if raw.exited})
        return out

    def _named(self, pid: int, k: RawKernel, kept: bool) -> RawKernel:
        """``k`` with its name (an exited process's kept with its graph kernels: its maps are gone)."""
        name_obj = (self._graph_kernels.kept_name(pid, k.key) if kept else None) or self._names.namer.name(pid, k.key)
        return dataclasses.replace(k, name=name_obj[0], object=name_obj[1])
