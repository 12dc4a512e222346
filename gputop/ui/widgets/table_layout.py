"""Which columns of the process table show at a width, and how wide each is (``layout``): the first
column and the sort column fixed at the left, the flexible one (COMMAND) given a share of what is
left, the rest scrolled sideways. No Textual (Rich measures the cells)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich.cells import cell_len

from gputop.view.columns import BY_KEY, OPTIONAL, Column

GUTTER = 2  # tag mark and a space
#: where not every column fits: the flexible column (COMMAND) takes at least this share of the width
#: left after the first column, at most FLEX_MAX cells (its own width where that is more)
FLEX_SHARE = 0.3
FLEX_MAX = 30


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
