"""The process table: a Line-API widget that draws only the visible rows.

A fixed header line with the sort column marked; rows are drawn lazily per line. A new snapshot
repaints only the screen lines whose text or look changed (``set_rows`` compares each visible
line's cells with what is drawn there), so an unchanged process costs no redraw and a refresh
costs a few formatted lines, not a widget tree. The selection
follows a process (its PID; scrape target and PID in the fleet view) across re-sorts. Clicking a
header posts ``SortClicked``; clicking a row selects it; double-clicking (or Enter, bound by the
screen) opens the details.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputop.model import ProcKey, ProcSample
from gputop.ui import bindings
from gputop.view import format as fmt
from gputop.view.columns import BY_KEY, OPTIONAL, Column

GUTTER = 2  # tag mark and a space
#: where not every column fits: the flexible column (COMMAND) takes at least this share of the width
#: left after the first column, at most FLEX_MAX cells (its own width where that is more)
FLEX_SHARE = 0.3
FLEX_MAX = 30

#: what a row's line shows: its cells' text, tagged, exited, under the cursor
LineKey = tuple[tuple[str, ...], bool, bool, bool]
#: the key of a line below the last row
BLANK: LineKey = ((), False, False, False)


@dataclass(frozen=True)
class Layout:
    """The columns shown at one width, in display order, and how many are scrolled off each side."""

    cols: tuple[tuple[Column, int], ...]
    #: columns hidden to the left of the scrolled part (shown by a ◀ after the fixed columns)
    hidden_left: int = 0
    #: columns hidden to the right (shown by a ▶ at the end of the header)
    hidden_right: int = 0
    #: how many columns are fixed at the left (the first column, and the sort column when pinned)
    fixed: int = 1
    #: the horizontal scroll in effect (no more than needed to show the last column)
    offset: int = 0

    def __iter__(self) -> Iterator[tuple[Column, int]]:
        return iter(self.cols)

    def __len__(self) -> int:
        return len(self.cols)


def col_width(col: Column) -> int:
    """A column's least width: its own, and never less than its header with a sort arrow."""
    return max(col.width, cell_len(col.header) + 1)


