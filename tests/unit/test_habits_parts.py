"""The pure parts of issue 22's habits: model.summarize's unknowns, TIME+'s format, the tree's order and
loops, the smoothed window's edges."""

from __future__ import annotations

import json

from gputop.model import (
    GpuSample,
    ProcSample,
    Rates,
    Snapshot,
    SourceStatus,
    snapshot_from_json,
    snapshot_to_json,
    summarize,
)
from gputop.view.format import time_plus
from gputop.view.history import PROC_SERIES, Point, window_mean
from gputop.view.tree import tree_order


def snap(*procs: ProcSample, bpf: str = "ok", gpus: tuple[GpuSample, ...] = ()) -> Snapshot:
    return Snapshot(time=100.0, interval_s=1.0, host="h", sources={"bpf": SourceStatus(bpf)}, gpus=gpus,
                    processes=procs)


def rates(launches: float | None, h2d: float | None = 0.0) -> Rates:
    return Rates(launches_per_s=launches, graph_kernel_launches_per_s=0.0,
                 memcpy_bytes_per_s=None if h2d is None else {"h2d": h2d, "d2h": 0.0, "d2d": 0.0})


def test_nothing_listed_is_zero_only_where_something_counts() -> None:
    counted = summarize(snap())
    assert (counted.processes, counted.launches_per_s, counted.h2d_bytes_per_s) == (0, 0.0, 0.0)
    assert counted.gpus_busy is None
    off = summarize(snap(bpf="unavailable"))
    assert (off.launches_per_s, off.graph_kernel_launches_per_s, off.d2d_bytes_per_s) == (None, None, None)


def test_one_unknown_term_makes_the_sum_unknown() -> None:
    a = ProcSample(1, "a", rates=rates(100.0, 5.0))
    b = ProcSample(2, "b", rates=rates(float("nan"), 7.0))
    c = ProcSample(3, "c", rates=rates(50.0, None))
    s = summarize(snap(a, b, c))
    assert (s.launches_per_s, s.h2d_bytes_per_s) == (None, None)
    assert summarize(snap(a, c)).launches_per_s == 150.0
    assert summarize(snap(a, c), procs=[a]).h2d_bytes_per_s == 5.0         # the listed rows only


def test_gpus_busy() -> None:
    busy = (GpuSample(0, util_pct=1.0), GpuSample(1, util_pct=0.0), GpuSample(2, util_pct=100.0))
    assert (summarize(snap(gpus=busy)).gpus, summarize(snap(gpus=busy)).gpus_busy) == (3, 2)
    assert summarize(snap(gpus=(*busy, GpuSample(3)))).gpus_busy is None


def test_summary_is_written_and_recomputed_on_reading() -> None:
    s = snap(ProcSample(1, "a", rates=rates(100.0)), ProcSample(2, "b", state="exited", rates=rates(20.0)))
    d = json.loads(snapshot_to_json(s))
    assert list(d)[-1] == "summary"
    assert d["summary"] == {"processes": 2, "running": 1, "stopped": 0, "exited": 1, "launches_per_s": 120.0,
                            "graph_kernel_launches_per_s": 0.0, "h2d_bytes_per_s": 0.0, "d2h_bytes_per_s": 0.0,
                            "d2d_bytes_per_s": 0.0, "gpus": 0, "gpus_busy": None, "warming_up": None}
    d["summary"]["launches_per_s"] = 1e9                                     # a stored one is not believed
    assert snapshot_from_json(json.dumps(d)).summary.launches_per_s == 120.0


def test_time_plus_as_top() -> None:
    assert [time_plus(v) for v in (None, float("nan"), -1.0, 0.0, 0.3, 59.99, 61.5, 3599.99, 59999.994)] == [
        "N/A", "N/A", "N/A", "0:00.00", "0:00.30", "0:59.99", "1:01.50", "59:59.99", "999:59.99"]
    assert [time_plus(v) for v in (60000.0, 360000.0, 86399.0 * 10)] == ["16h40", "100h00", "239h59"]


def test_tree_breaks_a_loop_of_parents_and_keeps_every_row_once() -> None:
    rows = [ProcSample(5, "e", ppid=6), ProcSample(6, "f", ppid=5), ProcSample(7, "g", ppid=7),
            ProcSample(8, "h", ppid=6)]
    order, prefixes = tree_order(rows)
    assert [p.pid for p in order] == [7, 5, 6, 8]
    assert prefixes == {6: "└─ ", 8: "   └─ "}


def test_tree_in_the_fleet_view_finds_parents_on_the_same_target() -> None:
    rows = [ProcSample(10, "p", ppid=1, instance="a:9464"), ProcSample(11, "c", ppid=10, instance="b:9464"),
            ProcSample(12, "c", ppid=10, instance="a:9464")]
    order, prefixes = tree_order(rows)
    assert [(p.instance, p.pid) for p in order] == [("a:9464", 10), ("a:9464", 12), ("b:9464", 11)]
    assert prefixes == {("a:9464", 12): "└─ "}


def pt(t: float, launches: float | None, dt: float = 1.0) -> Point:
    return Point(t, tuple(launches if name == "launches" else None for name in PROC_SERIES), interval_s=dt)


def test_window_mean_edges() -> None:
    pts = [pt(1.0, 999.0), pt(2.0, 100.0), pt(3.0, None), pt(4.0, 300.0, 2.0), pt(6.0, 200.0)]
    # window (1, 6]: 100·1 + 300·2 + 200·1 over 4 s (the unknown point is left out); 999 at t=1 is outside
    assert window_mean(pts, "launches", 6.0) == 225.0
    assert window_mean(pts, "launches", 4.0) == (999.0 + 100.0 + 600.0) / 4     # ends at the point shown
    assert window_mean(pts, "launches", 3.0) is None                           # unknown now: unknown
    assert window_mean(pts, "launches", 5.0) is None                           # no point at that time
    assert window_mean([pt(1.0, 50.0, 0.0)], "launches", 1.0) == 50.0          # no interval: its own value
