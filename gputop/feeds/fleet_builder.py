"""Snapshots from the answers of one refresh (pure: no I/O). ``SnapshotBuilder`` gathers the answers
as they arrive (each can go as soon as it is read: at 64,000 processes a family's answer is tens of
megabytes) and builds the ``Snapshot``: each process's counts, its rates from the quantity catalogue
(``counters.rates``), histograms and kernels; the GPUs; the sources and the fleet's health.
``series_points``: the charts of details and compare. Stdlib only."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gputop import counters
from gputop.counters import BY_FIELD, GPU, PROC, SCALARS
from gputop.feeds.fleet_client import Sample, sample_value
from gputop.feeds.fleet_health import fleet_sources, nodes_down, omitted, per_container
from gputop.feeds.fleet_pods import Pod, add_pod
from gputop.feeds.fleet_queries import (
    COUNTER_FAMILIES,
    DIRECTED,
    EXITED,
    GPU_FIELDS,
    HIST_COUNTS,
    HISTOGRAMS,
    KERNEL_LAUNCHES,
    LEVELS,
    PART,
    PROC_COUNTERS,
    START_TIME,
)
from gputop.model import (
    UVM_DIRECTIONS,
    CallBytes,
    Counts,
    GpuSample,
    KernelStat,
    ProcKey,
    ProcSample,
    Snapshot,
    SourceStatus,
)


@dataclass
class Results:
    """What one refresh read, by family name: the raw vector results."""

    build_info: list[Sample] = field(default_factory=list)
    source_up: list[Sample] = field(default_factory=list)
    gpus: list[Sample] = field(default_factory=list)
    totals: list[Sample] = field(default_factory=list)
    gauges: list[Sample] = field(default_factory=list)
    #: metric name -> increase() over the window
    increases: dict[str, list[Sample]] = field(default_factory=dict)
    #: histogram buckets and kernel launches of the watched processes
    watched: list[Sample] = field(default_factory=list)


def _pkey(m: Mapping[str, str]) -> tuple[str, int] | None:
    try:
        return (m.get("instance", ""), int(m["pid"]))
    except (KeyError, ValueError):
        return None


#: the labels of a process's series kept (``user``: exporters run with --user-label)
_LABELS = ("comm", "cmdline", "container", "user")


class _Proc:
    """Counts of one process being gathered from the families."""

    __slots__ = ("gauges", "gpu", "hists", "interval", "kernels", "labels", "seen", "total", "windowed")

    def __init__(self, m: Mapping[str, str]) -> None:
        self.labels = {k: m[k] for k in _LABELS if k in m}    # not the whole sample
        self.total: dict[str, Any] = {}
        self.interval: dict[str, Any] = {}
        self.gauges: dict[str, float] = {}
        self.gpu: int | None = None
        self.hists: dict[str, dict[str, list[tuple[float, float]]]] = {}
        self.kernels: dict[str, float] = {}
        #: unix time of the last sample of its launches counter (None: no such series)
        self.seen: float | None = None
        #: True when its launches counter had a sample a window before the refresh's instant
        self.windowed = False

    def learn(self, m: Mapping[str, str]) -> None:
        """Labels another series of the process carries where the first one had none (a series
        exported before the exporter knew the name is still there until its next scrape)."""
        for k in _LABELS:
            if m.get(k) and not self.labels.get(k):
                self.labels[k] = m[k]


_COUNTER_FIELD = dict(PROC_COUNTERS)
_COUNTER_FIELDS = frozenset([*_COUNTER_FIELD.values(), *LEVELS.values()])
_FLOAT_FIELDS = {q.field for q in SCALARS if not q.integral}
_TOTAL_NAMES = frozenset(COUNTER_FAMILIES)
#: the directed quantities of calls and bytes (copies, prefetches, NCCL calls by operation), by their directions
_PAIRED: tuple[tuple[str, tuple[str, ...]], ...] = tuple((q.field, q.directions) for q in PROC if q.paired)
_INT_GPU_FIELDS = {f.field for f in GPU if f.integral}


def _counts(c: dict[str, Any], integral: bool) -> Counts | None:
    """Counts from gathered values; increases (``integral``) are rounded to whole events."""
    if not c:
        return None

    def num(v: float | None, fld: str) -> Any:
        if v is None:
            return None
        return float(v) if fld in _FLOAT_FIELDS else round(v) if integral else int(v)

    kw: dict[str, Any] = {fld: (v if fld in _FLOAT_FIELDS else round(v) if integral else int(v))
                          for fld, v in c.items() if fld in _COUNTER_FIELDS}
    for fld, dirs in _PAIRED:
        parts = c.get(fld)
        if parts is not None:
            # None, not {}, when only one half was read (the table's scope reads copies' bytes only)
            kw[fld] = {d: CallBytes(num(parts[d]["calls"], "calls"), num(parts[d]["bytes"], "bytes"))
                       for d in dirs if d in parts and "calls" in parts[d] and "bytes" in parts[d]} or None
    mig = c.get("uvm_migrated")
    if mig is not None:
        kw["uvm_migrated"] = {d: num(mig[d]["value"], "b") for d in UVM_DIRECTIONS if d in mig}
    return Counts(**kw)


def log2_hist(buckets: list[tuple[float, float]]) -> dict[str, int]:
    """The model's ``{"2^k": count}`` from cumulative ``le`` buckets (le = 2^(k+1) - 1, then +Inf)."""
    out: dict[str, int] = {}
    prev = 0.0
    finite = sorted((le, v) for le, v in buckets if le != float("inf"))
    everything = [v for le, v in buckets if le == float("inf")]
    for k, (_, cum) in enumerate(finite):
        n = round(cum - prev)
        if n:
            out[f"2^{k}"] = n
        prev = cum
    rest = round(everything[0] - prev) if everything else 0
    if rest:
        out[f"2^{len(finite)}"] = rest
    return out


