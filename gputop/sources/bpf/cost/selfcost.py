"""gputop's own cost to the processes it traces: probe hits x this host's trap cost + the BPF
programs' run time.

The hits are exact: every uprobe program counts its runs (the BPF ``hits`` per-CPU array, entry and
return apart), and ``observe`` turns the totals into rates over each refresh interval. The programs'
run time per hit is sampled: it comes from BPF run-time statistics (``BPF_ENABLE_STATS``), which the
kernel keeps only while someone holds them on, and which meanwhile make every BPF program on the
host -- other tools' too -- pay two clock reads more per run. gputop holds them on for
STATS_WINDOW_S in every STATS_PERIOD_S (2 % of the time), so what the traced processes pay
continuously is the between-windows cost; the latest window's run time per uprobe hit times the
interval's exact hits is the interval's program time. Refreshes further apart than STATS_PERIOD_S (the
exporter's 15 s) get one window each, STATS_LEAD_S before the refresh (``refresh_in``), not one every
STATS_PERIOD_S of which the refresh reads only the last. The trap cost per hit comes from ``trapcost``
(measured once per kernel and cached). Unknown parts make the total unknown (None), never 0.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gputop.sources.bpf.common import linux
from gputop.sources.bpf.cost.trapcost import Calibration, TrapCost

STATS_WINDOW_S = 0.1  # BPF run-time statistics are on for this long...
STATS_PERIOD_S = 5.0  # ...in every this long at most
#: a refresh further off than STATS_PERIOD_S gets one window, this long before it (``refresh_in``)
STATS_LEAD_S = 1.0
CALIBRATION_POLL_S = 0.2  # while the trap cost is measured: how often the collector looks whether it is done


@dataclass(frozen=True)
class ProgStats:
    """Totals over gputop's programs since they were loaded (they grow only while statistics are
    on): run time, and runs by kind -- uprobes at function entry, uprobes at return (uretprobes),
    and others (tracepoints: no uprobe trap)."""

    run_ns: int
    entry_runs: int
    return_runs: int
    other_runs: int = 0
    other_ns: int = 0       # the part of run_ns the other programs ran (paid by whatever process hit them)

    @property
    def runs(self) -> int:
        return self.entry_runs + self.return_runs + self.other_runs


def cost_ns_per_s(entry_hits_per_s: float | None, return_hits_per_s: float | None,
                  programs_ns_per_s: float | None, trap: TrapCost | None) -> float | None:
    """CPU ns per second the traced processes pay for gputop's probes: every entry hit pays the
    trap, every return hit the return probe's extra trap, plus the programs' run time."""
    if entry_hits_per_s is None or return_hits_per_s is None or programs_ns_per_s is None or trap is None:
        return None
    return entry_hits_per_s * trap.trap_ns + return_hits_per_s * trap.return_ns + programs_ns_per_s


class _Closer:
    """Calls each scheduled function once its delay has passed, on one daemon thread kept for the
    process's life (``gputop-stats-window``), not a thread per window: a thread made and ended every
    STATS_PERIOD_S changed the thread count gputop shows to ``top -H`` and to the soak's checks
    (docs/matrix.md, "The soak's extra thread"). A forked child that schedules gets a thread of its own."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._due: list[tuple[float, Callable[[], None]]] = []
        self._pid = 0

    def __call__(self, delay_s: float, fn: Callable[[], None]) -> None:
        with self._cv:
            self._due.append((time.monotonic() + delay_s, fn))
            self._due.sort(key=lambda d: d[0])
            if self._pid != os.getpid():        # not started, or started by the parent of a fork
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="gputop-stats-window", daemon=True).start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._cv.wait(None if not self._due else self._due[0][0] - time.monotonic())
                _at, fn = self._due.pop(0)
            try:
                fn()
            except Exception:       # the next windows are closed all the same
                continue


_default_schedule = _Closer()


