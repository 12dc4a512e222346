"""What the BPF source returns: monotonic counters of each process (``RawProc``, ``RawKernel``), the
processes that map a probed object without a record (``IdleProc``), one reading (``BpfReading``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gputop.model import NCCL_OPS, SourceStatus
from gputop.sources.bpf.pystacks.sites import RawSite


@dataclass(frozen=True)
class RawKernel:
    key: int                 # host stub address (runtime) or CUfunction handle (driver)
    launches: int
    grid_sum: int
    block_sum: int
    name: str | None         # demangled, or None when unresolved
    object: str | None       # the object holding the stub, when known
    graph_launches: int = 0  # launches inside graph launches (gputop/sources/bpf/read/graphs.py)


@dataclass(frozen=True)
class RawProc:
    """Monotonic counters of one process since gputop first saw it."""

    pid: int
    counters: dict[str, int]
    memcpy_calls: tuple[int, ...]
    memcpy_bytes: tuple[int, ...]
    prefetch_calls: tuple[int, ...]
    prefetch_bytes: tuple[int, ...]
    grid_hist: tuple[int, ...]
    block_hist: tuple[int, ...]
    copy_hist: tuple[tuple[int, ...], ...]
    exited: bool
    kernels: tuple[RawKernel, ...]
    comm: str = ""
    #: gputop saw the process from its first CUDA call (so its live allocations are all known)
    complete: bool = True
    #: its kernels' ``graph_launches`` are exact (False: a graph table lost entries)
    graph_kernels_known: bool = True
    #: its syncs' latency histograms by API (gputop/latency.py's APIS and buckets): (durations' sum in ns,
    #: bucket counts); an API it never synchronised through is absent
    sync_hist: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    #: NCCL calls and bytes by operation (model.NCCL_OPS)
    nccl_calls: tuple[int, ...] = (0,) * len(NCCL_OPS)
    nccl_bytes: tuple[int, ...] = (0,) * len(NCCL_OPS)
    #: the largest NCCL communicator it created: (size, its rank in it); None: none seen created
    nccl_comm: tuple[int, int] | None = None
    #: its sampled launches by (stack, kernel): counters since gputop first saw it (pystacks/sites.py)
    call_sites: tuple[RawSite, ...] = ()


@dataclass(frozen=True)
class IdleProc:
    """A process that maps a probed object but has no record: no probe of it fired since gputop saw
    it (its probes were attached when it was scanned), unless its record could not be stored."""

    pid: int
    #: it exited (still shown once, like a process with a record)
    exited: bool = False
    #: gputop saw the process before it mapped CUDA (so it has no live allocations)
    complete: bool = True


@dataclass(frozen=True)
class BpfReading:
    status: SourceStatus
    procs: dict[int, RawProc] = field(default_factory=dict)
    uvm_cpu_faults: bool = False        # whether CPU faults on managed memory are traced
    #: gputop's own cost over the last refresh interval: exact hits, run time per hit sampled in the
    #: latest statistics window (see selfcost.SelfCost)
    overhead_ns_per_s: float | None = None
    probe_hits_per_s: float | None = None
    #: hits x this host's trap cost + overhead_ns_per_s (None while the trap cost is unknown)
    cost_ns_per_s: float | None = None
    trap_ns: float | None = None        #: the calibrated trap cost per entry hit (None: not yet known)
    stats_age_s: float | None = None    #: seconds since the statistics window of the run times closed
    #: processes that map a probed object and have no record in ``procs`` (never gputop itself)
    idle: dict[int, IdleProc] = field(default_factory=dict)
    #: process records that could not be stored since start (a process without one may have called)
    procs_dropped: int = 0
    #: processes that exec'd since the last reading (their command line, user... are read again)
    execed: frozenset[int] = frozenset()
    #: one launch in this many is sampled for its call site (pystacks/sites.py; 0: none; None: unknown)
    sample_period: int | None = None
