"""Lay out pieces of styled text on as few lines as a width allows (the header, the GPU panel).

A piece is never split: a line takes pieces while they fit, the next line starts with an indent.
A piece wider than a whole line is cut with an ellipsis, so nothing ever runs off the screen.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content


def flow(pieces: Sequence[Content], width: int, *, sep: str = "  ", indent: str = "  ",
         max_lines: int | None = None) -> list[Content]:
    """``pieces`` joined by ``sep`` on lines of at most ``width`` cells (empty pieces skipped)."""
    lines: list[Content] = []
    current: Content | None = None
    for piece in pieces:
        if not piece.cell_length:
            continue
        if current is not None and current.cell_length + len(sep) + piece.cell_length <= width:
            current = Content.assemble(current, sep, piece)
            continue
        if current is not None:
            lines.append(current)
        current = piece if not lines and current is None else Content.assemble(indent, piece)
        if current.cell_length > width:
            current = current.truncate(max(1, width), ellipsis=True)
    if current is not None:
        lines.append(current)
    if max_lines is not None and len(lines) > max_lines:
        lines = lines[:max_lines]
    return lines
