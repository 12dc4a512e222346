"""The snapshot model: frozen dataclasses and JSON (de)serialisation of schema ``gputop/1``.

Stdlib only. Unknown values are ``None`` (JSON ``null``), never 0. Field names carry units.
Mappings inside a snapshot are plain dicts by convenience; treat them as read-only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from itertools import repeat
from operator import methodcaller
from typing import Any, Union

SCHEMA = "gputop/1"

#: memcpy directions, in the order the UI shows them.
MEMCPY_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "d2d", "h2h", "unknown")
PREFETCH_DIRECTIONS: tuple[str, ...] = ("to_device", "to_host")
UVM_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "d2d")
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
    live_alloc_bytes: int | None = None
    managed_alloc_calls: int | None = None
    managed_alloc_bytes: int | None = None
    prefetch: Mapping[str, CallBytes] | None = None
    uvm_cpu_faults: int | None = None
    uvm_gpu_faults: int | None = None
    uvm_migrated: Mapping[str, int] | None = None
    uvm_thrashing: int | None = None
    sync_calls: int | None = None
    sync_wait_s: float | None = None


@dataclass(frozen=True)
class Rates:
    """Per-second rates over the snapshot's interval."""

    launches_per_s: float | None = None
    #: kernels run inside graph launches per second (None as ``Counts.graph_kernel_launches``)
    graph_kernel_launches_per_s: float | None = None
    memcpy_bytes_per_s: Mapping[str, float] | None = None
    uvm_faults_per_s: float | None = None
    #: share of the interval the process spent blocked in synchronisation calls
    sync_wait_pct: float | None = None


@dataclass(frozen=True)
class KernelStat:
    name: str
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
class ProcSample:
    pid: int
    comm: str | None        # None: the process vanished before gputop read its name
    ppid: int | None = None
    cmdline: str | None = None
    user: str | None = None
    container: str | None = None
    state: str = "running"  # "running" | "stopped" (by a signal or a tracer) | "exited" (shown once more)
    interval: Counts | None = None
    total: Counts | None = None
    rates: Rates | None = None
    grid_blocks_avg: float | None = None
    block_threads_avg: float | None = None
    grid_blocks_hist: Mapping[str, int] | None = None
    block_threads_hist: Mapping[str, int] | None = None
    memcpy_size_hist: Mapping[str, Mapping[str, int]] | None = None
    kernels: tuple[KernelStat, ...] = ()
    gpu_index: int | None = None
    gpu_mem_bytes: int | None = None
    gpu_util_pct: float | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    launch_bound: bool | None = None
    #: PID inside the process's own PID namespace (containers), when it differs
    nspid: int | None = None
    #: when the process started (unix seconds, the kernel's 10 ms resolution); with ``pid`` the
    #: process's identity: a PID the kernel gives to a new process is a new row whose counts start
    #: from zero. None: unknown (the process went before gputop read it)
    start_time: float | None = None
    #: fleet view (``gputop --prometheus``): the exporter's node name (``gputop_build_info``) and its
    #: Prometheus scrape target; None on a single host
    node: str | None = None
    instance: str | None = None
    #: fleet view: unix time of the process's last sample in Prometheus; None on a single host
    last_seen: float | None = None
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
    #: fleet view: the Kubernetes pod and namespace the process runs in, from kube-state-metrics
    #: (``kube_pod_container_info`` by the exporter's container id, ``kube_pod_info`` by a pod UID);
    #: None: unknown (on the host, no such series, or on a single host)
    pod: str | None = None
    namespace: str | None = None

    @property
    def key(self) -> ProcKey:
        """The process's identity in a view: the PID on one host; (instance, PID) in the fleet view,
        where PIDs repeat across nodes (and exporters)."""
        return self.pid if self.instance is None else (self.instance, self.pid)


#: a process's identity in a view (``ProcSample.key``): a PID, or (instance, PID) in the fleet view
ProcKey = Union[int, tuple[str, int]]


@dataclass(frozen=True)
class GpuSample:
    index: int
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
    mig_instance: int | None = None
    #: why values are None (NotSupported, NoPermission, GPU lost...), by field
    reasons: Mapping[str, str] | None = None
    #: fleet view: the node (``gputop_build_info``'s node label) the GPU is in; None on a single host
    node: str | None = None


