"""Schema ``gputop/1``: the frozen dataclasses a snapshot is made of.

Stdlib only. Unknown values are ``None`` (JSON ``null``), never 0. Field names carry units.
Mappings inside a snapshot are plain dicts by convenience; treat them as read-only. A field whose
annotation does not say its range carries a bound (``limits.bound``), which the checked reading
(``validate.py``) applies; the JSON writer is ``tojson.py``, the host-wide totals ``summary.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Union

from gputop.model.limits import (
    CALL_SITES,
    CMDLINE,
    FRAMES,
    GPUS,
    ID,
    INTERVAL,
    KERNEL_NAME,
    KERNELS,
    LATENCY_LE,
    LOG2_HIST,
    PID,
    PROCESSES,
    SIGNED,
    STATE_LETTER,
    TIME,
    UNIX_TIME,
    bound,
)
from gputop.model.summary import Summary, summarize

SCHEMA = "gputop/1"

#: memcpy directions, in the order the UI shows them.
MEMCPY_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "d2d", "h2h", "unknown")
PREFETCH_DIRECTIONS: tuple[str, ...] = ("to_device", "to_host")
UVM_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "d2d")
#: NCCL operations counted (ncclAllReduce ... ncclRecv; ncclBcast is ncclBroadcast's wrapper), by index
NCCL_OPS: tuple[str, ...] = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather",
                             "scatter", "send", "recv")
#: ncclDataType_t's element sizes in bytes, by value (ncclInt8 ... ncclFloat8e5m2; NCCL 2.24's enum)
NCCL_DTYPE_BYTES: tuple[int, ...] = (1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1)
#: log2 histograms (``*_hist``): key ``2^k`` counts values in [2^k, 2^(k+1)) (0 in 2^0), k below this;
#: the last bucket is open-ended
LOG2_BUCKETS = 32


@dataclass(frozen=True)
class CallBytes:
    calls: int
    bytes: int


@dataclass(frozen=True)
class Counts:
    """Event counts of one process, either over one interval or since first seen."""

    launches: int | None = None
    graph_launches: int | None = None
    captured_launches: int | None = None
    #: kernels run inside graph launches, derived from the graphs' structure (docs/collector.md);
    #: None when a graph launched in the window was built or instantiated out of gputop's sight
    graph_kernel_launches: int | None = None
    #: sums of the launches' grid blocks and block threads, so averages compose over any window
    grid_blocks_sum: int | None = None
    block_threads_sum: int | None = None
    memcpy: Mapping[str, CallBytes] | None = None
    alloc_calls: int | None = None
    alloc_bytes: int | None = None
    free_calls: int | None = None
    live_alloc_bytes: int | None = field(default=None, metadata=bound(SIGNED))   # allocations minus frees
    managed_alloc_calls: int | None = None
    managed_alloc_bytes: int | None = None
    prefetch: Mapping[str, CallBytes] | None = None
    uvm_cpu_faults: int | None = None
    uvm_gpu_faults: int | None = None
    uvm_migrated: Mapping[str, int] | None = None
    uvm_thrashing: int | None = None
    sync_calls: int | None = None
    sync_wait_s: float | None = None
    #: memsets (cudaMemset*, cuMemsetD*) and the bytes they set
    memset_calls: int | None = None
    memset_bytes: int | None = None
    #: NCCL calls and bytes by operation (``NCCL_OPS``), all of them, groups, calls of an unknown datatype
    #: (in no bytes count), communicators created
    nccl: Mapping[str, CallBytes] | None = None
    nccl_calls: int | None = None
    nccl_bytes: int | None = None
    nccl_group_calls: int | None = None
    nccl_untyped_calls: int | None = None
    nccl_comms: int | None = None


@dataclass(frozen=True)
class Rates:
    """Per-second rates over the snapshot's interval."""

    launches_per_s: float | None = None
    #: CUDA graph launches per second
    graph_launches_per_s: float | None = None
    #: kernels run inside graph launches per second (None as ``Counts.graph_kernel_launches``)
    graph_kernel_launches_per_s: float | None = None
    memcpy_bytes_per_s: Mapping[str, float] | None = None
    #: bytes set by memsets per second
    memset_bytes_per_s: float | None = None
    #: NCCL calls and their bytes per second, all operations
    nccl_calls_per_s: float | None = None
    nccl_bytes_per_s: float | None = None
    uvm_faults_per_s: float | None = None
    #: share of the interval the process spent blocked in synchronisation calls
    sync_wait_pct: float | None = None


