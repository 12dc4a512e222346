"""The catalogue of per-process quantities and GPU fields: one row each, and everything else derives.

A per-process quantity is named in three places only (and the probe that counts it): its member of
``struct proc_t`` (bpf/gputop.h), its row here and its field of :class:`gputop.model.Counts` (and of
``Rates`` if it yields a rate). From the rows come the BPF reader's members (``BPF_MEMBERS``), the
live feed's counts and both feeds' rates (``rates``), the process table's rate columns and sort keys,
the history's series, the details, compare and baseline rows, the exporter's families and the fleet's
queries, scales and chart series (``docs/metrics.md`` lists the families; docs/architecture.md, "Adding
a quantity"; ``tests/unit/test_counters.py`` and ``tests/unit/test_rates_spine.py`` hold the rows against
the model, the compiled C struct and every consumer). Stdlib only.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gputop.model import MEMCPY_DIRECTIONS, NCCL_OPS, PREFETCH_DIRECTIONS, UVM_DIRECTIONS, Counts, Rates


class Kind(enum.Enum):
    """How the exporter publishes a quantity (and so how the fleet reads it back)."""

    COUNTER = "counter"     #: a counter family, ``<metric>_total``
    SUM = "sum"             #: the ``_sum`` of a histogram family (``<metric>_sum``)
    GAUGE = "gauge"         #: a level, not a count (``<metric>``)


class Shown(enum.Enum):
    """How the details screen shows a quantity of its own (its row ``label``)."""

    COUNT = "count"         #: the interval's count, the total
    CALLS = "calls"         #: "N calls"
    CALLS_BYTES = "calls_bytes"     #: "N calls, B" with its ``bytes_field`` on the same line
    SPECIAL = "special"     #: drawn by the screen itself (rates, averages, directions, levels)
    NONE = "none"           #: no row (shown with another quantity, or not at all)


class Per(enum.Enum):
    """How a quantity's interval value becomes its rate (``Rates``)."""

    SECOND = "second"       #: the interval's count per second of the interval
    PERCENT = "percent"     #: seconds per second of the interval, as a percentage (at most 100)


@dataclass(frozen=True)
class Shows:
    """One value a quantity's rate shows: a process-table column (its sort key ``-s KEY``), the history
    series kept under the same name (charts, the steady sort) and its compare row."""

    key: str                        #: the column's sort key, and the history series' name
    header: str                     #: the column's title
    width: int                      #: the column's width in cells
    help: str                       #: the column's help line (help screen, ``-s`` listing)
    after: str                      #: the column it follows in the table's default order
    direction: str | None = None    #: directed rates: the direction this value is of
    compare: str | None = None      #: the compare screen's label of the rate (None: not compared)


@dataclass(frozen=True)
class Rate:
    """The rate a quantity yields: its ``Rates`` field and what it shows."""

    field: str                      #: its ``Rates`` field (model.py), schema gputop/1
    per: Per
    shows: tuple[Shows, ...]
    #: the fleet's PromQL of its series for details and compare (``{S}``: the watched processes' selector,
    #: ``[W]``: the window; a directed rate's answer split by its direction label); None: not charted there
    promql: str | None = None


