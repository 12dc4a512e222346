"""Prometheus exposition of the latest snapshot: a custom collector, no second copy of the counters.

The collector thread hands every new ``Snapshot`` to ``SnapshotCollector.update``; a scrape turns the
latest one into metric families. Counter values are exactly the snapshot's ``total`` counts; unknown
values (``None``) are absent series, never 0. Every label value goes through the display sanitiser.
Names and labels are a contract (docs/metrics.md; docs/architecture.md, "Exporter and fleet view").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gputop import __version__
from gputop.counters import BY_FIELD, GPU, PROC, Kind, Quantity
from gputop.exporter.admission import Admission
from gputop.exporter.aggregate import ContainerRow, Containers, same_process
from gputop.exporter.families import (
    BLOCK_FINITE,
    CMDLINE_LIMIT,
    COMM_LIMIT,
    CONTAINER_LIMIT,
    COPY_FINITE,
    GRID_FINITE,
    KERNEL_LIMIT,
    SYNC_HELP,
    SYNC_METRIC,
    USER_LIMIT,
    Families,
    cumulative,
    site_label,
    sync_buckets,
    used_families,
)
from gputop.exporter.options import BUCKETS, ExportOptions
from gputop.model import (
    MEMCPY_DIRECTIONS,
    CallBytes,
    CallSites,
    GpuSample,
    ProcSample,
    Snapshot,
)
from gputop.textsafe import sanitize, sanitize_middle

if TYPE_CHECKING:
    from gputop.feeds.live import RefreshTiming


_GPU_LABELS = ("gpu", "mig", "uuid", "name")
#: the quantities whose sums the launch-shape histograms carry
_GRID, _BLOCK = BY_FIELD["grid_blocks_sum"], BY_FIELD["block_threads_sum"]


class SnapshotCollector(Collector):
    """Holds the latest snapshot, and the last sample of processes that exited within the grace period:
    their counters stay exported (frozen) for that long, their gauges go at once (they use no GPU now)."""

    def __init__(self, options: ExportOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self._clock = clock
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        #: bumped by every update: a scrape's output can be reused until the next one
        self.version = 0
        #: refreshes posted (updates with a ``refresh`` timing: not the "starting" snapshot)
        self.refreshes = 0
        self._refresh: RefreshTiming | None = None
        self._posted: float | None = None       # monotonic time of the latest update
        # --aggregate container: the processes exported at the last update (traced ones, by PID), the
        # totals of those let go since, and the rows built at the last update
        self._exported: dict[int, ProcSample] = {}
        #: pid -> (start time, monotonic time its exit was last seen), within the grace period
        self._exits: dict[int, tuple[float | None, float]] = {}
        self._containers = Containers(options.exited_grace_s)
        self._rows: list[ContainerRow] = []
        # per process: which processes have series of their own, and the sums of the others
        self._admission = Admission(options.max_processes, options.exited_grace_s)

    # ------------------------------------------------------------ the collector thread's side

    def update(self, snap: Snapshot, refresh: RefreshTiming | None = None) -> None:
        """Serve ``snap`` from now on; ``refresh``: how long the collector took to build it (None for
        a snapshot no refresh built, such as the one posted while the BPF source starts)."""
        now = self._clock()
        with self._lock:
            self._posted = now
            if refresh is not None:
                self.refreshes += 1
                self._refresh = refresh
            self._snap = snap
            if self.options.aggregate == "container":
                self._aggregate(snap, now)
            else:
                self._admission.update(snap.processes, now)
            self.version += 1

    def _aggregate(self, snap: Snapshot, now: float) -> None:
        """Rebuild the container rows. A process that exits leaves its final totals to its container
        at once: nothing of it is kept but its identity and exit time (``gputop_exporter_processes``
        over the grace period; an exit shown twice is retired once) — under a churn of 100 processes a second,
        30,000 exited samples would otherwise be held for ``--exited-grace``. A process that leaves the
        snapshot unseen exiting (its PID taken by a new process) leaves its last totals."""
        running = [p for p in snap.processes if p.state != "exited"]
        exported = {p.pid: p for p in running if p.total is not None}
        ended = {p.pid: p for p in snap.processes if p.state == "exited" and p.total is not None}
        for pid, old in self._exported.items():
            new = exported.get(pid)
            if new is not None and same_process(old, new):
                continue
            last = ended.get(pid)
            if last is not None and same_process(old, last):
                continue                        # retired below with its final totals
            self._containers.retire(old, now)
        exits = {pid: v for pid, v in self._exits.items() if now - v[1] <= self.options.exited_grace_s}
        for pid in exported:
            exits.pop(pid, None)                # a new process under that PID
        for pid, p in ended.items():
            seen = exits.get(pid)
            if seen is None or seen[0] != p.start_time:     # not retired at an earlier sighting of its exit
                self._containers.retire(p, now)
            else:
                self._containers.touch(p.container, now)
            exits[pid] = (p.start_time, now)
        self._exits = exits
        self._exported = exported
        self._rows = self._containers.rows(running, now)

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snap

    @property
    def posted(self) -> float | None:
        """The collector's clock (monotonic) when the snapshot being served was posted; None before."""
        return self._posted

    def age(self, now: float | None = None) -> float | None:
        """Seconds since the snapshot being served was posted, on the collector's monotonic clock (a
        step of the wall clock changes nothing); None before the first."""
        posted = self._posted
        if posted is None:
            return None
        return max(0.0, (self._clock() if now is None else now) - posted)

    def liveness(self) -> tuple[float | None, RefreshTiming | None, int]:
        """(age of the snapshot served, the last refresh's timing, refreshes so far), read together."""
        with self._lock:
            return self.age(), self._refresh, self.refreshes

    # ------------------------------------------------------------ scrapes

    def describe(self) -> list[Metric]:
        return []       # families depend on the snapshot: the registry must not pre-describe them

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        with self._lock:
            snap = self._snap
        fam = Families()
        node = self.options.node or (snap.host if snap else "")
        fam.gauge("gputop_build_info", "gputop's version and the node it runs on (always 1).",
                  ("version", "node")).add_metric([__version__, sanitize(node, 253)], 1.0)
        running: list[ProcSample] = []
        if snap is not None:
            self._sources(fam, snap)
            for g in snap.gpus:
                self._gpu(fam, g)
            running = [p for p in snap.processes if p.state != "exited"]
        if self.options.aggregate == "container":
            with self._lock:
                rows = self._rows
                exits = sum(1 for _, t in self._exits.values() if now - t <= self.options.exited_grace_s)
            self._container_rows(fam, rows, len(running) + exits)
            yield from fam
            return
        with self._lock:
            admission = self._admission
            kept, others, omitted = admission.admitted(now), admission.others, admission.omitted
        fam.gauge("gputop_exporter_processes", "Processes with series of their own (running, or exited within the "
                  "grace period while they fit under --max-processes).", ()).add_metric([], float(len(kept)))
        fam.gauge("gputop_exporter_processes_omitted", "Running processes without series of their own "
                  "(over --max-processes): summed per container in the series with pid=\"\".",
                  ()).add_metric([], float(omitted))
        for p in kept:
            self._process(fam, p)
        for row in others:
            self._process(fam, row.sample)
        yield from fam

    def _container_rows(self, fam: Families, rows: Sequence[ContainerRow], processes: int) -> None:
        fam.gauge("gputop_exporter_processes", "Processes exported (running, or exited within the grace period).",
                  ()).add_metric([], float(processes))
        listed = fam.gauge("gputop_container_processes", "Processes of the container running now "
                           "(--aggregate container; \"\" is the host).", ("container",))
        for row in rows:
            names, values = self._labels(row.sample)
            listed.add_metric(values, float(row.processes))
            self._process(fam, row.sample)
            for gpu, use in sorted(row.gpus.items()):
                self._gpu_values(fam, names, values, gpu, use.mem_bytes, use.util_pct, use.launch_bound)

    def live_families(self) -> Iterator[Metric]:
        """The collector's own liveness, computed at every scrape (``LivenessCollector``): the age of
        the snapshot served moves between refreshes, so it is never part of a cached rendering."""
        age, refresh, refreshes = self.liveness()
        fam = Families()
        if age is not None:
            fam.gauge("gputop_snapshot_age_seconds", "Seconds since the collector posted the snapshot being served "
                      "(computed at the scrape; above 2 refresh intervals + 5 s /healthz says stale).",
                      ()).add_metric([], age)
        if refresh is not None:
            fam.gauge("gputop_refresh_duration_seconds", "Seconds the collector took to build the last snapshot.",
                      ()).add_metric([], refresh.duration_s)
            phase = fam.gauge("gputop_refresh_phase_seconds", "Seconds of the last refresh spent in each phase: bpf "
                              "(reading the BPF maps), nvml, mapped (BPF unavailable: processes mapping a "
                              "CUDA library), host (/proc), build (deltas, rates, the snapshot).",
                              ("phase",))
            for name, seconds in refresh.phases:
                phase.add_metric([name], seconds)
        if self.options.interval_s is not None:
            fam.gauge("gputop_refresh_interval_seconds", "The collector's configured refresh interval (-d).",
                      ()).add_metric([], self.options.interval_s)
        fam.counter("gputop_refreshes", "Snapshots the collector built since the exporter started.",
                    ()).add_metric([], float(refreshes))
        yield from fam

    def _sources(self, fam: Families, snap: Snapshot) -> None:
        up = fam.gauge("gputop_source_up", "1 when the source works, 0 when it is starting or unavailable.",
                       ("source",))
        for name, st in sorted(snap.sources.items()):
            up.add_metric([name], 1.0 if st.status == "ok" else 0.0)
        bpf = snap.sources.get("bpf")
        if bpf is None or bpf.status != "ok":
            return
        if bpf.probe_hits_per_s is not None:
            fam.gauge("gputop_probe_hits_per_second", "Hits of gputop's uprobes per second over the collector's "
                      "last refresh interval (exact: counted by the probes).", ()).add_metric([], bpf.probe_hits_per_s)
        if bpf.overhead_ns_per_s is not None:
            fam.gauge("gputop_bpf_run_seconds_per_second", "CPU seconds per second gputop's BPF programs ran over "
                      "the last refresh interval: its exact hits x the run time per hit sampled in the latest "
                      "statistics window (gputop_bpf_stats_age_seconds old).",
                      ()).add_metric([], bpf.overhead_ns_per_s / 1e9)
        if bpf.stats_age_s is not None:
            fam.gauge("gputop_bpf_stats_age_seconds", "Seconds since the BPF statistics window that sampled the "
                      "programs' run time per hit closed (one opens every 5 s).", ()).add_metric([], bpf.stats_age_s)
        if bpf.cost_ns_per_s is not None:
            fam.gauge("gputop_self_cost_seconds_per_second", "CPU seconds per second the traced processes pay for "
                      "gputop's probes: uprobe hits x this host's calibrated trap cost (gputop doctor shows it) + "
                      "the BPF programs' run time (gputop_bpf_run_seconds_per_second), over the last refresh interval.",
                      ()).add_metric([], bpf.cost_ns_per_s / 1e9)
        if bpf.trap_ns is not None:
            fam.gauge("gputop_uprobe_trap_seconds", "This host's uprobe trap cost per probe hit at function entry, "
                      "calibrated once per kernel (an empty probe on a function starting with push %rbp).",
                      ()).add_metric([], bpf.trap_ns / 1e9)
        if bpf.dropped is not None:
            fam.counter("gputop_dropped_records", "Records the BPF maps had no room for.",
                        ()).add_metric([], float(bpf.dropped))
        if bpf.dropped_by_tenant:
            tenants = fam.counter("gputop_tenant_dropped", "What a tenant (uid:N; cgroup:ID for uid 0) lost, by kind: "
                                  "events over its share of the BPF ring, or calls whose table entry (procs, kernels, "
                                  "names, ...) its share of that table or a full table had no room for "
                                  "(docs/SECURITY.md, Fair share).", ("tenant", "kind"))
            for tenant, kinds in sorted(bpf.dropped_by_tenant.items()):
                for kind, n in sorted(kinds.items()):
                    tenants.add_metric([sanitize(tenant, 64), sanitize(kind, 32)], float(n))
        for name, value, doc in (("gputop_probes", bpf.probes, "Probes attached."),
                                 ("gputop_probes_failed", bpf.probes_failed, "Probes the kernel refused."),
                                 ("gputop_probed_objects", bpf.objects, "ELF objects probed.")):
            if value is not None:
                fam.gauge(name, doc, ()).add_metric([], float(value))

    def _gpu(self, fam: Families, g: GpuSample) -> None:
        labels = [str(g.index), "" if g.mig_instance is None else str(g.mig_instance),
                  sanitize(g.uuid or "", 128), sanitize(g.name or "", 128)]
        for f in GPU:           # the gauges, then the counters
            value = getattr(g, f.field)
            if value is not None and not f.counter:
                fam.gauge(f.metric, f.help, _GPU_LABELS).add_metric(labels, float(value) * f.scale)
        for f in GPU:
            value = getattr(g, f.field)
            if value is not None and f.counter:
                fam.counter(f.metric, f.help, _GPU_LABELS).add_metric(labels, float(value))

    def _labels(self, p: ProcSample) -> tuple[tuple[str, ...], list[str]]:
        if self.options.aggregate == "container":
            return ("container",), [sanitize(p.container or "", CONTAINER_LIMIT)]
        names: tuple[str, ...] = ("pid", "comm", "container")
        # pid 0: the sum of a container's processes without series of their own (admission.py)
        values = [str(p.pid) if p.pid else "", sanitize(p.comm or "", COMM_LIMIT),
                  sanitize(p.container or "", CONTAINER_LIMIT)]
        if self.options.user_label:
            names += ("user",)
            values.append(sanitize(p.user or "", USER_LIMIT))
        if self.options.cmdline_label:
            names += ("cmdline",)
            values.append(sanitize(p.cmdline or "", CMDLINE_LIMIT))
        return names, values

    def _process(self, fam: Families, p: ProcSample) -> None:
        names, values = self._labels(p)
        t = p.total
        if t is not None:
            used = used_families(t)
            for q in PROC:
                value = getattr(t, q.field)
                if value is None or q.metric is None or (q.sparse is not None and q.sparse not in used):
                    continue
                if q.directions:
                    self._directed(fam, q, value, names, values)
                elif q.kind is Kind.COUNTER:
                    fam.counter(q.metric, q.help, names).add_metric(values, float(value))
                elif q.kind is Kind.GAUGE and p.state != "exited":
                    fam.gauge(q.metric, q.help, names).add_metric(values, float(value))
            self._histograms(fam, p, names, values)
        if p.state != "exited":
            self._gpu_use(fam, p, names, values)
        if t is not None and self.options.aggregate == "process":
            # a traced process's state: the fleet view marks it exited on this, not on its rates
            if p.start_time is not None:
                fam.gauge("gputop_process_start_time_seconds", "When the process started (unix seconds).",
                          names).add_metric(values, float(p.start_time))
            fam.gauge("gputop_process_exited", "1 when the process has exited (its counters stay for "
                      "--exited-grace), else 0.", names).add_metric(values, float(p.state == "exited"))
            if p.nccl_comm_size is not None and p.nccl_comm_rank is not None:
                fam.gauge("gputop_nccl_comm_size", "Ranks of the largest NCCL communicator the process created "
                          "(ncclCommInitRank*).", names).add_metric(values, float(p.nccl_comm_size))
                fam.gauge("gputop_nccl_comm_rank", "The process's rank in that communicator.",
                          names).add_metric(values, float(p.nccl_comm_rank))
        self._kernels(fam, p, names, values)
        if self.options.aggregate == "process":
            self._call_sites(fam, p.call_sites, names, values)

    @staticmethod
    def _directed(fam: Families, q: Quantity, by_dir: Mapping[str, object],
                  names: tuple[str, ...], values: list[str]) -> None:
        """A directed quantity's counters, one series per direction it has."""
        assert q.metric is not None
        labels = (*names, q.direction_label)
        if not q.paired:
            one = fam.counter(q.metric, q.help, labels)
            for d in q.directions:
                v = by_dir.get(d)
                if isinstance(v, (int, float)):
                    one.add_metric([*values, d], float(v))
            return
        calls = fam.counter(f"{q.metric}_calls", f"{q.help}, by {q.direction_label}.", labels)
        nbytes = fam.counter(f"{q.metric}_bytes", f"Bytes of {q.help.lower()}, by {q.direction_label}.", labels)
        for d in q.directions:
            cb = by_dir.get(d)
            if isinstance(cb, CallBytes):
                calls.add_metric([*values, d], float(cb.calls))
                nbytes.add_metric([*values, d], float(cb.bytes))

    def _histograms(self, fam: Families, p: ProcSample, names: tuple[str, ...], values: list[str]) -> None:
        t = p.total
        assert t is not None
        step = BUCKETS[self.options.buckets]
        for q, hist, finite in ((_GRID, p.grid_blocks_hist, GRID_FINITE), (_BLOCK, p.block_threads_hist, BLOCK_FINITE)):
            buckets = cumulative(hist, finite, step)
            total = getattr(t, q.field)
            if buckets is not None and total is not None and q.metric is not None:
                fam.histogram(q.metric, q.help, names).add_metric(values, buckets, float(total))
        if p.sync_latency is not None:
            for api, h in sorted(p.sync_latency.histograms.items()):
                fam.histogram(SYNC_METRIC, SYNC_HELP, (*names, "api")).add_metric(
                    [*values, api], sync_buckets(h, step), h.sum_s)
        if p.memcpy_size_hist is None or t.memcpy is None:
            return
        for d in MEMCPY_DIRECTIONS:
            cb = t.memcpy.get(d)
            buckets = cumulative(p.memcpy_size_hist.get(d), COPY_FINITE, step)
            if cb is not None and cb.calls and buckets is not None:
                fam.histogram("gputop_memcpy_size_bytes", "Bytes per memory copy, by direction (log2 buckets).",
                              (*names, "direction")).add_metric([*values, d], buckets, float(cb.bytes))

    def _gpu_use(self, fam: Families, p: ProcSample, names: tuple[str, ...], values: list[str]) -> None:
        if p.gpu_index is not None:
            self._gpu_values(fam, names, values, p.gpu_index, p.gpu_mem_bytes, p.gpu_util_pct, p.launch_bound)

    @staticmethod
    def _gpu_values(fam: Families, names: tuple[str, ...], values: list[str], gpu: int, mem_bytes: int | None,
                    util_pct: float | None, launch_bound: bool | None) -> None:
        labels = [*values, str(gpu)]
        gnames = (*names, "gpu")
        if mem_bytes is not None:
            fam.gauge("gputop_process_gpu_memory_bytes", "GPU memory the process (or container) uses (NVML).",
                      gnames).add_metric(labels, float(mem_bytes))
        if util_pct is not None:
            fam.gauge("gputop_process_sm_utilization_ratio", "Share of SM time the process (or container) used "
                      "(NVML), 0-1.", gnames).add_metric(labels, util_pct / 100.0)
        if launch_bound is not None:
            fam.gauge("gputop_process_launch_bound", "1 when the process (or a process of the container) launches "
                      "fast while its GPU idles (docs/nvml.md, the launch-bound rule).",
                      gnames).add_metric(labels, float(launch_bound))

    def _kernels(self, fam: Families, p: ProcSample, names: tuple[str, ...], values: list[str]) -> None:
        n = self.options.kernel_metrics
        if n <= 0 or not p.kernels:
            return
        launches = fam.counter("gputop_kernel_function_launches", "Launches of one kernel (top kernels per "
                               "process, with --kernel-metrics).", (*names, "kernel"))
        # one series per label: kernels whose names read the same (one module loaded per context, or
        # names equal once cut) add up, so that a series never swaps values with another as ranks change.
        # Ranked by all their launches, direct and inside graph launches (graph ones where known).
        by_label: dict[str, int] = {}
        graph: dict[str, int] = {}
        for k in p.kernels:
            label = sanitize_middle(k.name, KERNEL_LIMIT)
            by_label[label] = by_label.get(label, 0) + k.launches
            if k.graph_launches is not None:
                graph[label] = graph.get(label, 0) + k.graph_launches
        top = sorted(by_label, key=lambda lb: (-(by_label[lb] + graph.get(lb, 0)), lb))[:n]
        for label in top:
            launches.add_metric([*values, label], float(by_label[label]))
        if any(graph.get(label) for label in top):
            in_graphs = fam.counter("gputop_kernel_function_graph_launches", "Launches of one kernel inside CUDA "
                                    "graph launches (top kernels per process, with --kernel-metrics).",
                                    (*names, "kernel"))
            for label in top:
                if label in graph:
                    in_graphs.add_metric([*values, label], float(graph[label]))


    def _call_sites(self, fam: Families, cs: CallSites | None, names: tuple[str, ...], values: list[str]) -> None:
        """With ``--call-site-metrics N``: the process's sampled launches, and the samples of its top N call
        sites by samples since first seen. Exact counts of samples, never estimates: PromQL estimates a
        site's launches from them over any window (docs/metrics.md, "Call sites")."""
        n = self.options.call_site_metrics
        if n <= 0 or cs is None:
            return
        fam.counter("gputop_launch_samples", "Launches of the process sampled for their call sites (every "
                    "launch has the same chance; with --call-site-metrics).", names).add_metric(
                        values, float(cs.total_samples))
        # one series per (site, kind) label: sites whose labels read the same (two files alike in their
        # last two parts, names equal once cut) add up, as kernels do
        by_label: dict[tuple[str, str], int] = {}
        for site in cs.sites:
            if site.kind == "python" and (not site.frames or site.frames[0].file is None):
                continue        # not read yet: its label would be an address, then change once it is read
            key = (site_label(site), sanitize(site.kind, 16))
            by_label[key] = by_label.get(key, 0) + site.total_samples
        if not by_label:
            return
        samples = fam.counter("gputop_call_site_samples", "Sampled launches from one call site (its innermost Python "
                              "frame, or the native caller) since gputop first saw the process: the top sites of "
                              "each process by samples, with --call-site-metrics. Its share of the launches: "
                              "rate(this) / rate(gputop_launch_samples_total) (docs/metrics.md).",
                              (*names, "site", "kind"))
        for key in sorted(by_label, key=lambda k: (-by_label[k], k))[:n]:
            samples.add_metric([*values, *key], float(by_label[key]))


class LivenessCollector(Collector):
    """The liveness families of a ``SnapshotCollector`` (``live_families``), for a registry of their own
    that is rendered at every scrape, after the cached rendering of the snapshot."""

    def __init__(self, collector: SnapshotCollector) -> None:
        self._collector = collector

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return self._collector.live_families()
