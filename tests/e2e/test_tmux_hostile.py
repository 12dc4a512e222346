"""End to end, live (issue 10): the real dashboard in tmux tracing a real workload named
ESC[2J ESC[31m EVIL BEL 0x9b, whose kernel's ELF symbol is crafted the same way (plus U+202E).

What a user sees: the header intact (ESC[2J would erase it), no cell turned red (ESC[31m), the name
and the kernel shown as visible escapes in the table and in the details screen."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hostile_names import COMM_SHOWN, KERNEL_SHOWN, hostile_workload
from tmux_driver import TmuxSession, have_tmux

from gputop.sources.bpf import has_privileges

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not have_tmux(), reason="tmux not installed"),
              pytest.mark.skipif(not has_privileges(), reason="tracing needs root or CAP_BPF and CAP_PERFMON")]

_SGR = re.compile(r"\x1b\[([0-9;:]*)m")


def red_cells(styled: str) -> list[str]:
    """The SGR sequences of a ``capture-pane -e`` screen that set the foreground or background to
    red (palette colour 1 or 9: ESC[31m, ESC[41m, ESC[91m, ESC[101m, or 38;5;1 / 38;5;9)."""
    found = []
    for m in _SGR.finditer(styled):
        params = m.group(1).replace(":", ";").split(";")
        i = 0
        while i < len(params):
            p = params[i]
            if p in ("38", "48") and i + 1 < len(params):
                step = 3 if params[i + 1] == "5" else 5
                if params[i + 1] == "5" and i + 2 < len(params) and params[i + 2] in ("1", "9"):
                    found.append(m.group())
                i += step
                continue
            if p in ("31", "41", "91", "101"):
                found.append(m.group())
            i += 1
    return found


def styled(t: TmuxSession) -> str:
    """The screen with its colours and attributes as SGR sequences (``capture-pane -e``)."""
    return subprocess.run(["tmux", "-L", t.socket, "capture-pane", "-p", "-e", "-t", t.name], capture_output=True,
                          text=True, check=True).stdout


def test_hostile_name_and_kernel_in_the_dashboard(workloads, tmp_path: Path) -> None:
    wl_path = hostile_workload(workloads.dynamic, tmp_path)
    short = Path(tempfile.mkdtemp(prefix="g", dir="/tmp"))      # a short command line: it fits its column whole
    # (290 columns: every column shows, MSET/s, NCCL/s, NCCL B/s, TIME+, RSS and %MEM too, and the command still
    # fits whole)
    go = short / "go"
    wl = subprocess.Popen([str(wl_path), "--wait", str(go), "launch:3000:40,2,1:128,1,1:2", "sleep:60000"],
                          stdout=subprocess.PIPE)
    try:
        assert wl.stdout is not None and wl.stdout.readline().startswith(b"ready")
        with TmuxSession([sys.executable, "-m", "gputop.cli", "--no-nvml", "-p", str(wl.pid)], width=290,
                         env={"XDG_CONFIG_HOME": str(tmp_path / "config")}, cwd=ROOT) as t:
            t.wait_for(lambda s: f"{wl.pid} " in s and COMM_SHOWN in s, timeout=30)   # listed: probes attached
            go.touch()
            screen = t.wait_for(lambda s: re.search(rf"^\s*{wl.pid}\s.*\s80\s+128\s", s, re.M) is not None,
                                timeout=30)       # the refresh with the 3,000 launches of 40x2x1 blocks of 128
            lines = screen.splitlines()
            assert socket.gethostname() in lines[0]                      # the header is still there
            row = next(line for line in lines if line.lstrip().startswith(f"{wl.pid} "))
            assert f" {COMM_SHOWN} --wait {go} launch:3000:40,2,1:128,1,1:2 sleep:60000 " in row
            assert red_cells(styled(t)) == []

            t.send_keys("Enter")                                          # the details of the only row
            screen = t.wait_for(KERNEL_SHOWN, timeout=15)
            assert socket.gethostname() in screen.splitlines()[0]
            assert f"PID {wl.pid}" in screen and COMM_SHOWN in screen
            assert red_cells(styled(t)) == []
            t.send_keys("Escape")
            t.wait_for(lambda s: "COMMAND" in s, timeout=10)              # back on the process table
            t.send_keys("q")
            assert t.wait_exit(timeout=15) == 0
    finally:
        wl.kill()
        wl.wait()
        shutil.rmtree(short, ignore_errors=True)
