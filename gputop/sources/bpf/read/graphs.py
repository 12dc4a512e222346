"""Kernels inside CUDA graphs, by function: the BPF side's graph tables multiplied out.

``bpf/graph.bpf.h`` keeps, per graph content (gid), its kernel count, how often it was launched and
flags (``gids``; ``abi.G_UNKNOWN``, ``abi.G_LOST``), its kernel nodes by function (``gnodes``) and the
other contents it holds with their multiplicity (``gparts``: child graphs, graphs launched into a
capture, the content a modified graph started from). A content with launches is frozen (an exec holds it),
so what it holds never changes: its kernels by function are computed once and cached. Per process,
the kernels run through graph launches by function are the sum over its contents of launches x
kernels by function.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gputop.sources.bpf.common.abi import G_LOST, G_UNKNOWN, SHARE_OF
from gputop.sources.bpf.lifecycle.procid import Doomed, key_ident
from gputop.sources.bpf.lifecycle.shares import Shares

__all__ = ["G_LOST", "G_UNKNOWN", "TABLES", "Content", "GraphKernels", "by_function", "kernels_of"]

TABLES = ("gids", "graphs", "execs", "gnodes", "gparts")
SWEEP_S = 10.0      # gnodes/gparts entries of destroyed graphs are deleted at most this often


@dataclass(frozen=True)
class Content:
    kernels: int
    launches: int
    flags: int


def kernels_of(gid: int, nodes: Mapping[int, Mapping[int, int]], parts: Mapping[int, Mapping[int, int]],
               memo: dict[int, dict[int, int]]) -> dict[int, int] | None:
    """The kernels of content ``gid`` by function: its own nodes plus, for each part, its kernels
    times its multiplicity (a part without entries is empty: by_function checks the sum against the
    kernel count). None when parts form a cycle (the BPF side never writes one). Iterative: a graph
    modified after every instantiation makes a chain of parts as long as its history."""
    order: list[int] = []
    state: dict[int, int] = {}          # 1 on the path, 2 done
    stack: list[tuple[int, bool]] = [(gid, False)]
    while stack:
        g, done = stack.pop()
        if g in memo:
            continue
        if done:
            state[g] = 2
            order.append(g)
            continue
        if state.get(g) == 1:
            return None                  # a cycle
        state[g] = 1
        stack.append((g, True))
        for part in parts.get(g, {}):
            if part not in memo and state.get(part) != 2:
                stack.append((part, False))
    for g in order:
        out = dict(nodes.get(g, {}))
        for part, n in parts.get(g, {}).items():
            sub = memo.get(part)
            if sub is None:
                return None
            for f, k in sub.items():
                out[f] = out.get(f, 0) + n * k
        memo[g] = out
    return memo.get(gid)


def by_function(contents: Mapping[int, Content], nodes: Mapping[int, Mapping[int, int]],
                parts: Mapping[int, Mapping[int, int]],
                cache: dict[int, dict[int, int]] | None = None) -> dict[int, int] | None:
    """Kernels run through graph launches, by function, of one process: Σ launches x kernels by
    function over its launched contents. None when that is not known exactly (a content lost
    entries, or what its tables hold does not add up to its kernel count)."""
    memo: dict[int, dict[int, int]] = {}
    total: dict[int, int] = {}
    for gid, c in contents.items():
        if not c.launches:
            continue
        if c.flags & (G_LOST | G_UNKNOWN):
            return None
        funcs = cache.get(gid) if cache is not None else None
        if funcs is None:
            funcs = kernels_of(gid, nodes, parts, memo)
            if funcs is None or sum(funcs.values()) != c.kernels:
                return None
            if cache is not None:
                cache[gid] = funcs
        for f, k in funcs.items():
            total[f] = total.get(f, 0) + c.launches * k
    return total


class GraphKernels:
    """Reads the graph tables of a loaded BPF object (``table(name)``) once per refresh.

    ``read()`` gives, per process with graph contents, its graph kernel launches by function (None:
    not known exactly). Contents with launches never change, so their functions are cached and the
    node and part tables are read only when a newly launched content appears (and, to sweep the
    entries of destroyed graphs, at most every SWEEP_S)."""

    def __init__(self, table: Callable[[str], Any], shares: Shares,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._table = table
        self._shares = shares           # the entries the sweep deletes are given back to their tenant
        self._clock = clock
        self._cache: dict[int, dict[int, dict[int, int]]] = {}     # pid -> gid -> functions
        self._kept: dict[int, dict[int, int] | None] = {}          # exited processes' last result
        self._kept_names: dict[int, dict[int, tuple[str | None, str | None]]] = {}
        self._last_sweep = clock()

    def _contents(self) -> dict[int, dict[int, Content]]:
        out: dict[int, dict[int, Content]] = {}
        for k, v in self._table("gids").items():
            out.setdefault(int(k.tgid), {})[int(k.addr)] = Content(int(v.kernels), int(v.launches), int(v.flags))
        return out

    def _pairs(self, name: str, pids: set[int] | None) -> dict[int, dict[int, dict[int, int]]]:
        out: dict[int, dict[int, dict[int, int]]] = {}
        for k, v in self._table(name).items():
            pid = int(k.tgid)
            if pids is None or pid in pids:
                out.setdefault(pid, {}).setdefault(int(k.gid), {})[int(k.item)] = int(v.value)
        return out

    def _sweep(self) -> None:
        """Delete node and part entries whose content is gone (its graph destroyed before anything
        held it). The tables are read before the contents: a content is created before its entries."""
        names = ("gnodes", "gparts")
        tables = [self._table(name) for name in names]
        keys = [[k for k, _ in t.items()] for t in tables]
        live = {(int(k.tgid), int(k.addr)) for k, _ in self._table("gids").items()}
        swept: list[Counter[int]] = []
        for t, ks in zip(tables, keys):
            swept.append(Counter())
            for k in ks:
                if (int(k.tgid), int(k.gid)) not in live and t.pop(k, None) is not None:
                    swept[-1][key_ident(k)] += 1
        owners = self._shares.owners(Doomed(frozenset(me for c in swept for me in c)))
        for name, deleted in zip(names, swept):
            self._shares.give_back(owners, deleted, SHARE_OF[name])

    def read(self, pids: Iterable[int] | None = None) -> dict[int, dict[int, int] | None]:
        """Graph kernel launches by function of the processes with graph contents (all, or ``pids``)."""
        if self._clock() - self._last_sweep >= SWEEP_S:
            self._last_sweep = self._clock()
            self._sweep()
        wanted = set(pids) if pids is not None else None
        contents = {p: c for p, c in self._contents().items() if wanted is None or p in wanted}
        need = {pid for pid, cs in contents.items()
                if any(c.launches and gid not in self._cache.get(pid, {}) for gid, c in cs.items())}
        nodes = self._pairs("gnodes", need) if need else {}
        parts = self._pairs("gparts", need) if need else {}
        out: dict[int, dict[int, int] | None] = {}
        for pid, cs in contents.items():
            cache = self._cache.setdefault(pid, {})
            out[pid] = by_function(cs, nodes.get(pid, {}), parts.get(pid, {}), cache)
        return out

    def keep(self, pids: set[int], name: Callable[[int, int], tuple[str | None, str | None]]) -> None:
        """Before the tables of exited processes ``pids`` are deleted: keep their last result, with
        the kernels' names (``name(pid, function)``: their maps go too), for the record of theirs
        that is shown once more."""
        for pid, funcs in self.read(pids).items():
            self._kept[pid] = funcs
            self._kept_names[pid] = {f: name(pid, f) for f in funcs or {}}
        for pid in pids:
            self._cache.pop(pid, None)

    def kept(self, pid: int) -> tuple[bool, dict[int, int] | None]:
        """(whether a result was kept for exited ``pid``, that result)."""
        return pid in self._kept, self._kept.get(pid)

    def kept_name(self, pid: int, func: int) -> tuple[str | None, str | None] | None:
        """The name and object kept for a graph kernel of exited ``pid``, if any."""
        return self._kept_names.get(pid, {}).get(func)

    def retain(self, exited: set[int]) -> None:
        """Forget kept results of processes no longer shown as exited."""
        self._kept = {pid: v for pid, v in self._kept.items() if pid in exited}
        self._kept_names = {pid: v for pid, v in self._kept_names.items() if pid in exited}
