"""htop's habits (issue 22, items 1-3): tags (c compares the two tagged last, U untags all, the count in
the summary line), the summary line (Tasks:), the tree view (F5) and the TIME+, RSS and %MEM columns."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from textual.pilot import Pilot

from gputop.model import GpuSample, Rates
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.screens.compare import CompareScreen
from gputop.ui.screens.main import MainScreen
from gputop.ui.widgets.header import SummaryBar, summary_lines
from gputop.ui.widgets.proc_table import ProcTable
from gputop.view import format as fmt

from .test_ui_keys import notes, pids, push, run, table, three
from .ui_helpers import ManualFeed, proc, snapshot


def summary(app: GputopApp) -> str:
    """The summary bar's text on one line."""
    shown, tagged, tree = app.screen.query_one(SummaryBar).state
    return "\n".join(c.plain for c in summary_lines(shown, 10_000, tagged, tree))


def rate(value: float) -> str:
    return f"{fmt.si(value)}/s"


def bytes_rate(value: float) -> str:
    return f"{fmt.bytes_(value)}/s"


# -- tags -------------------------------------------------------------------------------------


def test_c_compares_the_two_tagged_last_and_says_so_u_untags_all() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        assert pids(app) == [20, 10, 30]
        await pilot.press("space", "space", "space")        # tags 20, 10, 30 in that order
        assert app.tags == [20, 10, 30]
        assert ", 3 tagged" in summary(app)
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert (screen.a_pid, screen.b_pid) == (10, 30)
        assert notes(app)[-1] == "3 tagged: comparing the two tagged last, PID 10 and PID 30 (U untags all)"
        await pilot.press("escape")
        await pilot.press("U")
        assert app.tags == []
        assert notes(app)[-1] == "untagged 3 processes"
        assert "tagged" not in summary(app)
        await pilot.press("U")
        assert notes(app)[-1] == "no process is tagged (Space tags one)"
        # two tagged: no word about the choice
        await pilot.press("home", "space", "space", "c")
        assert isinstance(app.screen, CompareScreen) and (app.screen.a_pid, app.screen.b_pid) == (20, 10)
        assert notes(app)[-1] == "no process is tagged (Space tags one)"

    run(None, body)


def test_tags_of_gone_processes_leave_the_count() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("space", "space")                  # 20 and 10
        assert ", 2 tagged" in summary(app)
        await push(pilot, feed, snapshot(proc(10, "alpha", 500.0), proc(30, "gamma", 40.0)))
        assert summary(app).startswith(" Tasks: 2 listed, 2 running, 0 stopped, 0 exited, 1 tagged  ")

    run(None, body)


# -- the summary line -------------------------------------------------------------------------


def host() -> Any:
    """Four processes (one stopped, one exited, one with unknown rates) and two GPUs."""
    a = proc(10, "alpha", 500.0, rates=Rates(launches_per_s=500.0, graph_kernel_launches_per_s=40.0,
                                             memcpy_bytes_per_s={"h2d": 1.5e9, "d2h": 2e6, "d2d": 0.0}))
    b = proc(20, "beta", 9000.0, state="stopped", rates=Rates(
        launches_per_s=9000.0, graph_kernel_launches_per_s=0.0, memcpy_bytes_per_s={"h2d": 5e8, "d2h": 0.0,
                                                                                      "d2d": 3e6}))
    c = proc(30, "gamma", 40.0, state="exited", rates=Rates(launches_per_s=40.0, graph_kernel_launches_per_s=0.0,
                                                            memcpy_bytes_per_s={"h2d": 0.0, "d2h": 0.0,
                                                                                "d2d": 0.0}))
    gpus = (GpuSample(index=0, util_pct=87.0), GpuSample(index=1, util_pct=0.0))
    return replace(snapshot(a, b, c), gpus=gpus)


def test_summary_line_counts_and_totals_exactly() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        bar = app.screen.query_one(SummaryBar)
        assert summary(app) == " Tasks: waiting for the first sample…"
        snap = host()
        await push(pilot, feed, snap)
        s = snap.summary
        assert bar.state[0] == s
        assert (s.processes, s.running, s.stopped, s.exited, s.gpus, s.gpus_busy) == (3, 1, 1, 1, 2, 1)
        assert (s.launches_per_s, s.graph_kernel_launches_per_s) == (9540.0, 40.0)
        assert (s.h2d_bytes_per_s, s.d2h_bytes_per_s, s.d2d_bytes_per_s) == (2e9, 2e6, 3e6)
        assert summary(app) == (f" Tasks: 3 listed, 1 running, 1 stopped, 1 exited  Launches: {rate(9540.0)}  "
                                f"Graph kernels: {rate(40.0)}  H2D {bytes_rate(2e9)}  D2H {bytes_rate(2e6)}  "
                                f"D2D {bytes_rate(3e6)}  GPUs busy: 1/2")
        # the bar, one line at 160 columns, is what the screen shows under the header
        assert app.screen.query_one(SummaryBar).region.height == 1
        # filtered: the listed rows' totals
        await pilot.press("slash", *"beta", "enter")
        await pilot.pause()
        assert summary(app) == (f" Tasks: 1 listed, 0 running, 1 stopped, 0 exited  Launches: {rate(9000.0)}  "
                                f"Graph kernels: {rate(0.0)}  H2D {bytes_rate(5e8)}  D2H {bytes_rate(0.0)}  "
                                f"D2D {bytes_rate(3e6)}  GPUs busy: 1/2")
        await pilot.press("escape")
        # a process of unknown rates makes the totals unknown; a GPU of unknown utilisation the busy count
        unknown = replace(snap, processes=(*snap.processes, proc(40, "delta", None, rates=None)),
                          gpus=(*snap.gpus, GpuSample(index=2)))
        await push(pilot, feed, unknown)
        assert summary(app) == (" Tasks: 4 listed, 2 running, 1 stopped, 1 exited  Launches: N/A  "
                                "Graph kernels: N/A  H2D N/A  D2H N/A  D2D N/A  GPUs busy: N/A")

    run(None, body)


