"""Base class of the screens that show live data."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.screen import Screen

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp


class LiveScreen(Screen[None]):
    """A screen redrawn from the app's state on each snapshot (only while visible)."""

    @property
    def gapp(self) -> GputopApp:
        return cast("GputopApp", self.app)

    def update_view(self) -> None:
        """Redraw from ``self.gapp`` (snapshot, settings, history)."""

    def on_screen_resume(self) -> None:
        self.update_view()

    def action_back(self) -> None:
        self.dismiss()
