"""The snapshot model: frozen dataclasses and JSON (de)serialisation of schema ``gputop/1``.

Stdlib only. Unknown values are ``None`` (JSON ``null``), never 0. Field names carry units.
Mappings inside a snapshot are plain dicts by convenience; treat them as read-only.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

SCHEMA = "gputop/1"

#: memcpy directions, in the order the UI shows them.
MEMCPY_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "d2d", "h2h", "unknown")
PREFETCH_DIRECTIONS: tuple[str, ...] = ("to_device", "to_host")
UVM_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "d2d")


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

    @property
    def key(self) -> ProcKey:
        """The process's identity in a view: the PID on one host; (instance, PID) in the fleet view,
        where PIDs repeat across nodes (and exporters)."""
        return self.pid if self.instance is None else (self.instance, self.pid)


#: a process's identity in a view (``ProcSample.key``): a PID, or (instance, PID) in the fleet view
ProcKey = int | tuple[str, int]


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
    overhead_ns_per_s: float | None = None      # the BPF programs' run time (ns of CPU per second)
    probe_hits_per_s: float | None = None
    #: what the traced processes pay for gputop's probes, ns of CPU per second: uprobe hits x this
    #: host's calibrated trap cost + overhead_ns_per_s (None while either is unknown)
    cost_ns_per_s: float | None = None
    #: the calibrated uprobe trap cost, ns per hit at function entry (None: not yet calibrated)
    trap_ns: float | None = None
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
             "headers", "attach",
             "probes_failed")
_UVM_ONLY = ("scope",)


@dataclass(frozen=True)
class Snapshot:
    time: float
    interval_s: float
    host: str
    sources: Mapping[str, SourceStatus] = field(default_factory=dict)
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[ProcSample, ...] = ()
    schema: str = SCHEMA

    def process(self, which: ProcKey) -> ProcSample | None:
        """The process with this key (``ProcSample.key``); a PID alone finds the first with it."""
        for p in self.processes:
            if p.pid == which if isinstance(which, int) else p.key == which:
                return p
        return None


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
        d = dict(zip(names, getter(obj), strict=True))
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


def _callbytes_map(d: Mapping[str, Any] | None) -> dict[str, CallBytes] | None:
    if d is None:
        return None
    return {k: CallBytes(int(v["calls"]), int(v["bytes"])) for k, v in d.items()}


def _counts(d: Mapping[str, Any] | None) -> Counts | None:
    if d is None:
        return None
    kw = {name: d.get(name) for name in _field_names(Counts)}
    kw["memcpy"] = _callbytes_map(d.get("memcpy"))
    kw["prefetch"] = _callbytes_map(d.get("prefetch"))
    return Counts(**kw)


def _simple(cls: Any, d: Mapping[str, Any]) -> Any:
    names = _field_names(cls)
    return cls(**{k: v for k, v in d.items() if k in names})


def _proc(d: Mapping[str, Any]) -> ProcSample:
    names = _field_names(ProcSample)
    kw = {k: v for k, v in d.items() if k in names}
    kw["interval"] = _counts(d.get("interval"))
    kw["total"] = _counts(d.get("total"))
    kw["rates"] = _simple(Rates, d["rates"]) if d.get("rates") is not None else None
    kw["kernels"] = tuple(_simple(KernelStat, k) for k in d.get("kernels") or ())
    return ProcSample(**kw)


def snapshot_from_dict(d: Mapping[str, Any]) -> Snapshot:
    if d.get("schema") != SCHEMA:
        raise ValueError(f"unsupported schema {d.get('schema')!r} (expected {SCHEMA!r})")
    return Snapshot(
        time=float(d["time"]),
        interval_s=float(d["interval_s"]),
        host=str(d["host"]),
        sources={k: _simple(SourceStatus, v) for k, v in (d.get("sources") or {}).items()},
        gpus=tuple(_simple(GpuSample, g) for g in d.get("gpus") or ()),
        processes=tuple(_proc(p) for p in d.get("processes") or ()),
    )


def snapshot_from_json(line: str) -> Snapshot:
    return snapshot_from_dict(json.loads(line))
