"""The exec tracepoint tells the host source which processes exec'd, so a command line is read
again even when the new program keeps the old name (`python` exec'ing `python`)."""

from __future__ import annotations

import subprocess
import sys
import time

from gputop.sources.bpf import BpfSource


def test_an_exec_is_in_the_next_reading(bpf_source: BpfSource) -> None:
    code = "import os, sys; sys.stdin.readline(); os.execv(sys.executable, [sys.executable, '-c', 'input()'])"
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        time.sleep(0.3)
        bpf_source.poll(0.05)
        assert p.pid in bpf_source.read().execed         # Popen's fork + exec
        bpf_source.poll(0.05)
        assert p.pid not in bpf_source.read().execed     # told once
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
        seen: set[int] = set()
        deadline = time.monotonic() + 10
        while p.pid not in seen and time.monotonic() < deadline:
            bpf_source.poll(0.1)
            seen |= bpf_source.read().execed
        assert p.pid in seen                              # the execv
    finally:
        p.kill()
        p.wait()
