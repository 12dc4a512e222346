"""Pilot tests: the dashboard never misleads (issue: the dashboard as a person uses it)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from gputop.feeds.replay import ReplayFeed
from gputop.model import Counts, Rates, Snapshot
from gputop.record import Recorder, read_recording
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.screens.compare import CompareScreen
from gputop.ui.screens.details import DetailsScreen
from gputop.ui.screens.main import MainScreen
from gputop.ui.widgets.header import HeaderBar, SummaryBar, header_content
from gputop.ui.widgets.panels import TextPanel
from gputop.ui.widgets.proc_table import ProcTable
from gputop.view import columns
from gputop.view import format as fmt
from gputop.view.columns import COLUMNS
from gputop.view.history import History

from .test_ui_keys import SIZE, notes, push, run, table, three
from .ui_helpers import SCENARIO, ManualFeed, proc, snapshot


def header(app: GputopApp) -> str:
    return header_content(app.screen.query_one(HeaderBar).state).plain


def footer_keys(app: GputopApp) -> set[str]:
    return {b.binding.action for b in app.screen.active_bindings.values() if b.binding.show and b.enabled}


def test_live_mode_says_why_replay_keys_do_nothing() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        for key in ("full_stop", "comma", "left_square_bracket", "right_square_bracket"):
            await pilot.press(key)
            await pilot.pause()
        assert not app.paused
        said = [n for n in notes(app) if "--replay FILE" in n]
        assert len(said) == 4

    run(None, body)


def test_readonly_footer_has_no_kill_and_k_says_why() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        assert "signal" not in footer_keys(app)
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert any("--readonly" in n for n in notes(app))

    run(DashboardOptions(readonly=True), body)

    async def live(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        assert "signal" in footer_keys(app)

    run(None, live)


def test_a_rate_near_1_gib_keeps_its_unit_from_frame_to_frame() -> None:
    """Issue 35: H2D/s flipped between 992M and 0.97G from one refresh to the next (bytes moved to the next
    unit at 97% of it). A rate jittering there, or up to 1010M, keeps its unit in the table and the summary line."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        cells, totals = set(), set()
        for i in range(6):
            mib = (992.0, 993.6, 995.1, 991.8, 1003.0, 1010.2)[i]
            rates = Rates(launches_per_s=100.0, memcpy_bytes_per_s={"h2d": mib * 2**20, "d2h": 0.0, "d2d": 0.0})
            await push(pilot, feed, snapshot(proc(10, "copy", 100.0, rates=rates), time=1767258000.0 + i))
            p = table(app).rows[0]
            cells.add(columns.BY_KEY["h2d"].render(p))
            line = app.screen.query_one(SummaryBar).state[0]
            totals.add(fmt.bytes_(line.h2d_bytes_per_s) if line is not None else "")
        assert cells == totals == {"992M", "994M", "995M", "1003M", "1010M"}, (cells, totals)

    run(None, body)


