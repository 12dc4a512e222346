"""One wording for one situation (issue 22 review, item 8): without the privileges to trace, `gputop -b`,
`gputop demo -b` and `gputop doctor` say the same why and the same hint (``gputop.modes.common.no_privileges``,
``tracing_off``), the dashboard's banner too (tests/bpf/test_privileges.py reads it in tmux).
Run as root with an empty capability bounding set (setpriv): uid 0, no capability."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.modes.common import tracing_off
from gputop.sources.bpf.program.privileges import ENABLE_HINT

ROOT = Path(__file__).resolve().parents[2]
NO_CAPS = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]
WHY = "tracing needs CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH (root has them): missing CAP_BPF, CAP_PERFMON"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to drop every capability")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NO_CAPS, sys.executable, "-m", "gputop.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_batch_demo_and_doctor_say_the_same_words_without_privileges() -> None:
    line = f"gputop: {tracing_off(WHY, ENABLE_HINT)}"
    assert line == (f"gputop: tracing is off ({WHY}): NVML and host data only. To trace: {ENABLE_HINT}")
    res = _run("-b", "-n", "1", "--no-nvml", "-d", "0.2")
    assert (res.returncode, res.stderr) == (0, line + "\n")
    res = _run("--bpf", "-b", "-n", "1", "--no-nvml")
    assert (res.returncode, res.stderr) == (77, f"gputop: error: {WHY}\nhint: {ENABLE_HINT}\n")
    res = _run("doctor")
    lines = res.stdout.splitlines()
    assert lines[:2] == [f"FAIL  privileges: root: tracing is off ({WHY})", f"      fix: {ENABLE_HINT}"]
    res = _run("demo", "-b", "-n", "1", "-d", "0.2")
    if res.returncode != 0 and "hint:" in res.stderr:
        pytest.skip(f"the demo cannot run here: {res.stderr}")
    assert res.returncode == 0, res.stderr
    assert res.stderr == line + "\n"