@dataclass(frozen=True)
class Quantity:
    """One per-process quantity: what the BPF program counts and how it is shown and exported."""

    field: str                      #: its ``Counts`` field (model.py)
    #: its member of ``struct proc_t`` (the scalar, or the prefix of ``<bpf>_calls``/``<bpf>_bytes``
    #: arrays for directed ones); None: not counted by the BPF program (unknown until a source is)
    bpf: str | None
    unit: str                       #: "launches", "calls", "bytes", "seconds", "faults", "blocks", "threads"
    help: str                       #: the exporter's HELP text
    metric: str | None = None       #: the exporter's family (without ``_total``), None: not exported
    kind: Kind = Kind.COUNTER
    #: BPF units per model unit: the model's value is the BPF member's divided by this (ns → s: 1e9)
    bpf_per_unit: int = 1
    #: the BPF member whose increase makes this quantity's increase unknown (graphs of unknown kernels)
    unknown_if: str | None = None
    #: only known where the BPF program's CPU page-fault tracepoint is attached
    needs_fault_tracepoint: bool = False
    #: directed quantities: the direction names and the label that carries them; ``calls`` and
    #: ``bytes`` (CallBytes) when ``paired``, else one value per direction
    directions: tuple[str, ...] = ()
    direction_label: str = "direction"
    paired: bool = False
    #: the details screen: its row's label and how it is shown
    label: str | None = None
    shown: Shown = Shown.NONE
    bytes_field: str | None = None  #: Shown.CALLS_BYTES: the bytes drawn with these calls
    #: the compare screen: labels of the interval's and the total's values (None: not compared)
    compare: str | None = None
    compare_total: str | None = None
    #: the process table reads its increases in the fleet view (rates, averages)
    in_table: bool = False
    #: its family of quantities exported only for a process for which one of them is non-zero (then all of
    #: them, zeros included), so that the many processes that never use it carry no series of it; the fleet
    #: view reads it as unknown (N/A) for the others
    sparse: str | None = None
    #: the rate it yields over a refresh's interval, and where that rate is shown (None: no rate)
    rate: Rate | None = None

    @property
    def integral(self) -> bool:
        """Counts of whole events (or bytes); False for seconds."""
        return self.bpf_per_unit == 1

    @property
    def series(self) -> str | None:
        """The name Prometheus stores its (undirected) series under, as the fleet queries it."""
        if self.metric is None or self.directions:
            return None
        suffix = {Kind.COUNTER: "_total", Kind.SUM: "_sum", Kind.GAUGE: ""}[self.kind]
        return f"{self.metric}{suffix}"

    def directed_series(self) -> tuple[tuple[str, str | None], ...]:
        """A directed quantity's counter series: (name, "calls" | "bytes" | None for a single value)."""
        if self.metric is None:
            return ()
        if self.paired:
            return ((f"{self.metric}_calls_total", "calls"), (f"{self.metric}_bytes_total", "bytes"))
        return ((f"{self.metric}_total", None),)


