"""Batch mode's first printed refresh (issue 22 review, items 6 and 9): `gputop -b -n 1` takes a first
sample at start and prints the one an interval later, so values that need two samples (CPU%) are
real, not N/A; the status line says the interval asked for (-d), not the one measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from support import ROOT, build_native
from test_nvml_batch import SCRIPT

from gputop import batch
from gputop.model import Snapshot, SourceStatus

BUSY = "import time\nt = time.time()\nwhile time.time() - t < 60: pass\n"


def _batch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """gputop -b ARGS with the fake NVML placing a busy process (100% of a core) on GPU 0."""
    lib = build_native("fake_nvml.c", "fake_nvml/libnvidia-ml.so.1", "-shared", "-fPIC")
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        script = tmp_path / "nvml.txt"
        script.write_text(SCRIPT.format(pid=busy.pid))
        env = {**os.environ, "GPUTOP_NVML_LIBRARY": str(lib), "FAKE_NVML_SCRIPT": str(script)}
        return subprocess.run([sys.executable, "-m", "gputop.cli", "-b", "--no-bpf", *args],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    finally:
        busy.kill()
        busy.wait()


def test_one_refresh_has_real_cpu_percent(tmp_path: Path) -> None:
    res = _batch(tmp_path, "-n", "1", "-d", "0.5", "-f", "json")
    assert res.returncode == 0, res.stderr
    (line,) = res.stdout.splitlines()
    (p,) = json.loads(line)["processes"]
    assert p["cpu_pct"] is not None and p["cpu_pct"] > 20, p["cpu_pct"]     # a busy loop, not N/A


def test_the_table_says_the_interval_asked_for(tmp_path: Path) -> None:
    res = _batch(tmp_path, "-n", "2", "-d", "0.3")
    assert res.returncode == 0, res.stderr
    heads = [ln for ln in res.stdout.splitlines() if ln.startswith("gputop - ")]
    assert len(heads) == 2 and all("  every 0.3s  " in h for h in heads), heads
    lines = res.stdout.splitlines()
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith("PID "):
            end = ln.index("CPU%") + len("CPU%")               # right-aligned under its header
            cpu = lines[i + 1][end - 6:end].strip()
            assert cpu != "N/A" and cpu.endswith("%"), lines[i:i + 2]


def test_the_status_line_says_the_interval_given_not_the_measured_one() -> None:
    snap = Snapshot(time=1767258000.0, interval_s=1.1, host="h", sources={"bpf": SourceStatus("unavailable")})
    assert "  every 1s  " in batch.table(snap, interval_s=1.0).splitlines()[0]
    # a recording (no interval given): its own, rounded once as in the dashboard's replay header
    assert "  every 1.1s  " in batch.table(snap).splitlines()[0]
    assert "  every 1s  " in batch.table(replace(snap, interval_s=1.006)).splitlines()[0]
