"""Bounded per-process and per-GPU time series kept by the dashboard for sparklines and charts.

Filled from the feed's thread (every snapshot is kept, even when the UI skips a redraw), read
from the UI thread; a lock guards both. Values are copied from snapshots, never computed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gputop.counters import SERIES
from gputop.model import ProcKey, ProcSample, Snapshot
from gputop.view import fields

#: GPU utilisation is kept for sparklines up to this many GPUs in a snapshot
MAX_GPU_SERIES = 64
#: the series kept per process, in chart order: every shown rate of the catalogue (``counters.SHOWS``), then
#: the CPU use (kept for the steady sort only), then the interval's sync latency p50 and p99 (all APIs, in
#: seconds: the details' latency chart)
PROC_SERIES: tuple[str, ...] = (*SERIES, "cpu_pct", "sync_p50_s", "sync_p99_s")
_AT: dict[str, int] = {name: i for i, name in enumerate(PROC_SERIES)}


@dataclass(frozen=True)
class Point:
    """One refresh of a process: the value of each series of ``PROC_SERIES`` (None: unknown)."""

    time: float
    values: tuple[float | None, ...]
    #: seconds the point's rates cover (its snapshot's interval); 0: unknown
    interval_s: float = 0.0

    def get(self, name: str) -> float | None:
        """The value of series ``name``."""
        return self.values[_AT[name]]


def point_of(time_s: float, p: ProcSample, interval_s: float = 0.0) -> Point:
    return Point(time_s, (*(fields.rate(p, key) for key in SERIES), p.cpu_pct, fields.sync_latency_s(p, "p50_s"),
                          fields.sync_latency_s(p, "p99_s")), interval_s)


#: the steady sort (docs/dashboard.md, "Steady sorting"): rows are ordered by a rate averaged over
#: this many seconds of refreshes, so that a bursty process does not trade places every refresh
SMOOTH_WINDOW_S = 5.0
#: the columns sorted by their smoothed rate -> the Point field it is kept in
SMOOTHED: dict[str, str] = {**{key: key for key in SERIES}, "cpu": "cpu_pct"}


def window_mean(points: Sequence[Point], name: str, until: float, window_s: float = SMOOTH_WINDOW_S) -> float | None:
    """The time-weighted mean of series ``name`` over the points of the last ``window_s`` seconds up to
    ``until`` (time > until - window_s): the sum of value x interval over the sum of the intervals of
    the points whose value is known, i.e. a rate's events in those intervals over the time they span.
    None when the point at ``until`` is missing or its value is unknown (the row shows N/A: it sorts
    with the unknown)."""
    if not points or abs(points[-1].time - until) > 1e-9:
        at = next((i for i in range(len(points) - 1, -1, -1) if abs(points[i].time - until) <= 1e-9), None)
        if at is None:
            return None
        points = points[:at + 1]
    last = points[-1].get(name)
    if last is None:
        return None
    weighted = 0.0
    covered = 0.0
    for pt in reversed(points):
        if pt.time <= until - window_s:
            break
        v = pt.get(name)
        if v is None or pt.interval_s <= 0:
            continue
        weighted += v * pt.interval_s
        covered += pt.interval_s
    return weighted / covered if covered > 0 else float(last)


@dataclass(frozen=True)
class Series:
    """One named series: x in seconds (relative, see ``History.series``), y values (None = unknown)."""

    name: str
    xs: tuple[float, ...]
    ys: tuple[float | None, ...]


class History:
    def __init__(self, maxlen: int = 600, *, replay: bool = False) -> None:
        self.maxlen = maxlen
        #: snapshots may come again (a replay stepped back, then played on): keep each time once
        self.replay = replay
        self._first_time: float | None = None
        self._lock = threading.Lock()
        self._procs: dict[ProcKey, tuple[str | None, deque[Point]]] = {}
        self._gpus: dict[tuple[str | None, int], deque[tuple[float, float | None]]] = {}
        self._last_time: float | None = None

    def add(self, snap: Snapshot) -> None:
        with self._lock:
            if self._last_time is not None and snap.time <= self._last_time:
                if self.replay and self._first_time is not None and snap.time >= self._first_time:
                    return  # seen already: a replay stepping back, or playing on from there
                if snap.time < self._last_time:
                    self._procs.clear()  # a replay that loops (or a clock stepping back): start again
                    self._gpus.clear()
                    self._first_time = None
            if self._first_time is None:
                self._first_time = snap.time
            self._last_time = snap.time
            for p in snap.processes:
                if p.instance is not None:
                    continue    # the fleet view: series come from Prometheus (query_range), for the shown ones
                entry = self._procs.get(p.pid)
                if entry is None or entry[0] != p.comm:  # new process, or the PID was reused
                    entry = (p.comm, deque(maxlen=self.maxlen))
                    self._procs[p.pid] = entry
                entry[1].append(point_of(snap.time, p, snap.interval_s))
            if len(snap.gpus) <= MAX_GPU_SERIES:     # a fleet's thousands of GPUs get no sparkline
                for g in snap.gpus:
                    self._gpus.setdefault((g.node, g.index), deque(maxlen=self.maxlen)).append((snap.time, g.util_pct))
            horizon = snap.time - self.maxlen * max(snap.interval_s, 0.001)
            for pid in [pid for pid, (_, pts) in self._procs.items() if pts and pts[-1].time < horizon]:
                del self._procs[pid]

    def points(self, key: ProcKey, until: float | None = None) -> list[Point]:
        """The points of ``key`` (a PID on one host), up to the time ``until`` (the snapshot shown)
        when given: a replay stepped back shows charts that end where it stands."""
        with self._lock:
            entry = self._procs.get(key)
            pts = list(entry[1]) if entry else []
        if until is not None:
            pts = [pt for pt in pts if pt.time <= until]
        return pts

    def smoothed(self, key: ProcKey, column: str, until: float) -> float | None:
        """Column ``column``'s rate of process ``key`` averaged over ``SMOOTH_WINDOW_S`` up to the snapshot
        at ``until`` (``window_mean``); None when not kept (a column not in ``SMOOTHED``, the fleet view)."""
        name = SMOOTHED.get(column)
        if name is None:
            return None
        return window_mean(self._recent(key, until), name, until)

    def _recent(self, key: ProcKey, until: float) -> list[Point]:
        """The points of ``key`` in the smoothing window up to ``until`` (newest last)."""
        with self._lock:
            entry = self._procs.get(key)
            if entry is None:
                return []
            out: list[Point] = []
            for pt in reversed(entry[1]):
                if pt.time <= until - SMOOTH_WINDOW_S:
                    break
                if pt.time <= until + 1e-9:
                    out.append(pt)
        out.reverse()
        return out

    def sort_values(self, until: float | None) -> Callable[[str, Sequence[ProcSample]], list[Any] | None]:
        """``columns.ProcOrder``'s sort values: a smoothed column's values (``smoothed``) of the snapshot at
        ``until``; a process without points there (the fleet view, whose rates are over its --window
        already; one not kept yet) sorts by the value it shows."""
        def values(column: str, procs: Sequence[ProcSample]) -> list[Any] | None:
            name = SMOOTHED.get(column)
            if name is None or until is None:
                return None
            out: list[Any] = []
            for p in procs:
                pts = self._recent(p.key, until) if p.instance is None else []
                if pts and abs(pts[-1].time - until) <= 1e-9 and pts[-1] == point_of(until, p, pts[-1].interval_s):
                    out.append(window_mean(pts, name, until))
                else:
                    out.append(point_of(until, p).get(name))
            return out
        return values

    def gpu_util(self, index: int, until: float | None = None, node: str | None = None) -> list[float | None]:
        with self._lock:
            return [u for t, u in self._gpus.get((node, index), ()) if until is None or t <= until]

    @property
    def last_time(self) -> float | None:
        with self._lock:
            return self._last_time


def series(points: list[Point], name: str, origin: float | None = None) -> Series:
    """A series of ``points``; x is seconds relative to ``origin`` (default: the first point)."""
    if not points:
        return Series(name, (), ())
    t0 = points[0].time if origin is None else origin
    return Series(name, tuple(pt.time - t0 for pt in points), tuple(pt.get(name) for pt in points))


def points_of_series(by_name: dict[str, list[tuple[float, float]]] | None) -> list[Point]:
    """Points from a feed's own time series (the fleet view's query_range results, by name of
    ``PROC_SERIES``): one point per time any series has, None where a series has no value."""
    if not by_name:
        return []
    times = sorted({t for values in by_name.values() for t, _ in values})
    lookup = {name: dict(values) for name, values in by_name.items()}
    out = []
    for t in times:
        out.append(Point(t, tuple(lookup.get(name, {}).get(t) for name in PROC_SERIES)))
    return out
