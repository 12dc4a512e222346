"""`gputop demo` without a GPU: the unfused workload launches three times as often as the fused one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import table_rows

ROOT = Path(__file__).resolve().parent.parent.parent


def _rate(cell: str) -> float:
    return float(cell.rstrip("k")) * (1000 if cell.endswith("k") else 1)


def test_demo_batch_shows_unfused_at_three_times_the_fused_rate(testbed) -> None:
    env = {**os.environ, "GPUTOP_DEMO_CUDART": str(testbed.libcudart)}
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "demo", "-b", "-n", "4", "--rate", "1000"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"demo without a GPU: launches through {testbed.libcudart}")
    rows = table_rows(res.stdout.rsplit("gputop - ", 1)[1])
    assert len(rows) == 2
    rates = [_rate(r["LAUNCH/s"]) for r in rows]                      # sorted like the dashboard
    assert 2700 <= rates[0] <= 3300 and 900 <= rates[1] <= 1100      # unfused 3k/s, fused 1k/s
    assert {r["GRID"] for r in rows} == {"4.10k"} and {r["BLOCK"] for r in rows} == {"256"}   # 4096, 3 digits


def test_demo_workloads_die_with_gputop(testbed) -> None:
    import signal
    import time

    env = {**os.environ, "GPUTOP_DEMO_CUDART": str(testbed.libcudart)}
    gt = subprocess.Popen([sys.executable, "-m", "gputop.cli", "demo", "-b", "-n", "100"], stdout=subprocess.PIPE,
                          text=True, env=env, cwd=ROOT)
    assert gt.stdout is not None and gt.stdout.readline().startswith("demo without a GPU")
    children = [int(p) for p in Path(f"/proc/{gt.pid}/task/{gt.pid}/children").read_text().split()]
    assert len(children) == 2
    gt.send_signal(signal.SIGKILL)                  # no clean-up code runs: the kernel must do it
    gt.wait()
    def running(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 10
    while any(running(c) for c in children):
        assert time.monotonic() < deadline, "the demo's workloads outlived gputop"
        time.sleep(0.05)
