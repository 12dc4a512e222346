"""Crafted recordings (issue 25): every field of a recorded snapshot is checked by type and range
when read. A bad line is skipped with one notice naming the file, the line and what was wrong; a
bad value of a field the schema lets be null is read as null (unknown) with one notice; nothing
ends in a traceback, in batch mode or in the replay feed.

Each case is one line between two good snapshots (times 1000 and 1002; the case's own snapshot,
where it is kept, has time 1001)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from gputop import model
from gputop.feeds.replay import ReplayFeed
from gputop.model import (
    CallBytes,
    Counts,
    GpuSample,
    KernelStat,
    ProcSample,
    Rates,
    Snapshot,
    SourceStatus,
    snapshot_from_dict,
    snapshot_to_dict,
    snapshot_to_json,
)
from gputop.record import RecordingError, read_recording
from gputop.record.lines import too_dense

ROOT = Path(__file__).resolve().parents[2]


def _snap(t: float) -> Snapshot:
    counts = Counts(launches=40, graph_launches=0, grid_blocks_sum=1280, block_threads_sum=5120,
                    memcpy={"h2d": CallBytes(3, 3 << 20), "d2h": CallBytes(1, 4096)}, alloc_calls=1,
                    live_alloc_bytes=1 << 30, prefetch={"to_device": CallBytes(0, 0)}, sync_calls=5,
                    sync_wait_s=0.25)
    kernels = (KernelStat("void add<float>(float*, int)", 30, 32.0, 128.0, interval_launches=3,
                          launches_per_s=3.0, object="/opt/app/libk.so"),
               KernelStat("0x7f00dead", 10, None, None, address=0x7F00DEAD))
    proc = ProcSample(pid=4242, comm="python", ppid=1, cmdline="python train.py", user="alice", state="running",
                      interval=counts, total=counts,
                      rates=Rates(launches_per_s=40.0, memcpy_bytes_per_s={"h2d": 3e6}, sync_wait_pct=25.0),
                      grid_blocks_avg=32.0, block_threads_avg=128.0, grid_blocks_hist={"2^5": 40},
                      block_threads_hist={"2^7": 40}, memcpy_size_hist={"h2d": {"2^20": 3}}, kernels=kernels,
                      gpu_index=0, gpu_mem_bytes=2 << 30, gpu_util_pct=50.0, cpu_pct=101.5, rss_bytes=1 << 31,
                      launch_bound=False, start_time=900.5)
    gpu = GpuSample(index=0, uuid="GPU-1", name="NVIDIA A100", util_pct=70, mem_used_bytes=1 << 33,
                    mem_total_bytes=80 << 30, temp_c=60.0, power_w=250.5, xid_errors=0,
                    reasons={"ecc_volatile_errors": "NotSupported"})
    return Snapshot(time=t, interval_s=1.0, host="node-7",
                    sources={"bpf": SourceStatus("ok", probes=12, objects=2, dropped=0, trap_ns=700.0),
                             "nvml": SourceStatus("ok")},
                    gpus=(gpu,), processes=(proc,))


GOOD = [_snap(1000.0 + i) for i in range(3)]
RAW = "@@raw@@"


def _line(d: dict[str, Any]) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode()


def _set(d: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        d = d[int(key)] if key.isdigit() else d[key]
    d[int(last) if last.isdigit() else last] = value


def _with(path: str, value: Any, raw: str | None = None, **more: Any) -> bytes:
    """The middle snapshot (time 1001) with the field at ``path`` (dots; a number indexes a list)
    set to ``value``, or to the JSON text ``raw`` (and more fields: ``a__b=value`` sets a.b)."""
    d = snapshot_to_dict(GOOD[1])
    _set(d, path, RAW if raw is not None else value)
    for key, v in more.items():
        _set(d, key.replace("__", "."), v)
    text = _line(d)
    return text.replace(json.dumps(RAW).encode(), raw.encode()) if raw is not None else text


def _without(key: str) -> bytes:
    d = snapshot_to_dict(GOOD[1])
    del d[key]
    return _line(d)


def _kept(change: Callable[[Snapshot], Snapshot]) -> Snapshot:
    return change(GOOD[1])


def _proc_is(**kw: Any) -> Callable[[Snapshot], Snapshot]:
    from dataclasses import replace
    return lambda s: replace(s, processes=(replace(s.processes[0], **kw),))


def _counts_are(which: str, **kw: Any) -> Callable[[Snapshot], Snapshot]:
    from dataclasses import replace
    return lambda s: replace(s, processes=(replace(s.processes[0], **{
        which: replace(getattr(s.processes[0], which), **kw)}),))


def _gpu_is(**kw: Any) -> Callable[[Snapshot], Snapshot]:
    from dataclasses import replace
    return lambda s: replace(s, gpus=(replace(s.gpus[0], **kw),))


@dataclass(frozen=True)
class Case:
    id: str
    line: bytes
    #: the notice after "FILE:2: " (None: no notice, the line is not bad)
    notice: str | None
    #: the middle snapshot as read, when it is kept (None: skipped)
    kept: Snapshot | None = None

    @property
    def skipped(self) -> bool:
        return self.kept is None


def skip(id: str, line: bytes, why: str) -> Case:
    return Case(id, line, why)


def keep(id: str, line: bytes, what: str | None, change: Callable[[Snapshot], Snapshot] = lambda s: s) -> Case:
    return Case(id, line, what, _kept(change))


#: the model's caps on text: a command line (Linux allows 6 MiB of arguments), a kernel name (the
#: live side cuts one at 4 KiB), any other text
CMDLINE_CAP = 8 << 20
KERNEL_NAME_CAP = 8192
TEXT_CAP = 1 << 16
BIG_NAME = "k" * 1_000_000
LONG_CMDLINE = "x" * 10_000_000
HUGE_INT = "7" * 5000
#: a snapshot with 21 kernels: the schema keeps the top 20
_MANY = snapshot_to_dict(GOOD[1])
_MANY["processes"][0]["kernels"] = [dict(_MANY["processes"][0]["kernels"][0], name=f"k{i}") for i in range(21)]

MALFORMED = "malformed snapshot"
PID_RANGE = f"{MALFORMED} (processes[0].pid is out of range (1 to 4194304))"
CASES = [
    # -- JSON that is not a snapshot, or not JSON at all
    skip("deep-arrays", b"[" * 100_000, "not JSON (nested too deeply)"),
    skip("deep-objects", _with("extra", None, raw='{"a":' * 100_000 + "1" + "}" * 100_000),
         "not JSON (nested too deeply)"),
    skip("10MB-line-of-garbage", b"x" * 10_000_000, "not JSON (Expecting value at column 1)"),
    keep("10MB-line-cmdline", _with("processes.0.cmdline", LONG_CMDLINE),
         f"processes[0].cmdline is longer than {CMDLINE_CAP} characters: cut",
         _proc_is(cmdline="x" * (CMDLINE_CAP - 1) + "…")),
    skip("1e999", _with("time", None, raw="1e999"), f"{MALFORMED} (time is not finite)"),
    keep("-1e999", _with("processes.0.cpu_pct", None, raw="-1e999"),
         "processes[0].cpu_pct is not finite: read as unknown", _proc_is(cpu_pct=None)),
    skip("NaN", _with("gpus.0.util_pct", None, raw="NaN"), "not JSON (NaN is not a JSON number)"),
    skip("Infinity", _with("interval_s", None, raw="Infinity"), "not JSON (Infinity is not a JSON number)"),
    skip("-Infinity", _with("processes.0.rates.launches_per_s", None, raw="-Infinity"),
         "not JSON (-Infinity is not a JSON number)"),
    skip("number-of-5000-digits", _with("processes.0.total.launches", None, raw=HUGE_INT),
         "not JSON (a number of more than 4300 digits)"),
    # -- the snapshot's own fields
    skip("time-string", _with("time", "1001"), f"{MALFORMED} (time is not a number (text))"),
    skip("time-negative", _with("time", -1.0), f"{MALFORMED} (time is out of range (0 to 2^37))"),
    skip("time-huge", _with("time", 2.0 ** 40), f"{MALFORMED} (time is out of range (0 to 2^37))"),
    skip("time-null", _with("time", None), f"{MALFORMED} (time is not a number (null))"),
    skip("interval-0", _with("interval_s", 0), f"{MALFORMED} (interval_s is out of range (above 0, below 2^32))"),
    skip("interval-negative", _with("interval_s", -1.0),
         f"{MALFORMED} (interval_s is out of range (above 0, below 2^32))"),
    skip("interval-inf", _with("interval_s", None, raw="1e999"), f"{MALFORMED} (interval_s is not finite)"),
    skip("host-null", _with("host", None), f"{MALFORMED} (host is not text (null))"),
    skip("host-number", _with("host", 7), f"{MALFORMED} (host is not text (an integer))"),
    keep("host-70000-characters", _with("host", "h" * 70_000), f"host is longer than {TEXT_CAP} characters: cut",
         lambda s: Snapshot(s.time, s.interval_s, "h" * (TEXT_CAP - 1) + "…", s.sources, s.gpus, s.processes)),
    skip("schema-missing", _without("schema"), "unsupported schema None (this gputop reads 'gputop/1')"),
    skip("schema-2", _with("schema", "gputop/2"),
         "written by a newer gputop (schema 'gputop/2'; this gputop reads 'gputop/1')"),
    skip("not-an-object", b"[1, 2]", "expected a JSON object, got list"),
    skip("sources-not-an-object", _with("sources", ["bpf"]), f"{MALFORMED} (sources is not an object (a list))"),
    keep("source-field-wrong-type", _with("sources.bpf.probes", "12"),
         "sources['bpf'].probes is not an integer (text): read as unknown",
         lambda s: Snapshot(s.time, s.interval_s, s.host, {**s.sources, "bpf": SourceStatus(
             "ok", probes=None, objects=2, dropped=0, trap_ns=700.0)}, s.gpus, s.processes)),
    # -- processes
    skip("processes-not-a-list", _with("processes", {"pid": 1}), f"{MALFORMED} (processes is not a list (an object))"),
    skip("processes-null", _with("processes", None), f"{MALFORMED} (processes is not a list (null))"),
    skip("process-not-an-object", _with("processes.0", 4242),
         f"{MALFORMED} (processes[0] is not an object (an integer))"),
    skip("pid-x", _with("processes.0.pid", "x"), f"{MALFORMED} (processes[0].pid is not an integer (text))"),
    skip("pid-1.5", _with("processes.0.pid", 1.5),
         f"{MALFORMED} (processes[0].pid is not an integer (a floating-point number))"),
    skip("pid-true", _with("processes.0.pid", True), f"{MALFORMED} (processes[0].pid is not an integer (true/false))"),
    skip("pid-negative", _with("processes.0.pid", -1), PID_RANGE),
    skip("pid-0", _with("processes.0.pid", 0), PID_RANGE),
    skip("pid-huge", _with("processes.0.pid", 1 << 64), PID_RANGE),
    skip("pid-null", _with("processes.0.pid", None), f"{MALFORMED} (processes[0].pid is not an integer (null))"),
    skip("state-number", _with("processes.0.state", 1), f"{MALFORMED} (processes[0].state is not text (an integer))"),
    keep("comm-null", _with("processes.0.comm", None), None, _proc_is(comm=None)),
    keep("comm-number", _with("processes.0.comm", 5), "processes[0].comm is not text (an integer): read as unknown",
         _proc_is(comm=None)),
    keep("launch-bound-string", _with("processes.0.launch_bound", "yes"),
         "processes[0].launch_bound is not true or false (text): read as unknown", _proc_is(launch_bound=None)),
    keep("start-time-huge", _with("processes.0.start_time", 1e300),
         "processes[0].start_time is out of range (0 to 2^37): read as unknown", _proc_is(start_time=None)),
    keep("ppid-negative", _with("processes.0.ppid", -7),
         "processes[0].ppid is out of range (0 to 2147483647): read as unknown", _proc_is(ppid=None)),
    # -- counts
    keep("count-negative", _with("processes.0.interval.launches", -5),
         "processes[0].interval.launches is out of range (0 to 2^64-1): read as unknown",
         _counts_are("interval", launches=None)),
    keep("count-string", _with("processes.0.total.alloc_calls", "1"),
         "processes[0].total.alloc_calls is not an integer (text): read as unknown",
         _counts_are("total", alloc_calls=None)),
    keep("count-2^64", _with("processes.0.total.launches", 1 << 64),
         "processes[0].total.launches is out of range (0 to 2^64-1): read as unknown",
         _counts_are("total", launches=None)),
    keep("count-true", _with("processes.0.total.sync_calls", True),
         "processes[0].total.sync_calls is not an integer (true/false): read as unknown",
         _counts_are("total", sync_calls=None)),
    keep("counts-not-an-object", _with("processes.0.interval", [1, 2]),
         "processes[0].interval is not an object (a list): read as unknown", _proc_is(interval=None)),
    keep("memcpy-calls-string", _with("processes.0.interval.memcpy.h2d.calls", "3"),
         "processes[0].interval.memcpy['h2d'].calls is not an integer (text): read as unknown",
         _counts_are("interval", memcpy=None)),
    keep("memcpy-direction-unknown", _with("processes.0.interval.memcpy.sideways", {"calls": 1, "bytes": 2}),
         None, _counts_are("interval", memcpy={"h2d": CallBytes(3, 3 << 20), "d2h": CallBytes(1, 4096),
                                                "sideways": CallBytes(1, 2)})),
    keep("memcpy-direction-1000-keys", _with("processes.0.interval.memcpy",
                                             {f"d{i}": {"calls": 1, "bytes": 1} for i in range(1000)}),
         "processes[0].interval.memcpy has more than 64 entries: read as unknown",
         _counts_are("interval", memcpy=None)),
    keep("rate-string", _with("processes.0.rates.memcpy_bytes_per_s.h2d", "fast"),
         "processes[0].rates.memcpy_bytes_per_s['h2d'] is not a number (text): read as unknown",
         lambda s: _proc_is(rates=Rates(launches_per_s=40.0, sync_wait_pct=25.0))(s)),
    # -- histograms
    keep("hist-key-not-2^k", _with("processes.0.grid_blocks_hist", {"2^x": 5}),
         "processes[0].grid_blocks_hist has a bucket other than 2^0 to 2^63 ('2^x'): read as unknown",
         _proc_is(grid_blocks_hist=None)),
    keep("hist-key-2^99999999", _with("processes.0.block_threads_hist", {"2^99999999": 1}),
         "processes[0].block_threads_hist has a bucket other than 2^0 to 2^63 ('2^99999999'): read as unknown",
         _proc_is(block_threads_hist=None)),
    keep("hist-count-negative", _with("processes.0.memcpy_size_hist.h2d.2^20", -3),
         "processes[0].memcpy_size_hist['h2d']['2^20'] is out of range (0 to 2^64-1): read as unknown",
         _proc_is(memcpy_size_hist=None)),
    # -- kernels
    skip("kernels-not-a-list", _with("processes.0.kernels", "abc"),
         f"{MALFORMED} (processes[0].kernels is not a list (text))"),
    skip("kernel-not-an-object", _with("processes.0.kernels.1", "k"),
         f"{MALFORMED} (processes[0].kernels[1] is not an object (text))"),
    skip("kernel-name-number", _with("processes.0.kernels.0.name", 5),
         f"{MALFORMED} (processes[0].kernels[0].name is not text (an integer))"),
    skip("kernel-launches-null", _with("processes.0.kernels.0.launches", None),
         f"{MALFORMED} (processes[0].kernels[0].launches is not an integer (null))"),
    skip("kernel-lacks-name", _with("processes.0.kernels.0", {"launches": 1, "grid_blocks_avg": None,
                                                              "block_threads_avg": None}),
         f"{MALFORMED} (processes[0].kernels[0].name is missing)"),
    keep("kernel-name-1MB", _with("processes.0.kernels.0.name", BIG_NAME),
         f"processes[0].kernels[0].name is longer than {KERNEL_NAME_CAP} characters: cut",
         lambda s: _proc_is(kernels=(KernelStat("k" * (KERNEL_NAME_CAP - 1) + "…", 30, 32.0, 128.0,
                                                interval_launches=3, launches_per_s=3.0, object="/opt/app/libk.so"),
                                     s.processes[0].kernels[1]))(s)),
    keep("kernels-21", _line(_MANY), "processes[0].kernels has more than 20 entries: the first 20 kept",
         lambda s: _proc_is(kernels=tuple(KernelStat(f"k{i}", 30, 32.0, 128.0, interval_launches=3,
                                                     launches_per_s=3.0, object="/opt/app/libk.so")
                                          for i in range(20)))(s)),
    # -- GPUs
    skip("gpus-not-a-list", _with("gpus", "0"), f"{MALFORMED} (gpus is not a list (text))"),
    skip("gpu-index-string", _with("gpus.0.index", "0"), f"{MALFORMED} (gpus[0].index is not an integer (text))"),
    keep("gpu-util-string", _with("gpus.0.util_pct", "70%"), "gpus[0].util_pct is not a number (text): read as unknown",
         _gpu_is(util_pct=None)),
    keep("gpu-reasons-not-text", _with("gpus.0.reasons.ecc_volatile_errors", 3),
         "gpus[0].reasons['ecc_volatile_errors'] is not text (an integer): read as unknown", _gpu_is(reasons=None)),
    keep("gpu-mem-float", _with("gpus.0.mem_used_bytes", 1.5e9),
         "gpus[0].mem_used_bytes is not an integer (a floating-point number): read as unknown",
         _gpu_is(mem_used_bytes=None)),
    keep("two-problems", _with("gpus.0.temp_c", "hot", gpus__0__power_w=True),
         "gpus[0].temp_c is not a number (text): read as unknown; "
         "gpus[0].power_w is not a number (true/false): read as unknown",
         _gpu_is(temp_c=None, power_w=None)),
    # -- JSON details
    keep("duplicate-key-last-good", _with("time", None, raw='"x","time":1001.0'), None),
    skip("duplicate-key-last-bad", _with("time", None, raw='1001.0,"time":"x"'),
         f"{MALFORMED} (time is not a number (text))"),
    skip("invalid-utf8", _with("host", "node-\x00").replace(b"\\u0000", b"\xff"), "not UTF-8 text: not a recording"),
    skip("bom", b"\xef\xbb\xbf" + snapshot_to_json(GOOD[1]).encode(), "not JSON (a byte order mark at column 1)"),
    keep("unknown-fields-ignored", _with("future_field", {"deep": [1, 2, {"x": None}]}), None),
    keep("lone-surrogate-text", _with("processes.0.comm", "py\udcff"), None, _proc_is(comm="py\udcff")),
]


def _file(tmp_path: Path, middle: bytes, name: str = "run.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(snapshot_to_json(GOOD[0]).encode() + b"\n" + middle + b"\n"
                     + snapshot_to_json(GOOD[2]).encode() + b"\n")
    return path


def _expected_notice(path: Path, case: Case) -> list[str]:
    if case.notice is None:
        return []
    text = f"{path}:2: {case.notice}"
    return [f"skipped a bad line ({text})" if case.skipped else text]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_crafted_line_between_two_good_ones(tmp_path: Path, case: Case) -> None:
    path = _file(tmp_path, case.line)
    notices: list[str] = []
    got = list(read_recording(path, notice=notices.append))
    expected = [GOOD[0], GOOD[2]] if case.skipped else [GOOD[0], case.kept, GOOD[2]]
    assert got == expected
    assert notices == _expected_notice(path, case)


@pytest.mark.parametrize("case", [c for c in CASES if c.skipped], ids=[c.id for c in CASES if c.skipped])
def test_without_a_notice_callback_a_bad_line_is_an_error(tmp_path: Path, case: Case) -> None:
    """read_recording(path) with no one to tell about a skipped line raises (baselines, scripts)."""
    path = _file(tmp_path, case.line)
    it = read_recording(path)
    assert next(it) == GOOD[0]
    with pytest.raises(RecordingError) as e:
        next(it)
    assert e.value.message == f"{path}:2: {case.notice}"


@pytest.mark.parametrize("preload", [True, False])
def test_the_replay_feed_steps_over_every_case(tmp_path: Path, preload: bool) -> None:
    """Random access: forward over every case, then back, then forward again; bad lines are never
    shown, kept ones are shown as read, and nothing raises."""
    path = tmp_path / "all.jsonl"
    lines = [snapshot_to_json(GOOD[0]).encode()]
    shown: list[Snapshot] = [GOOD[0]]
    for case in CASES:
        lines.append(case.line)
        if case.kept is not None:
            shown.append(case.kept)
    lines.append(snapshot_to_json(GOOD[2]).encode())
    shown.append(GOOD[2])
    path.write_bytes(b"\n".join(lines) + b"\n")
    feed = ReplayFeed(path, preload=preload)
    try:
        assert len(feed) == len(CASES) + 2
        forward = [feed.step(1) for _ in range(len(shown))]
        assert forward == shown
        assert feed.position == len(CASES) + 2
        back = [feed.step(-1) for _ in range(len(shown) - 1)]
        assert back == shown[-2::-1]
        assert feed.position == 1
        assert feed.step(len(CASES) + 5) == GOOD[2]
        assert feed.error is not None and str(path) in feed.error
    finally:
        feed.stop()


def test_the_replay_feed_says_which_line_it_skipped(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == "pid-x")
    path = _file(tmp_path, case.line)
    feed = ReplayFeed(path, preload=False)
    try:
        assert feed.step(1) == GOOD[0] and feed.error is None
        assert feed.step(1) == GOOD[2] and feed.position == 3
        assert feed.error == _expected_notice(path, case)[0]
        assert feed.step(-1) == GOOD[0]
    finally:
        feed.stop()


def test_a_bad_first_line_is_skipped_by_the_replay_feed_with_a_notice(tmp_path: Path) -> None:
    bad = next(c for c in CASES if c.id == "time-string")
    path = tmp_path / "r.jsonl"
    path.write_bytes(bad.line + b"\n" + snapshot_to_json(GOOD[2]).encode() + b"\n")
    feed = ReplayFeed(path, preload=False)
    try:
        assert feed.notices == [f"skipped a bad line ({path}:1: {bad.notice})"]
        assert feed.step(1) == GOOD[2]
    finally:
        feed.stop()
    notices: list[str] = []
    assert list(read_recording(path, notice=notices.append)) == [GOOD[2]]
    assert notices == [f"skipped a bad line ({path}:1: {bad.notice})"]


def test_the_replay_feed_says_what_it_read_as_unknown(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == "-1e999")
    path = _file(tmp_path, case.line, "r.jsonl.gz")
    path.write_bytes(gzip.compress(path.read_bytes()))
    feed = ReplayFeed(path, preload=False)
    try:
        assert [feed.step(1) for _ in range(3)] == [GOOD[0], case.kept, GOOD[2]]
        assert feed.error == f"{path}:2: {case.notice}"
    finally:
        feed.stop()


def test_many_bad_lines_before_the_first_good_one(tmp_path: Path) -> None:
    """Said one by one up to a bound (20 in batch mode, 3 when the dashboard starts), then counted."""
    bad = next(c for c in CASES if c.id == "pid-x")
    path = tmp_path / "r.jsonl"
    path.write_bytes((bad.line + b"\n") * 25 + snapshot_to_json(GOOD[2]).encode() + b"\n")
    notices: list[str] = []
    assert list(read_recording(path, notice=notices.append)) == [GOOD[2]]
    said = [f"skipped a bad line ({path}:{n}: {bad.notice})" for n in range(1, 26)]
    assert notices == [*said[:20], f"{path}: 5 more bad line(s) skipped before line 26"]
    feed = ReplayFeed(path, preload=False)
    try:
        assert feed.notices == [*said[:3], f"{path}: 22 more bad line(s) skipped before line 26"]
        assert feed.step(1) == GOOD[2] and feed.position == 26
    finally:
        feed.stop()


def test_a_recording_of_bad_lines_only_is_an_error(tmp_path: Path) -> None:
    """Every line bad: the first one's error, as a recording that is not one (no notices before it)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(c.line for c in CASES if c.skipped) + b"\n")
    first = f"{path}:1: {CASES[0].notice}"
    notices: list[str] = []
    with pytest.raises(RecordingError) as e:
        list(read_recording(path, notice=notices.append))
    assert (e.value.message, notices) == (first, [])
    with pytest.raises(RecordingError) as e:
        ReplayFeed(path)
    assert e.value.message == first


