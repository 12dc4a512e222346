"""Writing schema ``gputop/1``: a snapshot as plain JSON values (``snapshot_to_dict``) and as one line
of ASCII JSON (``snapshot_to_json``). Stdlib only; reading back is ``validate.py``."""

from __future__ import annotations

import dataclasses
import json
import operator
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from gputop.model.schema import (
    BPF_ONLY,
    UVM_ONLY,
    CallBytes,
    Counts,
    GpuSample,
    KernelStat,
    ProcSample,
    Rates,
    Snapshot,
    SourceStatus,
)
from gputop.model.summary import Summary


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
    "sync_latency": _plain,
    "call_sites": _plain,
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
            for k in BPF_ONLY:
                sd.pop(k, None)
        if name != "uvm":
            for k in UVM_ONLY:
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
