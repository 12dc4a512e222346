"""Scrollbars at 80×24 (issue 35, item 7): the details and compare screens scroll there, and their scrollbar
was Textual's default: two columns whose track has the background's colour, so that only the thumb showed,
a block floating mid-screen. Now they are as the process table's: one column, and the thumb runs on a
track of a colour of its own (as htop's and nvitop's), so that it reads as a position. Checked on the
rendered scrollbar: its region, and every cell of it, track and thumb, against the screen's background."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.color import Color as RichColor
from rich.segment import Segment
from textual.scrollbar import ScrollBar
from textual.widget import Widget

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from gputop.ui.screens.compare import CompareScreen
from gputop.ui.screens.details import DetailsScreen
from screenshots import build_app


def _bg(seg: Segment) -> RichColor | None:
    """The colour a cell of the scrollbar shows behind its glyph (a reversed cell: its foreground)."""
    style = seg.style
    if style is None:
        return None
    return style.color if style.reverse else style.bgcolor


def _cells(bar: ScrollBar) -> list[list[Segment]]:
    """The scrollbar as drawn: each line's segments, without the empty ones."""
    return [[s for s in bar.render_line(y) if s.text] for y in range(bar.size.height)]


@pytest.mark.parametrize("name", ["details", "compare"])
@pytest.mark.parametrize("theme", ["dark", "light", "high-contrast", "monochrome"])
def test_the_page_scrollbar_is_one_column_with_a_visible_track(name: str, theme: str) -> None:
    app, before = build_app(name, theme)
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await before(pilot)
            await pilot.pause(0.1)
            screen = app.screen
            assert isinstance(screen, DetailsScreen if name == "details" else CompareScreen)
            body: Widget = screen.query_one("#body")
            assert body.max_scroll_y > 0, "the page does not scroll at 80x24: nothing to check"
            assert body.show_vertical_scrollbar
            bar = body.vertical_scrollbar
            seen["width"] = bar.region.width
            seen["right"] = bar.region.right
            seen["screen_right"] = screen.region.right
            seen["height"] = bar.region.height
            seen["cells"] = _cells(bar)
            seen["background"] = screen.styles.background.rich_color
            seen["body_background"] = body.styles.background
            seen["styles"] = body.styles

    asyncio.run(main())
    styles = seen["styles"]
    assert styles.scrollbar_size_vertical == 1 and seen["width"] == 1       # one column, as the process table's
    assert seen["right"] == seen["screen_right"]                           # at the right edge
    background = seen["background"]
    track = styles.scrollbar_background.rich_color
    thumb = styles.scrollbar_color.rich_color
    assert track != background and thumb != track                          # the track shows; the thumb on it
    cells = seen["cells"]
    assert len(cells) == seen["height"] > 0
    assert all(len(line) == 1 and line[0].cell_length == 1 for line in cells), cells
    behind = [_bg(line[0]) for line in cells]
    # every cell is track or thumb, none the screen's background: the thumb reads as a position on the track
    assert all(c is not None and c != background for c in behind), behind
    on_track = [c == track for c in behind]
    assert 0 < on_track.count(False) < len(cells) and on_track.count(True) > 0, behind
    # the thumb is one run of cells, where the page is (at the top: it opens at its start)
    thumb_rows = [i for i, t in enumerate(on_track) if not t]
    assert thumb_rows == list(range(thumb_rows[0], thumb_rows[-1] + 1))
    assert thumb_rows[0] == 0