@dataclass(frozen=True)
class SourceStatus:
    status: str = "unavailable"  # "ok" | "unavailable" | "starting"
    reason: str | None = None
    # BPF-only fields (None for other sources)
    objects: int | None = None
    probes: int | None = None
    dropped: int | None = None
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


_BPF_ONLY = ("objects", "probes", "dropped", "overhead_ns_per_s", "probe_hits_per_s", "cost_ns_per_s", "trap_ns",
             "stats_age_s", "headers", "attach",
             "probes_failed")
_UVM_ONLY = ("scope",)


@dataclass(frozen=True)
class Summary:
    """Host-wide totals of the processes listed in a snapshot (htop's Tasks: line; ``summarize``,
    docs/dashboard.md "Summary line"): ``Snapshot.summary``, written in every JSON snapshot (optional
    field ``summary`` of schema gputop/1, derived: a reader recomputes it). A rate is None when any
    listed process's rate is unknown."""

    processes: int
    running: int
    stopped: int
    exited: int
    launches_per_s: float | None = None
    graph_kernel_launches_per_s: float | None = None
    #: memcpy bytes per second by direction (None: unknown)
    h2d_bytes_per_s: float | None = None
    d2h_bytes_per_s: float | None = None
    d2d_bytes_per_s: float | None = None
    gpus: int = 0
    #: GPUs whose utilisation is above 0 %; None: no GPU, or one whose utilisation is unknown
    gpus_busy: int | None = None


@dataclass(frozen=True)
class Snapshot:
    time: float
    interval_s: float
    host: str
    sources: Mapping[str, SourceStatus] = field(default_factory=dict)
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[ProcSample, ...] = ()
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


def _sum(values: list[Any]) -> float | None:
    """The sum of ``values``; None when one is unknown (None or NaN). C-level loops: the fleet view sums
    64,000 processes on the dashboard's thread."""
    if None in values:
        return None
    total = math.fsum(values)
    return None if math.isnan(total) else total


def summarize(snap: Snapshot, procs: Sequence[ProcSample] | None = None) -> Summary:
    """Totals of ``procs`` (default: every process of ``snap``), htop's Tasks: line: how many are listed,
    running, stopped and exited; the sums of their launches/s, graph kernels/s and H2D/D2H/D2D bytes/s
    over the snapshot's interval (None when any of them is unknown, and with no process when neither
    the BPF source nor Prometheus counts); the GPUs, and how many are busy (utilisation above 0 %: a
    kernel ran in NVML's last sample period; None without GPUs or when a GPU's utilisation is unknown)."""
    ps = snap.processes if procs is None else procs
    states = Counter(map(_STATE, ps))
    counted = any(st.status == "ok" for name, st in snap.sources.items() if name in ("bpf", "prometheus"))
    sums: dict[str, float | None] = dict.fromkeys(("launches", "graph", "h2d", "d2h", "d2d"))
    rates = list(map(_RATES, ps))
    if (ps or counted) and not any(map(operator.is_, rates, repeat(None))):     # identity: no Rates.__eq__
        sums["launches"] = _sum(list(map(_LAUNCHES, rates)))
        sums["graph"] = _sum(list(map(_GRAPH_KERNELS, rates)))
        by_dir = list(map(_MEMCPY, rates))
        if not any(map(operator.is_, by_dir, repeat(None))):
            for d in ("h2d", "d2h", "d2d"):
                sums[d] = _sum(list(map(methodcaller("get", d), by_dir)))
    utils = [g.util_pct for g in snap.gpus]
    busy = None if not utils or any(u is None or math.isnan(u) for u in utils) else sum(
        1 for u in utils if u is not None and u > 0)
    return Summary(
        processes=len(ps),
        running=states["running"],
        stopped=states["stopped"],
        exited=states["exited"],
        launches_per_s=sums["launches"],
        graph_kernel_launches_per_s=sums["graph"],
        h2d_bytes_per_s=sums["h2d"],
        d2h_bytes_per_s=sums["d2h"],
        d2d_bytes_per_s=sums["d2d"],
        gpus=len(utils),
        gpus_busy=busy,
    )


_STATE = operator.attrgetter("state")
_RATES = operator.attrgetter("rates")
_LAUNCHES = operator.attrgetter("launches_per_s")
_GRAPH_KERNELS = operator.attrgetter("graph_kernel_launches_per_s")
_MEMCPY = operator.attrgetter("memcpy_bytes_per_s")


