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
