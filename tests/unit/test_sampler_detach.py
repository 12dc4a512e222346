"""Quitting the dashboard does not wait for the kernel to detach the probes (issue 22, item 6):
``Sampler.detach_in_child`` forks a child that detaches once the parent has exited; the parent exits
at once with its own exit code. A real process tree (python -c), a BPF source that records its close."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import os, sys, time
    from gputop.feeds.live import Sampler, SamplerConfig

    out = sys.argv[1]

    class SlowBpf:
        probes = 3
        def close(self):
            # as the kernel's detach: slow, and it must happen after the parent has gone
            time.sleep(0.8)
            fds = sorted(os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2))
            with open(out, "w") as f:
                f.write(f"{os.getppid()} {os.getsid(0) == os.getpid()} {' '.join(fds)}")

    s = Sampler(SamplerConfig(use_bpf=False, use_nvml=False), bpf=SlowBpf())
    s.close_elsewhere = True
    print(f"pid {os.getpid()}", flush=True)
    if s.detach_in_child():
        os._exit(3)          # as the CLI: the exit code of the dashboard
    print("not forked", flush=True)
    """)


def test_the_parent_exits_at_once_and_a_child_detaches_after_it(tmp_path: Path) -> None:
    out = tmp_path / "closed"
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 3, r.stderr
    pid = int(r.stdout.removeprefix("pid "))
    assert r.stdout == f"pid {pid}\n"             # written once, nothing from the child
    assert r.stderr == ""
    assert not out.exists(), "the parent waited for the detach"
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    ppid, own_session, *fds = out.read_text().split()
    assert int(ppid) != pid and own_session == "True"     # it closed once its parent had exited
    assert fds == ["/dev/null"] * 3      # it can print nothing after the shell's prompt


def test_without_a_bpf_source_nothing_is_forked(tmp_path: Path) -> None:
    from gputop.feeds.live import Sampler, SamplerConfig

    s = Sampler(SamplerConfig(use_bpf=False, use_nvml=False))
    s.close_elsewhere = True
    assert s.detach_in_child() is False