def test_snapshot_from_dict_reports_what_it_read_as_unknown() -> None:
    d = snapshot_to_dict(GOOD[1])
    d["processes"][0]["cpu_pct"] = "high"
    problems: list[str] = []
    snap = snapshot_from_dict(d, problems)
    assert snap.processes[0].cpu_pct is None
    assert problems == ["processes[0].cpu_pct is not a number (text): read as unknown"]
    d["processes"][0]["pid"] = "x"
    with pytest.raises(ValueError, match=r"^processes\[0\]\.pid is not an integer \(text\)$"):
        snapshot_from_dict(d)


def test_the_caps_are_the_models() -> None:
    assert (model.MAX_CMDLINE, model.MAX_KERNEL_NAME, model.MAX_TEXT, model.MAX_KERNELS) == (
        CMDLINE_CAP, KERNEL_NAME_CAP, TEXT_CAP, 20)


def test_lists_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model.limits, "MAX_PROCESSES", 2)
    monkeypatch.setattr(model.limits, "MAX_GPUS", 1)
    d = snapshot_to_dict(GOOD[1])
    d["processes"] = d["processes"] * 3
    with pytest.raises(ValueError, match=r"^processes has more than 2 entries$"):
        snapshot_from_dict(d)
    d = snapshot_to_dict(GOOD[1])
    d["gpus"] = d["gpus"] * 2
    with pytest.raises(ValueError, match=r"^gpus has more than 1 entries$"):
        snapshot_from_dict(d)


