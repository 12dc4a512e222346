"""The catalogue of quantities (gputop/counters.py) against the model's fields and the C struct as
compiled (bpf/gputop.h's proc_t), and
the round trip it promises: every quantity and GPU field the exporter publishes comes back equal in
the fleet view (the exporter's text, parsed as Prometheus stores it, into the fleet's snapshot)."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputop.counters import BPF_MEMBERS, BY_FIELD, GPU, PROC, Shown
from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.feeds.prometheus import Results, build_snapshot
from gputop.model import CallBytes, Counts, GpuSample, ProcSample, Snapshot, SourceStatus
from gputop.sources.bpf import has_privileges, load_bcc, use_headers
from gputop.sources.bpf.program.compilecache import declarations_only
from gputop.sources.bpf.program.program import Program, program_text
from gputop.sources.bpf.read import records
from gputop.ui.screens import details
from gputop.view import compare

#: members of struct proc_t that are not quantities of a process: state of the BPF program itself
NOT_QUANTITIES = {
    "capturing": "captures under way in the process (decides where a launch counts)",
    "exited_ns": "when the process's leader exited",
    "nccl_nranks": "the size of the largest NCCL communicator the process created (a level: ProcSample.nccl_comm_size)",
    "nccl_rank": "the process's rank in it (ProcSample.nccl_comm_rank)",
}


@functools.cache
def _proc_t() -> dict[str, bool]:
    """struct proc_t's 64-bit integer members as compiled: name -> whether it is an array. Read from the
    type bcc gives the ``procs`` map's values, which the reader reads (records.py), after compiling the
    program's declarations (bpf/gputop.h's types and the maps) as gputop does."""
    if not has_privileges():
        pytest.skip("compiling the BPF program's declarations creates its maps: needs the tracing privileges")
    bcc = load_bcc()
    use_headers()
    bpf = bcc.BPF(text=declarations_only(program_text()).encode(), cflags=Program().cflags())
    try:
        fields = bpf[b"procs"].Leaf._fields_
    finally:
        bpf.cleanup()
    out = {}
    for name, ctype in fields:
        array = issubclass(ctype, ctypes.Array)
        element = ctype._type_ if array else ctype
        if element._type_ in "lLqQ" and ctypes.sizeof(element) == 8:
            out[name] = array
    return out


def test_the_catalogue_holds_every_field_of_the_model_once() -> None:
    fields = [q.field for q in PROC]
    assert len(fields) == len(set(fields))
    assert set(fields) == {f.name for f in dataclasses.fields(Counts)}
    gpu = {f.name for f in dataclasses.fields(GpuSample)}
    assert all(f.field in gpu for f in GPU) and len({f.field for f in GPU}) == len(GPU)


def test_each_quantity_the_bpf_program_counts_is_a_member_of_its_struct_and_each_member_a_quantity() -> None:
    members = _proc_t()
    used: set[str] = set()
    for q in PROC:
        if q.bpf is None:
            continue
        if q.directions:
            for part in ("calls", "bytes") if q.paired else ("",):
                name = f"{q.bpf}_{part}" if part else q.bpf
                assert members.get(name) is True, f"{q.field}: no array {name} in struct proc_t"
                used.add(name)
        else:
            assert members.get(q.bpf) is False, f"{q.field}: no scalar {q.bpf} in struct proc_t"
            used.add(q.bpf)
        if q.unknown_if is not None:
            assert members.get(q.unknown_if) is False
            used.add(q.unknown_if)
    scalars = {m for m, array in members.items() if not array}
    assert scalars - used == set(NOT_QUANTITIES)
    assert set(BPF_MEMBERS) == scalars - set(NOT_QUANTITIES)
    assert records._SCALARS is BPF_MEMBERS      # the reader reads what the catalogue names


def test_every_row_is_shown_and_exported_as_it_says() -> None:
    for q in PROC:
        assert (q.label is not None) == (q.shown is not Shown.NONE), q.field
        assert (q.bytes_field is not None) == (q.shown is Shown.CALLS_BYTES), q.field
        if q.bytes_field is not None:
            assert BY_FIELD[q.bytes_field].unit == "bytes"
        assert q.metric is None or q.metric.startswith("gputop_"), q.field
    # every quantity the details screen draws itself has its rows, under its label
    p = ProcSample(pid=1, comm="x", total=Counts(), interval=Counts())
    for q in PROC:
        if q.shown is Shown.SPECIAL:
            rows = details._special_rows(p, q)
            assert rows and q.label is not None and rows[0][0].startswith(q.label), q.field
    labels = [m.label for m in compare.METRICS]
    assert len(labels) == len(set(labels))
    assert {q.compare for q in PROC if q.compare} | {q.compare_total for q in PROC if q.compare_total} <= set(labels)


def _everything() -> tuple[ProcSample, GpuSample]:
    """A process with a distinct value for every quantity, and a GPU with one for every field."""
    kw: dict[str, Any] = {}
    for i, q in enumerate(PROC, start=1):
        if q.paired:
            kw[q.field] = {d: CallBytes(10 * i + j, 1000 * i + j) for j, d in enumerate(q.directions)}
        elif q.directions:
            kw[q.field] = {d: 1000 * i + j for j, d in enumerate(q.directions)}
        else:
            kw[q.field] = 100 * i if q.integral else i / 4
    total = Counts(**kw)
    gpu = GpuSample(index=0, uuid="GPU-1", name="H100", **{f.field: (7 * i if f.integral else 7.5 * i)
                                                           for i, f in enumerate(GPU, start=1)})
    proc = ProcSample(pid=4242, comm="train", total=total, interval=Counts(launches=0),
                      grid_blocks_hist={"2^6": 3}, block_threads_hist={"2^7": 3})
    return proc, gpu


def _as_prometheus_stores_it(snap: Snapshot, instance: str) -> Results:
    collector = SnapshotCollector(ExportOptions())
    collector.update(snap)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    res = Results()
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            one = {"metric": {"__name__": s.name, **s.labels, "instance": instance, "job": "gputop"},
                   "value": [1.0, repr(s.value)]}
            if s.name.endswith("_bucket"):
                continue
            if s.name.startswith("gputop_gpu_"):
                res.gpus.append(one)
            elif "pid" in s.labels and (s.name.endswith(("_total", "_sum", "_count"))):
                res.totals.append(one)
            elif "pid" in s.labels:
                res.gauges.append(one)
            elif s.name == "gputop_build_info":
                res.build_info.append(one)
    return res


def test_every_exported_quantity_and_gpu_field_comes_back_equal_in_the_fleet_view() -> None:
    proc, gpu = _everything()
    snap = Snapshot(time=1.0, interval_s=1.0, host="node-a", processes=(proc,), gpus=(gpu,),
                    sources={"bpf": SourceStatus("ok")})
    back = build_snapshot(_as_prometheus_stores_it(snap, "10.0.0.1:9464"), at=2.0, window_s=60.0, host="h")
    assert [p.pid for p in back.processes] == [4242]
    got = back.processes[0].total
    assert got is not None and proc.total is not None
    assert all(q.metric is not None for q in PROC)      # every quantity is exported
    for q in PROC:
        assert getattr(got, q.field) == getattr(proc.total, q.field), q.field
    assert len(back.gpus) == 1
    for f in GPU:       # percent → ratio → percent, MHz → Hz → MHz: exact to the last bit or two
        want = getattr(gpu, f.field)
        assert getattr(back.gpus[0], f.field) == (want if f.integral else pytest.approx(want, rel=1e-12)), f.field