_Q = Quantity
#: every per-process quantity, in the order the details and compare screens show them
PROC: tuple[Quantity, ...] = (
    _Q("launches", "launches", "launches", "Kernel launches that ran (captured ones excluded).",
       "gputop_kernel_launches", label="launches", shown=Shown.SPECIAL, in_table=True,
       rate=Rate("launches_per_s", Per.SECOND, (
           Shows("launches", "LAUNCH/s", 9, "kernel launches per second", after="command", compare="launches/s"),),
           "rate(gputop_kernel_launches_total{S}[W])")),
    _Q("graph_launches", "graph_launches", "launches", "CUDA graph launches (cudaGraphLaunch, cuGraphLaunch).",
       "gputop_graph_launches", label="graph launches", shown=Shown.SPECIAL, compare="graph launches",
       compare_total="graph launch total", in_table=True,
       rate=Rate("graph_launches_per_s", Per.SECOND, (
           Shows("graph_launches", "GRAPH/s", 8, "CUDA graph launches per second (cudaGraphLaunch, cuGraphLaunch): "
                 "a process that only replays graphs launches no kernel itself", after="block"),),
           "rate(gputop_graph_launches_total{S}[W])")),
    _Q("graph_kernel_launches", "graph_kernel_launches", "launches", "Kernels run inside CUDA graph launches, "
       "derived from the graphs' structure (absent once a graph of unknown kernels ran).",
       "gputop_graph_kernel_launches", unknown_if="graph_unknown_launches", label="graph kernels",
       shown=Shown.SPECIAL, in_table=True,
       rate=Rate("graph_kernel_launches_per_s", Per.SECOND, (
           Shows("graph_kernels", "GKERN/s", 8, "kernels run inside CUDA graph launches per second (N/A: a graph "
                 "of unknown kernels ran)", after="graph_launches"),))),
    _Q("captured_launches", "captured_launches", "launches", "Launches recorded into a graph by stream capture.",
       "gputop_captured_launches", label="captured", shown=Shown.COUNT),
    _Q("grid_blocks_sum", "grid_sum", "blocks", "Blocks per grid of kernel launches (log2 buckets).",
       "gputop_kernel_grid_blocks", Kind.SUM, label="avg grid×block", shown=Shown.SPECIAL, in_table=True),
    _Q("block_threads_sum", "block_sum", "threads", "Threads per block of kernel launches (log2 buckets).",
       "gputop_kernel_block_threads", Kind.SUM, in_table=True),
    _Q("memcpy", "memcpy", "bytes", "Memory copies", "gputop_memcpy", directions=MEMCPY_DIRECTIONS, paired=True,
       label="memcpy", shown=Shown.SPECIAL, in_table=True,
       rate=Rate("memcpy_bytes_per_s", Per.SECOND, tuple(
           Shows(d, f"{d.upper()}/s", 7, f"{name} memcpy bytes per second", after=after, direction=d,
                 compare=f"{d.upper()} B/s")
           for d, name, after in (("h2d", "host-to-device", "graph_kernels"), ("d2h", "device-to-host", "h2d"),
                                  ("d2d", "device-to-device", "d2h"))),
           'rate(gputop_memcpy_bytes_total{S,direction=~"h2d|d2h|d2d"}[W])')),
    _Q("memset_calls", "memset_calls", "calls", "Memsets (cudaMemset*, cuMemsetD*).", "gputop_memset_calls",
       label="memsets", shown=Shown.CALLS_BYTES, bytes_field="memset_bytes", compare="memset calls",
       compare_total="memset calls total"),
    _Q("memset_bytes", "memset_bytes", "bytes", "Bytes set by memsets.", "gputop_memset_bytes", in_table=True,
       rate=Rate("memset_bytes_per_s", Per.SECOND, (
           Shows("memset", "MSET/s", 7, "bytes set by memsets per second (cudaMemset*, cuMemsetD*)", after="d2d",
                 compare="memset B/s"),), "rate(gputop_memset_bytes_total{S}[W])")),
    _Q("nccl", "nccl", "bytes", "NCCL collectives and point-to-point calls", "gputop_nccl_op", directions=NCCL_OPS,
       direction_label="op", paired=True, sparse="nccl", label="NCCL", shown=Shown.SPECIAL),
    _Q("nccl_calls", "nccl_all_calls", "calls", "NCCL collective and point-to-point calls, every operation (by "
       "operation: gputop_nccl_op_calls_total).", "gputop_nccl_calls", compare_total="NCCL calls total", in_table=True,
       sparse="nccl",
       rate=Rate("nccl_calls_per_s", Per.SECOND, (
           Shows("nccl", "NCCL/s", 7, "NCCL collective and point-to-point calls per second (ncclAllReduce ... "
                 "ncclRecv)", after="memset", compare="NCCL calls/s"),), "rate(gputop_nccl_calls_total{S}[W])")),
    _Q("nccl_bytes", "nccl_all_bytes", "bytes", "Bytes of NCCL calls, every operation: count x the datatype's size (by "
       "operation: gputop_nccl_op_bytes_total).", "gputop_nccl_bytes", compare_total="NCCL bytes total", in_table=True,
       sparse="nccl",
       rate=Rate("nccl_bytes_per_s", Per.SECOND, (
           Shows("nccl_bytes", "NCCL B/s", 8, "bytes of NCCL calls per second (count × the datatype's size)",
                 after="nccl", compare="NCCL B/s"),), "rate(gputop_nccl_bytes_total{S}[W])")),
    _Q("nccl_group_calls", "nccl_group_calls", "calls", "NCCL group calls (ncclGroupStart).", "gputop_nccl_group_calls",
       sparse="nccl", label="NCCL groups", shown=Shown.CALLS),
    _Q("nccl_untyped_calls", "nccl_untyped_calls", "calls", "NCCL calls of a datatype gputop does not know (their "
       "bytes are in no bytes count).", "gputop_nccl_untyped_calls", sparse="nccl", label="NCCL untyped",
       shown=Shown.CALLS),
    _Q("nccl_comms", "nccl_comms", "communicators", "NCCL communicators created (ncclCommInitRank*).",
       "gputop_nccl_communicators", sparse="nccl", label="NCCL comms", shown=Shown.SPECIAL),
    _Q("alloc_calls", "alloc_calls", "calls", "Device, managed and pinned allocations.", "gputop_alloc_calls",
       label="allocations", shown=Shown.CALLS_BYTES, bytes_field="alloc_bytes", compare="alloc calls",
       compare_total="alloc calls total"),
    _Q("alloc_bytes", "alloc_bytes", "bytes", "Bytes requested by allocations.", "gputop_alloc_bytes"),
    _Q("free_calls", "free_calls", "calls", "Frees of tracked allocations.", "gputop_free_calls", label="frees",
       shown=Shown.CALLS),
    _Q("live_alloc_bytes", "live_bytes", "bytes", "Bytes of allocations not freed yet (unknown for processes "
       "that allocated before gputop started).", "gputop_live_alloc_bytes", Kind.GAUGE, label="live alloc",
       shown=Shown.SPECIAL),
    _Q("managed_alloc_calls", "managed_alloc_calls", "calls", "Managed (unified memory) allocations.",
       "gputop_managed_alloc_calls", label="managed alloc", shown=Shown.CALLS_BYTES,
       bytes_field="managed_alloc_bytes"),
    _Q("managed_alloc_bytes", "managed_alloc_bytes", "bytes", "Bytes of managed allocations.",
       "gputop_managed_alloc_bytes", compare="managed alloc"),
    _Q("prefetch", "prefetch", "bytes", "Managed-memory prefetches", "gputop_prefetch",
       directions=PREFETCH_DIRECTIONS, direction_label="destination", paired=True, label="prefetch",
       shown=Shown.SPECIAL),
    _Q("uvm_cpu_faults", "uvm_cpu_faults", "faults", "CPU page faults on managed memory.", "gputop_uvm_cpu_faults",
       needs_fault_tracepoint=True, label="UVM faults", shown=Shown.SPECIAL, in_table=True,
       rate=Rate("uvm_faults_per_s", Per.SECOND, (
           Shows("uvm", "UVM f/s", 7, "unified-memory page faults per second", after="live_mem",
                 compare="UVM faults/s"),), "rate(gputop_uvm_cpu_faults_total{S}[W])")),
    _Q("uvm_gpu_faults", None, "faults", "GPU page faults on managed memory (nvidia_uvm).", "gputop_uvm_gpu_faults"),
    _Q("uvm_migrated", None, "bytes", "Bytes migrated by nvidia_uvm, by direction.", "gputop_uvm_migrated_bytes",
       directions=UVM_DIRECTIONS, label="UVM migrated", shown=Shown.SPECIAL),
    _Q("uvm_thrashing", None, "events", "Thrashing events on managed memory (nvidia_uvm).", "gputop_uvm_thrashing",
       label="UVM thrashing", shown=Shown.COUNT),
    _Q("sync_calls", "sync_calls", "calls", "Stream, device, context and event synchronisations.",
       "gputop_sync_calls", compare="sync calls"),
    _Q("sync_wait_s", "sync_ns", "seconds", "Seconds blocked in synchronisation calls.", "gputop_sync_wait_seconds",
       bpf_per_unit=1_000_000_000, label="sync blocked", shown=Shown.SPECIAL, compare_total="sync wait total",
       in_table=True,
       rate=Rate("sync_wait_pct", Per.PERCENT, (
           Shows("sync", "SYNC%", 5, "share of the interval spent blocked in synchronize calls", after="uvm",
                 compare="sync wait %"),), "100 * rate(gputop_sync_wait_seconds_total{S}[W])")),
)
BY_FIELD: dict[str, Quantity] = {q.field: q for q in PROC}
#: the quantities that yield a rate, in the catalogue's order
RATED: tuple[Quantity, ...] = tuple(q for q in PROC if q.rate is not None)
#: every shown rate value (column, series, compare row), by its key
SHOWS: dict[str, tuple[Quantity, Shows]] = {s.key: (q, s) for q in RATED if q.rate for s in q.rate.shows}
#: the history series kept per process, in chart order: every shown rate's key
SERIES: tuple[str, ...] = tuple(SHOWS)


