"""A snapshot that arrives before the screen it would be drawn on is composed: the main screen is
pushed at start and the feed starts right after, so a fast replay's first snapshot can reach the app
first. It was drawn at once and the dashboard died with `NoMatches: No nodes match 'HeaderBar' on
MainScreen` (seen once in a full run: tests/ui/test_ui_fit_layout.py at 80×24). Here the screen is
pushed and the snapshot shown in one step, before the screen can compose: deterministic."""

from __future__ import annotations

import asyncio
import threading
import time

from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.screens.main import MainScreen
from gputop.ui.widgets.proc_table import ProcTable

from .ui_helpers import ManualFeed, proc, snapshot


def test_a_snapshot_before_the_screen_is_composed_is_drawn_once_it_is() -> None:
    app = GputopApp(ManualFeed(), DashboardOptions(theme="dark"))
    snap = snapshot(proc(4242, "early_bird"))

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(0.2)
            screen = MainScreen()
            app.push_screen(screen)
            assert not screen.is_mounted
            app.show_snapshot(snap)             # what SnapshotArrived does
            await pilot.pause(0.3)
            assert app.screen is screen and screen.is_mounted
            assert app.snapshot is snap
            table = screen.query_one(ProcTable)
            assert [(p.pid, p.comm) for p in table.rows] == [(4242, "early_bird")]

    asyncio.run(main())


def _send_until(feed: ManualFeed, done: threading.Event) -> None:
    n = 0
    while not done.is_set():
        feed.push(snapshot(proc(4242, "late"), time=1767258000.0 + n))
        n += 1
        time.sleep(0.001)


def _run_while_a_feed_sends() -> None:
    feed = ManualFeed()
    app = GputopApp(feed, DashboardOptions(theme="dark"))
    done = threading.Event()

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(0.1)
            threading.Thread(target=_send_until, args=(feed, done), daemon=True).start()
            await pilot.pause(0.1)

    try:
        asyncio.run(main())
    finally:
        done.set()


def test_snapshots_that_arrive_while_the_app_shuts_down_are_not_drawn() -> None:
    """Textual's test harness shuts the app down while its message loop still runs: a snapshot that
    came then reached a screen whose widgets were being removed (NoMatches, seen in full runs of
    tests/ui/test_ui_fit_layout.py with a replay at 16×; here 3 runs of 3 failed before the fix).
    A feed thread sends every millisecond until the app is gone, ten times over."""
    for _ in range(10):
        _run_while_a_feed_sends()