class SnapshotBuilder:
    """Gathers one refresh's query results as they arrive (each result can go as soon as it is
    read: at 64,000 processes a family's answer is tens of megabytes), then builds the snapshot."""

    def __init__(self) -> None:
        self.node_of: dict[str, str] = {}
        self.procs: dict[tuple[str, str], _Proc] = {}     # (instance, pid as the label has it)
        self.gpu_samples: list[Sample] = []
        self.source_up: list[Sample] = []
        #: each target's ``up`` (the scrape jobs that scrape gputop exporters), by instance
        self.up: dict[str, float] = {}
        #: the node names of the last hour, by instance: the names of targets whose scrapes fail now
        self.known_node: dict[str, str] = {}
        #: each container id (or pod UID) gputop's processes carry: its pod (None: two pods claim it)
        self.pods: dict[str, Pod | None] = {}
        #: targets whose exporter runs with --aggregate container (no per-process series)
        self.per_container: set[str] = set()
        #: targets with processes over --max-processes (summed per container in pid="" series), how many
        self.omitted: dict[str, float] = {}

    def _proc(self, m: Mapping[str, str]) -> _Proc:
        key = (m.get("instance", ""), m.get("pid", ""))
        p = self.procs.get(key)
        if p is None:
            p = self.procs[key] = _Proc(m)
        elif "comm" in m:
            p.learn(m)
        return p

    def add(self, job: str, samples: list[Sample]) -> None:
        """One query's result: ``build_info``, ``source_up``, ``gpus``, ``gauges`` (or a part of them:
        ``gauges:ANY``), ``watched``, ``total:METRIC`` (current values) or ``inc:METRIC`` (increase over
        the window)."""
        if job == "build_info":
            for s in samples:
                m = s["metric"]
                part = m.get(PART)
                if "instance" not in m:
                    continue
                if part is None and "node" in m:
                    self.node_of[m["instance"]] = m["node"]
                elif part == "known" and "node" in m:
                    self.known_node.setdefault(m["instance"], m["node"])
                elif part == "up":
                    self.up[m["instance"]] = sample_value(s)
                elif part == "containers":
                    self.per_container.add(m["instance"])
                elif part == "omitted":
                    self.omitted[m["instance"]] = sample_value(s)
        elif job == "source_up":
            self.source_up = samples
        elif job == "gpus":
            self.gpu_samples = samples
        elif job == "gauges" or job.startswith("gauges:"):
            for s in samples:
                m = s["metric"]
                part = m.get(PART)
                if part == "pods":
                    add_pod(self.pods, m)
                    continue
                if part is not None:        # only for processes some family knows (not one that went)
                    key = (m.get("instance", ""), m.get("pid", ""))
                    q = self.procs.get(key) or self.procs.setdefault(key, _Proc({}))
                    if part == "seen":
                        q.seen = sample_value(s)
                    elif part == "windowed":
                        q.windowed = True
                    continue
                p = self._proc(m)
                p.gauges[m.get("__name__", "")] = sample_value(s)
                if m.get("gpu", "").isdigit():
                    p.gpu = int(m["gpu"])
        elif job.startswith(("total:", "inc:")):
            # total launches come by name (a process renamed in the lookback has two: the larger is current)
            name = job.partition(":")[2]
            self._add_counter(job.startswith("total:"), name, samples, largest=name == PROC_COUNTERS[0][0])
        elif job == "watched_inc":          # increases of several families, each tagged with its name
            for s in samples:
                self._add_counter(False, s["metric"].get("family", ""), [s])
        elif job == "watched":
            for s in samples:
                m = s["metric"]
                p = self._proc(m)
                name = m.get("__name__", "")
                if name in _TOTAL_NAMES:        # the table's scope: totals of the watched processes only
                    self._add_counter(True, name, [s], largest=True)
                elif name == KERNEL_LAUNCHES:
                    p.kernels[m.get("kernel", "")] = sample_value(s)
                elif "le" in m:
                    le = float(m["le"])
                    p.hists.setdefault(name, {}).setdefault(m.get("direction", ""), []).append((le, sample_value(s)))

    def _add_counter(self, total: bool, name: str, samples: list[Sample], largest: bool = False) -> None:
        """One counter family's values: the hot loop (64,000 processes x 2 x 22 families a refresh).
        ``largest``: raw series, where a process renamed within the lookback has two of a counter
        (the older one stale): keep the larger value rather than the last one read."""
        fld = _COUNTER_FIELD.get(name) or (name if name in HIST_COUNTS else None)
        fld_d, label, part = DIRECTED.get(name, ("", "", None))
        procs = self.procs
        for s in samples:
            m = s["metric"]
            key = (m.get("instance", ""), m.get("pid", ""))
            p = procs.get(key)
            if p is None:
                p = procs[key] = _Proc(m)
            elif "comm" in m:
                p.learn(m)
            counts = p.total if total else p.interval
            v = float(s["value"][1])
            if fld is not None:
                counts[fld] = max(v, counts.get(fld, v)) if largest else v
            elif fld_d:
                slot = counts.setdefault(fld_d, {}).setdefault(m.get(label, ""), {})
                k = part or "value"
                slot[k] = max(v, slot.get(k, v)) if largest else v

    def name(self, instance: str) -> str | None:
        """A target's node name: its ``gputop_build_info`` now, else the last one within NAME_LOOKBACK."""
        return self.node_of.get(instance) or self.known_node.get(instance)

    def down(self, nodes: frozenset[str] = frozenset()) -> tuple[list[str], int]:
        """The targets (instances) whose last scrape failed, and how many targets there are (of the
        nodes ``nodes`` when given)."""
        targets = [i for i in self.up if not nodes or self.name(i) in nodes]
        return sorted((i for i in targets if self.up[i] < 1), key=lambda i: (self.name(i) or i, i)), len(targets)

    def build(self, *, at: float, window_s: float, host: str, nodes: frozenset[str] = frozenset()) -> Snapshot:
        out: list[ProcSample] = []
        for (instance, pid), p in self.procs.items():
            if (not p.total and not p.gauges) or not pid.isdigit():
                continue            # only increases: the process exited (its counters are no longer current)
            node = self.node_of.get(instance)
            if nodes and node not in nodes:
                continue
            pod = self.pods.get(p.labels.get("container") or "")
            out.append(_proc_sample(p, int(pid), instance, node, window_s, pod))
        # in the order that breaks the table's ties (gputop.view.columns.identity): sorting rows that are
        # already in order is a linear pass for the dashboard's thread
        out.sort(key=lambda q: (q.node or "", q.instance or "", q.pid))
        gpus = _gpus(self.gpu_samples, self.node_of, nodes)
        sources = fleet_sources(self.source_up, self.node_of, nodes)
        down, targets = self.down(nodes)
        said = [nodes_down(down, targets, self.name)] if down else []
        grouped = sorted(i for i in self.per_container if not nodes or self.node_of.get(i) in nodes)
        if grouped:
            said.append(per_container(grouped, self.name))
        capped = {i: self.omitted[i] for i in sorted(self.omitted) if not nodes or self.node_of.get(i) in nodes}
        if capped:
            said.append(omitted(capped, self.name))
        # a node down: what is shown of it is not current (degraded); the other clauses are notes
        sources["prometheus"] = SourceStatus("degraded" if down else "ok", reason="; ".join(said) or None)
        return Snapshot(time=at, interval_s=window_s, host=host, sources=sources, gpus=tuple(gpus),
                        processes=tuple(out))