# ---------------------------------------------------------------- JSON


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


#: values the JSON writer takes as they are (``_plain`` returns them unchanged)
_LEAF_TYPES = frozenset({int, float, str, bool, type(None)})


def _plain_map(m: Any) -> Any:
    """``_plain`` of a mapping field (or None): its keys as text, its values converted."""
    if m is None:
        return None
    return {str(k): v if type(v) in _LEAF_TYPES else _plain(v) for k, v in m.items()}


def _plain_list(items: Any) -> Any:
    return [v if type(v) in _LEAF_TYPES else _plain(v) for v in items]


def _dict_converter(cls: type, nested: Mapping[str, Any]) -> Any:
    """A fast ``_plain`` for instances of the dataclass ``cls``: one C-level getattr of every field
    (in field order, as ``_plain`` writes them) and a converter for each field that is not a plain
    value: its annotation names a mapping, a tuple or another dataclass (``nested``: a field's own
    converter; other mappings and tuples get ``_plain_map``/``_plain_list``)."""
    names = _field_names(cls)
    getter = operator.attrgetter(*names)
    fixes: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cls):
        ann = str(f.type)
        if f.name in nested:
            fixes.append((f.name, nested[f.name]))
        elif "Mapping" in ann or "dict" in ann:
            fixes.append((f.name, _plain_map))
        elif "tuple" in ann or "list" in ann:
            fixes.append((f.name, _plain_list))

    def convert(obj: Any) -> dict[str, Any]:
        d = dict(zip(names, getter(obj)))
        for name, fn in fixes:
            v = d[name]
            if v is not None:
                d[name] = fn(v)
        return d

    return convert


def _callbytes_plain(m: Mapping[Any, CallBytes]) -> dict[str, Any]:
    return {str(k): {"calls": v.calls, "bytes": v.bytes} if type(v) is CallBytes else _plain(v)
            for k, v in m.items()}


_counts_plain = _dict_converter(Counts, {"memcpy": _callbytes_plain, "prefetch": _callbytes_plain})
_rates_plain = _dict_converter(Rates, {})
_kernel_plain = _dict_converter(KernelStat, {})


def _kernels_plain(ks: Any) -> list[Any]:
    return [_kernel_plain(k) if type(k) is KernelStat else _plain(k) for k in ks]


def _memcpy_hist_plain(m: Any) -> Any:
    return {str(k): _plain_map(v) if isinstance(v, Mapping) else _plain(v) for k, v in m.items()}


_proc_plain = _dict_converter(ProcSample, {
    "interval": lambda c: _counts_plain(c) if type(c) is Counts else _plain(c),
    "total": lambda c: _counts_plain(c) if type(c) is Counts else _plain(c),
    "rates": lambda r: _rates_plain(r) if type(r) is Rates else _plain(r),
    "kernels": _kernels_plain,
    "memcpy_size_hist": _memcpy_hist_plain,
})
_gpu_plain = _dict_converter(GpuSample, {})
_summary_plain = _dict_converter(Summary, {})
_source_plain = _dict_converter(SourceStatus, {})


