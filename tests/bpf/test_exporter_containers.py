"""The real `gputop exporter --aggregate container --buckets log16` tracing real workloads in two real
cgroups named as container runtimes name them: one row per container with its processes' exact totals,
coarse histogram bounds, totals that stay when a process exits and goes, and a container forgotten
after the grace period once its last process went."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from promserver import Exporter, wait_until
from support import Workloads

C1, C2 = "c1" * 32, "c2" * 32
GRACE_S = 3.0


@pytest.fixture
def cgroups() -> Iterator[dict[str, Path]]:
    """Two cgroup v2 directories as docker names them (``docker-<id>.scope``); removed afterwards."""
    mounts = [ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines() if ln.split()[2] == "cgroup2"]
    assert mounts, "no cgroup2 mount"
    top = Path(mounts[0]) / f"gputop-test-{os.getpid()}"
    dirs = {c: top / f"docker-{c}.scope" for c in (C1, C2)}
    for d in dirs.values():
        d.mkdir(parents=True)
    try:
        yield dirs
    finally:
        for d in (*dirs.values(), top):
            deadline = time.monotonic() + 10
            while d.exists():
                try:
                    d.rmdir()
                except OSError:
                    assert time.monotonic() < deadline, f"{d} still holds processes"
                    time.sleep(0.1)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(m: dict, name: str, **labels: str) -> float | None:
    return m.get((name, tuple(sorted(labels.items()))))


def test_container_rows_are_their_processes_exact_totals(workloads: Workloads, cgroups: dict[str, Path],
                                                         tmp_path: Path) -> None:
    exp = Exporter("-d", "0.5", "--bpf", "--no-nvml", "--exited-grace", f"{GRACE_S:g}", "--aggregate", "container",
                   "--buckets", "log16")
    procs: list[subprocess.Popen[bytes]] = []
    go = tmp_path / "go"

    def start(container: str, *steps: str) -> subprocess.Popen[bytes]:
        # joins the cgroup, then execs: gputop first sees the workload already in its container
        p = subprocess.Popen(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroups[container]),
                              str(workloads.dynamic), "--wait", str(go), *steps], stdout=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.readline()
        procs.append(p)
        return p

    try:
        exp.healthy()
        a = start(C1, "launch:300:40,2,1:128,1,1:0", "memcpy:4:1:1000", "sleep:1500")
        b = start(C1, "launch:200:1,1,1:1,1,1:1", "sleep:600000")
        c = start(C2, "launch:70:1,1,1:32,1,1:0", "memcpy:2:2:500", "sleep:600000")
        time.sleep(1.0)                 # the exec events attach gputop to the three
        go.touch()
        m = wait_until("both containers' launches", lambda: (
            lambda m: m if value(m, "gputop_kernel_launches_total", container=C1) == 500
            and value(m, "gputop_kernel_launches_total", container=C2) == 70 else None)(samples(exp.metrics())), 30)
        assert value(m, "gputop_container_processes", container=C1) == 2
        assert value(m, "gputop_container_processes", container=C2) == 1
        assert value(m, "gputop_memcpy_bytes_total", container=C1, direction="h2d") == 4000
        assert value(m, "gputop_memcpy_bytes_total", container=C2, direction="d2h") == 1000
        assert value(m, "gputop_kernel_grid_blocks_count", container=C1) == 500
        assert value(m, "gputop_kernel_grid_blocks_sum", container=C1) == 300 * 80 + 200
        assert value(m, "gputop_kernel_grid_blocks_bucket", container=C1, le="15.0") == 200
        assert value(m, "gputop_kernel_grid_blocks_bucket", container=C1, le="255.0") == 500
        assert value(m, "gputop_kernel_block_threads_bucket", container=C2, le="255.0") == 70
        les = sorted({dict(k[1])["le"] for k in m if k[0] == "gputop_kernel_block_threads_bucket"})
        assert les == ["+Inf", "15.0", "2047.0", "255.0"]
        assert not [k for k in m if "pid" in dict(k[1])]

        # a's exit, then its grace period: C1 keeps a's 300 launches
        assert a.wait(timeout=30) == 0
        gone = time.monotonic()
        wait_until("a to be past its grace period", lambda: time.monotonic() - gone > GRACE_S + 1.5, 10)
        m = wait_until("a fresh scrape", lambda: samples(exp.metrics()), 5)
        assert value(m, "gputop_kernel_launches_total", container=C1) == 500
        assert value(m, "gputop_container_processes", container=C1) == 1
        assert value(m, "gputop_memcpy_bytes_total", container=C1, direction="h2d") == 4000

        # C1 emptied: its row goes after its last process's grace period and the container's own
        b.kill()
        b.wait()
        wait_until("C1 to be forgotten", lambda: f'container="{C1}"' not in exp.metrics(), 4 * GRACE_S + 10)
        assert value(samples(exp.metrics()), "gputop_kernel_launches_total", container=C2) == 70
        c.kill()
        c.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        rc, err = exp.stop()
    assert rc == 0, err
    assert "Traceback" not in err
