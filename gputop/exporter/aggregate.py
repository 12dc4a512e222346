"""Per-container totals for ``gputop exporter --aggregate container``: one row per container instead of
one per PID, with counters that never go down.

A container's counter is the sum of its processes' ``total`` counts: those running, those exited
within ``--exited-grace``, and those the exporter has let go of (``retired``), whose last totals are
kept so that a process ending never lowers its container's counter (Prometheus would read that as a
reset, and ``rate()`` would count the whole total again). A count one of the processes does not know
(``None``) is unknown for the container; once a process with an unknown count is retired, that count
stays unknown for its container. Live allocations are the running processes' only (an exited process
holds none). A container with no process left is forgotten ``--exited-grace`` after its last one went.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gputop.model import CallBytes, Counts, KernelStat, LatencyHistogram, ProcSample, SyncLatency

#: retired kernels kept per container (by launches): the top ``--kernel-metrics`` (20 at most) of a
#: container are among them unless 256 retired kernels launched more than they did
RETIRED_KERNELS = 256

Hist = Mapping[str, int]


def add_counts(a: Counts | None, b: Counts | None) -> Counts | None:
    """``a + b`` field by field; a field unknown (None) in either is unknown in the sum."""
    if a is None or b is None:
        return a if b is None else b
    out: dict[str, Any] = {}
    for f in fields(Counts):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x is None or y is None:
            out[f.name] = None
        elif isinstance(x, Mapping):
            out[f.name] = _add_maps(x, y)
        else:
            out[f.name] = x + y
    return Counts(**out)


def _add_maps(x: Mapping[str, Any], y: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(x)
    for k, v in y.items():
        w = out.get(k)
        if w is None:
            out[k] = v
        elif isinstance(v, CallBytes):
            out[k] = CallBytes(w.calls + v.calls, w.bytes + v.bytes)
        else:
            out[k] = w + v
    return out


def add_hist(a: Hist | None, b: Hist | None) -> dict[str, int] | None:
    if a is None or b is None:
        return None
    return _add_maps(a, b)


def add_latency(into: dict[str, LatencyHistogram], more: Mapping[str, LatencyHistogram]) -> None:
    """Sync latency histograms of ``more`` added into ``into``, API by API (an API one side never used: the
    other's)."""
    for api, h in more.items():
        w = into.get(api)
        into[api] = h if w is None else LatencyHistogram(
            w.calls + h.calls, w.sum_s + h.sum_s, tuple(a + b for a, b in zip(w.le_counts, h.le_counts)))


def add_dir_hists(a: Mapping[str, Hist] | None, b: Mapping[str, Hist] | None) -> dict[str, Hist] | None:
    if a is None or b is None:
        return None
    out: dict[str, Hist] = dict(a)
    for d, h in b.items():
        out[d] = _add_maps(out.get(d, {}), h)
    return out


@dataclass
class Part:
    """What processes of one container add up to: counts, histograms and kernels by name."""

    total: Counts | None = None
    grid: dict[str, int] | None = None
    block: dict[str, int] | None = None
    copies: dict[str, Hist] | None = None
    #: kernel name -> [launches, launches inside graphs or None]
    kernels: dict[str, list[int | None]] = field(default_factory=dict)
    procs: int = 0          # processes added
    #: sync latency histograms by API (a process that never synchronised adds none)
    sync: dict[str, LatencyHistogram] = field(default_factory=dict)

    def add(self, p: ProcSample, live: bool) -> None:
        total = p.total if live or p.total is None else replace(p.total, live_alloc_bytes=0)
        first = self.procs == 0
        self.procs += 1
        self.total = total if first else add_counts(self.total, total)
        self.grid = dict(p.grid_blocks_hist or {}) if first and p.grid_blocks_hist is not None \
            else add_hist(self.grid, p.grid_blocks_hist)
        self.block = dict(p.block_threads_hist or {}) if first and p.block_threads_hist is not None \
            else add_hist(self.block, p.block_threads_hist)
        self.copies = dict(p.memcpy_size_hist or {}) if first and p.memcpy_size_hist is not None \
            else add_dir_hists(self.copies, p.memcpy_size_hist)
        for k in p.kernels:
            self.add_kernel(k.name, k.launches, k.graph_launches)
        if p.sync_latency is not None:
            add_latency(self.sync, p.sync_latency.histograms)

    def add_kernel(self, name: str, launches: int, graph: int | None) -> None:
        have = self.kernels.get(name)
        if have is None:
            self.kernels[name] = [launches, graph]
            return
        have[0] = (have[0] or 0) + launches
        have[1] = None if have[1] is None or graph is None else have[1] + graph

    def merge(self, other: Part) -> None:
        if other.procs == 0:
            return
        if self.procs == 0:
            self.total, self.grid, self.block = other.total, _copy(other.grid), _copy(other.block)
            self.copies = None if other.copies is None else dict(other.copies)
        else:
            self.total = add_counts(self.total, other.total)
            self.grid = add_hist(self.grid, other.grid)
            self.block = add_hist(self.block, other.block)
            self.copies = add_dir_hists(self.copies, other.copies)
        self.procs += other.procs
        add_latency(self.sync, other.sync)
        for name, (launches, graph) in other.kernels.items():
            self.add_kernel(name, launches or 0, graph)

    def trim_kernels(self, keep: int) -> None:
        if len(self.kernels) > keep:
            top = sorted(self.kernels.items(), key=lambda kv: (-(kv[1][0] or 0), kv[0]))[:keep]
            self.kernels = dict(top)


def _copy(h: dict[str, int] | None) -> dict[str, int] | None:
    return None if h is None else dict(h)


def same_process(old: ProcSample, new: ProcSample) -> bool:
    """Whether ``new`` is a later sample of ``old``'s process (same PID, not a new one under it)."""
    if old.state == "exited" and new.state != "exited":
        return False
    return old.start_time is None or new.start_time is None or old.start_time == new.start_time


@dataclass(frozen=True)
class GpuUse:
    """A container's use of one GPU (NVML), summed over its running processes; None: unknown."""

    mem_bytes: int | None
    util_pct: float | None
    launch_bound: bool | None


@dataclass(frozen=True)
class ContainerRow:
    container: str           # "" for processes on the host
    processes: int           # running processes listed in the snapshot
    sample: ProcSample       # the container's counts, as a process row the renderer knows
    gpus: Mapping[int, GpuUse]


class Containers:
    """Retired totals per container, kept across snapshots by the exporter's collector thread."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._retired: dict[str, Part] = {}
        self._seen: dict[str, float] = {}      # container -> monotonic time a process of it was last exported

    def retire(self, p: ProcSample, now: float | None = None) -> None:
        """``p``'s last sample leaves the export: its totals stay in its container's (``now``: the
        container was seen then, for one never listed by ``rows``)."""
        if p.total is None:
            return
        if now is not None:
            self.touch(p.container, now)
        part = self._retired.setdefault(p.container or "", Part())
        part.add(p, live=False)
        part.trim_kernels(RETIRED_KERNELS)

    def touch(self, container: str | None, now: float) -> None:
        """A process of ``container`` was listed at ``now`` (an exit shown again): kept the grace from then."""
        c = container or ""
        self._seen[c] = max(now, self._seen.get(c, now))

    def rows(self, running: Iterable[ProcSample], now: float) -> list[ContainerRow]:
        parts: dict[str, Part] = {}
        listed: dict[str, int] = {}
        gpus: dict[str, dict[int, list[ProcSample]]] = {}
        for p in running:
            c = p.container or ""
            listed[c] = listed.get(c, 0) + 1
            if p.total is not None:
                parts.setdefault(c, Part()).add(p, live=True)
            if p.gpu_index is not None:
                gpus.setdefault(c, {}).setdefault(p.gpu_index, []).append(p)
        for c in (*parts, *listed):
            self._seen[c] = now
        for c in [c for c, t in self._seen.items() if now - t > self.grace_s]:
            del self._seen[c]
            self._retired.pop(c, None)
        rows = []
        for c in sorted(set(parts) | set(listed) | set(self._retired)):
            part = Part()
            part.merge(parts.get(c, Part()))
            part.merge(self._retired.get(c, Part()))
            rows.append(ContainerRow(c, listed.get(c, 0), _as_sample(c, part), _gpu_use(gpus.get(c, {}))))
        return rows


def _as_sample(container: str, part: Part) -> ProcSample:
    kernels = tuple(KernelStat(name, launches or 0, None, None, graph_launches=graph)
                    for name, (launches, graph) in part.kernels.items())
    return ProcSample(pid=0, comm=None, container=container, total=part.total if part.procs else None,
                      grid_blocks_hist=part.grid, block_threads_hist=part.block, memcpy_size_hist=part.copies,
                      kernels=kernels,
                      sync_latency=SyncLatency({}, {}, dict(part.sync)) if part.sync and part.procs else None)


def _gpu_use(by_gpu: Mapping[int, list[ProcSample]]) -> dict[int, GpuUse]:
    out = {}
    for gpu, procs in by_gpu.items():
        mems = [p.gpu_mem_bytes for p in procs]
        utils = [p.gpu_util_pct for p in procs]
        bounds = [p.launch_bound for p in procs]
        out[gpu] = GpuUse(None if None in mems else sum(m for m in mems if m is not None),
                          None if None in utils else sum(u for u in utils if u is not None),
                          True if True in bounds else (None if None in bounds else False))
    return out
