"""The process table's columns and sort orders, as data (like nvitop). Pure, no Textual.

Every column is a sort key; ``SORT_KEYS`` lists their names for ``-s``/``--sort``.
Unknown values sort last whichever the direction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_, is_not
from typing import Any, Optional, Union, overload

from gputop.counters import SHOWS, Per, Quantity
from gputop.model import ProcKey, ProcSample
from gputop.view import fields
from gputop.view import format as fmt

SortValue = Optional[Union[float, str]]
#: (column, processes) -> the values to sort the processes by, or None for the column's own
SortValues = Callable[[str, Sequence["ProcSample"]], "list[Any] | None"]


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


def _kernel_state(p: ProcSample) -> str | None:
    """htop's S: the kernel's state letter; X (the kernel's "dead") for a process that exited."""
    return "X" if p.state == "exited" else p.kernel_state


def _gpu(p: ProcSample) -> str:
    return fmt.text(p.gpu_index)


def _command_text(p: ProcSample) -> str:
    """The command; a down node's row (fleet view) starts with since when it is stale: in the widest
    column, whole, where the NODE column would cut it."""
    text = fmt.text(fields.command(p))
    if not p.stale:
        return text
    return f"[stale since {fmt.clock(p.last_seen) if p.last_seen is not None else 'N/A'}] {text}"


_OWN: tuple[Column, ...] = (
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
        _command_text,
        descending=False,
        align="left",
        flex=True,
        cut="middle",
        help="command line (program name without its directory)",
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
        "live_mem",
        "LIVE MEM",
        8,
        fields.live_alloc_bytes,
        lambda p: fmt.bytes_(fields.live_alloc_bytes(p)),
        help="bytes allocated through CUDA and not yet freed",
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
        "state",
        "S",
        3,
        _kernel_state,
        lambda p: fmt.text(_kernel_state(p)),
        descending=False,
        help="process state, as htop's S: R running, S sleeping, D disk sleep, T stopped, t traced, I idle, "
             "X exited",
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
        "cpu_time",
        "TIME+",
        9,
        lambda p: p.cpu_time_s,
        lambda p: fmt.time_plus(p.cpu_time_s),
        help="CPU time the process has used since it started, minutes:seconds.hundredths (top's TIME+)",
    ),
    Column(
        "rss", "RSS", 6, lambda p: p.rss_bytes, lambda p: fmt.bytes_(p.rss_bytes),
        help="resident memory of the process (bytes in RAM)",
    ),
    Column(
        "mem", "%MEM", 5, lambda p: p.mem_pct, lambda p: fmt.pct(p.mem_pct, 1),
        help="resident memory as a share of the host's physical memory (top's %MEM)",
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
    # shown after NODE in the fleet view only, when some process has a pod (``visible``)
    Column(
        "namespace",
        "NAMESPACE",
        10,
        lambda p: p.namespace,
        lambda p: fmt.text(p.namespace),
        descending=False,
        align="left",
        help="Kubernetes namespace of the process's pod (fleet view, from kube-state-metrics)",
    ),
    Column(
        "pod",
        "POD",
        16,
        lambda p: p.pod,
        lambda p: fmt.text(p.pod),
        descending=False,
        align="left",
        cut="middle",
        help="Kubernetes pod of the process (fleet view, from kube-state-metrics; N/A: on the host or unknown)",
    ),
)


def rate_render(q: Quantity, pct_digits: int = 0) -> Callable[[float | None], str]:
    """How a quantity's rate is written: a percentage (``pct_digits`` decimals), bytes, or a count per second;
    ``fmt.bytes_`` itself for bytes (the compare screen reads binary prefixes back by it)."""
    assert q.rate is not None
    if q.rate.per is Per.PERCENT:
        return lambda v: fmt.pct(v, pct_digits)
    return fmt.bytes_ if q.unit == "bytes" else fmt.si


def _rate_column(key: str) -> Column:
    """The column of a shown rate, from its catalogue row; ``~`` before a value whose series is younger than
    the fleet's window (docs/fleet.md, "Warming up")."""
    q, shows = SHOWS[key]
    render = rate_render(q)
    return Column(key, shows.header, shows.width, lambda p: fields.rate(p, key),
                  lambda p: fmt.reads_low(render(fields.rate(p, key)), p.warming_up), help=shows.help)


def _in_order(own: Sequence[Column]) -> tuple[Column, ...]:
    """The table's own columns with each rate column of the catalogue after the column it follows."""
    out = list(own)
    pending = [_rate_column(key) for key in SHOWS]
    while pending:
        placed = [c for c in pending if any(o.key == SHOWS[c.key][1].after for o in out)]
        if not placed:
            raise ValueError(f"rate columns follow no column: {[c.key for c in pending]}")
        for c in placed:
            at = next(i for i, o in enumerate(out) if o.key == SHOWS[c.key][1].after)
            out.insert(at + 1, c)
            pending.remove(c)
    return tuple(out)


COLUMNS: tuple[Column, ...] = _in_order(_OWN)
BY_KEY: dict[str, Column] = {c.key: c for c in COLUMNS}
SORT_KEYS: tuple[str, ...] = tuple(c.key for c in COLUMNS)
DEFAULT_SORT = "launches"


#: columns shown only in the fleet view (NAMESPACE and POD only where some process has a pod)
FLEET_ONLY: tuple[str, ...] = ("node", "namespace", "pod")
#: columns the fleet view never knows (the exporter exports no user, CPU or RSS): hidden there
FLEET_UNKNOWN: tuple[str, ...] = ("user", "state", "cpu", "cpu_time", "rss", "mem")
#: columns shown only where every visible column fits the width (else left out before any is
#: scrolled off; the sort column always shows): the column menu shows or hides them
OPTIONAL: tuple[str, ...] = ("memset", "nccl", "nccl_bytes", "state", "cpu_time", "rss", "mem")


def is_fleet(procs: Iterable[ProcSample]) -> bool:
    """Processes from the fleet view (they carry their node's exporter), not from this host."""
    return any(p.instance is not None for p in procs)


def has_pods(procs: Iterable[ProcSample]) -> bool:
    """Some process has a Kubernetes pod (fleet view, from kube-state-metrics): C-level loops."""
    return any(map(is_not, map(_POD, procs), repeat(None)))


def visible(keys: Sequence[str], fleet: bool, pods: bool = False) -> tuple[str, ...]:
    """The columns to show: NODE only in the fleet view, and there always, after PID, then NAMESPACE
    and POD where some process has a pod (``pods``); not the columns the fleet view cannot know."""
    out = [k for k in keys if k not in FLEET_ONLY and not (fleet and k in FLEET_UNKNOWN)]
    if fleet:
        at = 1 if out and out[0] == "pid" else 0
        out[at:at] = ["node", "namespace", "pod"] if pods else ["node"]
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


def matches(p: ProcSample, query: str) -> bool:
    """Whether ``query`` finds ``p``: the filter's and the search's test (``filter_processes``)."""
    q = query.strip().lower()
    if not q:
        return True
    if q.isdigit() and int(q) == p.pid:
        return True
    return any(q in s.lower() for s in (p.comm or "", p.cmdline or "", p.user or "", p.node or "", p.pod or "",
                                        p.namespace or ""))


def filter_processes(procs: Iterable[ProcSample], query: str) -> list[ProcSample]:
    """Keep processes whose command, user, node, pod or namespace contains ``query`` (case-insensitive)
    or whose PID is it."""
    return [p for p in procs if matches(p, query)]


def sort_processes(procs: Sequence[ProcSample], key: str, reverse: bool = False) -> list[ProcSample]:
    """Sort by column ``key`` in its natural direction (``reverse`` flips it); ties in ``identity``
    order (node, scrape target, PID; then as given).

    Unknown values go last in both directions, in ``identity`` order.
    """
    return ProcOrder(procs).rows(key, reverse)


_PID = attrgetter("pid")
_INSTANCE = attrgetter("instance")
_NODE = attrgetter("node")
_POD = attrgetter("pod")
#: ``_EMPTY.get(v, v)``: "" for None, else ``v`` (C-level, as ``identity`` has it)
_EMPTY: dict[Any, Any] = {None: ""}


#: columns whose value is an attribute of the process, or of its rates (None without rates)
_ATTRIBUTES = {"pid": "pid", "user": "user", "gpu": "gpu_index", "grid": "grid_blocks_avg",
               "block": "block_threads_avg", "gpu_mem": "gpu_mem_bytes", "sm": "gpu_util_pct", "cpu": "cpu_pct",
               "cpu_time": "cpu_time_s", "rss": "rss_bytes", "mem": "mem_pct",
               "node": "node", "namespace": "namespace", "pod": "pod"}
#: the undirected rate columns: their ``Rates`` field
_RATES = {key: q.rate.field for key, (q, shows) in SHOWS.items() if q.rate is not None and shows.direction is None}


def _values(key: str, procs: Sequence[ProcSample]) -> list[Any]:
    """Column ``key``'s values (``Column.value``) of every process, with C-level loops where they are
    plain attributes (``getattr(None, name, None)`` is None: no rates, no value)."""
    if key in _ATTRIBUTES:
        return list(map(attrgetter(_ATTRIBUTES[key]), procs))
    if key in _RATES:
        return list(map(getattr, map(attrgetter("rates"), procs), repeat(_RATES[key]), repeat(None)))
    return list(map(BY_KEY[key].value, procs))


class ProcOrder:
    """One snapshot's processes, sorted and filtered for the table (``sort_processes``'s order).

    At 64,000 rows (the fleet view) a sort must not walk the rows in Python: what it needs is computed
    once per snapshot, lazily, with C-level loops (``map``, ``compress``: a loop in Python bytecode
    hands the interpreter lock to the feed's thread every 5 ms while it unpickles a refresh) into
    lists of plain values (no container per row: 64,000 new tuples set off collections of the
    youngest generations, which move on into walks over the freshly unpickled snapshot): the ties'
    order (``identity``: three stable sorts, by PID, scrape target, node), and
    per column its values (text lowered) and the indices of the processes it knows and does not know,
    each in the ties' order. A sort is then ``list.sort`` keyed by ``values.__getitem__`` (C-level,
    stable: ties keep the ties' order), the unknown appended; its result is kept per column and
    direction, so going back to a column costs nothing. A filter keeps the sorted order (filtering a
    stable sort's result equals sorting the filtered rows). ``Rows.position`` finds the selected
    process's row with ``list.index`` (C-level) over the PIDs, then over the row order.
    """

    def __init__(self, procs: Sequence[ProcSample], sort_values: SortValues | None = None) -> None:
        self.procs = procs
        #: a column's sort values (by process index) other than its shown values, or None: the
        #: dashboard's smoothed rates (``gputop.view.history.Smoother``)
        self._sort_values = sort_values
        self._ties: list[int] | None = None
        #: column -> (values by process index, known and unknown process indices in the ties' order)
        self._columns: dict[str, tuple[list[Any], list[int], list[int]]] = {}
        self._sorted: dict[tuple[str, bool], list[int]] = {}
        self._matches: dict[str, list[bool]] = {}
        self._pids: list[int] = []
        self._instances: list[str | None] = []

    def _ties_order(self) -> list[int]:
        if self._ties is None:
            ps = self.procs
            self._pids = list(map(_PID, ps))
            self._instances = list(map(_INSTANCE, ps))
            # (node, instance, PID) by three stable sorts, least significant first: no tuple per row
            ties = sorted(range(len(ps)), key=self._pids.__getitem__)
            instances: list[Any] = list(map(_EMPTY.get, self._instances, self._instances))
            ties.sort(key=instances.__getitem__)
            nodes: list[Any] = list(map(_NODE, ps))
            nodes = list(map(_EMPTY.get, nodes, nodes))
            ties.sort(key=nodes.__getitem__)
            self._ties = ties
        return self._ties

    def _column(self, key: str) -> tuple[list[Any], list[int], list[int]]:
        got = self._columns.get(key)
        if got is None:
            own = self._sort_values(key, self.procs) if self._sort_values is not None else None
            values: list[Any] = own if own is not None else _values(key, self.procs)
            if str in set(map(type, values)):
                values = [v.lower() if isinstance(v, str) else v for v in values]
            ties = self._ties_order()
            known = list(compress(ties, map(is_not, map(values.__getitem__, ties), repeat(None))))
            unknown = (list(compress(ties, map(is_, map(values.__getitem__, ties), repeat(None))))
                       if len(known) < len(ties) else [])
            got = self._columns[key] = (values, known, unknown)
        return got

    def indices(self, key: str, reverse: bool = False, query: str = "") -> list[int]:
        """The shown processes' indices in ``procs``, in row order (don't change the list)."""
        descending = BY_KEY[key].descending != reverse
        order = self._sorted.get((key, descending))
        if order is None:
            values, known, unknown = self._column(key)
            order = sorted(known, key=values.__getitem__, reverse=descending)
            order += unknown
            self._sorted[(key, descending)] = order
        q = query.strip().lower()
        if not q:
            return order
        match = self._matches.get(q)
        if match is None:
            match = self._matches[q] = [matches(p, q) for p in self.procs]
        return [i for i in order if match[i]]

    def rows(self, key: str, reverse: bool = False, query: str = "") -> list[ProcSample]:
        return list(map(self.procs.__getitem__, self.indices(key, reverse, query)))

    def view(self, key: str, reverse: bool = False, query: str = "") -> Rows:
        """The rows as a sequence that fetches a process when asked (a table draws a screenful)."""
        return Rows(self, self.indices(key, reverse, query))

    def where(self, which: ProcKey) -> list[int]:
        """The indices in ``procs`` of the processes whose ``ProcSample.key`` is ``which`` (one, but
        for a PID reused within a snapshot): a C-level scan of the PIDs, no map built."""
        self._ties_order()
        pids, instances = self._pids, self._instances
        pid, instance = (which, None) if isinstance(which, int) else (which[1], which[0])
        out: list[int] = []
        i = -1
        try:
            while True:
                i = pids.index(pid, i + 1)
                if instances[i] == instance:
                    out.append(i)
        except ValueError:
            return out


class Rows(Sequence[ProcSample]):
    """``ProcOrder``'s processes in row order, fetched by index (no list of every row is built)."""

    def __init__(self, order: ProcOrder, indices: list[int]) -> None:
        self._procs = order.procs
        self._order = order
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, index: int) -> ProcSample: ...

    @overload
    def __getitem__(self, index: slice) -> list[ProcSample]: ...

    def __getitem__(self, index: int | slice) -> ProcSample | list[ProcSample]:
        if isinstance(index, slice):
            return list(map(self._procs.__getitem__, self.indices[index]))
        return self._procs[self.indices[index]]

    def __iter__(self) -> Iterator[ProcSample]:
        return map(self._procs.__getitem__, self.indices)

    def position(self, which: ProcKey) -> int | None:
        """The row of the process ``which`` (``ProcSample.key``; the first such row), or None."""
        found = self._order.where(which)
        if len(found) == 1:
            try:
                return self.indices.index(found[0])
            except ValueError:      # filtered out
                return None
        wanted = set(found)
        return next((r for r, i in enumerate(self.indices) if i in wanted), None)


def neighbour(key: str, visible: Sequence[str], step: int) -> str:
    """The visible column ``step`` places left (<0) or right (>0) of ``key``, clamped at the ends."""
    if not visible:
        return key
    i = visible.index(key) if key in visible else 0
    return visible[max(0, min(len(visible) - 1, i + step))]