def build_snapshot(res: Results, *, at: float, window_s: float, host: str,
                   nodes: frozenset[str] = frozenset()) -> Snapshot:
    """The snapshot of one refresh, from its query results (pure: no I/O)."""
    b = SnapshotBuilder()
    b.add("build_info", res.build_info)
    b.add("source_up", res.source_up)
    b.add("gpus", res.gpus)
    b.add("gauges", res.gauges)
    for s in res.totals:
        b.add(f"total:{s['metric'].get('__name__', '')}", [s])
    for name, samples in res.increases.items():
        b.add(f"inc:{name}", samples)
    b.add("watched", res.watched)
    return b.build(at=at, window_s=window_s, host=host, nodes=nodes)


def _increase(inc: Mapping[str, Any], name: str) -> Any:
    """``counters.rates``' value of a Counts field from a process's increases: a directed quantity's bytes
    by direction (the directions whose bytes Prometheus answered), else the number; None: not answered."""
    v = inc.get(name)
    if v is not None and BY_FIELD[name].paired:
        return {d: pair["bytes"] for d, pair in v.items() if "bytes" in pair}
    return v


def _proc_sample(p: _Proc, pid: int, instance: str, node: str | None, window_s: float,
                 pod: Pod | None = None) -> ProcSample:
    m = p.labels
    for series, fld in LEVELS.items():
        level = p.gauges.get(series)
        if level is not None:
            p.total[fld] = level
    total = _counts(p.total, integral=False)
    interval = _counts(p.interval, integral=True)
    inc = p.interval
    per_s = 1.0 / window_s if window_s > 0 else 0.0
    rates = None
    if inc:
        rates = counters.rates(lambda name: _increase(inc, name), per_s)

    def avg(sum_field: str, count_name: str) -> float | None:
        n = inc.get(count_name)
        s = inc.get(sum_field)
        return s / n if s is not None and n else None

    hists: dict[str, Any] = {}
    for bucket_name, fld in HISTOGRAMS:
        by_dir = p.hists.get(bucket_name)
        if by_dir is None:
            continue
        if fld == "memcpy_size_hist":
            hists[fld] = {d: log2_hist(b) for d, b in by_dir.items()}
        else:
            hists[fld] = log2_hist(by_dir.get("", []))
    kernels = tuple(KernelStat(name, int(n), None, None) for name, n in
                    sorted(p.kernels.items(), key=lambda kv: (-kv[1], kv[0])))
    sm = p.gauges.get("gputop_process_sm_utilization_ratio")
    gpu_mem = p.gauges.get("gputop_process_gpu_memory_bytes")
    bound = p.gauges.get("gputop_process_launch_bound")
    exited = p.gauges.get(EXITED)
    start = p.gauges.get(START_TIME)
    return ProcSample(
        pid=pid, comm=m.get("comm") or None, state="exited" if exited is not None and exited >= 0.5 else "running",
        start_time=start if start is not None and start > 0 else None, last_seen=p.seen,
        stale=False, warming_up=(not p.windowed) if p.seen is not None else None,
        cmdline=m.get("cmdline") or None, container=m.get("container") or None, user=m.get("user") or None,
        interval=interval, total=total, rates=rates,
        grid_blocks_avg=avg("grid_blocks_sum", HIST_COUNTS[0]),
        block_threads_avg=avg("block_threads_sum", HIST_COUNTS[1]),
        kernels=kernels, gpu_index=p.gpu, gpu_mem_bytes=None if gpu_mem is None else int(gpu_mem),
        gpu_util_pct=None if sm is None else sm * 100.0, launch_bound=None if bound is None else bound >= 0.5,
        node=node, instance=instance, namespace=pod[0] if pod else None, pod=pod[1] if pod else None, **hists)


