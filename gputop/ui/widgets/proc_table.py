"""The process table: a Line-API widget that draws only the visible rows.

A fixed header line with the sort column marked; rows are drawn lazily per line and cached until
the next snapshot, so a refresh costs a few formatted lines, not a widget tree. The selection
follows a PID across re-sorts. Clicking a header posts ``SortClicked``; clicking a row selects
it; double-clicking (or Enter, bound by the screen) opens the details.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputop.model import ProcSample
from gputop.ui import bindings
from gputop.ui import format as fmt
from gputop.ui.columns import BY_KEY, Column

GUTTER = 2  # tag mark and a space


def layout(columns: Sequence[str], width: int) -> list[tuple[Column, int]]:
    """Column widths for ``width`` cells: fixed widths, the flexible column takes the rest.

    Columns that do not fit are dropped from the right (the leftmost two always stay).
    """
    cols = [BY_KEY[k] for k in columns]
    while True:
        fixed = sum(c.width for c in cols) + len(cols) - 1 + GUTTER
        if fixed <= width or len(cols) <= 2:
            break
        cols.pop()
    spare = max(0, width - fixed)
    flex = [c for c in cols if c.flex]
    out = []
    for c in cols:
        w = c.width
        if flex and c is flex[0]:
            w += spare
        out.append((c, w))
    return out


class ProcTable(ScrollView, can_focus=True):
    BINDINGS = bindings.of(bindings.TABLE)

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "proc-table--header",
        "proc-table--header-sorted",
        "proc-table--cursor",
        "proc-table--tagged",
        "proc-table--exited",
        "proc-table--na",
        "proc-table--flag",
        "proc-table--message",
    }

    DEFAULT_CSS = """
    ProcTable {
        height: 1fr;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
        background: $background;
        color: $foreground;
    }
    ProcTable > .proc-table--header { background: $panel; color: $foreground; text-style: bold; }
    ProcTable > .proc-table--header-sorted { background: $primary; color: $background; text-style: bold; }
    ProcTable > .proc-table--cursor { background: $block-cursor-background; color: $block-cursor-foreground; }
    ProcTable > .proc-table--tagged { color: $accent; text-style: bold; }
    ProcTable > .proc-table--exited { color: $foreground 45%; text-style: dim; }
    ProcTable > .proc-table--na { color: $foreground 55%; }
    ProcTable > .proc-table--flag { color: $warning; text-style: bold; }
    ProcTable > .proc-table--message { color: $foreground 60%; text-style: italic; }
    """

    class SortClicked(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    class Activated(Message):
        def __init__(self, pid: int) -> None:
            super().__init__()
            self.pid = pid

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[ProcSample] = []
        self._cells: list[list[str] | None] = []
        self._columns: tuple[str, ...] = ()
        self._sort_key = ""
        self._descending = True
        self._tags: Collection[int] = ()
        self._message = ""
        self._cursor = 0
        self._selected_pid: int | None = None
        self._strips: dict[int, Strip] = {}
        self._layout: list[tuple[Column, int]] = []
        self._layout_width = -1
        self._base_style: Style | None = None

    # -- data ------------------------------------------------------------------------------
    def set_rows(
        self,
        rows: Sequence[ProcSample],
        columns: Sequence[str],
        sort_key: str,
        descending: bool,
        tags: Collection[int] = (),
        message: str = "",
    ) -> None:
        """Show ``rows`` in this order (already filtered and sorted)."""
        self._rows = list(rows)
        self._cells = [None] * len(self._rows)
        if tuple(columns) != self._columns:
            self._columns = tuple(columns)
            self._layout_width = -1
        self._sort_key = sort_key
        self._descending = descending
        self._tags = set(tags)
        self._message = message
        index = next((i for i, p in enumerate(self._rows) if p.pid == self._selected_pid), None)
        if index is None:
            index = min(self._cursor, max(0, len(self._rows) - 1))
        self._set_cursor(index, scroll=False)
        size = Size(self.size.width, len(self._rows) + 1)
        if size != self.virtual_size:  # a layout pass only when the row count changes
            self.virtual_size = size
        self._strips.clear()
        self.refresh()

    @property
    def rows(self) -> list[ProcSample]:
        return self._rows

    @property
    def selected_pid(self) -> int | None:
        return self._rows[self._cursor].pid if self._rows else None

    @property
    def cursor_row(self) -> int:
        return self._cursor

    def select_pid(self, pid: int) -> bool:
        for i, p in enumerate(self._rows):
            if p.pid == pid:
                self._set_cursor(i)
                return True
        return False

    def _set_cursor(self, index: int, scroll: bool = True) -> None:
        index = max(0, min(index, len(self._rows) - 1)) if self._rows else 0
        if index != self._cursor:
            self._strips.pop(self._cursor, None)
            self._strips.pop(index, None)
            self.refresh()
        self._cursor = index
        self._selected_pid = self._rows[index].pid if self._rows else None
        if scroll:
            self._scroll_to_cursor()

    def _scroll_to_cursor(self) -> None:
        visible = max(1, self.size.height - 1)
        top = round(self.scroll_y)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False)
        elif self._cursor >= top + visible:
            self.scroll_to(y=self._cursor - visible + 1, animate=False)

    # -- actions ---------------------------------------------------------------------------
    def action_cursor(self, step: int) -> None:
        self._set_cursor(self._cursor + step)

    def action_page(self, step: int) -> None:
        self._set_cursor(self._cursor + step * max(1, self.size.height - 2))

    def action_cursor_to(self, index: int) -> None:
        self._set_cursor(index if index >= 0 else len(self._rows) - 1)

    # -- mouse -----------------------------------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            key = self._column_at(offset.x)
            if key is not None:
                self.post_message(self.SortClicked(key))
            return
        index = round(self.scroll_y) + offset.y - 1
        if 0 <= index < len(self._rows):
            self._set_cursor(index)
            if event.chain >= 2:
                self.post_message(self.Activated(self._rows[index].pid))

    def _column_at(self, x: int) -> str | None:
        pos = GUTTER
        for col, w in self._current_layout():
            if pos <= x < pos + w + 1:
                return col.key
            pos += w + 1
        return None

    # -- rendering -------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base_style = None
        self._strips.clear()

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        self.virtual_size = Size(event.size.width, len(self._rows) + 1)

    def _current_layout(self) -> list[tuple[Column, int]]:
        width = self.scrollable_content_region.width
        if width != self._layout_width:
            self._layout = layout(self._columns, width)
            self._layout_width = width
            self._strips.clear()
        return self._layout

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(name)

    def _base(self) -> Style:
        style = self._base_style
        if style is None:
            style = self._base_style = self.rich_style
        return style

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        cols = self._current_layout()
        if y == 0:
            return self._header_strip(cols, width)
        index = round(self.scroll_y) + y - 1
        if not self._rows:
            if y == 2 and self._message:
                return _strip([("  " + self._message, self._style("proc-table--message"))], width, self._base())
            return Strip.blank(width, self._base())
        if index >= len(self._rows):
            return Strip.blank(width, self._base())
        strip = self._strips.get(index)
        if strip is None:
            strip = self._row_strip(index, cols, width)
            self._strips[index] = strip
        return strip

    def _header_strip(self, cols: list[tuple[Column, int]], width: int) -> Strip:
        base = self._style("proc-table--header")
        sorted_style = self._style("proc-table--header-sorted")
        parts: list[tuple[str, Style]] = [(" " * GUTTER, base)]
        for i, (col, w) in enumerate(cols):
            label = col.header
            style = base
            if col.key == self._sort_key:
                label += "▼" if self._descending else "▲"
                style = sorted_style
            label = fmt.fit(label, w)
            if i:
                parts.append((" ", base))
            parts.append((label.ljust(w) if col.align == "left" else label.rjust(w), style))
        return _strip(parts, width, base)

    def _row_strip(self, index: int, cols: list[tuple[Column, int]], width: int) -> Strip:
        p = self._rows[index]
        cells = self._cells[index]
        if cells is None:
            cells = [col.render(p) for col, _ in cols]
            self._cells[index] = cells
        tagged = p.pid in self._tags
        if index == self._cursor:
            base = self._style("proc-table--cursor")
        elif p.state == "exited":
            base = self._style("proc-table--exited")
        else:
            base = self._base()
        if tagged:
            base = base + self._style("proc-table--tagged")
        na = base + Style(dim=True) if index == self._cursor else base + self._style("proc-table--na")
        flag = base + self._style("proc-table--flag")
        parts: list[tuple[str, Style]] = [("● " if tagged else "  ", base)]
        for i, ((col, w), cell) in enumerate(zip(cols, cells, strict=True)):
            text = fmt.fit_middle(cell, w) if col.cut == "middle" else fmt.fit(cell, w)
            style = na if cell == fmt.NA else (flag if col.key == "launch_bound" and cell else base)
            if i:
                parts.append((" ", base))
            parts.append((text.ljust(w) if col.align == "left" else text.rjust(w), style))
        return _strip(parts, width, base)


def _strip(parts: list[tuple[str, Style]], width: int, fill: Style) -> Strip:
    """One line of exactly ``width`` cells; neighbouring parts of the same style become one segment
    (a row is a handful of segments, which keeps Textual's per-frame work small)."""
    segments: list[Segment] = []
    text: list[str] = []
    current: Style | None = None
    used = 0
    for chunk, style in parts:
        if style != current and text:
            segments.append(Segment("".join(text), current))
            text = []
        current = style
        text.append(chunk)
        used += len(chunk) if chunk.isascii() else cell_len(chunk)
    if used < width:
        if current == fill:
            text.append(" " * (width - used))
        else:
            segments.append(Segment("".join(text), current))
            text = [" " * (width - used)]
            current = fill
        used = width
    if text:
        segments.append(Segment("".join(text), current))
    strip = Strip(segments, used)
    return strip if used == width else strip.crop(0, width)
