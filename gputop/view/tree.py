"""The process tree (F5, as htop's): rows under their parent by ``ppid``, siblings in the sort's order.
Pure, no Textual (docs/dashboard.md, "Tree view")."""

from __future__ import annotations

from collections.abc import Sequence

from gputop.model import ProcKey, ProcSample

#: what goes before a command at each depth: the last child's branch, another child's, and the lines
#: continuing past a parent that has more children below (htop's tree characters)
LAST, BRANCH, PIPE, SPACE = "└─ ", "├─ ", "│  ", "   "


def parent_key(p: ProcSample) -> ProcKey | None:
    """The key (``ProcSample.key``) the parent would have in the same view: PIDs are per node, so in
    the fleet view the parent is on the same scrape target."""
    if p.ppid is None:
        return None
    return p.ppid if p.instance is None else (p.instance, p.ppid)


def tree_order(rows: Sequence[ProcSample]) -> tuple[list[ProcSample], dict[ProcKey, str]]:
    """``rows`` (sorted) in tree order, and each shown child's prefix (its branch and the lines of its
    ancestors). A process whose parent is not among ``rows`` (not traced, filtered out, or unknown) is a
    root; roots and siblings keep the order of ``rows``. A loop of parents (a reused PID) is broken
    where it is met: its first process in ``rows`` becomes a root."""
    keys = {p.key for p in rows}
    children: dict[ProcKey, list[ProcSample]] = {}
    roots: list[ProcSample] = []
    for p in rows:
        parent = parent_key(p)
        if parent is None or parent == p.key or parent not in keys:
            roots.append(p)
        else:
            children.setdefault(parent, []).append(p)
    out: list[ProcSample] = []
    prefixes: dict[ProcKey, str] = {}
    seen: set[ProcKey] = set()

    def walk(p: ProcSample, lead: str, branch: str) -> None:
        stack: list[tuple[ProcSample, str, str]] = [(p, lead, branch)]
        while stack:
            node, lead, branch = stack.pop()
            if node.key in seen:
                continue
            seen.add(node.key)
            out.append(node)
            if branch:
                prefixes[node.key] = lead + branch
            kids = [k for k in children.get(node.key, ()) if k.key not in seen]
            below = lead + (SPACE if branch == LAST else PIPE) if branch else ""
            for i in range(len(kids) - 1, -1, -1):       # pushed last first: popped in order
                stack.append((kids[i], below, LAST if i == len(kids) - 1 else BRANCH))

    for r in roots:
        walk(r, "", "")
    for p in rows:                       # in a loop of parents: no root reaches them
        if p.key not in seen:
            walk(p, "", "")
    return out, prefixes