def snapshot_to_dict(snap: Snapshot) -> dict[str, Any]:
    """The snapshot as plain JSON values: what ``_plain`` makes of it (tests/unit/test_model_json.py
    holds them equal), by per-class converters rather than a generic walk."""
    d: dict[str, Any] = {
        "schema": snap.schema,
        "time": snap.time,
        "interval_s": snap.interval_s,
        "host": snap.host,
        "sources": {},
        "gpus": [_gpu_plain(g) if type(g) is GpuSample else _plain(g) for g in snap.gpus],
        "processes": [_proc_plain(p) if type(p) is ProcSample else _plain(p) for p in snap.processes],
    }
    d["summary"] = _summary_plain(snap.summary)     # derived from the rest: read back, it is recomputed
    for name, st in snap.sources.items():
        sd = _source_plain(st) if type(st) is SourceStatus else _plain(st)
        if name != "bpf":
            for k in _BPF_ONLY:
                sd.pop(k, None)
        if name != "uvm":
            for k in _UVM_ONLY:
                sd.pop(k, None)
        d["sources"][name] = sd
    return d


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_text(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return f"\\x{cp - 0xDC00:02x}" if 0xDC80 <= cp <= 0xDCFF else f"\\u{{{cp:04x}}}"


def _valid_unicode(obj: Any) -> Any:
    if isinstance(obj, str):
        return _SURROGATE.sub(_surrogate_text, obj)
    if isinstance(obj, dict):
        return {_valid_unicode(k): _valid_unicode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_valid_unicode(v) for v in obj]
    return obj


def snapshot_to_json(snap: Snapshot) -> str:
    """One line of JSON, ASCII only. Text holds what the process or ELF file gave, except bytes
    that are not valid UTF-8 (Python's ``surrogateescape`` lone surrogates U+DC80-U+DCFF): each
    is written as the four characters ``\\xNN`` (Python's ``backslashreplace``), as every display
    shows it, so that the JSON is valid Unicode for every reader (a lone ``\\udcNN`` escape is
    not); any other lone surrogate becomes ``\\u{XXXX}``."""
    d = snapshot_to_dict(snap)
    text = json.dumps(d, separators=(",", ":"), allow_nan=False)
    if "\\ud" in text:   # a lone surrogate, or (most often) an astral character's pair: rare either way
        text = json.dumps(_valid_unicode(d), separators=(",", ":"), allow_nan=False)
    return text


# ---------------------------------------------------------------- reading: every field checked
#
# A snapshot read back (a recording, which may come from anyone) is held to the schema field by
# field, here and nowhere else: an integer is an int (not a bool, a float or text) within its
# range, a number is finite and within its range, text is a str of bounded length, a list or an
# object has the shape its field says and a bounded length. Unknown fields are ignored (the schema
# adds fields freely). A field the schema lets be null whose value is bad is read as None (unknown)
# and the problem reported; any other bad value refuses the snapshot (``SnapshotError``).

#: Linux's PID_MAX_LIMIT on 64-bit (``pid_max`` can be raised up to it, never beyond)
PID_MAX = 1 << 22
#: pid_t's range: the other ids of a process (ppid, nspid), GPU and MIG indices
ID_MAX = (1 << 31) - 1
#: counts are the BPF side's unsigned 64-bit counters
COUNT_LIMIT = 1 << 64
#: unix seconds (time, start_time): below 2^37, the year 6325 (Python's dates end at 9999)
TIME_LIMIT = 1 << 37
#: the seconds a snapshot covers (the fleet view's --window included): above 0, below 2^32
INTERVAL_LIMIT = 1 << 32
#: any other number (a rate, a percentage, an average, a temperature): finite, |x| below 2^64
NUMBER_LIMIT = float(1 << 64)
#: characters of a command line: Linux allows 6 MiB of arguments
MAX_CMDLINE = 8 << 20
#: characters of any other text (a name, a path, a reason)
MAX_TEXT = 1 << 16
#: characters of a kernel name: the live side cuts one at 4096 characters and a "…" (ELF symbols
#: and c++filt's output: ``elfread.NAME_MAX_BYTES``, ``symbols.DEMANGLED_MAX``); twice that leaves
#: room, and keeps the dashboard's shortening of names (``view.format.kernel_name``, whose time grows
#: with the square of a name's bracket depth) within a second a name
MAX_KERNEL_NAME = 8192
#: characters of a key of a keyed object (a direction, a source's name, a field's name), and its entries
MAX_KEY = 64
MAX_ENTRIES = 64
#: kernels per process: the schema keeps the top 20 (``sampler.TOP_KERNELS``); more are cut to 20
MAX_KERNELS = 20
MAX_GPUS = 1 << 16
MAX_PROCESSES = 1 << 20
#: the keys of a log2 histogram
HIST_KEYS = frozenset(f"2^{k}" for k in range(64))


class SnapshotError(ValueError):
    """A snapshot read from JSON that does not hold to schema gputop/1: the message says where
    (``processes[2].pid``) and what is wrong, in ASCII."""


class _Bad(Exception):
    """A bad value: ``what`` is wrong with it, at ``path`` (built outwards as it propagates)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path = ""

    def under(self, name: str) -> _Bad:
        self.path = _join(name, self.path)
        return self


class _Cut(Exception):
    """A value too long, kept cut to ``value``; ``what`` says so."""

    def __init__(self, value: Any, what: str) -> None:
        super().__init__(what)
        self.value = value
        self.what = what


_ABSENT: Any = object()
_KIND = {str: "text", int: "an integer", float: "a floating-point number", bool: "true/false",
         type(None): "null", list: "a list", dict: "an object"}
#: reads one value; may append problems (paths relative to the value) or raise _Bad or _Cut
Check = Callable[[Any, list[str]], Any]


def _join(name: str, sub: str) -> str:
    """``sub`` (a path or a problem that starts with one) inside ``name``."""
    if not sub:
        return name
    return name + sub if sub[0] == "[" else f"{name}.{sub}"


def _prefix(problems: list[str], start: int, name: str) -> None:
    for j in range(start, len(problems)):
        problems[j] = _join(name, problems[j])


def _kind(v: Any) -> str:
    return _KIND.get(type(v), "an unknown type")


def _not(expected: str, v: Any) -> _Bad:
    return _Bad(f"is not {expected} ({_kind(v)})")


def _key(k: str) -> str:
    return f"[{k!a}]"


def _ints(lo: int, hi: int, label: str) -> Check:
    def check(v: Any, problems: list[str]) -> int:
        if type(v) is int:
            if lo <= v <= hi:
                return v
            raise _Bad(f"is out of range ({label})")
        raise _not("an integer", v)
    return check


def _numbers(lo: float, hi: float, label: str, *, lo_open: bool = False, to_float: bool = False) -> Check:
    """Numbers from ``lo`` (excluded when ``lo_open``) to below ``hi``; an integer stays one unless
    ``to_float``."""
    def check(v: Any, problems: list[str]) -> float:
        t = type(v)
        if t is float or t is int:
            if lo < v < hi or (v == lo and not lo_open):      # false for NaN
                return float(v) if to_float else v
            if t is float and not math.isfinite(v):
                raise _Bad("is not finite")
            raise _Bad(f"is out of range ({label})")
        raise _not("a number", v)
    return check


def _texts(cap: int) -> Check:
    def check(v: Any, problems: list[str]) -> str:
        if type(v) is str:
            if len(v) <= cap:
                return v
            raise _Cut(v[: cap - 1] + "…", f"is longer than {cap} characters: cut")
        raise _not("text", v)
    return check


def _flag(v: Any, problems: list[str]) -> bool:
    if type(v) is bool:
        return v
    raise _not("true or false", v)


_count = _ints(0, COUNT_LIMIT - 1, "0 to 2^64-1")
_signed = _ints(-(1 << 63), (1 << 63) - 1, "-2^63 to 2^63-1")
_pid = _ints(1, PID_MAX, f"1 to {PID_MAX}")
_id = _ints(0, ID_MAX, f"0 to {ID_MAX}")
_number = _numbers(-NUMBER_LIMIT, NUMBER_LIMIT, "-2^64 to 2^64")
_unix_time = _numbers(0, TIME_LIMIT, "0 to 2^37")
_time = _numbers(0, TIME_LIMIT, "0 to 2^37", to_float=True)
_interval = _numbers(0, INTERVAL_LIMIT, "above 0, below 2^32", lo_open=True, to_float=True)
_text = _texts(MAX_TEXT)
_kernel_name = _texts(MAX_KERNEL_NAME)
_cmdline = _texts(MAX_CMDLINE)


def _keyed(value: Check) -> Check:
    """An object of at most ``MAX_ENTRIES`` keys of at most ``MAX_KEY`` characters (a direction,
    a source, a field's name: any, so that the schema can add one), each value read by ``value``."""
    def check(v: Any, problems: list[str]) -> dict[str, Any]:
        if type(v) is not dict:
            raise _not("an object", v)
        if len(v) > MAX_ENTRIES:
            raise _Bad(f"has more than {MAX_ENTRIES} entries")
        out = {}
        for k, x in v.items():
            if type(k) is not str or len(k) > MAX_KEY:
                raise _Bad(f"has a key longer than {MAX_KEY} characters")
            start = len(problems)
            try:
                out[k] = value(x, problems)
            except _Bad as e:
                raise e.under(_key(k)) from None
            except _Cut as e:
                out[k] = e.value
                problems.append(f"{_key(k)} {e.what}")
                continue
            if len(problems) > start:
                _prefix(problems, start, _key(k))
        return out
    return check


def _hist(v: Any, problems: list[str]) -> dict[str, int]:
    """Log2 buckets ``{"2^k": count}``, k from 0 to 63."""
    if type(v) is not dict:
        raise _not("an object", v)
    for k, n in v.items():
        if k not in HIST_KEYS:
            raise _Bad(f"has a bucket other than 2^0 to 2^63 ({str(k)[:24]!a})")
        try:
            _count(n, problems)
        except _Bad as e:
            raise e.under(_key(k)) from None
    return v


def _callbytes(v: Any, problems: list[str]) -> CallBytes:
    if type(v) is not dict:
        raise _not("an object", v)
    calls_bytes = []
    for name in ("calls", "bytes"):
        x = v.get(name, _ABSENT)
        if x is _ABSENT:
            raise _Bad("is missing").under(name)
        try:
            calls_bytes.append(_count(x, problems))
        except _Bad as e:
            raise e.under(name) from None
    return CallBytes(*calls_bytes)


#: a field as ``_read`` reads it: its name, its check, whether the schema lets it be null (a bad
#: value is then read as None), whether it must be there (no default), and whether its check may
#: report problems of its own (an object, a list or a keyed object)
_Field = tuple[str, Check, bool, bool, bool]


#: the checks that report no problems of their own (they return a value or raise)
_LEAVES = frozenset({_count, _signed, _pid, _id, _number, _unix_time, _time, _interval, _text, _kernel_name,
                     _cmdline, _flag, _hist})


def _spec(cls: type, checks: Mapping[str, Check]) -> tuple[_Field, ...]:
    fields = dataclasses.fields(cls)
    assert {f.name for f in fields} - {"schema"} == set(checks), f"{cls.__name__}: a field without a check"
    return tuple((f.name, checks[f.name], "None" in str(f.type),
                  f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                  checks[f.name] not in _LEAVES)
                 for f in fields if f.name in checks)


def _read(spec: tuple[_Field, ...], d: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """The fields of ``spec`` in ``d``, checked: keyword arguments of the dataclass."""
    kw: dict[str, Any] = {}
    for name, check, nullable, required, nested in spec:
        v = d.get(name, _ABSENT)
        if v is _ABSENT:
            if required:
                raise _Bad("is missing").under(name)
            continue
        if v is None and nullable:
            kw[name] = None
            continue
        start = len(problems)
        try:
            kw[name] = check(v, problems)
        except _Cut as e:
            if nested:
                _prefix(problems, start, name)
            kw[name] = e.value
            problems.append(f"{name} {e.what}")
            continue
        except _Bad as e:
            if not nullable:
                raise e.under(name) from None
            kw[name] = None
            del problems[start:]
            problems.append(f"{_join(name, e.path)} {e.what}: read as unknown")
            continue
        if nested and len(problems) > start:
            _prefix(problems, start, name)
    return kw


def _objects(spec: tuple[_Field, ...], cls: type) -> Check:
    def check(v: Any, problems: list[str]) -> Any:
        if type(v) is not dict:
            raise _not("an object", v)
        return cls(**_read(spec, v, problems))
    return check


def _list(item: Check, limit: str, cut: bool = False) -> Check:
    """A list read by ``item``, of at most the module's ``limit`` entries (looked up at each call:
    a test can lower it); with ``cut``, a longer one is cut to that many (the first ones: the list
    is sorted by importance)."""
    def check(v: Any, problems: list[str]) -> tuple[Any, ...]:
        if type(v) is not list:
            raise _not("a list", v)
        most: int = globals()[limit]
        over = len(v) > most
        if over and not cut:
            raise _Bad(f"has more than {most} entries")
        out = []
        for i, x in enumerate(v[:most] if over else v):
            start = len(problems)
            try:
                out.append(item(x, problems))
            except _Bad as e:
                raise e.under(f"[{i}]") from None
            if len(problems) > start:
                _prefix(problems, start, f"[{i}]")
        if over:
            raise _Cut(tuple(out), f"has more than {most} entries: the first {most} kept")
        return tuple(out)
    return check


_COUNTS_SPEC = _spec(Counts, {
    **{f.name: _count for f in dataclasses.fields(Counts)},
    "live_alloc_bytes": _signed,        # allocations minus frees: a signed 64-bit counter
    "memcpy": _keyed(_callbytes), "prefetch": _keyed(_callbytes), "uvm_migrated": _keyed(_count),
    "sync_wait_s": _number,
})
_RATES_SPEC = _spec(Rates, {**{f.name: _number for f in dataclasses.fields(Rates)},
                            "memcpy_bytes_per_s": _keyed(_number)})
_KERNEL_SPEC = _spec(KernelStat, {
    "name": _kernel_name, "launches": _count, "grid_blocks_avg": _number, "block_threads_avg": _number,
    "interval_launches": _count, "launches_per_s": _number, "object": _text, "address": _count,
    "graph_launches": _count, "interval_graph_launches": _count, "graph_launches_per_s": _number,
})
_PROC_SPEC = _spec(ProcSample, {
    "pid": _pid, "comm": _text, "ppid": _id, "cmdline": _cmdline, "user": _text, "container": _text,
    "state": _text, "interval": _objects(_COUNTS_SPEC, Counts), "total": _objects(_COUNTS_SPEC, Counts),
    "rates": _objects(_RATES_SPEC, Rates), "grid_blocks_avg": _number, "block_threads_avg": _number,
    "grid_blocks_hist": _hist, "block_threads_hist": _hist, "memcpy_size_hist": _keyed(_hist),
    "kernels": _list(_objects(_KERNEL_SPEC, KernelStat), "MAX_KERNELS", cut=True),
    "gpu_index": _id, "gpu_mem_bytes": _count, "gpu_util_pct": _number, "cpu_pct": _number,
    "rss_bytes": _count, "launch_bound": _flag, "nspid": _id, "start_time": _unix_time, "node": _text,
    "instance": _text, "last_seen": _unix_time, "stale": _flag, "warming_up": _flag, "cpu_time_s": _number,
    "mem_pct": _number, "pod": _text, "namespace": _text,
})
_GPU_SPEC = _spec(GpuSample, {
    "index": _id, "uuid": _text, "name": _text, "util_pct": _number, "mem_util_pct": _number,
    "mem_used_bytes": _count, "mem_total_bytes": _count, "temp_c": _number, "power_w": _number,
    "power_limit_w": _number, "sm_clock_mhz": _number, "pcie_tx_bytes_per_s": _number,
    "pcie_rx_bytes_per_s": _number, "xid_errors": _count, "ecc_volatile_errors": _count, "mig_instance": _id,
    "reasons": _keyed(_text), "node": _text,
})
_SOURCE_SPEC = _spec(SourceStatus, {
    "status": _text, "reason": _text, "objects": _count, "probes": _count, "dropped": _count,
    "overhead_ns_per_s": _number, "probe_hits_per_s": _number, "cost_ns_per_s": _number, "trap_ns": _number,
    "stats_age_s": _number, "headers": _text, "attach": _text, "probes_failed": _count, "scope": _text,
})
_SNAPSHOT_SPEC = _spec(Snapshot, {
    "time": _time, "interval_s": _interval, "host": _text,
    "sources": _keyed(_objects(_SOURCE_SPEC, SourceStatus)),
    "gpus": _list(_objects(_GPU_SPEC, GpuSample), "MAX_GPUS"),
    "processes": _list(_objects(_PROC_SPEC, ProcSample), "MAX_PROCESSES"),
})


def snapshot_from_dict(d: Mapping[str, Any], problems: list[str] | None = None) -> Snapshot:
    """The snapshot a JSON object (``json.loads`` of a line) describes, every field checked.

    Raises ``SnapshotError`` (a ValueError) for a snapshot that does not hold to the schema. A
    field the schema lets be null that holds a bad value is read as None; text longer than its
    cap is cut (``…`` marks the cut), and kernels beyond the top 20 are dropped: each such problem
    is appended to ``problems`` when given, as one ASCII line that says where and what.
    """
    if not isinstance(d, Mapping):
        raise SnapshotError(f"a snapshot is an object, not {_kind(d)}")
    schema = d.get("schema")
    if schema != SCHEMA:
        shown = f"{schema[:40]!a}" if isinstance(schema, str) else "None" if schema is None else _kind(schema)
        raise SnapshotError(f"unsupported schema {shown} (expected {SCHEMA!r})")
    found: list[str] = []
    try:
        kw = _read(_SNAPSHOT_SPEC, d, found)
    except _Bad as e:
        raise SnapshotError(f"{e.path} {e.what}") from None
    if problems is not None:
        problems.extend(found)
    return Snapshot(**kw)


def snapshot_from_json(line: str) -> Snapshot:
    return snapshot_from_dict(json.loads(line))
