"""End to end, live: the real `gputop` in tmux (160x45) tracing real workloads at known launch rates.

Reads what a user sees: each workload's row, its LAUNCH/s, and the sort order, from the pane.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tmux_replay import cell, number, table
from tmux_driver import TmuxSession, have_tmux

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not have_tmux(), reason="tmux not installed")]


@pytest.fixture
def paced(workloads, tmp_path: Path) -> Iterator[tuple[int, int]]:
    """Two processes launching at 3,000/s and 1,000/s for 40 s."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([str(workloads.dynamic), "--wait", str(go), f"paced:{rate}:40000"],
                              stdout=subprocess.PIPE) for rate in (3000, 1000)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
    go.touch()
    yield procs[0].pid, procs[1].pid
    for p in procs:
        p.kill()
        p.wait()


def test_live_dashboard_shows_traced_rates_in_launch_order(paced: tuple[int, int], tmp_path: Path) -> None:
    fast, slow = paced
    with TmuxSession([sys.executable, "-m", "gputop.cli", "--no-nvml", "-p", f"{fast},{slow}"],
                     env={"XDG_CONFIG_HOME": str(tmp_path)}, cwd=ROOT) as t:
        def settled(screen: str) -> bool:
            if str(fast) not in screen or str(slow) not in screen:
                return False
            header, rows = table(screen)
            by_pid = {r.split()[0]: number(cell(header, r, "LAUNCH/s")) for r in rows}
            r = by_pid.get(str(fast))
            return r is not None and 2700 <= r <= 3300

        screen = t.wait_for(settled, timeout=30)
        header, rows = table(screen)
        assert [r.split()[0] for r in rows] == [str(fast), str(slow)]      # LAUNCH/s descending
        slow_rate = number(cell(header, rows[1], "LAUNCH/s"))
        assert slow_rate is not None and 900 <= slow_rate <= 1100
        assert "wl_dynamic" in rows[0]
        assert "bpf" in screen.lower()

        t.send_keys("q")
        assert t.wait_exit(timeout=15) == 0
