"""End to end (issue 10): bad input to the real dashboard in tmux. A recording that is not one
exits 1 with one error and one hint line, a recording cut short plays with a notice, and a corrupt
config.toml gives a notice and defaults, and survives a setting changed in the dashboard (backed
up before the file is replaced)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tmux_driver import TmuxSession, have_tmux

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "scenario.jsonl"

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not have_tmux(), reason="tmux not installed")]


def _gputop(*args: str) -> list[str]:
    return [sys.executable, "-m", "gputop.cli", *args]


@pytest.mark.parametrize(("content", "message", "hint"), [
    (b"\x00\xff garbage", "bad.jsonl:1: not UTF-8 text: not a recording",
     "record one with: gputop --record FILE (JSON Lines, schema gputop/1)"),
    (b'{"schema":"gputop/3","time":1,"interval_s":1,"host":"h"}\n',
     "bad.jsonl:1: written by a newer gputop (schema 'gputop/3'; this gputop reads 'gputop/1')",
     "replay it with the gputop version that recorded it, or upgrade gputop"),
], ids=["garbage", "future-schema"])
def test_dashboard_over_a_bad_recording_exits_1(tmp_path: Path, content: bytes, message: str, hint: str) -> None:
    (tmp_path / "bad.jsonl").write_bytes(content)
    with TmuxSession(_gputop("--replay", "bad.jsonl"), env={"XDG_CONFIG_HOME": str(tmp_path)}, cwd=tmp_path) as t:
        assert t.wait_exit(timeout=30) == 1
        # with the history: tmux's "Pane is dead" line can scroll the first line out of the screen
        screen = subprocess.run(["tmux", "-L", t.socket, "capture-pane", "-p", "-S", "-", "-t", t.name],
                                capture_output=True, text=True, check=True).stdout
        lines = [line for line in screen.splitlines() if line.strip() and not line.startswith("Pane is dead")]
        assert lines == [f"gputop: error: {message}", f"hint: {hint}"]


def test_cut_recording_and_corrupt_config_in_the_dashboard(tmp_path: Path) -> None:
    lines = RECORDING.read_text().splitlines(keepends=True)[:6]
    (tmp_path / "cut.jsonl").write_text("".join(lines[:5]) + lines[5][:500])
    config = tmp_path / "gputop" / "config.toml"
    config.parent.mkdir()
    corrupt = b'theme = "light"\nmy_own_key = 1\n[[oops\n'
    config.write_bytes(corrupt)
    with TmuxSession(_gputop("--replay", "cut.jsonl"), width=200, env={"XDG_CONFIG_HOME": str(tmp_path)},
                     cwd=tmp_path) as t:
        screen = t.wait_for("cut.jsonl:6: the last line is cut short at column 501", timeout=30)
        assert "config: cannot read" in screen                  # the corrupt file: a notice, defaults
        t.send_keys("t")                                          # change the theme: config.toml is rewritten
        t.wait_for("config.toml.bak", timeout=15)                 # ... and says where the old one is kept
        t.send_keys("q")
        assert t.wait_exit(timeout=15) == 0
    assert (config.parent / "config.toml.bak").read_bytes() == corrupt
    assert "theme = " in config.read_text()