@dataclass(frozen=True)
class KernelStat:
    name: str = field(metadata=bound(KERNEL_NAME))
    launches: int
    grid_blocks_avg: float | None
    block_threads_avg: float | None
    interval_launches: int | None = None
    launches_per_s: float | None = None
    #: the ELF object that holds the kernel's host stub, or None for driver handles
    object: str | None = None
    #: host stub / handle address when the name could not be resolved
    address: int | None = None
    #: its launches inside graph launches (``launches`` counts the direct ones): since first seen,
    #: in the interval, per second; None when not known (as the process's graph_kernel_launches)
    graph_launches: int | None = None
    interval_graph_launches: int | None = None
    graph_launches_per_s: float | None = None


@dataclass(frozen=True)
class Latency:
    """Synchronisation calls that returned in a window, and their durations' percentiles and maximum in
    seconds, each its log-linear bucket's midpoint (within 6.25 %: gputop/latency.py); None without a call."""

    calls: int
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None


@dataclass(frozen=True)
class LatencyHistogram:
    """One API's sync durations since the process was first seen, as a Prometheus histogram: calls, their
    sum in seconds, and the calls at most each bound of ``latency.EXPORT_LE_NS`` long (cumulative)."""

    calls: int
    sum_s: float
    le_counts: tuple[int, ...] = field(default=(), metadata=bound(LATENCY_LE))


@dataclass(frozen=True)
class SyncLatency:
    """How long a process's synchronisations blocked, by API (``latency.APIS``) and for all of them
    (``all``): over the refresh interval, since first seen, and the histograms the exporter publishes.
    An API the process never synchronised through is absent."""

    interval: Mapping[str, Latency]
    total: Mapping[str, Latency]
    histograms: Mapping[str, LatencyHistogram]


@dataclass(frozen=True)
class Frame:
    """One frame of a call site's stack: a Python frame's file, line and function (its qualified name from
    3.11), or a native caller's object and symbol (``line`` None). None: not known (not read yet, or
    not readable)."""

    file: str | None = None
    line: int | None = field(default=None, metadata=bound(ID))
    function: str | None = None


@dataclass(frozen=True)
class CallSite:
    """Where a process's sampled launches came from: one call site (its innermost Python frame, or the
    native caller of the launch where the thread ran no Python), with the most sampled stack through it.
    Launches per second are estimated from the samples (the interval's launches x the site's part of the
    interval's samples), with the half-width of the estimate's 95 % interval; ``share_pct`` is its part
    of the process's samples since first seen, with its own half-width (gputop/callsites.py)."""

    kind: str                       # "python" | "native"
    frames: tuple[Frame, ...] = field(default=(), metadata=bound(FRAMES))    # innermost first
    truncated: bool = False         # the stack is deeper than the frames kept
    samples: int = 0                # over the interval
    total_samples: int = 0          # since first seen
    launches_per_s: float | None = None
    launches_per_s_error: float | None = None
    share_pct: float | None = None
    share_pct_error: float | None = None
    top_kernel: str | None = field(default=None, metadata=bound(KERNEL_NAME))


@dataclass(frozen=True)
class CallSites:
    """A process's launches sampled for their call sites (one in ``period`` on average): samples over the
    interval and since first seen, and its top call sites by samples."""

    samples: int
    total_samples: int
    sites: tuple[CallSite, ...] = field(default=(), metadata=bound(CALL_SITES))
    period: int | None = None


