"""Write the README's screenshots: the main, details, compare and help screens in two themes.

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--themes dark,light]

Each screenshot is the real app, fed the scripted scenario recording tests/data/scenario.jsonl
(61 snapshots of a two-GPU node), exported as SVG at 160×45. The same flows (FLOWS) drive the
SVG snapshot tests in tests/ui/test_ui_snapshots.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gputop.feeds.base import Feed, FeedKind, SnapshotCallback  # noqa: E402
from gputop.model import Snapshot  # noqa: E402
from gputop.record import read_recording  # noqa: E402

RECORDING = ROOT / "tests" / "data" / "scenario.jsonl"
SIZE = (160, 45)
FRAMES = 61  # up to the frame where `python eval.py` (7300) has exited and fades


class FrameFeed(Feed):
    """A feed that hands over given snapshots when the flow asks (``deliver``)."""

    kind = FeedKind.LIVE

    def __init__(self, frames: list[Snapshot]) -> None:
        self.frames = frames
        self.callback: SnapshotCallback | None = None

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self.callback = on_snapshot

    def stop(self) -> None:
        pass

    def set_interval(self, interval_s: float) -> None:
        pass

    def set_paused(self, paused: bool) -> None:
        pass

    async def deliver(self, pilot: Any) -> None:
        for _ in range(500):
            if self.callback is not None:
                break
            await pilot.pause(0.01)
        assert self.callback is not None, "the app did not start the feed"
        for snap in self.frames:
            self.callback(snap)
        await pilot.pause()
        await pilot.pause()


Before = Callable[[Any, FrameFeed], Awaitable[None]]


async def _nothing(pilot: Any, feed: FrameFeed) -> None:
    await feed.deliver(pilot)


def _then(*keys: str) -> Before:
    async def run(pilot: Any, feed: FrameFeed) -> None:
        await feed.deliver(pilot)
        await pilot.press(*keys)
        await pilot.pause(0.2)

    return run


async def _filter(pilot: Any, feed: FrameFeed) -> None:
    from textual.widgets import Input

    await feed.deliver(pilot)
    await pilot.press("slash", *"alice")
    pilot.app.screen.query_one(Input).cursor_blink = False
    await pilot.press("enter")
    await pilot.pause(0.1)


@dataclass(frozen=True)
class Flow:
    before: Before
    options: dict[str, Any] = field(default_factory=dict)
    frames: int = FRAMES


FLOWS: dict[str, Flow] = {
    "main": Flow(_nothing),
    "details": Flow(_then("enter")),
    "compare": Flow(_nothing, {"compare_pids": (4242, 4243)}),
    "help": Flow(_then("h")),
    # extra states covered by the snapshot tests
    "sort-menu": Flow(_then("s")),
    "signal": Flow(_then("down", "k")),
    "filter": Flow(_filter),
    "tagged": Flow(_then("space", "down", "space", "greater_than_sign")),
    "baseline": Flow(_then("down", "down", "down", "c"), {"baseline": RECORDING}),
    "starting": Flow(_nothing, frames=0),
    "stack": Flow(_then("enter", "down", "enter")),    # the second call site's whole stack (details, Enter)
}

#: the README's screenshots
README_SCREENS = ("main", "details", "compare", "help")


def frames(n: int) -> list[Snapshot]:
    out = []
    for i, snap in enumerate(read_recording(RECORDING)):
        if i >= n:
            break
        out.append(snap)
    return out


def build_app(name: str, theme: str) -> tuple[Any, Callable[[Any], Awaitable[None]]]:
    """The app of flow ``name`` in ``theme`` and the coroutine to run before the screenshot."""
    from gputop.ui.app import DashboardOptions, GputopApp

    flow = FLOWS[name]
    feed = FrameFeed(frames(flow.frames))
    app = GputopApp(feed, DashboardOptions(theme=theme, **flow.options))

    async def before(pilot: Any) -> None:
        await flow.before(pilot, feed)

    return app, before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "screenshots")
    ap.add_argument("--themes", default="dark,light")
    ap.add_argument("--screens", default=",".join(README_SCREENS))
    args = ap.parse_args()
    os.environ["TZ"] = "UTC"
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="gputop-shots-")  # never the user's settings
    os.environ.pop("NO_COLOR", None)
    import time

    time.tzset()
    from textual._doc import take_svg_screenshot

    args.out.mkdir(parents=True, exist_ok=True)
    for theme in args.themes.split(","):
        for name in args.screens.split(","):
            app, before = build_app(name, theme)
            svg = take_svg_screenshot(app=app, terminal_size=SIZE, run_before=before)
            path = args.out / f"{name}-{theme}.svg"
            path.write_text(svg, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
