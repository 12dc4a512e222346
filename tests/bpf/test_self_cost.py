"""gputop's own cost: the real trap calibration, its cache, and cost_ns_per_s built exactly from
hits x the calibrated trap + the programs' run time while a real workload launches."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from support import Workloads

from gputop.sources import trapcost
from gputop.sources.bpf import BpfSource, has_privileges
from gputop.sources.trapcost import Calibration, CalibrationError, TrapCost


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


def test_cost_is_hits_times_trap_plus_programs(bpf_source: BpfSource, workloads: Workloads,
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
        while time.monotonic() < deadline:
            bpf_source.poll(0.1)
            c = bpf_source.cost
            before = (c.entry_hits_per_s, c.return_hits_per_s, c.ns_per_s)
            reading = bpf_source.read()
            if before == (c.entry_hits_per_s, c.return_hits_per_s, c.ns_per_s) and (c.entry_hits_per_s or 0) > 1000:
                break
        else:
            pytest.fail("no statistics window saw the workload's launches")
        entry, ret, programs = before
        assert entry is not None and ret is not None and programs is not None
        assert reading.trap_ns == 700.0
        assert reading.cost_ns_per_s == entry * 700.0 + ret * 600.0 + programs
        assert reading.overhead_ns_per_s == programs
    finally:
        bpf_source.cost.calibration = saved
        wl.kill()
        wl.wait()