@dataclass(frozen=True)
class ProcSample:
    pid: int = field(metadata=bound(PID))
    comm: str | None        # None: the process vanished before gputop read its name
    ppid: int | None = field(default=None, metadata=bound(ID))
    cmdline: str | None = field(default=None, metadata=bound(CMDLINE))
    user: str | None = None
    container: str | None = None
    state: str = "running"  # "running" | "stopped" (by a signal or a tracer) | "exited" (shown once more)
    interval: Counts | None = None
    total: Counts | None = None
    rates: Rates | None = None
    grid_blocks_avg: float | None = None
    block_threads_avg: float | None = None
    grid_blocks_hist: Mapping[str, int] | None = field(default=None, metadata=bound(LOG2_HIST))
    block_threads_hist: Mapping[str, int] | None = field(default=None, metadata=bound(LOG2_HIST))
    #: by memcpy direction
    memcpy_size_hist: Mapping[str, Mapping[str, int]] | None = field(default=None, metadata=bound(LOG2_HIST))
    kernels: tuple[KernelStat, ...] = field(default=(), metadata=bound(KERNELS))
    gpu_index: int | None = field(default=None, metadata=bound(ID))
    gpu_mem_bytes: int | None = None
    gpu_util_pct: float | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    launch_bound: bool | None = None
    #: PID inside the process's own PID namespace (containers), when it differs
    nspid: int | None = field(default=None, metadata=bound(ID))
    #: when the process started (unix seconds, the kernel's 10 ms resolution); with ``pid`` the
    #: process's identity: a PID the kernel gives to a new process is a new row whose counts start
    #: from zero. None: unknown (the process went before gputop read it)
    start_time: float | None = field(default=None, metadata=bound(UNIX_TIME))
    #: fleet view (``gputop --prometheus``): the exporter's node name (``gputop_build_info``) and its
    #: Prometheus scrape target; None on a single host
    node: str | None = None
    instance: str | None = None
    #: fleet view: unix time of the process's last sample in Prometheus; None on a single host
    last_seen: float | None = field(default=None, metadata=bound(UNIX_TIME))
    #: fleet view: True when the process's node is down (its scrape fails) and this is its last known
    #: row, as of ``last_seen``; None on a single host
    stale: bool | None = None
    #: fleet view: True while Prometheus holds less than the window (``--window``) of the process's
    #: series, so its rates read low; None on a single host
    warming_up: bool | None = None
    #: user + system CPU time the process has used since it started (seconds; top's TIME+), from the
    #: host source; None: unknown (the fleet view, a refused read)
    cpu_time_s: float | None = None
    #: its resident memory (``rss_bytes``) as a % of the host's physical memory (top's %MEM); None: unknown
    mem_pct: float | None = None
    #: the kernel's state of the process, one letter as htop's S column and ``/proc/PID/stat`` have it:
    #: R running, S sleeping, D uninterruptible (disk) sleep, T stopped, t traced, I idle, W paging, P
    #: parked; None: unknown (the fleet view, an exited process, a refused read)
    kernel_state: str | None = field(default=None, metadata=bound(STATE_LETTER))
    #: fleet view: the Kubernetes pod and namespace the process runs in, from kube-state-metrics
    #: (``kube_pod_container_info`` by the exporter's container id, ``kube_pod_info`` by a pod UID);
    #: None: unknown (on the host, no such series, or on a single host)
    pod: str | None = None
    namespace: str | None = None
    #: its syncs' latency: percentiles over the interval and since first seen, by API; None: unknown (no
    #: sync seen, the fleet view)
    sync_latency: SyncLatency | None = None
    #: the largest NCCL communicator the process created (ncclCommInitRank*): its size and the process's rank
    #: in it; None: none seen created (made before gputop started, or by ncclCommSplit, ncclCommInitAll)
    nccl_comm_size: int | None = field(default=None, metadata=bound(ID))
    nccl_comm_rank: int | None = field(default=None, metadata=bound(ID))
    #: where its launches come from: sampled Python call sites (or native callers); None: unknown (no
    #: launch sampled yet, a program without call sites, the fleet view)
    call_sites: CallSites | None = None

    @property
    def key(self) -> ProcKey:
        """The process's identity in a view: the PID on one host; (instance, PID) in the fleet view,
        where PIDs repeat across nodes (and exporters)."""
        return self.pid if self.instance is None else (self.instance, self.pid)


#: a process's identity in a view (``ProcSample.key``): a PID, or (instance, PID) in the fleet view
ProcKey = Union[int, tuple[str, int]]


