"""docs/PERFORMANCE.md is what bench/performance.py writes from the figures kept in docs/perf/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import benchjson  # noqa: E402
import perfdoc  # noqa: E402
import performance  # noqa: E402


def test_every_section_has_its_figures() -> None:
    missing = [s.name for s in perfdoc.SECTIONS if not (performance.DEFAULT_DIR / f"{s.name}.json").exists()]
    assert missing == []


def test_the_document_is_the_figures_rendered() -> None:
    """No hand edits: a figure changed in the document and not in docs/perf/ (or the reverse) fails."""
    expected = perfdoc.render(performance.load(performance.DEFAULT_DIR))
    assert (ROOT / "docs" / "PERFORMANCE.md").read_text() == expected, \
        "run: .venv/bin/python bench/performance.py --render-only"


def test_every_section_names_its_command_and_conditions() -> None:
    docs = performance.load(performance.DEFAULT_DIR)
    for s in perfdoc.SECTIONS:
        body = s.render(docs[s.name])
        assert f"bench/{s.script}" in body, s.name
        if "conditions" in docs[s.name]:       # bench/soak.py writes its own summary, without them
            assert "Measured 20" in body and "CPUs" in body, s.name


def test_render_only_writes_the_document(tmp_path: Path) -> None:
    out = tmp_path / "PERFORMANCE.md"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "performance.py"), "--render-only", "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == (ROOT / "docs" / "PERFORMANCE.md").read_text()


def test_a_missing_section_says_how_to_measure_it() -> None:
    text = perfdoc.render({})
    for s in perfdoc.SECTIONS:
        assert f"## {s.title}\n\nNot measured yet: `.venv/bin/python bench/{s.script}" in text


@pytest.mark.parametrize(("argv", "shown"), [
    (["bench/x.py", "--rounds", "3", "--json", "/tmp/a.json"], ".venv/bin/python bench/x.py --rounds 3"),
    (["bench/x.py", "--json=/tmp/a.json", "--calls", "9"], ".venv/bin/python bench/x.py --calls 9"),
    (["bench/x.py", "--label", "a b"], ".venv/bin/python bench/x.py --label 'a b'"),
])
def test_the_recorded_command_leaves_out_json(monkeypatch: pytest.MonkeyPatch, argv: list[str], shown: str) -> None:
    monkeypatch.setattr(sys, "argv", argv)
    assert benchjson.command() == shown
