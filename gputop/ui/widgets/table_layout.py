"""Which columns of the process table show at a width, and how wide each is (``layout``): where not every
column fits, the columns that tell rows apart (PID, USER, GPU, COMMAND; NODE, NAMESPACE and POD in the fleet
view) fixed at the left, and the sort column with them when it is scrolled off; the flexible one (COMMAND)
given a share of the width; the rest scrolled sideways. No Textual (Rich measures the cells)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from rich.cells import cell_len

from gputop.view.columns import BY_KEY, OPTIONAL, Column

GUTTER = 2  # tag mark and a space
#: where not every column fits: the flexible column (COMMAND) takes at least this share of the width
#: left after the first column, at most FLEX_MAX cells (its own width where that is more)
FLEX_SHARE = 0.3
FLEX_MAX = 30
#: the columns that tell one row from another: where the columns scroll, those of them that lead the row
#: stay fixed at its left (issue 35: scrolled right, only PID told rows apart), as htop keeps its command
#: in sight and nvitop its PID, USER and command
IDENTITY = frozenset({"pid", "node", "namespace", "pod", "user", "gpu", "command"})
#: where keeping every identity column fixed would leave the scrolled columns fewer than SCROLL_MIN cells
#: (a narrow terminal; the fleet view's NODE, NAMESPACE and POD at 80 columns), they scroll in this order:
#: the least telling first (the pod's name tells more than its namespace, the command more than anything
#: but the PID, which always stays)
GIVE_WAY = ("namespace", "gpu", "user", "node", "pod", "command")
#: the least room kept for the scrolled columns: the sort column and another number, and the ◀ ▶ markers
SCROLL_MIN = 20


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
    #: a cell after the fixed columns is kept for the ◀ marker, blank while nothing is scrolled off to the
    #: left: the scrolled columns start at the same place at every offset (identity columns fixed)
    gap: bool = False

    def __iter__(self) -> Iterator[tuple[Column, int]]:
        return iter(self.cols)

    def __len__(self) -> int:
        return len(self.cols)


def col_width(col: Column) -> int:
    """A column's least width: its own, and never less than its header with a sort arrow."""
    return max(col.width, cell_len(col.header) + 1)


def _fixed(cols: Sequence[Column], width: int, cw: Callable[[Column], int]) -> list[Column]:
    """The columns fixed at the left where the others scroll: the first, then the identity columns that
    follow it (``IDENTITY``), as many as leave the scrolled ones ``SCROLL_MIN`` cells (``GIVE_WAY``)."""
    fixed = [cols[0]]
    for c in cols[1:]:
        if c.key not in IDENTITY:
            break
        fixed.append(c)

    def room(cs: Sequence[Column]) -> int:
        return width - GUTTER - sum(cw(c) for c in cs) - (len(cs) - 1)

    for key in GIVE_WAY:
        if room(fixed) >= SCROLL_MIN:
            break
        fixed = [c for c in fixed if c.key != key or c is cols[0]]
    return fixed


def layout(columns: Sequence[str], width: int, sort_key: str = "", offset: int = 0) -> Layout:
    """Column widths for ``width`` cells; the flexible column takes what is left.

    Where every column fits, they all show. Where not, the first column and the identity columns that
    follow it (PID, USER, GPU, COMMAND: ``_fixed``) stay at the left and the others scroll horizontally
    (``offset`` of them are skipped); columns that do not fit are hidden, and markers say so (◀ after the
    fixed columns, ▶ at the end). The sort column is never hidden: when it is scrolled off, it is pinned
    after the fixed columns. The fixed columns keep their widths whatever the scroll (the flexible one
    takes what the columns shown unscrolled leave), so ← → never move them. Where not every column fits,
    the optional ones (``columns.OPTIONAL``: TIME+, RSS, %MEM, ...) move to the end and, where the others
    then fit, start scrolled off (▶), leaving the room to the others (unless one is the sort column).
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
    # where the columns scroll, the flexible one (COMMAND) keeps room enough to tell processes apart, as
    # top's and htop's COMMAND takes what the fixed columns leave: FLEX_SHARE of the width after the first
    # column, from its own width up to FLEX_MAX; more columns scroll off for it
    base = width - GUTTER - col_width(cols[0])
    scrolls = sum(col_width(c) + 1 for c in cols[1:]) > base
    flex_min = max(0, min(FLEX_MAX, int(base * FLEX_SHARE))) if scrolls else 0

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

    fixed = _fixed(cols, width, cw) if scrolls else cols[:1]
    rest = [c for c in cols if c not in fixed]
    sort_col = BY_KEY.get(sort_key)
    if sort_col not in rest:
        sort_col = None
    # the columns that scroll, one a step: the sort column is not one of them (scrolled off, it is pinned,
    # so a step that only moved it there would change nothing on the screen)
    scroll = [c for c in rest if c is not sort_col]
    offset = max(0, min(offset, max(0, len(scroll) - 1)))
    avail = width - GUTTER - sum(cw(c) for c in fixed) - (len(fixed) - 1)
    flex_fixed = next((c for c in fixed if c.flex), None) if len(fixed) > 1 else None

    def attempt(offset: int, extra: int = 0) -> tuple[list[Column], list[Column], int]:
        """(pinned, window, columns hidden on the right) when ``offset`` columns are scrolled off and the
        fixed flexible column takes ``extra`` cells more; with fixed identity columns both markers' cells
        are kept at every offset, so that the scrolled part has the same room whatever the scroll."""
        if offset == 0 and cost(rest) <= avail:
            return [], list(rest), 0
        first = rest.index(scroll[offset]) if offset < len(scroll) else len(rest)
        candidates = rest[first:]
        marks = 2 if flex_fixed is not None or offset else 1
        pinned: list[Column] = []
        if sort_col is not None and sort_col not in candidates:     # scrolled off to the left
            pinned = [sort_col]
        window = fit(avail - extra - marks - cost(pinned), candidates)
        if sort_col is not None and sort_col in candidates and sort_col not in window:     # off to the right
            pinned = [sort_col]
            candidates = [c for c in candidates if c is not sort_col]
            window = fit(avail - extra - marks - cost(pinned), candidates)
        return pinned, window, len(candidates) - len(window)

    extra = 0
    if flex_fixed is not None:      # what the unscrolled columns leave goes to COMMAND, at every offset
        p0, w0, h0 = attempt(0)
        extra = max(0, avail - (2 if h0 else 0) - cost(p0 + w0))
    pinned, window, hidden_right = attempt(offset, extra)
    while offset > 0:                       # never scrolled further than the last column needs
        p2, w2, h2 = attempt(offset - 1, extra)
        if h2:
            break
        offset, pinned, window, hidden_right = offset - 1, p2, w2, h2
    shown = fixed + pinned + window
    hidden_left = offset
    gap = flex_fixed is not None and bool(hidden_left or hidden_right)
    used = sum(cw(c) for c in shown) + len(shown) - 1 + GUTTER
    used += (1 if hidden_left or gap else 0) + (1 if hidden_right else 0)
    flex = flex_fixed or next((c for c in shown if c.flex), None)
    spare = extra if flex_fixed is not None else max(0, width - used)
    out = tuple((c, cw(c) + (spare if c is flex else 0)) for c in shown)
    return Layout(out, hidden_left, hidden_right, len(fixed) + len(pinned), offset, gap)
