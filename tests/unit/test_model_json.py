"""snapshot_to_dict's per-class converters write exactly what the generic walk ``tojson._plain`` does."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from gputop import model
from gputop.model import (
    CallBytes,
    CallSite,
    CallSites,
    Counts,
    Frame,
    GpuSample,
    KernelStat,
    Latency,
    LatencyHistogram,
    ProcSample,
    Rates,
    Snapshot,
    SourceStatus,
    SyncLatency,
    snapshot_from_json,
    snapshot_to_dict,
    snapshot_to_json,
    tojson,
)


def _value(ann: str, n: int) -> Any:
    """A value of every field's type, distinct per field, text with undecodable bytes and astral characters."""
    if "SyncLatency" in ann:
        lat = Latency(n, 0.001, 0.002, 0.004 + n, 0.1)
        return SyncLatency(interval={"stream": lat, "all": lat}, total={"stream": Latency(n + 1), "all": lat},
                           histograms={"stream": LatencyHistogram(n, n + 0.5, tuple(range(n, n + 14)))})
    if "CallSites" in ann:
        frames = (Frame(f"/srv/m{n}.py \udcff", n + 1, "Model.forward"), Frame(None, None, None),
                  Frame("libx.so", None, "caller()"))
        return CallSites(n, n + 7, (CallSite("python", frames, True, n, n + 7, n + 0.5, 0.25, 55.5, 2.5, "k<1>"),
                                    CallSite("native", frames[2:], False, 0, 1)), 1024)
    if "Mapping[str, CallBytes]" in ann:
        return {"h2d": CallBytes(n, n * 4096), "d2h": CallBytes(n + 1, 0), "unknown": CallBytes(0, 7)}
    if "Mapping[str, Mapping[str, int]]" in ann:
        return {"h2d": {"0": n, "12": 3}, "d2h": {}}
    if "Mapping[str, int]" in ann:
        return {"0": n, "5": n + 2, "31": 1}
    if "Mapping[str, float]" in ann:
        return {"h2d": n + 0.5, "d2h": 1e-9}
    if "Mapping[str, str]" in ann:
        return {"util_pct": "NotSupported", "temp_c": "GPU lost \udc80"}
    if "bool" in ann:
        return n % 2 == 0
    if "float" in ann:
        return n + 0.125
    if "int" in ann:
        return n * 1_000_003
    if "str" in ann:
        return f"f{n} caf\u00e9 \U0001f600 \udcff\\x"
    raise AssertionError(f"no sample value for {ann}")


def _fill(cls: type, seed: int, **given: Any) -> Any:
    kw = {}
    for i, f in enumerate(dataclasses.fields(cls)):
        if f.name in given:
            kw[f.name] = given[f.name]
        elif f.name not in ("interval", "total", "rates", "kernels", "schema", "sources", "gpus", "processes"):
            kw[f.name] = _value(str(f.type), seed + i)
    return cls(**kw)


def _rich() -> Snapshot:
    procs = []
    for pid in (101, 202):
        kernels = tuple(_fill(KernelStat, pid + j) for j in range(3))
        procs.append(_fill(ProcSample, pid, pid=pid, interval=_fill(Counts, pid), total=_fill(Counts, pid * 2),
                           rates=_fill(Rates, pid), kernels=kernels))
    procs.append(ProcSample(pid=303, comm=None))                         # the defaults: None and ()
    return Snapshot(time=1700000000.25, interval_s=1.0, host="h\udc81st",
                    sources={"bpf": _fill(SourceStatus, 1), "nvml": _fill(SourceStatus, 2),
                             "uvm": _fill(SourceStatus, 3), "host": SourceStatus("ok")},
                    gpus=(_fill(GpuSample, 4), GpuSample(index=1)), processes=tuple(procs))


def _reference_dict(snap: Snapshot) -> dict[str, Any]:
    """The generic conversion snapshot_to_dict used before its per-class converters."""
    d: dict[str, Any] = {"schema": snap.schema, "time": snap.time, "interval_s": snap.interval_s,
                         "host": snap.host, "sources": {}, "gpus": [tojson._plain(g) for g in snap.gpus],
                         "processes": [tojson._plain(p) for p in snap.processes]}
    for name, st in snap.sources.items():
        sd = tojson._plain(st)
        for k in model.BPF_ONLY if name != "bpf" else ():
            sd.pop(k, None)
        for k in model.UVM_ONLY if name != "uvm" else ():
            sd.pop(k, None)
        d["sources"][name] = sd
    d["summary"] = tojson._plain(model.summarize(snap))     # derived, last (docs/dashboard.md, Summary line)
    return d


def test_converters_write_what_the_generic_walk_writes() -> None:
    snap = _rich()
    ref = _reference_dict(snap)
    new = snapshot_to_dict(snap)
    assert new == ref
    assert json.dumps(new) == json.dumps(ref)                  # the same keys in the same order
    text = snapshot_to_json(snap)
    expected = json.dumps(tojson._valid_unicode(ref), separators=(",", ":"), allow_nan=False)
    assert text == expected
    assert text.isascii()
    assert "\\udc" not in text and "\\\\xff" in text      # an undecodable byte as the text \xNN


def test_every_field_is_written_and_read_back() -> None:
    snap = _rich()
    d = snapshot_to_dict(snap)
    p = d["processes"][0]
    assert list(p) == [f.name for f in dataclasses.fields(ProcSample)]
    assert list(p["interval"]) == [f.name for f in dataclasses.fields(Counts)]
    assert p["interval"]["memcpy"]["h2d"] == {"calls": 107, "bytes": 107 * 4096}   # field 6 of Counts
    assert list(p["kernels"][2]) == [f.name for f in dataclasses.fields(KernelStat)]
    assert d["processes"][2]["kernels"] == [] and d["processes"][2]["interval"] is None
    assert "scope" not in d["sources"]["bpf"] and "scope" in d["sources"]["uvm"]
    assert "probes" in d["sources"]["bpf"] and "probes" not in d["sources"]["nvml"]
    back = snapshot_from_json(json.dumps(d))
    assert back.processes[1].total == snap.processes[1].total
    assert back.processes[0].kernels == snap.processes[0].kernels
    assert back.gpus == snap.gpus
