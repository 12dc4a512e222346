"""Steady sorting (issue 22, item 3): rows sort by a rate averaged over the last 5 s, so bursty processes
hold their places, while the cells still show the last interval's rate.

The rates are real: ``tests/data/steady_sort.jsonl`` is the real gputop (BPF) tracing three of the test
bed's workloads that launch in bursts at 300, 400 and 500 launches/s (``tests/data/steady_sort.py``:
210 every 0.7 s, 360 every 0.9 s, 300 every 0.6 s; a 1 s refresh holds one burst or two).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from gputop.model import Snapshot
from gputop.record import read_recording
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.view import history
from gputop.view.columns import BY_KEY

from .test_ui_keys import pids, push, run, table
from .ui_helpers import ManualFeed

RECORDING = Path(__file__).resolve().parents[1] / "data" / "steady_sort.jsonl"


@pytest.fixture(scope="module")
def frames() -> list[Snapshot]:
    return list(read_recording(RECORDING))


def by_rate(snap: Snapshot) -> list[int]:
    """The PIDs by the last interval's launches/s, highest first: the order an instantaneous sort gives."""
    return [p.pid for p in sorted(snap.processes, key=lambda p: -(p.rates.launches_per_s or 0.0)
                                  if p.rates else 0.0)]


def window_rate(frames: list[Snapshot], at: int, pid: int) -> float:
    """The launches of ``pid`` in the refreshes of the last 5 s up to frame ``at`` over the time they
    cover: counted from the recording's interval counts, not from its rates."""
    until = frames[at].time
    launches = 0
    covered = 0.0
    for snap in frames[: at + 1]:
        if snap.time > until - history.SMOOTH_WINDOW_S:
            p = snap.process(pid)
            assert p is not None and p.interval is not None and p.interval.launches is not None
            launches += p.interval.launches
            covered += snap.interval_s
    return launches / covered


def test_the_recording_holds_real_bursts(frames: list[Snapshot]) -> None:
    """What the test bed recorded: every interval held whole bursts of 210, 360 or 300 launches."""
    assert len(frames) == 33
    slow, mid, fast = (p.pid for p in frames[0].processes)        # started at 300/s, 400/s, 500/s
    bursts = {slow: 210, mid: 360, fast: 300}
    for snap in frames:
        for p in snap.processes:
            assert p.interval is not None and p.interval.launches in (bursts[p.pid], 2 * bursts[p.pid]), p


def test_instantaneous_order_swaps_while_the_smoothed_order_holds(frames: list[Snapshot]) -> None:
    slow, mid, fast = (p.pid for p in frames[0].processes)
    seen: list[tuple[list[int], list[int], list[str]]] = []

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        for snap in frames:
            await push(pilot, feed, snap)
            cells = [BY_KEY["launches"].render(p) for p in table(app).rows]
            seen.append((by_rate(snap), pids(app), cells))

    run(DashboardOptions(), body)
    instantaneous = [s[0] for s in seen]
    shown = [s[1] for s in seen]
    # the last interval's rates reorder the rows in 31 refreshes of 32, in 5 different orders
    changes = sum(1 for a, b in zip(instantaneous, instantaneous[1:]) if a != b)
    assert changes == 31
    assert len({tuple(o) for o in instantaneous}) == 5
    assert instantaneous[1] == [fast, slow, mid]           # 300/s above 400/s: 420 launches against 360
    assert instantaneous[6] == [slow, mid, fast]           # 300/s on top, 500/s last
    # the table holds 500/s, 400/s, 300/s from the second refresh on (the first has no history yet)
    assert shown[0] == instantaneous[0] == [mid, fast, slow]
    assert all(order == [fast, mid, slow] for order in shown[1:])
    # and shows the last interval's rates (frame 6: 420, 360 and 300 launches), in the steady order
    rates = {p.pid: BY_KEY["launches"].render(p) for p in frames[6].processes}
    assert seen[6][2] == [rates[fast], rates[mid], rates[slow]]


def test_the_smoothed_rate_is_the_windows_launches_over_its_time(frames: list[Snapshot]) -> None:
    h = history.History()
    for snap in frames:
        h.add(snap)
    slow, mid, fast = (p.pid for p in frames[0].processes)
    for at in (6, 15, 32):
        until = frames[at].time
        for pid in (slow, mid, fast):
            got = h.smoothed(pid, "launches", until)
            assert got == pytest.approx(window_rate(frames, at, pid), rel=1e-12)
    # frame 6: 300/s's five refreshes held 7 bursts of 210 (1,470 launches in 5.03 s)
    counts = [p.interval.launches if p.interval else None for s in frames[2:7] for p in s.processes if p.pid == slow]
    assert counts == [210, 210, 420, 210, 420]
    assert round(h.smoothed(slow, "launches", frames[6].time) or 0, 1) == 292.0
    # a column that is not a rate is not smoothed; an unknown time has no points
    assert h.smoothed(slow, "pid", until) is None
    assert h.smoothed(slow, "launches", until + 0.5) is None
