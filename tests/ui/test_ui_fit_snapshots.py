"""SVG snapshots of issue 22's layout fixes at the smallest supported terminal, 80×24: a message on its
own line above the footer, the sort menu over the dimmed table, the replay's footer with every key.

Update after an intended change with: pytest tests/ui/test_ui_fit_snapshots.py --snapshot-update
(look at each difference first).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from gputop.ui.app import DashboardOptions, GputopApp
from screenshots import build_app

from .ui_helpers import SCENARIO

SIZE = (80, 24)


def test_message_line_at_80x24(snap_compare: Any) -> None:
    app, before = build_app("main", "dark")

    async def run(pilot: Any) -> None:
        await before(pilot)
        await pilot.press("c")          # nothing tagged: a warning, on its own line
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run)


def test_sort_menu_over_the_dimmed_table_at_80x24(snap_compare: Any) -> None:
    app, before = build_app("sort-menu", "dark")
    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_replay_footer_at_80x24(snap_compare: Any) -> None:
    from gputop.feeds.replay import ReplayFeed

    feed = ReplayFeed(SCENARIO, speed=1.0)
    app = GputopApp(feed, DashboardOptions(theme="dark"))

    async def run(pilot: Any) -> None:
        await pilot.pause(0.3)
        await pilot.press("full_stop", "full_stop", "full_stop")     # paused on snapshot 3 or 4: fixed text
        await pilot.pause(0.2)
        while feed.position != 4:
            await pilot.press("full_stop" if feed.position < 4 else "comma")
            await pilot.pause(0.05)
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run)