# -- the command line over one file holding every case -------------------------------------------


def _cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", "--replay", str(path), "-b", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, stdin=subprocess.DEVNULL)


def test_batch_mode_over_every_case(tmp_path: Path) -> None:
    """The bad lines first, between the first two good snapshots; then the cases kept."""
    path = tmp_path / "all.jsonl"
    skipped = [c for c in CASES if c.skipped]
    kept = [c for c in CASES if not c.skipped]
    path.write_bytes(b"\n".join([snapshot_to_json(GOOD[0]).encode(), *(c.line for c in skipped),
                                 snapshot_to_json(GOOD[1]).encode(), snapshot_to_json(GOOD[2]).encode(),
                                 *(c.line for c in kept)]) + b"\n")
    line_of = {c.id: i + 2 for i, c in enumerate(skipped)}
    skip_notices = [f"gputop: skipped a bad line ({path}:{line_of[c.id]}: {c.notice})" for c in skipped]
    res = _cli(path, "-n", "3", "-f", "json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert [json.loads(line)["time"] for line in res.stdout.splitlines()] == [1000.0, 1001.0, 1002.0]
    assert res.stdout.splitlines() == [snapshot_to_json(s) for s in GOOD]
    assert res.stderr.splitlines() == skip_notices

    res = _cli(path, "-n", "3", "-f", "table")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert sum(line.startswith("gputop - ") for line in res.stdout.splitlines()) == 3
    assert res.stderr.splitlines() == skip_notices

    res = _cli(path, "-f", "json")          # to the end: the kept cases too, as read
    assert res.returncode == 0, res.stderr[-2000:]
    first_kept = len(skipped) + 4
    kept_notices = [f"gputop: {path}:{first_kept + i}: {c.notice}" for i, c in enumerate(kept) if c.notice]
    assert res.stderr.splitlines() == skip_notices + kept_notices
    assert res.stdout.splitlines() == [snapshot_to_json(s) for s in [*GOOD, *(c.kept for c in kept if c.kept)]]


def test_batch_mode_over_bad_lines_only_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(next(c for c in CASES if c.id == "1e999").line + b"\n"
                     + next(c for c in CASES if c.id == "pid-x").line + b"\n")
    for form in ("json", "table"):
        res = _cli(path, "-f", form)
        assert res.returncode == 1 and res.stdout == ""
        assert res.stderr.splitlines() == [f"gputop: error: {path}:1: {MALFORMED} (time is not finite)",
                                           "hint: record one with: gputop --record FILE (JSON Lines, schema gputop/1)"]


def test_a_control_character_in_a_string_is_said_once(tmp_path: Path) -> None:
    """json's message for it ends in "at": the error says "at column" once (issue 22, item 9)."""
    from gputop.record import RecordingError, read_recording

    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"comm": "a\tb"}\n')
    with pytest.raises(RecordingError) as e:
        list(read_recording(path))
    assert str(e.value).endswith("r.jsonl:1: not JSON (Invalid control character at column 12)")


def test_a_line_of_many_small_objects_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    """Issue 40: one 64 MiB line of {} (a valid snapshot's keys, then 33 million empty objects in an
    unknown field) peaked replay at 1.73 GB, the objects built before any check. The line is refused
    from its brackets and commas, counted before decoding: the read stays within three times the line
    (its bytes and its text), and the good lines around it are read."""
    import tracemalloc

    head = snapshot_to_json(GOOD[1])[:-1]
    filler = ",".join(["{}"] * ((63 << 20) // 3))      # just under the 64 MiB a line may hold
    line = (head + ',"future_field":[' + filler + "]}").encode()
    path = _file(tmp_path, line)
    notices: list[str] = []
    tracemalloc.start()
    try:
        got = list(read_recording(path, notice=notices.append))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == [GOOD[0], GOOD[2]]
    assert len(notices) == 1 and "more objects and arrays than a snapshot holds" in notices[0], notices
    assert peak < 3 * len(line), (peak, len(line))
    # a snapshot of 10,000 processes as the writer writes it is read
    big = replace(GOOD[1], processes=GOOD[1].processes * 10_000)
    text = snapshot_to_json(big)
    assert len(text) > 4 << 20 and not too_dense(text)