class SelfCost:
    """Statistics windows of STATS_WINDOW_S every STATS_PERIOD_S, and the trap calibration.

    ``read`` returns the programs' ProgStats (None once the source is closed); ``tick`` is called
    from the collector thread and opens a window when one is due; the window is closed by
    ``schedule`` (a timer thread) after STATS_WINDOW_S, whatever the collector is doing.
    """

    def __init__(self, read: Callable[[], ProgStats | None], clock: Callable[[], float],
                 schedule: Callable[[float, Callable[[], None]], None] = _default_schedule,
                 calibration: Callable[[str], Calibration] = Calibration) -> None:
        self._read = read
        self._clock = clock
        self._schedule = schedule
        self._make_calibration = calibration
        self._mu = threading.Lock()
        self._fd: int | None = None
        self._t0 = 0.0
        self._base = ProgStats(0, 0, 0)
        self._next = 0.0
        self.calibration: Calibration | None = None
        #: the latest window (sampled): run ns per uprobe program run, the tracepoint programs' run ns
        #: per second (paid by any process that execs, maps, faults...), and when it closed
        self.ns_per_hit: float | None = None
        self.other_ns_per_s: float | None = None
        self.window_closed: float | None = None
        #: over the last refresh interval (exact, ``observe``): uprobe hits per second at entry, at return
        self.entry_hits_per_s: float | None = None
        self.return_hits_per_s: float | None = None
        self._hits: tuple[float, int, int] | None = None     # (clock, entry total, return total)
        self._refresh_at: float | None = None    # when the next refresh reads the run times (refresh_in)

    @property
    def trap(self) -> TrapCost | None:
        return self.calibration.cost if self.calibration is not None else None

    @property
    def hits_per_s(self) -> float | None:
        """gputop's uprobe hits per second over the last refresh interval (exact)."""
        if self.entry_hits_per_s is None or self.return_hits_per_s is None:
            return None
        return self.entry_hits_per_s + self.return_hits_per_s

    @property
    def ns_per_s(self) -> float | None:
        """The programs' run time per second over the last interval: its exact hits x the latest
        window's run time per hit, plus the tracepoints' run time of that window."""
        hits = self.hits_per_s
        if hits is None or self.other_ns_per_s is None:
            return None
        if hits == 0:
            return self.other_ns_per_s
        if self.ns_per_hit is None:
            return None
        return hits * self.ns_per_hit + self.other_ns_per_s

    @property
    def cost_ns_per_s(self) -> float | None:
        return cost_ns_per_s(self.entry_hits_per_s, self.return_hits_per_s, self.ns_per_s, self.trap)

    def stats_age_s(self) -> float | None:
        """Seconds since the window the run times come from closed; None before the first."""
        return None if self.window_closed is None else max(0.0, self._clock() - self.window_closed)

    def observe(self, entry_hits: int, return_hits: int) -> None:
        """The hit counters' totals now: rates over the time since the previous observation."""
        now = self._clock()
        with self._mu:
            if self._hits is not None and now > self._hits[0]:
                t0, e0, r0 = self._hits
                self.entry_hits_per_s = (entry_hits - e0) / (now - t0)
                self.return_hits_per_s = (return_hits - r0) / (now - t0)
            self._hits = (now, entry_hits, return_hits)

    def refresh_in(self, seconds: float) -> None:
        """The next refresh, which reads the latest window, comes in ``seconds``: when it is further off
        than STATS_PERIOD_S, the next window waits until STATS_LEAD_S before it."""
        with self._mu:
            self._refresh_at = self._clock() + seconds

    def _due(self) -> float:
        """When the next window opens (under _mu): STATS_PERIOD_S after the last one opened, or later,
        STATS_LEAD_S before the next refresh (the one whose figure it gives)."""
        due = self._t0 + STATS_PERIOD_S if self._fd is not None else self._next
        if self._refresh_at is not None:
            due = max(due, self._refresh_at - STATS_LEAD_S)
        return due

    def tick(self, attach: str | None = None, measure: bool = True) -> None:
        """Open a statistics window when one is due; with ``attach`` (how the probes attach), take
        the trap cost from the cache, or measure it once on a background thread when ``measure``
        (the caller's say: once a snapshot is out, so that it never delays the first)."""
        with self._mu:
            if attach is not None and self._fd is None:
                if self.calibration is None:
                    self.calibration = self._make_calibration(attach)
                self.calibration.start(measure)
            if self.calibration is not None and self.calibration.running:
                return          # statistics would add their clock reads to the calibration's probes
            if self._fd is not None or self._clock() < self._due():
                return
            fd = linux.enable_stats()
            if fd is None:      # refused: the programs' cost stays unknown
                self._next = float("inf")
                return
            base = self._read()
            if base is None:
                os.close(fd)
                return
            self._fd, self._t0, self._base = fd, self._clock(), base
        self._schedule(STATS_WINDOW_S, self.close_window)

    def idle_s(self) -> float:
        """How long the collector may wait before ``tick`` has something to do: until the next window is
        due (inf where statistics were refused), CALIBRATION_POLL_S while the trap cost is being measured."""
        with self._mu:
            if self.calibration is not None and self.calibration.running:
                return CALIBRATION_POLL_S
            return max(0.0, self._due() - self._clock())

    def close_window(self) -> None:
        try:
            end = self._read()      # outside _mu: reading takes the source's lock
        except Exception:           # the window closes all the same: statistics never stay on
            end = None
        with self._mu:
            if self._fd is None:
                return
            now = self._clock()
            os.close(self._fd)
            self._fd = None
            self._next = self._t0 + STATS_PERIOD_S
            dt = now - self._t0
            if end is None or dt <= 0:
                return
            b = self._base
            runs = end.entry_runs + end.return_runs - b.entry_runs - b.return_runs
            if runs > 0:        # a window without hits says nothing of their run time: keep the last
                self.ns_per_hit = (end.run_ns - end.other_ns - b.run_ns + b.other_ns) / runs
            self.other_ns_per_s = (end.other_ns - b.other_ns) / dt
            self.window_closed = now

    def stop(self) -> None:
        with self._mu:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
