"""Issue 35: an exited process's row vanished one refresh after its exit. The dashboard keeps it, faded and
marked exited, for 3 s or 2 refreshes (whichever is longer) after the refresh that reported the exit, its
rates and levels N/A (never its last interval's rate shown as current), counted in the summary line but out of
its sums; then it is gone. A snapshot still reports the exit once (JSON, recordings: docs/architecture.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from gputop.model import Counts
from gputop.record import read_recording
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.exited import LINGER_REFRESHES, LINGER_S, ExitedRows
from gputop.ui.screens.details import DetailsScreen
from gputop.ui.widgets.panels import TextPanel
from gputop.view import format as fmt

from .test_ui_habits_tags import summary
from .test_ui_keys import pids, push, run, table
from .ui_helpers import ManualFeed, proc, snapshot

T0 = 1767258000.0


def cells(app: GputopApp, pid: int) -> dict[str, str]:
    """The cells of ``pid``'s row by column key, and its state."""
    t = table(app)
    i = pids(app).index(pid)
    p = t.rows[i]
    lay = t.current_layout
    return {**{col.key: col.render(p) for col, _ in lay}, "state": p.state}


def frames(interval: float = 1.0, n: int = 6) -> list[Any]:
    """A process (PID 2) running, then its exit reported, then absent from every later snapshot; PID 1 runs on."""
    live = proc(1, "live", 10.0)
    dying = proc(2, "dying", 500.0, total=Counts(launches=4321))
    snaps = [snapshot(live, dying, time=T0), snapshot(live, replace(dying, state="exited"), time=T0 + interval)]
    snaps += [snapshot(live, time=T0 + interval * (k + 2)) for k in range(n)]
    return [replace(s, interval_s=interval) for s in snaps]


def test_an_exited_row_stays_three_seconds_with_its_rates_unknown() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        snaps = frames(1.0)
        await push(pilot, feed, snaps[0])
        assert cells(app, 2)["launches"] == "500"
        await push(pilot, feed, snaps[1])           # the refresh that reports the exit: its last interval
        assert cells(app, 2)["state"] == "exited" and cells(app, 2)["launches"] == "500"
        for k in (2, 3):                            # 1 s and 2 s after: kept, marked exited, rates N/A
            await push(pilot, feed, snaps[k])
            assert pids(app) == [1, 2], k
            row = cells(app, 2)
            assert row["state"] == "exited" and row["command"].startswith("dying")
            for key in ("launches", "h2d", "sync", "grid", "gpu_mem", "cpu"):
                assert row[key] == fmt.NA, (k, key, row[key])
            assert "live" in app.snapshot.process(1).comm     # type: ignore[union-attr]
        await push(pilot, feed, snaps[4])           # 3 s after: gone
        assert pids(app) == [1]

    run(None, body)


def test_a_slow_refresh_keeps_the_row_two_refreshes() -> None:
    """At -d 5 the row stays 2 refreshes (10 s), not one: 3 s is shorter than 2 refreshes."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        snaps = frames(5.0)
        await push(pilot, feed, *snaps[:3])
        assert pids(app) == [1, 2] and cells(app, 2)["launches"] == fmt.NA
        await push(pilot, feed, snaps[3])
        assert pids(app) == [1]

    run(None, body)
    assert ExitedRows.keep_s(5.0) == LINGER_REFRESHES * 5.0 and ExitedRows.keep_s(0.25) == LINGER_S


def test_fast_refreshes_keep_the_row_three_seconds() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        snaps = frames(0.25, n=16)
        await push(pilot, feed, *snaps[:2])
        shown = []
        for s in snaps[2:]:
            await push(pilot, feed, s)
            shown.append(2 in pids(app))
        # 0.25 s to 2.75 s after the exit: kept (11 refreshes); from 3 s on: gone
        assert shown == [True] * 11 + [False] * 5, shown

    run(None, body)


def test_the_summary_counts_the_kept_row_as_exited_and_sums_the_others() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        snaps = frames(1.0)
        await push(pilot, feed, *snaps[:3])
        line = summary(app)
        assert line.startswith(" Tasks: 2 listed, 1 running, 0 stopped, 1 exited  Launches: 10/s  "), line
        await pilot.press("slash", *"dy", "enter")      # filtered to the kept row: counted, its sums unknown-free
        line = summary(app)
        assert pids(app) == [2]
        assert line.startswith(" Tasks: 1 listed, 0 running, 0 stopped, 1 exited  Launches: 0/s  "), line

    run(None, body)


def test_a_reused_pid_shows_the_new_process_only() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        snaps = frames(1.0)
        await push(pilot, feed, *snaps[:2])
        await push(pilot, feed, snapshot(proc(1, "live", 10.0), proc(2, "newcomer", 7.0), time=T0 + 2))
        assert pids(app) == [1, 2] and cells(app, 2)["command"].startswith("newcomer")
        assert cells(app, 2)["state"] == "running" and cells(app, 2)["launches"] == "7"

    run(None, body)


def test_details_of_a_kept_row_say_exited_then_gone() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        snaps = frames(1.0)
        await push(pilot, feed, *snaps[:3])
        await pilot.press("down", "enter")
        assert isinstance(app.screen, DetailsScreen)
        title = app.screen.query_one("#title", TextPanel).content.plain
        stats = app.screen.query_one("#stats", TextPanel).content.plain
        assert "PID 2" in title and "[exited]" in title
        assert "4.32k" in stats                     # its totals stay
        await push(pilot, feed, *snaps[3:5])
        assert "[gone]" in app.screen.query_one("#title", TextPanel).content.plain

    run(None, body)


def test_the_recording_reports_the_exit_once(tmp_path: Path) -> None:
    """The kept row is the dashboard's own: --record writes the snapshots as the feed gave them."""
    out = tmp_path / "run.jsonl"

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, *frames(1.0)[:4])
        assert pids(app) == [1, 2]

    run(DashboardOptions(record=out), body)
    recorded = [[(p.pid, p.state) for p in s.processes] for s in read_recording(out)]
    assert recorded == [[(1, "running"), (2, "running")], [(1, "running"), (2, "exited")], [(1, "running")],
                        [(1, "running")]]


def test_a_replay_stepped_back_shows_the_same_rows() -> None:
    """Which rows are kept depends on the snapshots' times only: stepping back into the window shows the row
    again, stepping back before the exit shows the process as it ran."""
    rows = ExitedRows()
    snaps = frames(1.0)
    shown = [[p.pid for p in rows.apply(s, 1.0).processes] for s in snaps[:6]]
    assert shown == [[1, 2], [1, 2], [1, 2], [1, 2], [1], [1]]
    assert [p.pid for p in rows.apply(snaps[2], 1.0).processes] == [1, 2]       # back into the window
    back = rows.apply(snaps[0], 1.0)
    assert [(p.pid, p.state) for p in back.processes] == [(1, "running"), (2, "running")]
    assert back is snaps[0]
