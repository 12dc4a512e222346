"""The process table's columns and sort orders, as data (like nvitop). Pure, no Textual.

Every column is a sort key; ``SORT_KEYS`` lists their names for ``-s``/``--sort``.
Unknown values sort last whichever the direction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gputop.model import ProcSample
from gputop.ui import fields
from gputop.ui import format as fmt

SortValue = float | str | None


@dataclass(frozen=True)
class Column:
    key: str  #: the sort-key name (``-s KEY``)
    header: str
    width: int  #: cells; the flexible column takes what is left, at least this
    value: Callable[[ProcSample], SortValue]
    render: Callable[[ProcSample], str]
    descending: bool = True  #: the direction chosen when this column becomes the sort column
    align: str = "right"
    flex: bool = False
    help: str = ""
    #: where a value too long for the column is cut: "end" or "middle" (keeps a command's last flags)
    cut: str = "end"


def _flag(p: ProcSample) -> str:
    if p.launch_bound is None:
        return fmt.NA
    return "◆" if p.launch_bound else ""


def _bool_value(p: ProcSample) -> float | None:
    return None if p.launch_bound is None else float(p.launch_bound)


def _gpu(p: ProcSample) -> str:
    return fmt.text(p.gpu_index)


COLUMNS: tuple[Column, ...] = (
    Column("pid", "PID", 7, lambda p: p.pid, lambda p: str(p.pid), descending=False, help="process id"),
    Column(
        "user",
        "USER",
        8,
        lambda p: p.user,
        lambda p: fmt.text(p.user),
        descending=False,
        align="left",
        help="owner of the process",
    ),
    Column("gpu", "GPU", 3, lambda p: p.gpu_index, _gpu, descending=False, help="GPU index the process uses"),
    Column(
        "command",
        "COMMAND",
        16,
        fields.command,
        lambda p: fmt.text(fields.command(p)),
        descending=False,
        align="left",
        flex=True,
        cut="middle",
        help="command line (program name without its directory)",
    ),
    Column(
        "launches",
        "LAUNCH/s",
        9,
        fields.launches_per_s,
        lambda p: fmt.si(fields.launches_per_s(p)),
        help="kernel launches per second",
    ),
    Column(
        "grid",
        "GRID",
        6,
        lambda p: p.grid_blocks_avg,
        lambda p: fmt.num(p.grid_blocks_avg),
        help="average blocks per launched grid",
    ),
    Column(
        "block",
        "BLOCK",
        5,
        lambda p: p.block_threads_avg,
        lambda p: fmt.num(p.block_threads_avg),
        help="average threads per block",
    ),
    Column(
        "graph_kernels",
        "GKERN/s",
        8,
        fields.graph_kernels_per_s,
        lambda p: fmt.si(fields.graph_kernels_per_s(p)),
        help="kernels run inside CUDA graph launches per second (N/A: a graph of unknown kernels ran)",
    ),
    Column(
        "h2d",
        "H2D/s",
        7,
        fields.h2d_per_s,
        lambda p: fmt.bytes_(fields.h2d_per_s(p)),
        help="host-to-device memcpy bytes per second",
    ),
    Column(
        "d2h",
        "D2H/s",
        7,
        fields.d2h_per_s,
        lambda p: fmt.bytes_(fields.d2h_per_s(p)),
        help="device-to-host memcpy bytes per second",
    ),
    Column(
        "d2d",
        "D2D/s",
        7,
        fields.d2d_per_s,
        lambda p: fmt.bytes_(fields.d2d_per_s(p)),
        help="device-to-device memcpy bytes per second",
    ),
    Column(
        "live_mem",
        "LIVE MEM",
        8,
        fields.live_alloc_bytes,
        lambda p: fmt.bytes_(fields.live_alloc_bytes(p)),
        help="bytes allocated through CUDA and not yet freed",
    ),
    Column(
        "uvm",
        "UVM f/s",
        7,
        fields.uvm_faults_per_s,
        lambda p: fmt.si(fields.uvm_faults_per_s(p)),
        help="unified-memory page faults per second",
    ),
    Column(
        "sync",
        "SYNC%",
        5,
        fields.sync_wait_pct,
        lambda p: fmt.pct(fields.sync_wait_pct(p)),
        help="share of the interval spent blocked in synchronize calls",
    ),
    Column(
        "gpu_mem",
        "GPU MEM",
        7,
        lambda p: p.gpu_mem_bytes,
        lambda p: fmt.bytes_(p.gpu_mem_bytes),
        help="GPU memory used by the process (NVML)",
    ),
    Column(
        "sm",
        "SM%",
        4,
        lambda p: p.gpu_util_pct,
        lambda p: fmt.pct(p.gpu_util_pct),
        help="SM utilisation attributed to the process (NVML)",
    ),
    Column(
        "cpu",
        "CPU%",
        5,
        lambda p: p.cpu_pct,
        lambda p: fmt.pct(p.cpu_pct),
        help="CPU use of the process, % of one core",
    ),
    Column(
        "launch_bound", "LB", 3, _bool_value, _flag, help="◆ launch-bound: the CPU cannot launch fast enough"
    ),
    # shown after PID in the fleet view only (``visible``)
    Column(
        "node",
        "NODE",
        12,
        lambda p: p.node,
        lambda p: fmt.text(p.node),
        descending=False,
        align="left",
        cut="middle",
        help="node the process runs on (fleet view: gputop --prometheus); hidden on one host",
    ),
)

BY_KEY: dict[str, Column] = {c.key: c for c in COLUMNS}
SORT_KEYS: tuple[str, ...] = tuple(c.key for c in COLUMNS)
DEFAULT_SORT = "launches"


#: columns shown only in the fleet view
FLEET_ONLY: tuple[str, ...] = ("node",)
#: columns the fleet view never knows (the exporter exports no user, CPU or RSS): hidden there
FLEET_UNKNOWN: tuple[str, ...] = ("user", "cpu")


def is_fleet(procs: Iterable[ProcSample]) -> bool:
    """Processes from the fleet view (they carry their node's exporter), not from this host."""
    return any(p.instance is not None for p in procs)


def visible(keys: Sequence[str], fleet: bool) -> tuple[str, ...]:
    """The columns to show: NODE only in the fleet view, and there always, after PID (and not the
    columns it cannot know)."""
    out = [k for k in keys if k not in FLEET_ONLY and not (fleet and k in FLEET_UNKNOWN)]
    if fleet:
        out.insert(1 if out and out[0] == "pid" else 0, "node")
    return tuple(out)


def identity(p: ProcSample) -> tuple[str, str, int]:
    """What breaks ties in every sort: node, scrape target, PID (just the PID on one host)."""
    return (p.node or "", p.instance or "", p.pid)


def check_sort_key(key: str) -> str:
    """Return ``key`` or raise ``ValueError`` listing the valid names."""
    if key not in BY_KEY:
        raise ValueError(f"unknown sort column {key!r}; choose one of: {', '.join(SORT_KEYS)}")
    return key


def check_columns(keys: Iterable[str]) -> tuple[str, ...]:
    """Validate a list of column names (order kept, duplicates dropped; PID always shown)."""
    out: list[str] = []
    for k in keys:
        check_sort_key(k)
        if k not in out:
            out.append(k)
    if "pid" not in out:
        out.insert(0, "pid")
    return tuple(out)


def _matches(p: ProcSample, query: str) -> bool:
    q = query.strip().lower()
    if not q:
        return True
    if q.isdigit() and int(q) == p.pid:
        return True
    return any(q in s.lower() for s in (p.comm or "", p.cmdline or "", p.user or "", p.node or ""))


def filter_processes(procs: Iterable[ProcSample], query: str) -> list[ProcSample]:
    """Keep processes whose command, user or node contains ``query`` (case-insensitive) or whose PID is it."""
    return [p for p in procs if _matches(p, query)]


def sort_processes(procs: Sequence[ProcSample], key: str, reverse: bool = False) -> list[ProcSample]:
    """Sort by column ``key`` in its natural direction (``reverse`` flips it); PID breaks ties.

    Unknown values go last in both directions.
    """
    col = BY_KEY[key]
    descending = col.descending != reverse
    # indices into lists rather than (value, process) pairs: at 64,000 rows (fleet view) the pairs
    # outlived the cyclic collector's young generations and set off full collections of seconds
    order = sorted(procs, key=identity)
    values = [col.value(p) for p in order]
    lowered: list[Any] = [v.lower() if isinstance(v, str) else v for v in values]    # None where unknown
    known = [i for i, v in enumerate(values) if v is not None]
    known.sort(key=lowered.__getitem__, reverse=descending)     # stable: ties stay in identity order
    return [order[i] for i in known] + [p for p, v in zip(order, values, strict=True) if v is None]


def neighbour(key: str, visible: Sequence[str], step: int) -> str:
    """The visible column ``step`` places left (<0) or right (>0) of ``key``, clamped at the ends."""
    if not visible:
        return key
    i = visible.index(key) if key in visible else 0
    return visible[max(0, min(len(visible) - 1, i + step))]
