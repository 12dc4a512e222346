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


def _host_mode() -> str:
    """How gputop attaches on this host: "links" (uprobe_multi, Linux 6.6+ with bcc 0.21+) unless the
    kernel or bcc lacks them or GPUTOP_UPROBE_LINKS=off says perf events."""
    if _WHY:
        return "perf"
    from gputop.sources.bpf.attach.uprobes import bcc_loads_for_links, links_supported, links_wanted

    bcc = load_bcc()
    return "links" if links_wanted() and bcc_loads_for_links(bcc.BPF, bcc.lib) and links_supported() else "perf"


#: the attach mode of every test that takes ``bpf_source`` and is not marked ``attach_modes``
HOST_MODE = _host_mode()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``bpf_source`` in the host's attach mode; ``@pytest.mark.attach_modes("links", "perf")`` where the
    behaviour differs by mode (attach and detach, descriptors, probes left, releases), each mode then
    one session source (pytest groups the tests by it)."""
    if "bpf_source" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("attach_modes")
    modes = list(marker.args) if marker else [HOST_MODE]
    metafunc.parametrize("bpf_source", modes, indirect=True, scope="session")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After pytest's own grouping (by parameter index: a test marked with one mode that is not the
    host's shares index 0 with the host's tests), the host-mode tests first, then each other mode's:
    one session source per mode, started once. A test marked for both runtimes and both modes runs
    each runtime in the host's mode and the default runtime (12) in the other: how probes attach is
    the same for every runtime, and a runtime attached as perf events costs ~14 s to detach."""
    order = [*dict.fromkeys([HOST_MODE, "links", "perf"])]

    def mode(item: pytest.Item) -> str | None:
        callspec = getattr(item, "callspec", None)
        return callspec.params.get("bpf_source") if callspec else None

    def redundant(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        return (mode(item) not in (None, HOST_MODE) and callspec is not None
                and callspec.params.get("rt", 12) != 12)

    dropped = [item for item in items if redundant(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not redundant(item)]

    at = [i for i, item in enumerate(items) if mode(item) is not None]
    ranked = sorted((items[i] for i in at), key=lambda item: order.index(mode(item) or HOST_MODE))
    for i, item in zip(at, ranked):
        items[i] = item


@pytest.fixture(scope="session")
def bpf_source(request: pytest.FixtureRequest) -> Iterator[BpfSource]:
    """gputop's source attaching with uprobe_multi links (Linux 6.6+), or with a perf event per
    probe (older kernels): as this host attaches, or each mode the test is marked with."""
    if _WHY:
        pytest.skip(_WHY)
    src = BpfSource(uprobe_links=request.param == "links")
    src.start()
    assert src.uprobes is not None
    if request.param == "links" and src.uprobes.mode != "links":
        src.close()
        pytest.skip("no uprobe_multi links here (Linux < 6.6, or a bcc that cannot load programs for them: 0.18)")
    src.uprobes.wait_preloaded()        # descriptors and programs counted from here hold still
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