def _gpus(samples: list[Sample], node_of: Mapping[str, str], nodes: frozenset[str]) -> list[GpuSample]:
    fields_of = {name: (fld, scale) for name, fld, scale in GPU_FIELDS}
    gathered: dict[tuple[str, int, str], dict[str, Any]] = {}
    for s in samples:
        m = s["metric"]
        spec = fields_of.get(m.get("__name__", ""))
        if spec is None or not m.get("gpu", "").isdigit():
            continue
        key = (m.get("instance", ""), int(m["gpu"]), m.get("mig", ""))
        g = gathered.setdefault(key, {"uuid": m.get("uuid") or None, "name": m.get("name") or None})
        fld, scale = spec
        v = sample_value(s) * scale
        g[fld] = round(v) if fld in _INT_GPU_FIELDS else v
    out = []
    for (instance, index, mig), kw in gathered.items():
        node = node_of.get(instance)
        if nodes and node not in nodes:
            continue
        out.append(GpuSample(index=index, mig_instance=int(mig) if mig.isdigit() else None, node=node, **kw))
    out.sort(key=lambda g: (g.node or "", g.index, g.mig_instance or -1))
    return out


def series_points(samples: Iterable[Sample], name: str) -> dict[ProcKey, dict[str, list[tuple[float, float]]]]:
    """query_range results of the rate of quantity ``name`` (``SERIES_QUERIES``) as ``{key: {series name:
    [(t, v)]}}``, the series named as the catalogue's rate shows them (a directed one by its direction)."""
    rate = BY_FIELD[name].rate
    assert rate is not None
    out: dict[ProcKey, dict[str, list[tuple[float, float]]]] = {}
    for s in samples:
        m = s["metric"]
        k = _pkey(m)
        series = next((sh.key for sh in rate.shows if sh.direction in (None, m.get("direction"))), None)
        if k is None or series is None:
            continue
        out.setdefault(k, {})[series] = [(float(t), float(v)) for t, v in s["values"]]
    return out