def test_left_right_scroll_hidden_columns_at_80_columns() -> None:
    """← → scroll the columns that do not fit; PID, USER, GPU and COMMAND stay fixed at the left at every step
    (issue 35: scrolled right, only PID told rows apart), and the sort column stays, pinned after them."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.resize_terminal(80, 24)
        await push(pilot, feed, three())
        t = table(app)

        def line(y: int) -> str:
            return "".join(s.text for s in t.render_line(y))

        start = line(0)
        assert start.rstrip().endswith("▶") and "◀" not in start and "LAUNCH/s▼" in start
        assert "CPU%" not in start
        fixed = start[:start.index("LAUNCH/s▼")]
        seen = [start]
        for _ in range(20):
            await pilot.press("right")
            head = line(0)
            assert head.startswith(fixed), head                 # PID USER GPU COMMAND, where they were
            assert "LAUNCH/s▼" in head                          # the sort column, pinned after them
            rows = [line(y) for y in (1, 2, 3)]
            assert any("bob" in r and "beta" in r for r in rows), rows
            seen.append(head)
        head = line(0)
        assert "◀" in head and "▶" not in head and "%MEM" in head
        for c in columns.COLUMNS:
            if c.key not in columns.FLEET_ONLY:
                assert any(c.header in h for h in seen), c.header   # every column was reached
        for _ in range(20):
            await pilot.press("left")
        assert line(0) == start

    run(None, body)


def test_details_marks_a_stopped_then_gone_process_and_unfreezes_its_rates() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        p = proc(10, "alpha", 500.0, total=Counts(launches=12345))
        await push(pilot, feed, snapshot(p))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        title = app.screen.query_one("#title", TextPanel).content.plain
        assert "[running]" in title
        await push(pilot, feed, snapshot(replace(p, state="stopped"), time=1767258001.0))
        assert "[stopped]" in app.screen.query_one("#title", TextPanel).content.plain
        await push(pilot, feed, snapshot(time=1767258002.0))
        title = app.screen.query_one("#title", TextPanel).content.plain
        stats = app.screen.query_one("#stats", TextPanel).content.plain
        assert "[gone]" in title
        launches = next(line for line in stats.splitlines() if line.startswith("launches"))
        assert launches.split() == ["launches", "N/A", "12.3k"]  # the total stays, the rate is unknown

    run(None, body)


def test_compare_cuts_commands_in_the_middle_and_marks_gone() -> None:
    long_a = "python train.py --model gpt2-medium --batch-size 64 --seq-len 2048 --lr 3e-4 --fused=0"
    long_b = long_a.replace("--fused=0", "--fused=1")

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.resize_terminal(80, 24)
        a = proc(1, "python", 1000.0, cmdline=long_a)
        b = proc(2, "python", 20000.0, cmdline=long_b)
        await push(pilot, feed, snapshot(a, b))
        await pilot.pause(0.2)
        assert isinstance(app.screen, CompareScreen)
        sides = app.screen.query_one("#sides", TextPanel).content.plain.splitlines()
        assert sides[0].endswith("--fused=0") and sides[1].endswith("--fused=1"), sides
        assert all(len(line) <= 78 for line in sides)
        metrics = app.screen.query_one("#metrics", TextPanel).content.plain
        launches = next(line for line in metrics.splitlines() if line.startswith("launches/s"))
        assert launches.split()[1:] == ["1.00k", "20.0k", "20.00×"]
        await push(pilot, feed, snapshot(b, time=1767258001.0))
        sides = app.screen.query_one("#sides", TextPanel).content.plain.splitlines()
        assert "[gone]" in sides[0] and "[running]" in sides[1]

    run(DashboardOptions(compare_pids=(1, 2)), body)


def test_replay_header_shows_recorded_interval_and_real_speed_and_charts_end_at_the_frame() -> None:
    feed = ReplayFeed(SCENARIO, speed=64.0)
    app = GputopApp(feed, DashboardOptions())  # type: ignore[arg-type]

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(300):
                if feed.position >= 20:
                    break
                await pilot.pause(0.01)
            await pilot.press("p")
            await pilot.pause()
            assert "every 1s" in header(app) and "×64" in header(app)
            await pilot.press("minus")  # one snapshot every 0.5 s of 1 s snapshots at speed 64: ×128
            await pilot.pause()
            assert "every 1s" in header(app) and "×128 " in header(app)
            await pilot.press("full_stop")
            here = app.snapshot
            assert here is not None
            await pilot.press("comma", "comma", "comma")
            now = app.snapshot
            assert now is not None and now.time == here.time - 3
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, DetailsScreen)
            points = app.screen._points
            assert points and points[-1].time == now.time

    asyncio.run(main())
    feed.stop()


def test_starting_snapshot_is_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    with Recorder(path) as rec:
        rec.write(Snapshot(time=1.0, interval_s=0.0, host="h"))  # the collector's "starting"
        rec.write(snapshot(proc(1)))
    snaps = list(read_recording(path))
    assert len(snaps) == 1 and snaps[0].interval_s == 1.0


def test_demo_banner_wraps_at_80_columns() -> None:
    banner = ("demo: the same elementwise chain, unfused (A: one kernel per operation) against fused "
              "(B: one kernel); launches/s is the difference to look at")

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.resize_terminal(80, 24)
        await push(pilot, feed, three())
        b = app.screen.query_one("#banner")
        assert b.size.height >= 2
        assert isinstance(app.screen.query_one(ProcTable), ProcTable)

    run(DashboardOptions(banner=banner), body)


def test_idle_process_keeps_totals_in_details() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        idle = proc(7, "idle", 0.0, total=Counts(launches=5000), rates=Rates(launches_per_s=0.0))
        await push(pilot, feed, snapshot(idle))
        await pilot.press("enter")
        await pilot.pause()
        stats = app.screen.query_one("#stats", TextPanel).content.plain
        launches = next(line for line in stats.splitlines() if line.startswith("launches"))
        assert launches.split() == ["launches", "0/s", "5.00k"]

    run(None, body)


def test_the_sort_column_cannot_be_hidden() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("s")
        await pilot.pause()
        menu = app.screen
        from textual.widgets import OptionList

        ol = menu.query_one(OptionList)
        ol.highlighted = [c.key for c in COLUMNS].index("launches")
        await pilot.press("x")
        await pilot.pause()
        assert "launches" in app.settings.columns
        assert any("sorted by this column" in n for n in notes(app))

    run(None, body)


def test_gpu_sparkline_ends_at_the_snapshot_shown() -> None:
    history = History(replay=True)
    snaps = [s for s, _ in zip(read_recording(SCENARIO), range(10))]
    for s in snaps:
        history.add(s)
    assert len(history.gpu_util(0)) == 10
    assert history.gpu_util(0, until=snaps[3].time) == [g.util_pct for s in snaps[:4] for g in s.gpus
                                                        if g.index == 0]
