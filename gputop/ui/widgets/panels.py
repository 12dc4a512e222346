"""Small text panels: key/value lists and the top-kernels table."""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.widget import Widget

from gputop.model import KernelStat
from gputop.view import format as fmt

_MUTED = "$foreground 60%"


class TextPanel(Widget):
    """Shows a Content; ``show`` replaces it (redrawn only when it changed)."""

    DEFAULT_CSS = """
    TextPanel { height: auto; background: $surface; color: $foreground; padding: 0 1; }
    """

    def __init__(
        self, content: Content | str = "", *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._content = Content(content) if isinstance(content, str) else content

    def show(self, content: Content) -> None:
        if content != self._content:
            self._content = content
            self.refresh(layout=True)

    @property
    def content(self) -> Content:
        return self._content

    def render(self) -> Content:
        return self._content


def kernels_table(
    kernels: Sequence[KernelStat], width: int, limit: int = 10, title: str = "top kernels"
) -> Content:
    """Name, launches/s, avg grid, avg block and total launches of the first ``limit`` kernels, and
    their launches inside graph launches per second when any kernel ran in a graph."""
    shown = list(kernels)[:limit]
    graphs = any(k.graph_launches for k in shown)
    num_w = (9, 8, 6, 9, 9) if graphs else (9, 8, 6, 9)
    name_w = max(12, width - sum(num_w) - len(num_w) - 2)
    head = f"{title[:name_w]:<{name_w}} {'LAUNCH/s':>9} {'GRID':>8} {'BLOCK':>6} {'TOTAL':>9}"
    head += f" {'GRAPH/s':>9}" if graphs else ""
    lines = [Content.styled(head, "bold $primary")]
    if not kernels:
        lines.append(Content.styled("no kernels seen yet", _MUTED))
    names = fmt.kernel_names(
        [fmt.text(k.name) if k.name else (f"0x{k.address:x}" if k.address is not None else "?") for k in shown],
        name_w,
    )
    for k, name in zip(shown, names):
        cells = [
            fmt.si(k.launches_per_s),
            fmt.num(k.grid_blocks_avg),
            fmt.num(k.block_threads_avg),
            fmt.si(k.launches),
        ]
        if graphs:
            cells.append(fmt.si(k.graph_launches_per_s))
        parts: list[tuple[str, str] | str] = [fmt.fit(name, name_w).ljust(name_w)]
        for cell, w in zip(cells, num_w):
            parts += [" ", (cell.rjust(w), _MUTED if cell == fmt.NA else "")]
        lines.append(Content.assemble(*parts))
    return Content("\n").join(lines)


class KernelsPanel(Widget):
    """The top-kernels table, laid out at the panel's current width."""

    DEFAULT_CSS = """
    KernelsPanel { height: auto; background: $surface; color: $foreground; padding: 0 1;
                   text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *, limit: int = 10, id: str | None = None) -> None:
        super().__init__(id=id)
        self.limit = limit
        self._kernels: tuple[KernelStat, ...] = ()
        self._title = "top kernels"

    def show(self, kernels: Sequence[KernelStat], title: str = "top kernels") -> None:
        kernels = tuple(kernels)
        if kernels != self._kernels or title != self._title:
            self._kernels = kernels
            self._title = title
            self.refresh(layout=True)

    @property
    def kernels(self) -> tuple[KernelStat, ...]:
        return self._kernels

    def render(self) -> Content:
        return kernels_table(self._kernels, max(40, self.content_region.width), self.limit, self._title)
