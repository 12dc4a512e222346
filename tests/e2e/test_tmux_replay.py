"""End to end: the real dashboard in tmux over the scenario recording (python -m gputop.ui --replay).

Reads what a user sees: the row of a process, its rate and the sort order, from the captured pane.
The live-collector variant (a traced workload) comes with the CLI.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from tmux_driver import TmuxSession, have_tmux

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "scenario.jsonl"

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not have_tmux(), reason="tmux not installed")]

_SUFFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def number(text: str) -> float | None:
    text = text.rstrip("%")
    if text == "N/A":
        return None
    if text[-1] in _SUFFIX:
        return float(text[:-1]) * _SUFFIX[text[-1]]
    return float(text)


def table(screen: str) -> tuple[str, list[str]]:
    lines = screen.splitlines()
    i = next(n for n, line in enumerate(lines) if "PID" in line and "COMMAND" in line)
    rows = []
    for line in lines[i + 1:]:
        if not line.strip() or not line.split()[0].isdigit():
            break
        rows.append(line)
    return lines[i], rows


def cell(header: str, row: str, label: str) -> str:
    """The right-aligned cell under ``label`` (its last token up to the label's end)."""
    end = header.index(label) + len(label)
    if end < len(header) and header[end] in "▼▲":
        end += 1
    return row[:end].split()[-1]


@pytest.fixture
def dashboard(tmp_path: Path) -> TmuxSession:
    s = TmuxSession([sys.executable, "-m", "gputop.ui", "--replay", str(RECORDING)],
                    env={"XDG_CONFIG_HOME": str(tmp_path), "TZ": "UTC"}, cwd=ROOT)
    s.start()
    yield s
    s.kill()


def test_replay_in_tmux_shows_rows_rates_and_sort_order(dashboard: TmuxSession) -> None:
    dashboard.wait_for(lambda s: "gpu-node-07" in s and "4242" in s, timeout=20)
    dashboard.wait_for(lambda s: (m := re.search(r"REPLAY (\d+)/90", s)) is not None and int(m[1]) >= 3,
                       timeout=15)
    dashboard.send_keys("p")
    screen = dashboard.wait_for("PAUSED", timeout=5)
    header, rows = table(screen)
    assert "LAUNCH/s▼" in header
    assert rows[0].split()[0] == "4242"  # the unfused training job launches most
    row = rows[0]
    assert "alice" in row and "fused=0" in row
    rate = number(cell(header, row, "LAUNCH/s"))
    assert rate is not None and 45_000 < rate < 60_000
    rates = [number(cell(header, r, "LAUNCH/s")) for r in rows]
    known = [r for r in rates if r is not None]
    assert known == sorted(known, reverse=True)

    dashboard.send_keys(">")  # sort by the next column: GRID
    screen = dashboard.wait_for(lambda s: "GRID▼" in s, timeout=5)
    header, rows = table(screen)
    grids = [number(cell(header, r, "GRID")) for r in rows]
    known = [g for g in grids if g is not None]
    assert known == sorted(known, reverse=True) and grids[: len(known)] == known
    assert rows[0].split()[0] == "6001"  # 65536-block UVM triad kernel

    dashboard.send_keys("/")
    dashboard.send_keys("triton", literal=True)
    dashboard.send_keys("Enter")
    # filtered as it is typed: the one row shows before Enter gives the table the focus back; q once the
    # footer is the table's again (⏎ Details; the input's has none), else q is typed into the filter (the
    # run beside the QEMU guests once took it so)
    screen = dashboard.wait_for(lambda s: len(table(s)[1]) == 1 and "Details" in s.rstrip().splitlines()[-1],
                                timeout=5)
    assert table(screen)[1][0].split()[0] == "5120"

    dashboard.send_keys("q")
    assert dashboard.wait_exit(timeout=10) == 0


SIZES = [(200, 60), (160, 45), (120, 40), (80, 24), (40, 12), (20, 5)]


@pytest.mark.parametrize("keys", [(), ("Enter",), ("Space", "Down", "Space", "c"), ("h",), ("s",)],
                         ids=["main", "details", "compare", "help", "sort-menu"])
def test_resize_in_tmux_never_crashes(dashboard: TmuxSession, keys: tuple[str, ...]) -> None:
    """Resizing the terminal through every size and back, on every screen: the dashboard keeps
    running and redraws at the new size (160×45 → 80×24 and back used to end it with a traceback)."""
    dashboard.wait_for(lambda s: "gpu-node-07" in s and "4242" in s, timeout=20)
    dashboard.send_keys("p")
    dashboard.wait_for("PAUSED", timeout=5)
    for k in keys:
        dashboard.send_keys(k)
    for w, h in SIZES + SIZES[-2::-1] + [(150, 45), (120, 45), (150, 45)]:
        dashboard.resize(w, h)
        screen = dashboard.wait_for(lambda s, w=w: max(len(line) for line in s.splitlines()) <= w and
                                    bool(s.strip()), timeout=5)
        assert dashboard.alive, f"the dashboard ended at {w}×{h}:\n{screen}"
    screen = dashboard.wait_for(lambda s: "gputop" in s or "Sort by" in s, timeout=5)
    assert "Traceback" not in screen
    if not keys:    # redrawn at 150×45: the whole table is back
        # the rows with the header (a frame may show the header before its rows)
        screen = dashboard.wait_for(lambda s: "LAUNCH/s▼" in s and "COMMAND" in s and bool(table(s)[1]), timeout=5)
        header, rows = table(screen)
        assert "LAUNCH/s▼" in header and rows[0].split()[0] == "4242"
    dashboard.send_keys("Escape")       # back to the process list (or nothing there), then quit
    time.sleep(0.3)                     # ESC then q at once would read as alt+q
    dashboard.wait_for(lambda s: "PID USER" in s and "COMMAND" in s, timeout=5)
    dashboard.send_keys("q")
    assert dashboard.wait_exit(timeout=10) == 0


def test_htops_function_keys_in_tmux(dashboard: TmuxSession) -> None:
    """Issue 35 item 3, as it was found: F1 opens and closes the help; F3 finds a process without hiding
    the others (Enter keeps it selected: Enter again opens its details); F10 quits from the details."""
    dashboard.wait_for(lambda s: "gpu-node-07" in s and "4242" in s, timeout=20)
    dashboard.send_keys("p")
    screen = dashboard.wait_for("PAUSED", timeout=5)
    listed = len(table(screen)[1])
    dashboard.send_keys("F1")
    dashboard.wait_for("gputop — keys", timeout=5)
    dashboard.send_keys("F1")
    dashboard.wait_for(lambda s: "gputop — keys" not in s and "LAUNCH/s" in s, timeout=5)
    dashboard.send_keys("F3")
    dashboard.wait_for("search by", timeout=5)                  # the search line, focused
    dashboard.send_keys("triton", literal=True)
    dashboard.wait_for(lambda s: any(ln.strip() == "triton" for ln in s.splitlines()), timeout=5)
    dashboard.send_keys("Enter")
    screen = dashboard.wait_for(lambda s: not any(ln.strip() == "triton" for ln in s.splitlines()), timeout=5)
    assert len(table(screen)[1]) == listed                   # nothing hidden
    dashboard.send_keys("Enter")
    dashboard.wait_for(lambda s: "5120" in s and "LAUNCH/s▼" not in s, timeout=5)    # its details
    dashboard.send_keys("F10")
    assert dashboard.wait_exit(timeout=10) == 0
