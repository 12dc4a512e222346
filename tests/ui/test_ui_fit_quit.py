"""Issue 22, item 7: `q` does not wait for the collector. The feed starts stopping (the probes detach) on
its own thread the moment `q` is pressed, while Textual restores the terminal; ``run_dashboard`` still
waits for it before returning, so nothing is left attached when the process exits."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from gputop.ui.app import DashboardOptions, GputopApp, run_dashboard

from .ui_helpers import ManualFeed


class SlowStopFeed(ManualFeed):
    """A feed whose stop takes as long as a collector detaching its probes; it records who stopped it."""

    def __init__(self, app_box: list[GputopApp], stop_s: float = 0.5) -> None:
        super().__init__()
        self.app_box = app_box
        self.stop_s = stop_s
        self.stops: list[tuple[str, bool]] = []    # (thread, was the app still running)
        self.stopped_event = threading.Event()

    def stop(self) -> None:
        app = self.app_box[0] if self.app_box else None
        self.stops.append((threading.current_thread().name, bool(app and app.is_running)))
        if not self.stopped_event.is_set():
            self.stopped_event.wait(self.stop_s)        # the detach
            self.stopped_event.set()
        self.stopped = True


def test_q_starts_stopping_the_feed_while_the_app_still_runs() -> None:
    box: list[GputopApp] = []
    feed = SlowStopFeed(box)
    app = GputopApp(feed, DashboardOptions())
    box.append(app)

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(0.05)
            await pilot.press("q")
            await pilot.pause(0.05)
    asyncio.run(main())
    assert feed.stops[0] == ("gputop-quit", True)


def test_run_dashboard_returns_only_once_the_feed_has_stopped(monkeypatch) -> None:
    """The process exits after the detach (no leaked probes), whoever finishes first."""
    box: list[GputopApp] = []
    feed = SlowStopFeed(box, stop_s=0.3)
    orig_run = GputopApp.run

    async def quit_at_once(pilot: Any) -> None:
        pilot.app.action_quit()

    def run(self: GputopApp, *args: object, **kw: object) -> int | None:
        box.append(self)
        # quit from inside the app's loop (a call_later before run() needs an event loop on Python 3.9)
        return orig_run(self, headless=True, size=(100, 30), auto_pilot=quit_at_once)

    monkeypatch.setattr(GputopApp, "run", run)
    assert run_dashboard(feed, DashboardOptions()) == 0
    assert feed.stopped and feed.stopped_event.is_set()
    assert feed.stops[0][0] == "gputop-quit"
