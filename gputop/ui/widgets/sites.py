"""The call-sites panel of the details screen: the process's top call sites (gputop/view/sites.py says
what each cell is), one selected by a cursor; the screen opens the selected site's whole stack."""

from __future__ import annotations

from textual import events
from textual.actions import SkipAction
from textual.content import Content
from textual.geometry import Region
from textual.widget import Widget

from gputop.model import CallSite, CallSites
from gputop.ui import bindings
from gputop.view import format as fmt
from gputop.view import sites

_MUTED = "$foreground 60%"
#: the numbers' columns: launches/s with its ±, share with its ±
NUM_W = (15, 12)
#: lines above the first row: the summary and the column heads
HEAD_LINES = 2
#: the selected row, as the process table shows its cursor
CURSOR = "$block-cursor-foreground on $block-cursor-background"


def sites_table(cs: CallSites | None, width: int, limit: int = 10, cursor: int | None = None,
                focused: bool = True, note: str | None = None) -> Content:
    """The summary line, then site, launches/s ±, share ± and top kernel of the first ``limit`` sites.
    ``cursor``: the row shown selected (as the process table shows its cursor; underlined where the panel
    has not the focus); ``note``: one line instead (the fleet view has no call sites)."""
    if note is not None:
        return Content.styled(note, _MUTED)
    lines = [Content.styled(sites.summary(cs), "bold $primary")]
    rows = sites.site_rows(cs, limit)
    if not rows:
        return lines[0]
    rest = width - sum(NUM_W) - len(NUM_W) - 2
    site_w = max(12, min(max(len(r[0]) for r in rows), rest * 11 // 20))
    kern_w = max(12, rest - site_w)
    head = (f"{sites.HEAD[0]:<{site_w}} {sites.HEAD[1]:>{NUM_W[0]}} {sites.HEAD[2]:>{NUM_W[1]}}  "
            f"{sites.HEAD[3]}")
    lines.append(Content.styled(head, "bold"))
    # shortened as the kernels panel shortens them; one kernel launched from two sites reads the same in both
    distinct = list(dict.fromkeys(r[3] for r in rows))
    short = dict(zip(distinct, fmt.kernel_names(distinct, kern_w)))
    kernels = [short[r[3]] for r in rows]
    for i, ((label, rate, share, _), kernel) in enumerate(zip(rows, kernels)):
        parts: list[tuple[str, str] | str] = [fmt.fit(label, site_w).ljust(site_w)]
        for cell, w in zip((rate, share), NUM_W):
            parts += [" ", (cell.rjust(w), _MUTED if cell == fmt.NA else "")]
        parts += ["  ", (fmt.fit(kernel, kern_w), _MUTED if kernel == fmt.NA else "")]
        line = Content.assemble(*parts)
        if i == cursor:
            line = line.pad_right(max(0, width - line.cell_length)).stylize(CURSOR if focused else "underline")
        lines.append(line)
    return Content("\n").join(lines)


class SitesPanel(Widget, can_focus=True):
    """The call-sites table with a cursor (``↑`` ``↓`` when focused: at the first or last row they scroll
    the page instead); the cursor follows its site when the sites change places."""

    BINDINGS = bindings.of(bindings.SITES)
    DEFAULT_CSS = """
    SitesPanel { height: auto; background: $surface; color: $foreground; padding: 0 1;
                 text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *, limit: int = 10, id: str | None = None) -> None:
        super().__init__(id=id)
        self.limit = limit
        self._sites: CallSites | None = None
        self._note: str | None = None
        self._cursor = 0

    def show(self, cs: CallSites | None, note: str | None = None) -> None:
        """Show ``cs`` (None: no launch sampled), or the line ``note`` instead."""
        if cs == self._sites and note == self._note:
            return
        key = sites.site_key(s) if (s := self.selected) is not None else None
        self._sites, self._note = cs, note
        shown = self._shown
        index = next((i for i, s in enumerate(shown) if sites.site_key(s) == key), self._cursor)
        self._cursor = max(0, min(index, len(shown) - 1))
        self.refresh(layout=True)

    @property
    def _shown(self) -> tuple[CallSite, ...]:
        return () if self._sites is None or self._note is not None else self._sites.sites[: self.limit]

    @property
    def call_sites(self) -> CallSites | None:
        return self._sites

    @property
    def cursor_row(self) -> int:
        return self._cursor

    @property
    def selected(self) -> CallSite | None:
        shown = self._shown
        return shown[self._cursor] if shown else None

    def render(self) -> Content:
        width = max(40, self.content_region.width)
        return sites_table(self._sites, width, self.limit, self._cursor, self.has_focus, self._note)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def action_cursor(self, step: int) -> None:
        """The previous or next site; past the first or last: the key scrolls the page (SkipAction)."""
        index = self._cursor + step
        if not 0 <= index < len(self._shown):
            raise SkipAction()
        self._cursor = index
        self.refresh()
        self._show_row()

    def _show_row(self) -> None:
        """Scroll the page (the panel's container) so that the cursor's row shows."""
        parent = self.parent
        if isinstance(parent, Widget) and parent.is_scrollable:
            y = self.virtual_region.y + HEAD_LINES + self._cursor
            parent.scroll_to_region(Region(0, y, 1, 1), animate=False, x_axis=False)

    async def on_click(self, event: events.Click) -> None:
        """A click selects the row under it; a double click also opens its stack (the screen's Enter)."""
        index = event.y - HEAD_LINES
        if 0 <= index < len(self._shown):
            self._cursor = index
            self.refresh()
            if event.chain == 2:
                await self.screen.run_action("stack")
