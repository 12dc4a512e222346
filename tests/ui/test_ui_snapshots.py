"""SVG snapshots of every screen on fixed frames of the scenario recording (fixed host and time).

Update after an intended change with: pytest tests/ui/test_ui_snapshots.py --snapshot-update
The flows are those of scripts/screenshots.py, which writes the README's screenshots.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from screenshots import FLOWS, SIZE, build_app

CASES = [(name, "dark") for name in FLOWS] + [
    (name, theme) for theme in ("light",) for name in ("main", "details", "compare", "help")
] + [("main", "high-contrast"), ("main", "monochrome"), ("details", "monochrome")]


@pytest.mark.parametrize(("name", "theme"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_screen(snap_compare: Any, name: str, theme: str) -> None:
    app, before = build_app(name, theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def test_narrow_terminal(snap_compare: Any) -> None:
    app, before = build_app("main", "dark")
    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


@pytest.mark.parametrize("size", [(80, 24), (100, 30)], ids=["80x24", "100x30"])
@pytest.mark.parametrize("name", ["main", "details", "compare", "help"])
def test_small_terminals(snap_compare: Any, name: str, size: tuple[int, int]) -> None:
    app, before = build_app(name, "dark")
    assert snap_compare(app, terminal_size=size, run_before=before)


@pytest.mark.parametrize("name", ["main", "details", "compare"])
def test_fleet_screen(snap_compare: Any, name: str) -> None:
    """The fleet view (gputop --prometheus) over three nodes running the same PIDs: NODE column, GPUs
    grouped by node, details and compare (fused on one node against unfused on another)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
    from fleet_scenario import NODES, FleetFrameFeed, fleet_frames

    from gputop.ui.app import DashboardOptions, GputopApp

    feed = FleetFrameFeed(fleet_frames(61))
    compare = ((NODES[0][1], 4242), (NODES[1][1], 4243)) if name == "compare" else None
    app = GputopApp(feed, DashboardOptions(theme="dark", compare_pids=compare))

    async def before(pilot: Any) -> None:
        await feed.deliver(pilot)
        if name == "details":
            await pilot.press("enter")
            await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)


def _family(snap: Any) -> Any:
    """The scenario's node with parents given (its processes all have PPID 1): 4242's launcher runs
    the workers 4243 and 6001, and 6001 forked 7007 (``nbody``): a tree for F5."""
    from dataclasses import replace

    parents = {4243: 4242, 6001: 4242, 7007: 6001}
    return replace(snap, processes=tuple(replace(p, ppid=parents.get(p.pid, p.ppid)) for p in snap.processes))


@pytest.mark.parametrize("name", ["tags", "tree"])
def test_habits(snap_compare: Any, name: str) -> None:
    """issue 22: three processes tagged (the summary line counts them), and the tree view (F5)."""
    from gputop.ui.app import DashboardOptions, GputopApp
    from screenshots import FrameFeed, frames

    shots = frames(61)
    feed = FrameFeed(shots if name == "tags" else [_family(s) for s in shots])
    app = GputopApp(feed, DashboardOptions(theme="dark"))

    async def before(pilot: Any) -> None:
        await feed.deliver(pilot)
        await pilot.press(*(("space", "space", "space") if name == "tags" else ("f5",)))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=before)
