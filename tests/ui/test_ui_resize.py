"""Resizing never crashes and never leaves a screen drawn for the old size.

Every screen (main, details, compare, help, sort menu, signal dialog), in live and replay mode,
is resized through 200×60 → 160×45 → 120×40 → 80×24 → 40×12 → 20×5 and back; after each step
the app is still running and every line of the process table is exactly the terminal's width.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from gputop.feeds.base import Feed
from gputop.feeds.replay import ReplayFeed
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.widgets.proc_table import ProcTable

from .ui_helpers import SCENARIO, ManualFeed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from screenshots import frames

SIZES = [(200, 60), (160, 45), (120, 40), (80, 24), (40, 12), (20, 5)]
WALK = SIZES + SIZES[-2::-1] + [(150, 45), (120, 45), (150, 45)]

#: keys that open each screen from the main screen (the compare screen opens from options)
SCREENS: dict[str, tuple[str, ...]] = {
    "main": (),
    "details": ("enter",),
    "compare": (),
    "help": ("h",),
    "sort-menu": ("s",),
    "signal": ("k",),
    "scrolled": ("right", "right", "right"),
}


async def walk(app: GputopApp, pilot: Pilot[Any], screen: str) -> None:
    await pilot.press(*SCREENS[screen])
    await pilot.pause()
    opened = type(app.screen)
    for w, h in WALK:
        await pilot.resize_terminal(w, h)
        await pilot.pause()
        assert app.is_running, f"the dashboard ended at {w}×{h}"
        assert type(app.screen) is opened
        main = app.screen_stack[1]
        table = main.query_one(ProcTable)
        if table.size.width:
            for y in range(table.size.height):
                assert table.render_line(y).cell_length == table.scrollable_content_region.width, (w, h, y)
    assert app.return_code is None


def run(feed: Feed, options: DashboardOptions, body: Callable[[GputopApp, Pilot[Any]], Awaitable[None]],
        deliver: Callable[[], None] = lambda: None) -> None:
    app = GputopApp(feed, options)

    async def main() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause(0.05)
            deliver()
            await pilot.pause(0.1)
            await body(app, pilot)

    asyncio.run(main())


@pytest.mark.parametrize("screen", list(SCREENS))
def test_resize_live(screen: str) -> None:
    feed = ManualFeed()
    options = DashboardOptions(compare_pids=(4242, 4243) if screen == "compare" else None)

    def deliver() -> None:
        for snap in frames(30):
            feed.push(snap)

    run(feed, options, lambda app, pilot: walk(app, pilot, screen), deliver)


@pytest.mark.parametrize("screen", list(SCREENS))
def test_resize_replay(screen: str) -> None:
    feed = ReplayFeed(SCENARIO, speed=64.0)
    options = DashboardOptions(compare_pids=(4242, 4243) if screen == "compare" else None)
    run(feed, options, lambda app, pilot: walk(app, pilot, screen))
