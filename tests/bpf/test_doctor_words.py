"""Issue 22, item 9: `gputop doctor` names the kernel headers the collector compiles against, the
path the JSON's ``sources.bpf.headers`` names (it named the tree they are merged from)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.sources.bpf import BpfUnavailable, has_privileges, load_bcc

ROOT = Path(__file__).resolve().parents[2]


def _gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_doctor_names_the_headers_the_json_names() -> None:
    if not has_privileges():
        pytest.skip("needs root")
    try:
        load_bcc()
    except BpfUnavailable as e:
        pytest.skip(e.reason)
    doctor = _gputop("doctor")
    (line,) = [ln for ln in doctor.stdout.splitlines() if "kernel headers:" in ln]
    snap = json.loads(_gputop("-b", "-n", "1", "-f", "json", "--no-nvml").stdout.splitlines()[0])
    headers = snap["sources"]["bpf"]["headers"]
    assert line.split("kernel headers: ", 1)[1] == headers
    paths = re.findall(r"/[^\s()]+", headers)
    assert paths and all(Path(p).is_dir() for p in paths)
