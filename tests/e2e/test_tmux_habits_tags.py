"""End to end, live (issue 22, items 1-2): the real `gputop` in tmux (160x45) tracing three real workloads
at 3,000, 2,000 and 1,000 launches/s: the summary line (Tasks:) and tags (Space, c on three, U), as
a user sees them in the pane.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Workloads
from test_tmux_replay import cell, number, table
from tmux_driver import TmuxSession, have_tmux

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not have_tmux(), reason="tmux not installed")]

RATES = (3000, 2000, 1000)


@pytest.fixture
def paced(workloads: Workloads, tmp_path: Path) -> Iterator[tuple[int, ...]]:
    """Three processes launching at 3,000/s, 2,000/s and 1,000/s for 60 s."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([str(workloads.dynamic), "--wait", str(go), f"paced:{rate}:60000"],
                              stdout=subprocess.PIPE) for rate in RATES]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
    go.touch()
    yield tuple(p.pid for p in procs)
    for p in procs:
        p.kill()
        p.wait()


def tasks_line(screen: str) -> str:
    return next((ln.strip() for ln in screen.splitlines() if ln.strip().startswith("Tasks:")), "")


def test_live_summary_line_and_tags(paced: tuple[int, ...], tmp_path: Path) -> None:
    fast, mid, slow = paced
    with TmuxSession([sys.executable, "-m", "gputop.cli", "--no-nvml", "-p", ",".join(map(str, paced))],
                     env={"XDG_CONFIG_HOME": str(tmp_path)}, cwd=ROOT) as t:
        def settled(screen: str) -> bool:
            if not all(str(p) in screen for p in paced):
                return False
            header, rows = table(screen)
            rates = {r.split()[0]: number(cell(header, r, "LAUNCH/s")) for r in rows}
            got = rates.get(str(slow))
            return got is not None and 900 <= got <= 1100 and [r.split()[0] for r in rows] == list(map(str, paced))

        screen = t.wait_for(settled, timeout=60)
        line = tasks_line(screen)
        # counts exact; no copies traced (0/s); no NVML: how many GPUs are busy is unknown
        assert line.startswith("Tasks: 3 listed, 3 running, 0 stopped, 0 exited  Launches: "), line
        assert line.endswith("  Graph kernels: 0/s  H2D 0/s  D2H 0/s  D2D 0/s  GPUs busy: N/A"), line
        total = number(re.search(r"Launches: (\S+)/s", line).group(1))  # type: ignore[union-attr]
        assert total is not None and 5400 <= total <= 6600, line          # 3,000 + 2,000 + 1,000

        t.send_keys("Space")                                               # tags the fastest, moves down
        screen = t.wait_for(lambda s: ", 1 tagged" in tasks_line(s), timeout=10)
        assert [int(m.group(1)) for m in re.finditer(r"^●\s+(\d+) ", screen, re.MULTILINE)] == [fast]
        t.send_keys("Space", "Space")
        screen = t.wait_for(lambda s: ", 3 tagged" in tasks_line(s), timeout=10)
        marked = sorted(int(m.group(1)) for m in re.finditer(r"^●\s+(\d+) ", screen, re.MULTILINE))
        assert marked == sorted(paced)                                     # ● before each tagged row

        t.send_keys("c")                                                   # the two tagged last: mid, slow
        screen = t.wait_for(lambda s: "comparing the two tagged last" in s, timeout=10)
        flat = " ".join(screen.split())
        assert f"3 tagged: comparing the two tagged last, PID {mid} and PID {slow}" in flat, flat
        time.sleep(0.5)                  # the message is on its own line only: no pop-up box over the data
        screen = t.capture()
        assert screen.count("comparing the") == 1, screen
        t.send_keys("Escape")
        t.wait_for(lambda s: tasks_line(s).startswith("Tasks:"), timeout=10)
        t.send_keys("U")
        screen = t.wait_for(lambda s: "untagged 3 processes" in s, timeout=10)
        t.wait_for(lambda s: "tagged" not in tasks_line(s) and tasks_line(s).startswith("Tasks: 3 listed"),
                   timeout=10)

        t.send_keys("q")
        assert t.wait_exit(timeout=60) == 0
