"""The collector wakes only when it has work (issue 38 item 7, the exporter's cost): between events it
sleeps until the BPF source's next periodic task (``BpfSource.idle_s``: the next full rescan or
statistics window, at most MAX_IDLE_S; POLL_S while work is pending), and ``Sampler.stop`` ends that
wait at once (``BpfSource.wake``)."""

from __future__ import annotations

import os
import threading
import time

from test_sampler import FakeBpf, FakeHost, FakeNvml

from gputop.feeds.live import Sampler, SamplerConfig
from gputop.sources.bpf import BpfSource
from gputop.sources.bpf.common import linux as bpfsys
from gputop.sources.bpf.cost import selfcost
from gputop.sources.bpf.cost.selfcost import ProgStats, SelfCost
from gputop.sources.bpf.lifecycle import events


def test_the_source_sleeps_until_its_next_rescan_or_window() -> None:
    t = [100.0]
    src = BpfSource(clock=lambda: t[0])
    ev = src.events
    ev.last_full_scan = 100.0
    src.cost._next = float("inf")               # statistics refused: never due
    assert events.MAX_IDLE_S == events.EARLY_RESCAN_S == 1.0
    assert src.idle_s() == 1.0                  # the count of events lost is read every second
    t[0] = 109.25
    assert src.idle_s() == 0.75                 # the full rescan is due at 110
    t[0] = 111.0
    assert src.idle_s() == 0.0                  # overdue: no wait
    t[0] = 100.0
    src.cost._next = 100.5
    assert src.idle_s() == 0.5                  # the next statistics window
    src.cost._next = float("inf")
    # work pending: a rescan beyond RESCANS_AT_ONCE, a file the BPF side named
    src.procs.note_rescan(4242)
    assert src.idle_s() == events.POLL_S == 0.2
    src.procs.take_rescan()
    ev.unknown_files[(1, 2)] = (4242, None, 0)
    assert src.idle_s() == events.POLL_S
    ev.unknown_files.clear()
    assert src.idle_s() == 1.0


def test_statistics_windows_say_when_they_are_due(monkeypatch) -> None:
    monkeypatch.setattr(bpfsys, "enable_stats", lambda: os.open("/dev/null", os.O_RDONLY))
    t = [0.0]
    timers: list[object] = []
    cost = SelfCost(lambda: ProgStats(0, 0, 0), lambda: t[0], schedule=lambda d, fn: timers.append(fn))
    assert cost.idle_s() == 0.0                 # the first window is due at once
    cost.tick()
    t[0] = 0.05
    assert cost.idle_s() == selfcost.STATS_PERIOD_S - 0.05      # open: the next one opens 5 s after this one
    t[0] = 0.125
    timers[0]()                                 # type: ignore[operator]
    assert cost.idle_s() == 5.0 - 0.125
    t[0] = 7.0
    assert cost.idle_s() == 0.0
    # a refresh every 15 s (the exporter's) reads one window: it opens STATS_LEAD_S before the refresh
    t[0] = 10.0
    cost.refresh_in(15.0)
    assert cost.idle_s() == 25.0 - selfcost.STATS_LEAD_S - 10.0 == 14.0
    t[0] = 20.0
    cost.tick()
    assert len(timers) == 1                     # not yet: the refresh reads only the window just before it
    t[0] = 24.0
    cost.tick()
    assert len(timers) == 2
    t[0] = 24.1
    timers[1]()                                 # type: ignore[operator]
    assert cost.window_closed == 24.1
    t[0] = 25.0
    cost.refresh_in(1.0)                        # refreshes every second (the dashboard): every STATS_PERIOD_S
    assert cost.idle_s() == 24.0 + selfcost.STATS_PERIOD_S - 25.0
    monkeypatch.setattr(bpfsys, "enable_stats", lambda: None)
    t[0] = 29.0
    cost.tick()                                 # refused: the programs' cost stays unknown, no window ever due
    assert cost.idle_s() == float("inf")
    cost.stop()


class _Ring:
    """bcc's BPF object as the wait uses it: what is on the ring is taken by ring_buffer_consume."""

    def __init__(self) -> None:
        self.consumed = 0

    def ring_buffer_consume(self) -> None:
        self.consumed += 1


def test_the_wait_ends_on_events_on_wake_or_at_its_timeout() -> None:
    src = BpfSource()
    ring_r, ring_w = os.pipe()                  # stands for the ring buffer's map: readable when events are on it
    ring = _Ring()
    src.program.bpf = ring
    try:
        src._open_wait(ring_r)
        t0 = time.monotonic()
        src._wait_ring(0.3)                     # nothing: the whole timeout
        assert 0.28 <= time.monotonic() - t0 < 2.0 and ring.consumed == 1
        os.write(ring_w, b"e")
        t0 = time.monotonic()
        src._wait_ring(30.0)                    # events on the ring: at once
        assert time.monotonic() - t0 < 2.0 and ring.consumed == 2
        os.read(ring_r, 1)
        threading.Timer(0.1, src.wake).start()
        t0 = time.monotonic()
        src._wait_ring(30.0)                    # woken from another thread
        assert 0.05 <= time.monotonic() - t0 < 2.0 and ring.consumed == 3
        src.wake()
        src.wake()                              # a wake before the wait ends it at once, and only that one
        t0 = time.monotonic()
        src._wait_ring(30.0)
        assert time.monotonic() - t0 < 2.0
        t0 = time.monotonic()
        src._wait_ring(0.2)
        assert time.monotonic() - t0 >= 0.18
    finally:
        src.program.bpf = None
        src._close_wait()
        os.close(ring_r)
        os.close(ring_w)
    assert src._wake_fds is None
    src.wake()                                  # closed: nothing to write to


class _IdleBpf(FakeBpf):
    """A source with nothing to do for a minute: its poll waits until woken."""

    def __init__(self, readings: list[dict[int, object]]) -> None:
        super().__init__(readings)              # type: ignore[arg-type]
        self.woken = threading.Event()
        self.waits: list[float] = []

    def idle_s(self) -> float:
        return 60.0

    def poll(self, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        self.woken.wait(timeout_s)
        return False

    def wake(self) -> None:
        self.woken.set()


def test_stop_ends_the_collectors_wait_at_once() -> None:
    bpf = _IdleBpf([{}] * 10)
    s = Sampler(SamplerConfig(interval_s=300.0, first_interval_s=0.05), bpf=bpf,  # type: ignore[arg-type]
                nvml=FakeNvml(None, {}), host=FakeHost(set()))
    snaps: list[object] = []
    s.start(snaps.append)
    deadline = time.monotonic() + 10
    while len(snaps) < 2 and time.monotonic() < deadline:       # the "starting" one and the first refresh
        time.sleep(0.01)
    assert len(snaps) == 2
    t0 = time.monotonic()
    s.stop()
    assert not s.running and time.monotonic() - t0 < 1.0
    assert max(bpf.waits) == 60.0               # it waited as long as the source let it, not 0.2 s at a time


def test_without_bpf_the_wait_is_one_sleep_that_stop_ends() -> None:
    s = Sampler(SamplerConfig(use_bpf=False, use_nvml=False))
    threading.Timer(0.1, s.stop).start()
    t0 = time.monotonic()
    s.wait(30.0)
    assert time.monotonic() - t0 < 2.0