@dataclass(frozen=True)
class GpuSample:
    index: int = field(metadata=bound(ID))
    uuid: str | None = None
    name: str | None = None
    util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    xid_errors: int | None = None
    ecc_volatile_errors: int | None = None
    #: MIG instance id when this row is a MIG instance, else None
    mig_instance: int | None = field(default=None, metadata=bound(ID))
    #: why values are None (NotSupported, NoPermission, GPU lost...), by field
    reasons: Mapping[str, str] | None = None
    #: fleet view: the node (``gputop_build_info``'s node label) the GPU is in; None on a single host
    node: str | None = None


@dataclass(frozen=True)
class SourceStatus:
    status: str = "unavailable"  # "ok" | "unavailable" | "starting" | "degraded" (fleet view: a node down)
    reason: str | None = None
    # BPF-only fields (None for other sources)
    objects: int | None = None
    probes: int | None = None
    dropped: int | None = None
    #: what each tenant that lost any lost (``uid:N``; ``cgroup:ID`` for uid 0), by kind: ``events`` over its
    #: share of the ring, and calls whose table entry (``procs``, ``kernels``, ``names``... : the share
    #: classes) its share or a full table had no room for (docs/SECURITY.md, "Fair share"); also in ``dropped``
    dropped_by_tenant: Mapping[str, Mapping[str, int]] | None = None
    #: the BPF programs' run time, ns of CPU per second of the interval: its exact hits x the run time
    #: per hit sampled in the latest statistics window (``stats_age_s`` old), + the tracepoints' time
    overhead_ns_per_s: float | None = None
    probe_hits_per_s: float | None = None       # gputop's uprobe hits per second of the interval (exact)
    #: what the traced processes pay for gputop's probes, ns of CPU per second: uprobe hits x this
    #: host's calibrated trap cost + overhead_ns_per_s (None while either is unknown)
    cost_ns_per_s: float | None = None
    #: the calibrated uprobe trap cost, ns per hit at function entry (None: not yet calibrated)
    trap_ns: float | None = None
    #: seconds since the statistics window that sampled the programs' run time closed (None: none yet)
    stats_age_s: float | None = None
    headers: str | None = None
    attach: str | None = None           # "links" (uprobe_multi) | "perf" (a perf event per probe)
    probes_failed: int | None = None    # probes that did not attach (the first one's reason in ``reason``)
    #: UVM only: what is traced when "ok": "cpu" (CPU faults on managed memory only) or "cpu+gpu"
    scope: str | None = None

    @property
    def traps_ns_per_s(self) -> float | None:
        """The trap part of cost_ns_per_s (the rest is the programs' run time)."""
        if self.cost_ns_per_s is None or self.overhead_ns_per_s is None:
            return None
        return self.cost_ns_per_s - self.overhead_ns_per_s


#: the fields of ``SourceStatus`` that only the BPF source (``sources["bpf"]``), and only UVM's, writes
BPF_ONLY = ("objects", "probes", "dropped", "dropped_by_tenant", "overhead_ns_per_s", "probe_hits_per_s",
            "cost_ns_per_s", "trap_ns", "stats_age_s", "headers", "attach", "probes_failed")
UVM_ONLY = ("scope",)


@dataclass(frozen=True)
class Snapshot:
    time: float = field(metadata=bound(TIME))
    interval_s: float = field(metadata=bound(INTERVAL))
    host: str
    sources: Mapping[str, SourceStatus] = field(default_factory=dict)
    gpus: tuple[GpuSample, ...] = field(default=(), metadata=bound(GPUS))
    processes: tuple[ProcSample, ...] = field(default=(), metadata=bound(PROCESSES))
    schema: str = SCHEMA

    @cached_property
    def summary(self) -> Summary:
        """The totals of its processes (``summarize``), computed once."""
        return summarize(self)

    def process(self, which: ProcKey) -> ProcSample | None:
        """The process with this key (``ProcSample.key``); a PID alone finds the first with it."""
        for p in self.processes:
            if p.pid == which if isinstance(which, int) else p.key == which:
                return p
        return None

