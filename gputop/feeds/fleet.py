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
from gputop.feeds.fleet_worker import WorkerReader
from gputop.feeds.prometheus import FleetConfig, FleetError, FleetReader, Series, Watched, parse_duration
from gputop.model import ProcKey, Snapshot, SourceStatus


class Reader(Protocol):
    """What the feed reads a refresh through: ``FleetReader`` or ``gputop.feeds.fleet_worker.WorkerReader``."""

    @property
    def queries(self) -> int: ...

    def read(self, at: float, watched: Watched, interval_s: float) -> tuple[Snapshot, Series]: ...

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

    def series(self, key: ProcKey) -> SeriesByName | None:
        """The time series of a watched process (``SERIES_QUERIES``' names, memcpy by direction)."""
        with self._lock:
            return self._series.get(key)

    # ------------------------------------------------------------ refreshes

    def _run(self, on_snapshot: SnapshotCallback) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
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
        return replace(last, sources={**last.sources, "prometheus": status})

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
            snap, series = self.reader.read(at, self._watched, self.interval_s)
        finally:
            self.refreshing = False
        with self._lock:
            self._series = series
        self._last = snap
        self.error = None
        self.last_refresh_s = time.monotonic() - t0
        return snap