def test_summary_line_wraps_on_two_lines_at_80_columns() -> None:
    feed = ManualFeed()
    app = GputopApp(feed, DashboardOptions())

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(200):
                if feed.started.is_set():
                    break
                await pilot.pause(0.01)
            await push(pilot, feed, host())
            bar = app.screen.query_one(SummaryBar)
            assert bar.region.height == 2
            lines = [c.plain for c in summary_lines(bar.state[0], bar.content_region.width, 0, False)]
            assert lines == [f" Tasks: 3 listed, 1 running, 1 stopped, 1 exited  Launches: {rate(9540.0)}",
                             f" Graph kernels: {rate(40.0)}  H2D {bytes_rate(2e9)}  D2H {bytes_rate(2e6)}  "
                             f"D2D {bytes_rate(3e6)}  GPUs busy: 1/2"]

    asyncio.run(main())


# -- the tree view ----------------------------------------------------------------------------


def family() -> Any:
    """A launcher (1000) with two workers, one of which forked a helper; an unrelated process."""
    return snapshot(
        proc(1000, "torchrun", 10.0, ppid=1),
        proc(1001, "worker", 5000.0, ppid=1000),
        proc(1002, "worker", 7000.0, ppid=1000),
        proc(1003, "helper", 20.0, ppid=1001),
        proc(2000, "serve", 3000.0, ppid=1),
    )


def commands(app: GputopApp) -> list[str]:
    t = table(app)
    return [t._line_key(i, t.current_layout)[0][3] for i in range(len(t.rows))]


def test_f5_shows_the_tree_by_ppid_siblings_in_sort_order() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, family())
        assert pids(app) == [1002, 1001, 2000, 1003, 1000]
        await pilot.press("f5")
        assert app.tree_view and notes(app)[-1] == "tree view: children under their parent (by PPID)"
        assert pids(app) == [2000, 1000, 1002, 1001, 1003]
        assert [c.split(" --job")[0] for c in commands(app)] == [
            "serve", "torchrun", "├─ worker", "└─ worker", "   └─ helper"]
        assert summary(app).endswith("  GPUs busy: N/A  tree (F5)")
        # the selection follows its process into the tree
        await pilot.press("home")
        assert table(app).selected_pid == 2000
        await pilot.press("down", "down")
        assert table(app).selected_pid == 1002
        # sorted the other way, siblings swap; the tree stays
        await pilot.press("r")
        assert pids(app) == [1000, 1001, 1003, 1002, 2000]
        assert table(app).selected_pid == 1002
        await pilot.press("f5")
        assert not app.tree_view and pids(app) == [1000, 1003, 2000, 1001, 1002]
        assert notes(app)[-1] == "tree view off: a flat list"

    run(None, body)


# -- TIME+, RSS, %MEM -------------------------------------------------------------------------


def test_time_rss_mem_columns_exact_and_optional() -> None:
    p = proc(10, "alpha", 500.0, cpu_time_s=3723.45, rss_bytes=3 << 29, mem_pct=2.34)
    q = proc(20, "beta", 100.0)                                  # unknown: N/A
    feed = ManualFeed()
    app = GputopApp(feed, DashboardOptions())

    async def main() -> None:
        async with app.run_test(size=(210, 30)) as pilot:
            for _ in range(200):
                if feed.started.is_set():
                    break
                await pilot.pause(0.01)
            await push(pilot, feed, snapshot(p, q))
            t = app.screen.query_one(ProcTable)
            lay = t.current_layout
            keys = [c.key for c, _ in lay]
            assert keys[-6:] == ["state", "cpu", "cpu_time", "rss", "mem", "launch_bound"] and not lay.hidden_right
            at = [keys.index(k) for k in ("cpu_time", "rss", "mem")]
            assert [t._line_key(0, lay)[0][i] for i in at] == ["62:03.45", fmt.bytes_(3 << 29), fmt.pct(2.34, 1)]
            assert [t._line_key(1, lay)[0][i] for i in at] == ["N/A", "N/A", "N/A"]
            await pilot.resize_terminal(160, 30)
            await pilot.pause()
            lay = t.current_layout
            # at 160 columns the others fit alone: MSET/s, NCCL/s, NCCL B/s, S, TIME+, RSS, %MEM start scrolled off (▶)
            assert [c.key for c, _ in lay][-1] == "launch_bound" and lay.hidden_right == 7
            # sorting by one of them shows it
            app.set_sort("cpu_time")
            await pilot.pause()
            assert "cpu_time" in [c.key for c, _ in t.current_layout] and pids(app) == [10, 20]

    asyncio.run(main())


def test_fleet_view_hides_time_rss_mem() -> None:
    from gputop.view import columns

    assert {"cpu_time", "rss", "mem"} <= set(columns.FLEET_UNKNOWN)
    shown = columns.visible(columns.SORT_KEYS, fleet=True)
    assert not {"cpu_time", "rss", "mem"} & set(shown) and "node" in shown


def test_main_screen_is_the_one_with_the_bar() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        assert isinstance(app.screen, MainScreen)
        ids = [w.id for w in app.screen.children]
        assert ids.index("summary") == ids.index("header") + 1

    run(None, body)

