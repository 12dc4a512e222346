"""End to end (issue 22, items 5 and 6): the real `gputop` in tmux at 80×24 keeps every key in its
footer, and `q` gives the terminal back without waiting for the probes to detach.

The quit test is timed against a baseline measured in the same run (the same program with --no-bpf,
which has nothing to detach): with the BPF collector and probes attached to two CUDA workloads, the
terminal comes back and the process exits within 0.25 s of the baseline's times; the probes are
detached by a child left behind (no terminal, standard streams on /dev/null, so nothing is printed
after the shell's prompt), and within seconds no program or link gputop held stays loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_driver import TmuxSession, have_tmux, process_tree

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "data" / "scenario.jsonl"
sys.path.insert(0, str(ROOT / "tests" / "bpf"))

from kernel_state import held_by, probe_events_of, still_loaded  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not have_tmux(), reason="tmux not installed")]

FOOTER_80_LIVE = " / Filter s Sort ⏎ Details ␣ Tag c Compare k Kill q Quit ? Help p Pause t Theme"
FOOTER_80_REPLAY = " / Filter s Sort ⏎ Details ␣ Tag c Compare q Quit ? Help p Pause t Theme ., Step"
#: the footer's text while the dashboard shows (gone once the terminal is restored)
SHOWING = "q Quit"


def gputop(*args: str) -> list[str]:
    return [sys.executable, "-m", "gputop.cli", *args]


def test_footer_at_80x24_keeps_every_key_in_a_replay(tmp_path: Path) -> None:
    with TmuxSession(gputop("--replay", str(SCENARIO)), width=80, height=24,
                     env={"XDG_CONFIG_HOME": str(tmp_path)}, cwd=ROOT) as t:
        screen = t.wait_for("REPLAY", timeout=30)
        assert screen.splitlines()[23].rstrip() == FOOTER_80_REPLAY
        t.send_keys("q")
        assert t.wait_exit(timeout=15) == 0


def test_footer_at_80x24_keeps_every_key_live(tmp_path: Path) -> None:
    with TmuxSession(gputop("--no-bpf", "--no-nvml"), width=80, height=24,
                     env={"XDG_CONFIG_HOME": str(tmp_path)}, cwd=ROOT) as t:
        screen = t.wait_for("no CUDA process seen yet", timeout=30)
        assert screen.splitlines()[23].rstrip() == FOOTER_80_LIVE
        t.send_keys("q")
        assert t.wait_exit(timeout=15) == 0


def _gputop_pid(t: TmuxSession) -> int:
    for pid in process_tree(t.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"\0gputop.cli\0" in cmdline:      # python -m gputop.cli (not the shell that runs it)
            return pid
    raise AssertionError("no gputop process in the pane")


def _quit(t: TmuxSession) -> tuple[float, float]:
    """Press q; (seconds until the dashboard is gone from the terminal, until the process has exited)."""
    t0 = time.monotonic()
    t.send_keys("q")
    t.wait_for(lambda s: SHOWING not in s, timeout=30, poll=0.005)
    restored = time.monotonic() - t0
    assert t.wait_exit(timeout=60, poll=0.005) == 0
    return restored, time.monotonic() - t0


@pytest.fixture
def two_workloads(workloads, tmp_path: Path) -> Iterator[tuple[int, int]]:
    """Two processes of the test bed's CUDA runtime (dynamic and static), 1000 launches/s for 60 s."""
    go = tmp_path / "go"
    procs = [subprocess.Popen([str(exe), "--wait", str(go), "paced:1000:60000"], stdout=subprocess.PIPE)
             for exe in (workloads.dynamic, workloads.static)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
    go.touch()
    yield procs[0].pid, procs[1].pid
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="the BPF collector needs root")
def test_q_gives_the_terminal_back_without_waiting_for_the_probes(two_workloads: tuple[int, int],
                                                                   tmp_path: Path) -> None:
    pids = ",".join(map(str, two_workloads))
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    # the baseline: the same dashboard with nothing to detach
    with TmuxSession(gputop("--no-bpf", "--no-nvml"), width=120, height=30, env=env, cwd=ROOT) as t:
        t.wait_for("no CUDA process seen yet", timeout=30)
        time.sleep(1)
        baseline, baseline_exited = _quit(t)
    with TmuxSession(gputop("--bpf", "--no-nvml", "-p", pids), width=120, height=30, env=env, cwd=ROOT) as t:
        t.wait_for(lambda s: "BPF ok" in s and "wl_static" in s and "wl_dynamic" in s, timeout=90)
        time.sleep(2)
        pid = _gputop_pid(t)
        held = held_by(pid)
        assert held.progs, "the collector holds no BPF program: nothing was attached"
        restored, exited = _quit(t)
        screen = t.capture()
        # the probes are detached by a child of its own session, which can print nothing anywhere
        children = _detaching(pids)
        for child in children:
            assert os.getsid(child) == child
            assert {os.readlink(f"/proc/{child}/fd/{fd}") for fd in (0, 1, 2)} == {os.devnull}
        # ... and soon: nothing gputop loaded stays after it exits, its probes were not leaked
        deadline = time.monotonic() + 30
        while (_detaching(pids) or still_loaded(held) != ([], [])) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert still_loaded(held) == ([], [])
        assert probe_events_of(pid) == []
        assert _detaching(pids) == []
        assert t.capture() == screen            # nothing printed once the program had exited
    print(f"q -> terminal restored: {restored:.3f} s with BPF, {baseline:.3f} s without; "
          f"-> process exited: {exited:.3f} s with BPF, {baseline_exited:.3f} s without; "
          f"{len(children)} child detaching")
    assert restored <= baseline + 0.25, (restored, baseline, exited)
    assert exited <= baseline_exited + 0.25, (exited, baseline_exited, restored)


def _detaching(pids: str) -> list[int]:
    """gputop processes still running with ``-p pids`` (its command line): the child left detaching."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gputop.cli" in argv and pids.encode() in argv:
            found.append(int(entry.name))
    return found
