"""Host-wide totals of a snapshot's processes (htop's Tasks: line): ``Summary`` and ``summarize``.

``Snapshot.summary`` is ``summarize`` of the snapshot, computed once; the JSON writer adds it to every
snapshot (optional field ``summary`` of schema gputop/1, derived: a reader recomputes it). It reads
a snapshot's attributes only, so it imports nothing of the schema at run time.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import methodcaller
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputop.model.schema import ProcSample, Snapshot


@dataclass(frozen=True)
class Summary:
    """Host-wide totals of the processes listed in a snapshot (htop's Tasks: line; ``summarize``,
    docs/dashboard.md "Summary line"): ``Snapshot.summary``, written in every JSON snapshot (optional
    field ``summary`` of schema gputop/1, derived: a reader recomputes it). A rate is None when any
    listed process's rate is unknown; ``warming_up`` (the fleet view's) counts the summed processes whose
    rates read low."""

    processes: int
    running: int
    stopped: int
    exited: int
    launches_per_s: float | None = None
    graph_kernel_launches_per_s: float | None = None
    #: memcpy bytes per second by direction (None: unknown)
    h2d_bytes_per_s: float | None = None
    d2h_bytes_per_s: float | None = None
    d2d_bytes_per_s: float | None = None
    gpus: int = 0
    #: GPUs whose utilisation is above 0 %; None: no GPU, or one whose utilisation is unknown
    gpus_busy: int | None = None
    #: fleet view: of the processes summed into the rates, those warming up (their rates, so the sums, read
    #: low); None on a single host
    warming_up: int | None = None


def _sum(values: list[Any]) -> float | None:
    """The sum of ``values``; None when one is unknown (None or NaN). C-level loops: the fleet view sums
    64,000 processes on the dashboard's thread."""
    if None in values:
        return None
    total = math.fsum(values)
    return None if math.isnan(total) else total


def current(p: ProcSample) -> bool:
    """Whether ``p``'s rates are current, to be summed: not a down node's last row (``stale``), nor in the
    fleet view a process that exited (its rate over the window reaches back before its exit). A local
    process that exited shows its last interval, which is current."""
    return not p.stale and not (p.instance is not None and p.state == "exited")


def summarize(snap: Snapshot, procs: Sequence[ProcSample] | None = None) -> Summary:
    """Totals of ``procs`` (default: every process of ``snap``), htop's Tasks: line: how many are listed,
    running, stopped and exited; the sums of their current launches/s, graph kernels/s and H2D/D2H/D2D
    bytes/s over the snapshot's interval (``current``: not a down node's stale rows, nor the fleet's exited
    ones; None when any of them is unknown, when every row is a down node's, and with no process when
    neither the BPF source nor Prometheus counts); the GPUs, and how many are busy (utilisation above 0 %: a
    kernel ran in NVML's last sample period; None without GPUs or when a GPU's utilisation is unknown); in the
    fleet view (Prometheus a source) how many of the summed processes are warming up (their series younger
    than the window: the sums read low), None on a single host."""
    ps = snap.processes if procs is None else procs
    states = Counter(map(_STATE, ps))
    counted = any(st.status in ("ok", "degraded") for name, st in snap.sources.items()
                  if name in ("bpf", "prometheus"))
    sums: dict[str, float | None] = dict.fromkeys(("launches", "graph", "h2d", "d2h", "d2d"))
    summed = [p for p in ps if current(p)]
    rates = list(map(_RATES, summed))
    # every row a down node's: what the fleet does now is unknown, not 0
    unknown = bool(ps) and all(p.stale for p in ps)
    if (ps or counted) and not unknown and not any(map(operator.is_, rates, repeat(None))):     # no Rates.__eq__
        sums["launches"] = _sum(list(map(_LAUNCHES, rates)))
        sums["graph"] = _sum(list(map(_GRAPH_KERNELS, rates)))
        by_dir = list(map(_MEMCPY, rates))
        if not any(map(operator.is_, by_dir, repeat(None))):
            for d in ("h2d", "d2h", "d2d"):
                sums[d] = _sum(list(map(methodcaller("get", d), by_dir)))
    utils = [g.util_pct for g in snap.gpus]
    busy = None if not utils or any(u is None or math.isnan(u) for u in utils) else sum(
        1 for u in utils if u is not None and u > 0)
    return Summary(
        processes=len(ps),
        running=states["running"],
        stopped=states["stopped"],
        exited=states["exited"],
        launches_per_s=sums["launches"],
        graph_kernel_launches_per_s=sums["graph"],
        h2d_bytes_per_s=sums["h2d"],
        d2h_bytes_per_s=sums["d2h"],
        d2d_bytes_per_s=sums["d2d"],
        gpus=len(utils),
        gpus_busy=busy,
        warming_up=list(map(_WARMING_UP, summed)).count(True) if "prometheus" in snap.sources else None,
    )


_STATE = operator.attrgetter("state")
_RATES = operator.attrgetter("rates")
_WARMING_UP = operator.attrgetter("warming_up")
_LAUNCHES = operator.attrgetter("launches_per_s")
_GRAPH_KERNELS = operator.attrgetter("graph_kernel_launches_per_s")
_MEMCPY = operator.attrgetter("memcpy_bytes_per_s")