#: the undirected quantities (one number each)
SCALARS: tuple[Quantity, ...] = tuple(q for q in PROC if not q.directions)
#: the scalar members of ``struct proc_t`` the BPF reader reads (the quantities' and their ``unknown_if``)
BPF_MEMBERS: tuple[str, ...] = tuple(dict.fromkeys(
    m for q in SCALARS for m in (q.bpf, q.unknown_if) if m is not None))


def rates(value: Callable[[str], Any], per_s: float) -> Rates:
    """A process's ``Rates`` over an interval of ``1 / per_s`` seconds, one per rated quantity:
    ``value(field)`` is the interval's value of the ``Counts`` field (for a paired directed quantity its
    bytes by direction, a mapping), None where unknown, and so is the rate. The live feed and the fleet
    view both derive their rates here."""
    kw: dict[str, Any] = {}
    for q in RATED:
        assert q.rate is not None
        v = value(q.field)
        if v is None:
            kw[q.rate.field] = None
        elif q.directions:
            kw[q.rate.field] = {d: b * per_s for d, b in v.items()}
        elif q.rate.per is Per.PERCENT:
            kw[q.rate.field] = min(100.0, 100.0 * v * per_s)
        else:
            kw[q.rate.field] = v * per_s
    return Rates(**kw)


