"""Helpers of the dashboard tests: a feed driven by the test, and snapshot builders."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

from gputop.feeds.base import SnapshotCallback
from gputop.model import Counts, ProcSample, Rates, Snapshot, SourceStatus

#: the scripted scenario recording (tests/data/scenario.py writes it)
SCENARIO = Path(__file__).resolve().parents[1] / "data" / "scenario.jsonl"


class ManualFeed:
    """A Feed whose snapshots the test pushes with ``push`` (from the test's thread)."""

    kind = "live"

    def __init__(self, *, block_start: threading.Event | None = None) -> None:
        self.callback: SnapshotCallback | None = None
        self.interval: float | None = None
        self.paused = False
        self.stopped = False
        self.start_thread: str | None = None
        self.started = threading.Event()
        self._block_start = block_start

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self.start_thread = threading.current_thread().name
        if self._block_start is not None:
            self._block_start.wait(10)
        self.callback = on_snapshot
        self.started.set()

    def stop(self) -> None:
        self.stopped = True

    def set_interval(self, interval_s: float) -> None:
        self.interval = interval_s

    def set_paused(self, paused: bool) -> None:
        self.paused = paused

    def push(self, snap: Snapshot) -> None:
        assert self.started.wait(5), "the app did not start the feed"
        assert self.callback is not None
        self.callback(snap)


def proc(pid: int, comm: str = "python", launches: float | None = 100.0, **kw: object) -> ProcSample:
    """A running process with the given launch rate (None = unknown)."""
    rates = Rates(launches_per_s=launches, memcpy_bytes_per_s={"h2d": 1e6, "d2h": 2e6, "d2d": 0.0},
                  uvm_faults_per_s=0.0, sync_wait_pct=5.0)
    base = ProcSample(pid=pid, comm=comm, cmdline=f"{comm} --job {pid}", user="alice", gpu_index=0,
                      interval=Counts(launches=None if launches is None else int(launches)),
                      total=Counts(launches=None if launches is None else int(launches) * 10),
                      rates=rates, grid_blocks_avg=32.0, block_threads_avg=128.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def snapshot(*procs: ProcSample, time: float = 1767258000.0, host: str = "test-host") -> Snapshot:
    return Snapshot(time=time, interval_s=1.0, host=host,
                    sources={"bpf": SourceStatus("ok", probes=10, objects=2, dropped=0, overhead_ns_per_s=1e6,
                                                 probe_hits_per_s=5000.0, trap_ns=700.0,
                                                 cost_ns_per_s=5000 * 700.0 + 1e6),
                             "nvml": SourceStatus("unavailable", "no NVIDIA driver"),
                             "uvm": SourceStatus("unavailable", "no nvidia_uvm")},
                    processes=tuple(procs))
