"""gputop's own cost: the real trap calibration, its cache, the exact hit counters against the kernel's
run counts, and cost_ns_per_s built exactly from the interval's hits x the calibrated trap + the
programs' run time while a real workload launches."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from support import SCAN_WAIT_S, Workloads

from gputop.sources.bpf import BpfSource, has_privileges
from gputop.sources.bpf.common import linux as bpfsys
from gputop.sources.bpf.cost import trapcost
from gputop.sources.bpf.cost.trapcost import Calibration, CalibrationError, TrapCost


def _never(mode: str) -> TrapCost:
    raise CalibrationError("measured although the cache holds the figure")


@pytest.mark.parametrize("mode", ["links", "perf"])
def test_real_calibration_is_cached_and_reused(mode: str, tmp_path: Path) -> None:
    if not has_privileges():
        pytest.skip("the calibration attaches uprobes: it needs root (or CAP_BPF + CAP_PERFMON)")
    first = Calibration(mode, tmp_path)
    first.start()
    assert first.done.wait(60) and first.error is None, first.error
    cost = first.cost
    assert cost is not None and not cost.cached and cost.attach == mode and cost.call_ns is not None
    # a trap is a kernel entry, the unprobed call a few instructions; a return probe traps once more
    assert cost.trap_ns > 10 * cost.call_ns
    assert cost.return_ns > 10 * cost.call_ns
    again = Calibration(mode, tmp_path, measure_fn=_never)
    again.start()
    assert again.done.is_set() and again.cost == TrapCost(**{**cost.__dict__, "cached": True})
    # another mode (or kernel) is another key: measured apart
    other = "perf" if mode == "links" else "links"
    assert trapcost.load_cached(other, tmp_path) is None
    # repeatable: a second measurement lands within a factor of 1.5 of the first (a loaded 2-core host)
    second = trapcost.measure(mode)
    assert 1 / 1.5 < second.trap_ns / cost.trap_ns < 1.5


@pytest.mark.attach_modes("links", "perf")
def test_hits_are_the_kernels_own_run_counts(bpf_source: BpfSource, workloads: Workloads, tmp_path: Path) -> None:
    """The per-CPU hit counters against the kernel's run counts of gputop's uprobe programs (BPF
    statistics held on meanwhile): equal, entry and return apart, over a real workload's calls."""
    go = tmp_path / "go"
    wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:3000:1,1,1:1,1,1:0", "malloc:40:64",
                           "sync:25"], stdout=subprocess.PIPE)
    assert wl.stdout is not None
    pid = int(wl.stdout.readline().split()[1])
    bpf_source.scan([pid], wait_s=SCAN_WAIT_S)   # what it mapped probed (perf events: one by one, on a loaded host)
    end = time.monotonic() + 1.0                 # gputop probes what it mapped (its exec and mmap events);
    while time.monotonic() < end:                # its start-up calls (registrations) are over meanwhile
        bpf_source.poll(0.1)
    fd = bpfsys.enable_stats()
    assert fd is not None
    try:
        h0, s0 = bpf_source.hit_totals(), bpf_source._prog_stats()
        go.touch()
        assert wl.wait(timeout=60) == 0
        s1, h1 = bpf_source._prog_stats(), bpf_source.hit_totals()
    finally:
        os.close(fd)
    assert s0 is not None and s1 is not None and h0 is not None and h1 is not None
    entry, ret = h1[0] - h0[0], h1[1] - h0[1]
    assert (entry, ret) == (s1.entry_runs - s0.entry_runs, s1.return_runs - s0.return_runs)
    assert entry >= 3000 + 40 + 25 and ret >= 40 + 25


@pytest.mark.attach_modes("links", "perf")
def test_cost_is_the_intervals_hits_times_trap_plus_programs(bpf_source: BpfSource, workloads: Workloads,
                                                             tmp_path: Path) -> None:
    mode = bpf_source.uprobes.mode if bpf_source.uprobes else "links"
    trapcost.store(TrapCost(700.0, 600.0, mode, 9, 20000, 0.0, call_ns=2.0), tmp_path)
    cal = Calibration(mode, tmp_path, measure_fn=_never)
    cal.start()                                 # from the cache: no measurement
    assert cal.cost == TrapCost(700.0, 600.0, mode, 9, 20000, 0.0, call_ns=2.0, cached=True)
    saved, bpf_source.cost.calibration = bpf_source.cost.calibration, cal
    wl = subprocess.Popen([str(workloads.dynamic), "paced:20000:8000"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:      # until a statistics window has sampled the run time per hit
            bpf_source.poll(0.25)
            reading = bpf_source.read()
            c = bpf_source.cost
            if c.ns_per_hit is not None and (reading.probe_hits_per_s or 0) > 1000:
                break
        else:
            pytest.fail("no statistics window saw the workload's launches")
        entry, ret = c.entry_hits_per_s, c.return_hits_per_s
        assert entry is not None and ret is not None and reading.overhead_ns_per_s is not None
        assert reading.probe_hits_per_s == entry + ret
        assert reading.overhead_ns_per_s == (entry + ret) * c.ns_per_hit + (c.other_ns_per_s or 0.0)
        assert reading.trap_ns == 700.0
        assert reading.cost_ns_per_s == entry * 700.0 + ret * 600.0 + reading.overhead_ns_per_s
        assert reading.stats_age_s is not None and 0 <= reading.stats_age_s < 30
    finally:
        bpf_source.cost.calibration = saved
        wl.kill()
        wl.wait()
