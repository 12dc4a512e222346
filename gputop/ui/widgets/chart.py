"""A widget showing a plotext chart drawn at its current size in the current theme's colours."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.widget import Widget

from gputop.ui.themes import ChartPalette, chart_palette

#: draws a chart: (width, height, palette, colorless) -> ANSI text
Draw = Callable[[int, int, ChartPalette, bool], str]


class Chart(Widget):
    DEFAULT_CSS = """
    Chart { width: 1fr; height: 1fr; min-height: 6; background: $background; }
    """

    def __init__(self, draw: Draw, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._draw = draw
        self._cache: tuple[tuple[object, ...], Text] | None = None
        self._version = 0

    def set_draw(self, draw: Draw) -> None:
        self._draw = draw
        self.redraw()

    def redraw(self) -> None:
        """The data changed: draw again at the next refresh."""
        self._version += 1
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache = None

    def render(self) -> Text:
        width, height = self.size
        theme = self.app.current_theme
        key = (width, height, theme.name, self._version)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        if width < 10 or height < 4:
            text = Text("")
        else:
            ansi = self._draw(width, height, chart_palette(theme), bool(getattr(self.app, "no_color", False)))
            text = Text.from_ansi(ansi, no_wrap=True, end="")
        self._cache = (key, text)
        return text