def layout(columns: Sequence[str], width: int, sort_key: str = "", offset: int = 0) -> Layout:
    """Column widths for ``width`` cells; the flexible column takes what is left.

    The first column always shows; the others scroll horizontally (``offset`` of them are
    skipped). Columns that do not fit are hidden, and markers say so (◀ after the fixed columns,
    ▶ at the end). The sort column is never hidden: when it is scrolled off, it is pinned after
    the first column. Where not every column fits, the optional ones (``columns.OPTIONAL``: TIME+,
    RSS, %MEM) move to the end and, where the others then fit, start scrolled off (▶), leaving the
    room to the others (unless one is the sort column).
    """
    cols = [BY_KEY[k] for k in columns]
    if not cols:
        return Layout(())
    if sum(col_width(c) + 1 for c in cols) - 1 + GUTTER > width:
        later = [c for c in cols[1:] if c.key in OPTIONAL and c.key != sort_key]
        cols = [c for c in cols if c not in later] + later
        if later and offset == 0:       # the others alone, and the ▶ marker
            rest_only = layout([c.key for c in cols if c not in later], width - 1, sort_key)
            if not rest_only.hidden_right and not rest_only.hidden_left:
                return Layout(rest_only.cols, 0, len(later), rest_only.fixed, 0)
    fixed = cols[:1]
    rest = cols[1:]
    offset = max(0, min(offset, max(0, len(rest) - 1)))
    avail = width - GUTTER - sum(col_width(c) for c in fixed)
    # where the columns scroll anyway, the flexible one (COMMAND) keeps room enough to tell processes
    # apart, as top's and htop's COMMAND takes what the fixed columns leave: FLEX_SHARE of the width,
    # from its own width up to FLEX_MAX; more columns scroll off for it
    scrolls = sum(col_width(c) + 1 for c in rest) > avail
    flex_min = max(0, min(FLEX_MAX, int(avail * FLEX_SHARE))) if scrolls else 0

    def cw(c: Column) -> int:
        return max(col_width(c), flex_min) if c.flex else col_width(c)

    def cost(cs: Sequence[Column]) -> int:
        return sum(cw(c) + 1 for c in cs)

    def fit(avail: int, candidates: Sequence[Column]) -> list[Column]:
        out: list[Column] = []
        for c in candidates:
            if cost([*out, c]) > avail:
                break
            out.append(c)
        return out

    sort_col = BY_KEY.get(sort_key)

    def attempt(offset: int) -> tuple[list[Column], list[Column], int]:
        """(pinned, window, columns hidden on the right) when ``offset`` columns are scrolled off."""
        if offset == 0 and cost(rest) <= avail:
            return [], list(rest), 0
        candidates = rest[offset:]
        marks = (1 if offset else 0) + 1
        window = fit(avail - marks, candidates)
        pinned: list[Column] = []
        if sort_col is not None and sort_col in rest and sort_col not in window:
            pinned = [sort_col]
            candidates = [c for c in candidates if c is not sort_col]
            window = fit(avail - marks - cost(pinned), candidates)
        return pinned, window, len(candidates) - len(window)

    pinned, window, hidden_right = attempt(offset)
    while offset > 0:                       # never scrolled further than the last column needs
        p2, w2, h2 = attempt(offset - 1)
        if h2:
            break
        offset, pinned, window, hidden_right = offset - 1, p2, w2, h2
    shown = fixed + pinned + window
    hidden_left = sum(1 for c in rest[:offset] if c not in pinned)
    used = sum(cw(c) for c in shown) + len(shown) - 1 + GUTTER
    used += (1 if hidden_left else 0) + (1 if hidden_right else 0)
    spare = max(0, width - used)
    flex = next((c for c in shown if c.flex), None)
    out = tuple((c, cw(c) + (spare if c is flex else 0)) for c in shown)
    return Layout(out, hidden_left, hidden_right, len(fixed) + len(pinned), offset)


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
        def __init__(self, key: ProcKey) -> None:
            super().__init__()
            self.key = key

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: Sequence[ProcSample] = []
        self._cells: list[tuple[str, ...] | None] = []
        self._columns: tuple[str, ...] = ()
        self._sort_key = ""
        self._descending = True
        self._tags: Collection[ProcKey] = ()
        #: tree view: what goes before each child's command (``gputop.view.tree``)
        self._prefixes: Mapping[ProcKey, str] = {}
        self._message = ""
        self._cursor = 0
        self._selected_key: ProcKey | None = None
        #: row index -> (what the line shows, its strip)
        self._strips: dict[int, tuple[LineKey, Strip]] = {}
        #: screen line -> what is drawn there (None: unknown, redraw it); line 0 is the header
        self._drawn: dict[int, LineKey | None] = {}
        #: the content width the lines are drawn at (measured once a repaint, not once a line)
        self._width = 0
        self._styles: dict[str, Style] = {}
        self._layout = Layout(())
        self._layout_key: tuple[object, ...] = ()
        self._hoffset = 0  #: columns scrolled off to the left (← →)
        self._base_style: Style | None = None

    # -- data ------------------------------------------------------------------------------
    def set_rows(
        self,
        rows: Sequence[ProcSample],
        columns: Sequence[str],
        sort_key: str,
        descending: bool,
        tags: Collection[ProcKey] = (),
        message: str = "",
        find: Callable[[ProcKey], int | None] | None = None,
    ) -> None:
        """Show ``rows`` in this order (already filtered and sorted); repaint the lines that changed.

        ``find`` (a process's key -> its index in ``rows``, or None) keeps the selection without a
        walk through the rows (64,000 in the fleet view; ``columns.Rows.position``). The tree's
        prefixes are those given last to ``set_prefixes``."""
        was_empty = not self._rows
        self._rows = rows
        self._cells = [None] * len(self._rows)
        header = (tuple(columns), sort_key, descending)
        full = (header != (self._columns, self._sort_key, self._descending) or message != self._message
                or was_empty or not self._rows)
        self._columns = tuple(columns)
        self._sort_key = sort_key
        self._descending = descending
        self._tags = set(tags)
        self._message = message
        if self._selected_key is None:
            index = None
        elif find is not None:
            index = find(self._selected_key)
        else:
            index = next((i for i, p in enumerate(self._rows) if p.key == self._selected_key), None)
        if index is None:
            index = min(self._cursor, max(0, len(self._rows) - 1))
        self._cursor = index
        self._selected_key = self._rows[index].key if self._rows else None
        size = Size(self.size.width, len(self._rows) + 1)
        if size != self.virtual_size:  # a layout pass only when the row count changes
            self.virtual_size = size
        if full:
            self._repaint()
        else:
            self._repaint_changed()

    def set_prefixes(self, prefixes: Mapping[ProcKey, str] | None) -> None:
        """Tree view: what the next ``set_rows`` shows before the commands of the processes named
        (``gputop.view.tree``); None or empty: no tree."""
        self._prefixes = prefixes or {}

    def _repaint(self) -> None:
        self._strips.clear()
        self._drawn.clear()
        self.refresh()

    def _repaint_changed(self) -> None:
        """Refresh only the visible lines whose content differs from what is drawn there."""
        if not self.is_mounted:
            return self._repaint()
        width, height = self.scrollable_content_region.size
        if width != self._width:
            self._width = width
            return self._repaint()
        cols = self._current_layout()
        top = round(self.scroll_y)
        drawn = self._drawn
        rows = len(self._rows)
        start = 0   # first line of the run of changed lines being gathered (0: none)
        for y in range(1, height + 1):
            index = top + y - 1
            changed = y < height and drawn.get(y) != (self._line_key(index, cols) if index < rows else BLANK)
            if changed:
                drawn[y] = None
                start = start or y
            elif start:      # one refresh a run of changed lines: each call costs Textual some work
                self.refresh(Region(0, start, width, y - start))
                start = 0

    def _measure(self) -> int:
        """The content width now (the vertical scrollbar comes and goes with the row count)."""
        self._width = self.scrollable_content_region.width
        return self._width

    def _line_key(self, index: int, cols: Layout) -> LineKey:
        """What row ``index``'s line shows: equal keys draw the same line."""
        p = self._rows[index]
        cells = self._cells[index]
        if cells is None:
            cells = tuple(col.render(p) for col, _ in cols)
            prefix = self._prefixes.get(p.key) if self._prefixes else None
            if prefix:
                cells = tuple(prefix + c if col.key == "command" else c
                              for (col, _), c in zip(cols, cells))
            self._cells[index] = cells
        return (cells, p.key in self._tags, p.state == "exited", index == self._cursor)

    @property
    def rows(self) -> Sequence[ProcSample]:
        return self._rows

    @property
    def selected_pid(self) -> int | None:
        return self._rows[self._cursor].pid if self._rows else None

    @property
    def selected_key(self) -> ProcKey | None:
        """The selected process's identity (``ProcSample.key``: PIDs repeat across a fleet's nodes)."""
        return self._rows[self._cursor].key if self._rows else None

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
        moved = index != self._cursor
        self._cursor = index
        self._selected_key = self._rows[index].key if self._rows else None
        if scroll:
            self._scroll_to_cursor()
        if moved:
            self._repaint_changed()

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

    def action_hscroll(self, step: int) -> None:
        """Scroll the columns right of the first one by ``step`` columns (while some are hidden)."""
        self._measure()
        lay = self._current_layout()
        if (step > 0 and not lay.hidden_right) or (step < 0 and not lay.hidden_left):
            return
        self._hoffset = max(0, self._hoffset + step)
        self._repaint()

    @property
    def current_layout(self) -> Layout:
        self._measure()
        return self._current_layout()

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
                self.post_message(self.Activated(self._rows[index].key))

    def _column_at(self, x: int) -> str | None:
        pos = GUTTER
        self._measure()
        lay = self._current_layout()
        for i, (col, w) in enumerate(lay):
            if i == lay.fixed and lay.hidden_left:
                pos += 1  # the ◀ marker
            if pos <= x < pos + w + 1:
                return col.key
            pos += w + 1
        return None

    # -- rendering -------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base_style = None
        self._styles.clear()
        self._strips.clear()
        self._drawn.clear()

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        self._drawn.clear()
        self._measure()
        self.virtual_size = Size(event.size.width, len(self._rows) + 1)

    def render_lines(self, crop: Region) -> list[Strip]:
        self._measure()     # once a repaint, not once a line: it is dear to compute
        return super().render_lines(crop)

    def _current_layout(self) -> Layout:
        """The layout for the current width, columns, sort column and scroll; the rows' cached
        cells and lines are for one layout only, so a new one drops them."""
        width = self._width
        key = (width, self._columns, self._sort_key, self._hoffset)
        if key != self._layout_key:
            self._layout = layout(self._columns, width, self._sort_key, self._hoffset)
            self._hoffset = self._layout.offset
            self._layout_key = (width, self._columns, self._sort_key, self._hoffset)
            self._cells = [None] * len(self._rows)
            self._strips.clear()
            self._drawn.clear()
        return self._layout

    def _style(self, name: str) -> Style:
        style = self._styles.get(name)     # kept until the theme or CSS changes (notify_style_update)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(name)
        return style

    def _base(self) -> Style:
        style = self._base_style
        if style is None:
            style = self._base_style = self.rich_style
        return style

    def render_line(self, y: int) -> Strip:
        width = self._width or self._measure()
        cols = self._current_layout()
        if y == 0:
            self._drawn[0] = None
            return self._header_strip(cols, width)
        index = round(self.scroll_y) + y - 1
        if not self._rows:
            self._drawn[y] = None
            if y == 2 and self._message:
                return _strip([("  " + self._message, self._style("proc-table--message"))], width, self._base())
            return Strip.blank(width, self._base())
        if index >= len(self._rows):
            self._drawn[y] = BLANK
            return Strip.blank(width, self._base())
        key = self._line_key(index, cols)
        cached = self._strips.get(index)
        if cached is not None and cached[0] == key:
            strip = cached[1]
        else:
            strip = self._row_strip(index, key, cols, width)
            self._strips[index] = (key, strip)
        self._drawn[y] = key
        return strip

    def _header_strip(self, cols: Layout, width: int) -> Strip:
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
            if i == cols.fixed and cols.hidden_left:
                parts.append(("◀", base))
            if i:
                parts.append((" ", base))
            parts.append((label.ljust(w) if col.align == "left" else label.rjust(w), style))
        if cols.hidden_right:
            parts.append((" " * (width - _used(parts) - 1) + "▶", base))
        return _strip(parts, width, base)

    def _row_strip(self, index: int, key: LineKey, cols: Layout, width: int) -> Strip:
        cells, tagged, exited, cursor = key
        if cursor:
            base = self._style("proc-table--cursor")
        elif exited:
            base = self._style("proc-table--exited")
        else:
            base = self._base()
        if tagged:
            base = base + self._style("proc-table--tagged")
        na = base + Style(dim=True) if cursor else base + self._style("proc-table--na")
        flag = base + self._style("proc-table--flag")
        parts: list[tuple[str, Style]] = [("● " if tagged else "  ", base)]
        gap = cols.fixed if cols.hidden_left else -1
        for i, ((col, w), cell) in enumerate(zip(cols, cells)):
            text = _cell_text(cell, w, col.align, col.cut)
            style = na if cell == fmt.NA else (flag if col.key == "launch_bound" and cell else base)
            if i == gap:
                parts.append((" ", base))
            if i:
                parts.append((" ", base))
            parts.append((text, style))
        return _strip(parts, width, base)


_CELL_TEXT: dict[tuple[str, int, str, str], str] = {}


def _cell_text(cell: str, width: int, align: str, cut: str) -> str:
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


def _used(parts: list[tuple[str, Style]]) -> int:
    return sum(cell_len(chunk) for chunk, _ in parts)


#: characters Rich measures without looking at each one (its fast path); a segment holding any other
#: (an ellipsis, a wide character) is measured character by character each time Textual cuts the line
#: at the scrollbar, so such a part gets a segment of its own instead of lengthening its neighbours'
_FAST_WIDTH = frozenset(
    chr(c)
    for lo, hi in ((0x20, 0x7E), (0xA0, 0xAC), (0xAE, 0x2FF), (0x370, 0x482), (0x2500, 0x25FC), (0x2800, 0x28FF))
    for c in range(lo, hi + 1)
)


def _strip(parts: list[tuple[str, Style]], width: int, fill: Style) -> Strip:
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
