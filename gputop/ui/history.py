"""Bounded per-process and per-GPU time series kept by the dashboard for sparklines and charts.

Filled from the feed's thread (every snapshot is kept, even when the UI skips a redraw), read
from the UI thread; a lock guards both. Values are copied from snapshots, never computed.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from gputop.model import ProcKey, ProcSample, Snapshot
from gputop.ui import fields

#: GPU utilisation is kept for sparklines up to this many GPUs in a snapshot
MAX_GPU_SERIES = 64
#: the series kept per process, in chart order
PROC_SERIES: tuple[str, ...] = ("launches", "h2d", "d2h", "d2d", "uvm_faults", "sync_pct")


@dataclass(frozen=True)
class Point:
    time: float
    launches: float | None
    h2d: float | None
    d2h: float | None
    d2d: float | None
    uvm_faults: float | None
    sync_pct: float | None


def point_of(time_s: float, p: ProcSample) -> Point:
    return Point(
        time_s,
        fields.launches_per_s(p),
        fields.h2d_per_s(p),
        fields.d2h_per_s(p),
        fields.d2d_per_s(p),
        fields.uvm_faults_per_s(p),
        fields.sync_wait_pct(p),
    )


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
                entry[1].append(point_of(snap.time, p))
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
    return Series(name, tuple(pt.time - t0 for pt in points), tuple(getattr(pt, name) for pt in points))


def points_of_series(by_name: dict[str, list[tuple[float, float]]] | None) -> list[Point]:
    """Points from a feed's own time series (the fleet view's query_range results, by name of
    ``PROC_SERIES``): one point per time any series has, None where a series has no value."""
    if not by_name:
        return []
    times = sorted({t for values in by_name.values() for t, _ in values})
    lookup = {name: dict(values) for name, values in by_name.items()}
    return [Point(t, *(lookup.get(name, {}).get(t) for name in PROC_SERIES)) for t in times]
