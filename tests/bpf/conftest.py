"""BPF tests run real probes: they need root, bcc, uprobes and tracefs (all present on CI)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import SCAN_WAIT_S

from gputop.sources.bpf import BpfSource, BpfUnavailable, RawProc, has_privileges, load_bcc


def _precondition() -> str | None:
    if not has_privileges():
        return "BPF tests need root (or CAP_BPF + CAP_PERFMON)"
    try:
        load_bcc()
    except BpfUnavailable as e:
        return e.reason
    if not os.path.isdir("/sys/bus/event_source/devices/uprobe"):
        return "the kernel has no uprobe PMU"
    return None


_WHY = _precondition()


@pytest.fixture(scope="session", params=["links", "perf"])
def bpf_source(request: pytest.FixtureRequest) -> Iterator[BpfSource]:
    """gputop's source attaching with uprobe_multi links (Linux 6.6+), or with a perf event per
    probe (older kernels): every test that uses it runs both ways."""
    if _WHY:
        pytest.skip(_WHY)
    src = BpfSource(uprobe_links=request.param == "links")
    src.start()
    assert src.uprobes is not None
    if request.param == "links" and src.uprobes.mode != "links":
        src.close()
        pytest.skip("no uprobe_multi links here (Linux < 6.6, or a bcc that cannot load programs for them: 0.18)")
    yield src
    src.close()


class Run:
    """A workload started with --wait GOFILE: probes attach before it calls anything."""

    def __init__(self, src: BpfSource, argv: list[str], tmp: Path, env: dict[str, str] | None = None,
                 prefix: list[str] | None = None) -> None:
        self.src = src
        self.go = tmp / f"go-{time.monotonic_ns()}"
        full = [*(prefix or []), argv[0], "--wait", str(self.go), *argv[1:]]
        self.proc = subprocess.Popen(full, stdout=subprocess.PIPE, env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline().decode() if self.proc.stdout else ""
        assert line.startswith("ready"), f"workload did not start: {line!r}"
        self.pid = int(line.split()[1])     # the process that runs the ops (inside unshare: a child)

    def go_and_wait(self, timeout_s: float = 60) -> RawProc:
        self.src.scan([self.pid], wait_s=SCAN_WAIT_S)           # what the collector does on the exec event
        self.go.touch()
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None:
            self.src.poll(0.02)
            assert time.monotonic() < deadline, "workload timed out"
        assert self.proc.returncode == 0, f"workload failed: {self.proc.returncode}"
        self.go.unlink()
        reading = self.src.read()
        assert self.pid in reading.procs, f"no record for pid {self.pid}"
        return reading.procs[self.pid]


@pytest.fixture
def run_workload(bpf_source: BpfSource, tmp_path: Path):  # type: ignore[no-untyped-def]
    runs: list[Run] = []

    def start(argv: list[str], env: dict[str, str] | None = None, src: BpfSource | None = None,
              prefix: list[str] | None = None) -> Run:
        r = Run(src or bpf_source, [str(a) for a in argv], tmp_path, env, prefix)
        runs.append(r)
        return r

    yield start
    for r in runs:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()
        r.src.forget(r.pid)
