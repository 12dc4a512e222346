"""Lines of text as Textual strips, cheaply: a cell's text cut and padded to its width (memoised),
and a line's parts merged into as few segments as their styles allow (``strip``)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gputop.view import format as fmt

_CELL_TEXT: dict[tuple[str, int, str, str], str] = {}


def cell_text(cell: str, width: int, align: str, cut: str) -> str:
    """A cell's text cut and padded to ``width`` (memoised: most cells repeat from one refresh to the next)."""
    key = (cell, width, align, cut)
    text = _CELL_TEXT.get(key)
    if text is None:
        text = fmt.fit_middle(cell, width) if cut == "middle" else fmt.fit(cell, width)
        text = text.ljust(width) if align == "left" else text.rjust(width)
        if len(_CELL_TEXT) >= 8192:
            _CELL_TEXT.clear()
        _CELL_TEXT[key] = text
    return text


def used(parts: list[tuple[str, Style]]) -> int:
    """The cells ``parts`` take."""
    return sum(cell_len(chunk) for chunk, _ in parts)


#: characters Rich measures without looking at each one (its fast path); a segment holding any other
#: (an ellipsis, a wide character) is measured character by character each time Textual cuts the line
#: at the scrollbar, so such a part gets a segment of its own instead of lengthening its neighbours'
_FAST_WIDTH = frozenset(
    chr(c)
    for lo, hi in ((0x20, 0x7E), (0xA0, 0xAC), (0xAE, 0x2FF), (0x370, 0x482), (0x2500, 0x25FC), (0x2800, 0x28FF))
    for c in range(lo, hi + 1)
)


def strip(parts: list[tuple[str, Style]], width: int, fill: Style) -> Strip:
    """One line of exactly ``width`` cells; neighbouring parts of the same style become one segment
    (a row is a handful of segments, which keeps Textual's per-frame work small)."""
    segments: list[Segment] = []
    text: list[str] = []
    current: Style | None = None
    used = 0
    for chunk, style in parts:
        if chunk.isascii():
            used += len(chunk)
            slow = False
        else:
            used += cell_len(chunk)
            slow = not _FAST_WIDTH.issuperset(chunk)
        if text and (slow or (style is not current and style != current)):
            segments.append(Segment("".join(text), current))
            text = []
        current = style
        if slow:
            segments.append(Segment(chunk, style))
        else:
            text.append(chunk)
    if used < width:
        if current is not fill and current != fill:
            if text:
                segments.append(Segment("".join(text), current))
                text = []
            current = fill
        text.append(" " * (width - used))
        used = width
    if text:
        segments.append(Segment("".join(text), current))
    strip = Strip(segments, used)
    return strip if used == width else strip.crop(0, width)
