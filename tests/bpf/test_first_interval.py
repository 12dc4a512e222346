"""Every interval's counts cover exactly its interval_s, the first one too.

A process already launching at a steady rate when gputop starts is counted from the moment its
probes attach; what it launched while gputop was still attaching belongs to the totals, not to the
first interval (which used to read 1.3x to 2.4x the true rate).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

GPUTOP = [sys.executable, "-m", "gputop.cli"]
RATE = 4000


def test_first_interval_rate_of_a_process_running_before_gputop(workloads, tmp_path) -> None:
    go = tmp_path / "go"
    wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), f"paced:{RATE}:20000"],
                          stdout=subprocess.PIPE)
    try:
        assert wl.stdout is not None and wl.stdout.readline().startswith(b"ready")
        go.touch()
        time.sleep(0.5)                 # launching steadily before gputop starts
        out = subprocess.run([*GPUTOP, "-b", "-n", "3", "-d", "2", "-f", "json", "-p", str(wl.pid), "--no-nvml",
                              "--bpf"], capture_output=True, text=True, timeout=120, check=True).stdout
    finally:
        wl.kill()
        wl.wait()
    snaps = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(snaps) == 3
    intervals = []
    for snap in snaps:
        (proc,) = [p for p in snap["processes"] if p["pid"] == wl.pid]
        intervals.append(proc["interval"]["launches"])
        rate = proc["interval"]["launches"] / snap["interval_s"]
        # the workload paces itself to 4000/s to within a millisecond's launches; an interval that
        # also held the launches made while gputop attached would read 10% to 140% more
        assert abs(rate - RATE) / RATE < 0.05, (rate, snap["interval_s"], proc["interval"]["launches"])
        assert proc["rates"]["launches_per_s"] == pytest.approx(rate, rel=1e-9)
    # the intervals add up to what the totals gained after the first interval began
    totals = [p["total"]["launches"] for s in snaps for p in s["processes"] if p["pid"] == wl.pid]
    assert totals[2] - totals[0] == intervals[1] + intervals[2]
    assert totals[0] >= intervals[0]
