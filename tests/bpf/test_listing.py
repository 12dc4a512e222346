"""Every process that maps a probed CUDA object is listed, also while it calls nothing (as nvitop
lists every GPU process): real probes, a real Sampler, workloads started before gputop."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.feeds.live import Sampler, SamplerConfig
from gputop.model import ProcSample
from gputop.sources.bpf import BpfSource


def _started(argv: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
    return proc


@pytest.fixture
def idle_workloads(workloads, tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes],  # type: ignore[no-untyped-def]
                                                                 subprocess.Popen[bytes]]]:
    """Two processes that linked the real libcudart and wait (no CUDA call yet): the first launches
    321 kernels of 2x1x1 blocks of 64 threads once GO exists, the second never calls anything."""
    go = tmp_path / "go"
    busy = _started([str(workloads.dynamic), "--wait", str(go), "launch:321:2,1,1:64,1,1:0"])
    idle = _started([str(workloads.dynamic), "--wait", str(tmp_path / "never"), "launch:1:1,1,1:1,1,1:0"])
    yield go, busy, idle
    for p in (busy, idle):
        if p.poll() is None:
            p.kill()
        p.wait()


def _counted(p: ProcSample | None) -> tuple[str, int | None, int | None, float | None]:
    assert p is not None and p.total is not None and p.interval is not None and p.rates is not None
    return p.state, p.interval.launches, p.total.launches, p.rates.launches_per_s


def test_idle_process_started_before_gputop_is_listed_then_counted_exactly(idle_workloads) -> None:
    go, busy, idle = idle_workloads
    src = BpfSource()
    sampler = Sampler(SamplerConfig(use_nvml=False), bpf=src)
    sampler.open_bpf()                  # the initial scan finds both processes' libcudart
    try:
        assert sampler.bpf_error is None
        first = sampler.collect()
        for pid in (busy.pid, idle.pid):
            p = first.process(pid)
            assert _counted(p) == ("running", 0, 0, 0.0)
            assert p is not None and p.comm == "wl_dynamic"
            assert p.total is not None and p.total.live_alloc_bytes is None   # it mapped CUDA before gputop
        assert sampler.collect().process(idle.pid) is not None                # idle for a while: still listed

        idle.kill()
        idle.wait()
        go.touch()
        busy.wait(timeout=30)
        assert busy.returncode == 0
        deadline = time.monotonic() + 5     # before the first full rescan and sweep (RESCAN_S)
        while not (reading := src.read()).idle[idle.pid].exited:    # its exit event, though it has no record
            assert time.monotonic() < deadline, "the exit of a process without a record was not reported"
            sampler.wait(0.05)
        assert idle.pid not in reading.procs and busy.pid not in reading.idle

        second = sampler.collect()
        assert _counted(second.process(busy.pid))[:3] == ("exited", 321, 321)
        b = second.process(busy.pid)
        assert b is not None and (b.grid_blocks_avg, b.block_threads_avg) == (2.0, 64.0)
        assert _counted(second.process(idle.pid)) == ("exited", 0, 0, 0.0)
        third = sampler.collect()
        assert third.process(busy.pid) is None and third.process(idle.pid) is None
        assert busy.pid not in src._maps and idle.pid not in src._maps        # forgotten
    finally:
        sampler.close()
