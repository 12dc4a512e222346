"""The process table: a Line-API widget that draws only the visible rows.

A fixed header line with the sort column marked; rows are drawn lazily per line. A new snapshot
repaints only the screen lines whose text or look changed (``set_rows`` compares each visible
line's cells with what is drawn there), so an unchanged process costs no redraw and a refresh
costs a few formatted lines, not a widget tree. The selection
follows a process (its PID; scrape target and PID in the fleet view) across re-sorts. Clicking a
header posts ``SortClicked``; clicking a row selects it; double-clicking (or Enter, bound by the
screen) opens the details. Which columns fit the width: ``table_layout``; a line's text as a strip:
``strips``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import ClassVar

from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputop.model import ProcKey, ProcSample
from gputop.ui import bindings
from gputop.ui.widgets import strips
from gputop.ui.widgets.table_layout import GUTTER, Layout, layout
from gputop.view import format as fmt
from gputop.view.columns import matches

#: what a row's line shows: its cells' text, tagged, exited, under the cursor
LineKey = tuple[tuple[str, ...], bool, bool, bool]
#: the key of a line below the last row
BLANK: LineKey = ((), False, False, False)


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
        # dim: an exited process, a down node's last row (fleet view): not what runs now
        return (cells, p.key in self._tags, p.state == "exited" or bool(p.stale), index == self._cursor)

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

    def find(self, query: str, *, after: bool) -> bool:
        """Select the first row from the selected one (``after``: from the next one) that ``query`` finds,
        wrapping around (htop's search); False when none does (the selection stays)."""
        n = len(self._rows)
        start = self._cursor + (1 if after else 0)
        for i in range(n):
            index = (start + i) % n
            if matches(self._rows[index], query):
                self._set_cursor(index)
                return True
        return False

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
            if i == lay.fixed and (lay.hidden_left or lay.gap):
                pos += 1  # the ◀ marker, or the cell kept for it
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
        """The lines in ``crop``: this widget's own strips, with the app's line filters applied, as
        Textual's styles cache draws them for a widget without border, padding, outline, hatch, tint or
        opacity (else through it). The cache's generic path builds two more strips a line (about three
        quarters of a refresh of the table went there); a row's strip kept from the last refresh keeps
        its filtered copy too, so an unchanged row costs nothing."""
        self._measure()     # once a repaint, not once a line: it is dear to compute
        if not self._plain_styles():
            return super().render_lines(crop)
        width = self.region.width
        base_background, background = self.background_colors
        filters = self.get_line_filters()
        inner: Style | None = None
        out: list[Strip] = []
        for y in crop.line_range:
            strip = self.render_line(y)
            if strip.cell_length != width:     # as the styles cache: cut or padded with the background
                if inner is None:
                    inner = self._styles_cache.get_inner_outer(base_background, background)[0].rich_style
                strip = strip.adjust_cell_length(width, inner)
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, background)
            out.append(strip)
        if crop.column_span != (0, width):
            x1, x2 = crop.column_span
            out = [strip.crop(x1, x2) for strip in out]
        return out

    def _plain_styles(self) -> bool:
        """No border, padding, outline, hatch, tint or opacity: a line is what ``render_line`` draws."""
        styles = self.styles
        return (not self.BLANK and not any(styles.gutter) and self.region.width == self.content_region.width
                and not styles.tint.a and self.opacity == 1.0 and styles.text_opacity == 1.0
                and not any(edge for edge, _ in styles.outline)
                and not (styles.has_rule("hatch") and styles.hatch != "none"))

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
                return strips.strip([("  " + self._message, self._style("proc-table--message"))], width, self._base())
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
            if i == cols.fixed and (cols.hidden_left or cols.gap):
                parts.append(("◀" if cols.hidden_left else " ", base))
            if i:
                parts.append((" ", base))
            parts.append((label.ljust(w) if col.align == "left" else label.rjust(w), style))
        if cols.hidden_right:
            parts.append((" " * (width - strips.used(parts) - 1) + "▶", base))
        return strips.strip(parts, width, base)

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
        gap = cols.fixed if cols.hidden_left or cols.gap else -1
        for i, ((col, w), cell) in enumerate(zip(cols, cells)):
            text = strips.cell_text(cell, w, col.align, col.cut)
            style = na if cell == fmt.NA else (flag if col.key == "launch_bound" and cell else base)
            if i == gap:
                parts.append((" ", base))
            if i:
                parts.append((" ", base))
            parts.append((text, style))
        return strips.strip(parts, width, base)


