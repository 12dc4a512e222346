"""The fleet view's feed (``gputop --prometheus URL``): a snapshot every interval, read from Prometheus
by ``gputop.feeds.prometheus.FleetReader`` in this process, or by ``gputop.feeds.fleet_worker`` in a
child process. Errors never end the feed: the last good snapshot is sent again, marked stale."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Protocol

from gputop.errors import EX_USAGE, GputopError
from gputop.feeds.base import Feed, FeedKind, SeriesByName, SnapshotCallback
from gputop.feeds.fleet_topk import Scope, View
from gputop.feeds.fleet_worker import WorkerReader
from gputop.feeds.prometheus import FleetConfig, FleetError, FleetReader, Series, Watched, parse_duration
from gputop.model import ProcKey, Snapshot, SourceStatus, Summary
from gputop.view.columns import BY_KEY


class Reader(Protocol):
    """What the feed reads a refresh through: ``FleetReader`` or ``gputop.feeds.fleet_worker.WorkerReader``."""

    @property
    def queries(self) -> int: ...

    @property
    def scope(self) -> Scope | None: ...

    def read(self, at: float, watched: Watched, interval_s: float,
             view: View | None = None) -> tuple[Snapshot, Series]: ...

    def close(self) -> None: ...


class FleetFeed(Feed):
    """A ``Feed`` over Prometheus: a snapshot every interval, built by the feed's own thread (and,
    with ``FleetConfig.child``, read and parsed by a child process)."""

    kind = FeedKind.FLEET

    def __init__(self, config: FleetConfig) -> None:
        try:
            self.window_s = parse_duration(config.window)
        except ValueError as e:
            raise GputopError(str(e), "give --window as Prometheus writes durations: 30s, 2m, 1h", EX_USAGE) from None
        if self.window_s <= 0:
            raise GputopError(f"--window must be longer than 0: {config.window!r}", "try --window 2m", EX_USAGE)
        self.config = config
        self.interval_s = config.interval_s
        self.timeout_s = config.timeout_s or max(10.0, 2 * config.interval_s)
        self.reader: Reader
        if config.child:
            self.reader = WorkerReader(config)
        else:
            self.reader = FleetReader(config)
        #: what the header shows while Prometheus does not answer (None when it does)
        self.error: str | None = None
        #: seconds the last refresh took (the benchmark reads it)
        self.last_refresh_s: float | None = None
        #: True while a refresh is being read (the benchmark reads it)
        self.refreshing = False
        self._last: Snapshot | None = None
        self._watched: Watched = ()
        #: the table's sort and filter (``set_view``): with ``FleetConfig.top``, a refresh reads its top rows only
        self._view: View | None = None
        #: what the last refresh's table holds (its top rows of how many); None: every process
        self.scope: Scope | None = None
        self._series: Series = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._paused = False
        self._thread: threading.Thread | None = None

    @property
    def queries(self) -> int:
        """Queries sent so far (tests and the benchmark count them)."""
        return self.reader.queries

    # ------------------------------------------------------------ Feed

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self._thread = threading.Thread(target=self._run, args=(on_snapshot,), name="gputop-collector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.reader.close()         # a child reading a refresh ends: the thread's read returns at once
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.timeout_s + 1)

    def set_interval(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._wake.set()

    def set_paused(self, paused: bool) -> None:
        self._paused = paused
        self._wake.set()

    # ------------------------------------------------------------ details and compare

    def watch(self, keys: Sequence[ProcKey]) -> None:
        """Read histograms, kernels and time series of these processes too (details, compare)."""
        remote = tuple(dict.fromkeys(k for k in keys if isinstance(k, tuple)))
        if remote != self._watched:
            self._watched = remote
            self._wake.set()        # the screen waits for them: refresh now

    def set_view(self, sort: str, descending: bool, query: str) -> None:
        """The table's sort column, direction and filter: with ``FleetConfig.top`` a refresh reads the top
        rows by them, so a change refreshes now (not at the next interval)."""
        view = View(sort, descending, query.strip())
        if view != self._view:
            self._view = view
            if self.config.top > 0:
                self._wake.set()

    def _scope_of(self, snap: Snapshot) -> Scope | None:
        scope = self.scope
        return scope if scope is not None and self._last is not None and snap.time == self._last.time else None

    def table_note(self, snap: Snapshot) -> str | None:
        """``top 500 of 64,000 by LAUNCH/s`` (``matching 'vllm'`` with a filter) where the table of ``snap``
        holds the top rows of more processes; while a refresh by another sort or filter is on its way, it
        says so."""
        scope = self._scope_of(snap)
        if scope is None or not scope.partial:
            return None
        v = scope.view
        matching = f" matching {v.query!r}" if v.query else ""
        note = (f"table: {'top' if v.descending else 'bottom'} {scope.top:,} of {scope.processes:,}{matching} "
                f"by {BY_KEY[v.sort].header}")
        if self._view is not None and self._view != v:
            note += " (reading the new order…)"
        return note

    def summary_of(self, snap: Snapshot, query: str) -> Summary | None:
        """The fleet's totals of the processes ``query`` finds, summed by Prometheus (a top-K refresh
        read with that filter); None otherwise."""
        scope = self._scope_of(snap)
        return scope.summary if scope is not None and scope.view.query == query.strip() else None

    def series(self, key: ProcKey) -> SeriesByName | None:
        """The time series of a watched process (``SERIES_QUERIES``' names, memcpy by direction)."""
        with self._lock:
            return self._series.get(key)

    # ------------------------------------------------------------ refreshes

    def _run(self, on_snapshot: SnapshotCallback) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self._wake.clear()          # what asks for a refresh from now on asks for the next one
            if not self._paused:
                snap = self.refresh()
                if self._stop.is_set():
                    break
                on_snapshot(snap)
            # one refresh every interval (a refresh slower than that is followed by the next at once)
            self._wake.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
            self._wake.clear()

    def refresh(self) -> Snapshot:
        """One refresh; never raises for Prometheus's failures (see ``collect``)."""
        try:
            return self.collect()
        except FleetError as e:
            return self._stale(e)

    def _stale(self, e: FleetError) -> Snapshot:
        last = self._last
        reason = e.message
        if last is not None and last.processes:
            age = time.strftime("%H:%M:%S", time.localtime(last.time))
            self.error = f"STALE (data of {age}): {reason}"
        else:
            self.error = reason
        status = SourceStatus("unavailable", reason=reason)
        if last is None:
            return Snapshot(time=time.time(), interval_s=self.window_s, host=self.config.url,
                            sources={"prometheus": status})
        stale = replace(last, sources={**last.sources, "prometheus": status})
        if self.scope is not None:          # the last totals of the fleet, not those of the rows kept
            stale.__dict__["summary"] = self.scope.summary
        return stale

    def refreshes(self, stop: threading.Event) -> Generator[Snapshot, None, None]:
        """Batch mode: ``collect`` every interval in the caller's thread (``FleetError`` ends it:
        Prometheus failing ends batch mode); the feed is stopped at the end."""
        try:
            next_at = time.monotonic()
            first = True
            while not stop.is_set():
                if not first:
                    next_at += self.interval_s
                    time.sleep(max(0.0, next_at - time.monotonic()))
                first = False
                yield self.collect()
        finally:
            self.stop()

    def collect(self) -> Snapshot:
        """One refresh: every query at one instant; raises ``FleetError`` when Prometheus fails."""
        t0 = time.monotonic()
        at = self.config.at if self.config.at is not None else time.time()
        self.refreshing = True
        try:
            view = self._view if self.config.top > 0 else None
            snap, series = self.reader.read(at, self._watched, self.interval_s, view)
        finally:
            self.refreshing = False
        self.scope = self.reader.scope
        with self._lock:
            self._series = series
        self._last = snap
        self.error = None
        self.last_refresh_s = time.monotonic() - t0
        return snap