def counts_value(c: Counts) -> Callable[[str], Any]:
    """``rates``' ``value`` over model counts: a field's value, a paired quantity's bytes by direction."""
    def value(name: str) -> Any:
        v = getattr(c, name)
        if v is not None and BY_FIELD[name].paired:
            return {d: cb.bytes for d, cb in v.items()}
        return v
    return value


@dataclass(frozen=True)
class GpuField:
    """One field of ``GpuSample`` as the exporter publishes it and the fleet reads it back."""

    field: str              #: its ``GpuSample`` field
    metric: str             #: the family (a counter's without ``_total``)
    help: str
    #: the exported value is the model's times this (percent → ratio: 0.01; MHz → Hz: 1e6)
    scale: float = 1.0
    counter: bool = False   #: a counter (``_total``), else a gauge
    integral: bool = False  #: the model holds an int

    @property
    def series(self) -> str:
        return f"{self.metric}_total" if self.counter else self.metric

    @property
    def from_base(self) -> float:
        """The factor back from the exported base unit to the model's (exact for these scales)."""
        return 1.0 / self.scale


GPU: tuple[GpuField, ...] = (
    GpuField("util_pct", "gputop_gpu_utilization_ratio", "Share of time a kernel ran (NVML), 0-1.", 0.01),
    GpuField("mem_util_pct", "gputop_gpu_memory_utilization_ratio",
             "Share of time memory was read or written, 0-1.", 0.01),
    GpuField("mem_used_bytes", "gputop_gpu_memory_used_bytes", "GPU memory in use.", integral=True),
    GpuField("mem_total_bytes", "gputop_gpu_memory_total_bytes", "GPU memory in total.", integral=True),
    GpuField("temp_c", "gputop_gpu_temperature_celsius", "GPU temperature."),
    GpuField("power_w", "gputop_gpu_power_watts", "Power drawn."),
    GpuField("power_limit_w", "gputop_gpu_power_limit_watts", "Power limit enforced."),
    GpuField("sm_clock_mhz", "gputop_gpu_sm_clock_hertz", "SM clock.", 1e6),
    GpuField("pcie_tx_bytes_per_s", "gputop_gpu_pcie_tx_bytes_per_second", "PCIe bytes sent per second."),
    GpuField("pcie_rx_bytes_per_s", "gputop_gpu_pcie_rx_bytes_per_second", "PCIe bytes received per second."),
    GpuField("xid_errors", "gputop_gpu_xid_errors", "XID errors seen since gputop started.", counter=True,
             integral=True),
    GpuField("ecc_volatile_errors", "gputop_gpu_ecc_volatile_errors", "Volatile (since driver load) ECC errors.",
             counter=True, integral=True),
)
