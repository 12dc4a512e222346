"""Base class of the screens that show live data."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual import events
from textual.screen import Screen

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp


class LiveScreen(Screen[None]):
    """A screen redrawn from the app's state on each snapshot (only while visible).

    Below ``NARROW`` cells the screen has the class ``-narrow``: side-by-side panels stack up and
    the screen scrolls, so that every table and metric stays reachable."""

    NARROW = 120

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < self.NARROW, "-narrow")
        self.call_after_refresh(self.update_view)  # text laid out for a width (titles) follows it

    @property
    def gapp(self) -> GputopApp:
        return cast("GputopApp", self.app)

    def update_view(self) -> None:
        """Redraw from ``self.gapp`` (snapshot, settings, history)."""

    def on_screen_resume(self) -> None:
        self.update_view()

    def action_back(self) -> None:
        self.dismiss()
