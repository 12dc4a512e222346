"""Issue 40, live: a tenant (uid 65534) against a root ``gputop -b``, trying to make it lose another
tenant's data through the events its process life sends (bpf/life.bpf.h, docs/SECURITY.md "Fair share").
The review's freeze was a loop of mmap and munmap of a library gputop had probed: an event and a
rescan per call, a drain that never ended while the loop refilled it (0 snapshots in 30 s, SIGTERM
ignored, victims started meanwhile never seen). Its chmod variant named the file anew at every
mapping (6 million ring-buffer drops). Each test runs the attack against the real program and
asserts the refresh cadence, the victims' exact counts and what the attacker's loss is counted as."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import build_native
from test_hostile_objects_live import NOBODY, _as_nobody, _Batch, nobody_dir  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.serial]     # refresh cadence: run alone (./test.sh), not beside the QEMU guests

INTERVAL_S = 0.5
VICTIMS = 3
LAUNCHES = 500
ATTACK_S = 12.0


def _attackers(lib: Path, mode: str) -> list[subprocess.Popen[str]]:
    """tests/native/map_churn.c as uid 65534 for ATTACK_S, started once they map: three mapping ``lib``
    (one kept up with 150,000 events a second; three stalled the refreshes 5.7 s and lost 936,904 events
    before), or one forking."""
    exe = build_native("map_churn.c", "map_churn", "-ldl")
    procs = []
    for _ in range(1 if mode == "fork" else 3):
        p = subprocess.Popen([str(exe), str(lib), str(ATTACK_S), *((mode,) if mode != "map" else ())],
                             stdout=subprocess.PIPE, text=True, preexec_fn=_as_nobody, cwd="/")
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().startswith("mapping")
    return procs


def _objects(gt: _Batch) -> int:
    return int(gt.lines[-1][1]["sources"]["bpf"]["objects"])


def _victims(gt: _Batch, workloads: Any, libs: list[Path], tmp_path: Path) -> dict[int, int]:
    """Each of ``libs`` (a libcudart no gputop probed yet) loaded by a process of its own while the attack
    runs; once gputop probed them all, each makes LAUNCHES launches and exits. Their exact totals, as
    gputop's last snapshot that shows each."""
    before = _objects(gt)
    runs = []
    for i, lib in enumerate(libs):
        go = tmp_path / f"go{i}"
        p = subprocess.Popen([str(workloads.dlopen), "--wait", str(go), "--cudart", str(lib),
                              f"launch:{LAUNCHES}:1,1,1:1,1,1:0", "sleep:1500"], stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().startswith("ready")
        runs.append((p, go))
    deadline = time.monotonic() + 10
    while _objects(gt) < before + len(libs):
        assert time.monotonic() < deadline, f"victims' runtimes probed: {_objects(gt) - before} of {len(libs)}"
        time.sleep(0.1)
    for _p, go in runs:
        go.touch()
    for p, _go in runs:
        assert p.wait(timeout=60) == 0
    time.sleep(3 * INTERVAL_S)
    pids = {p.pid for p, _ in runs}
    last = {p["pid"]: p for _, snap in gt.lines for p in snap["processes"] if p["pid"] in pids}
    return {pid: (last[pid]["total"] or {}).get("launches") for pid in pids if pid in last}


def _copies(testbed: Any, d: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        (d / f"v{i}").mkdir()
        out.append(d / f"v{i}" / "libcudart.so.12")
        shutil.copy(testbed.libcudart, out[-1])
    return out


@pytest.mark.parametrize("mode", ["map", "chmod", "fork"])
def test_a_tenant_churning_process_life_neither_stalls_gputop_nor_hides_others(
        mode: str, workloads: Any, testbed: Any, tmp_path: Path, nobody_dir: Path) -> None:  # noqa: F811
    """map: the review's loop of mmap and munmap of a library gputop probed (the test bed's libcudart,
    loaded by a process first); chmod: over the tenant's own copy, its mode changed before each
    mapping; fork: a traced process forking children that exit at once (an event each: past the
    tenant's share). While it runs, every refresh comes within one interval of when it was due, three
    processes started by another tenant with runtimes of their own are probed and counted exactly,
    what was lost is the attacker's only, and SIGTERM stops gputop."""
    gt = _Batch(tmp_path)                   # -d 0.5
    holder = None
    attackers: list[subprocess.Popen[str]] = []
    rc = None
    try:
        target = testbed.libcudart
        if mode == "map":
            holder = subprocess.Popen([str(workloads.dlopen), "--cudart", str(target), "launch:1:1,1,1:1,1,1:0",
                                       "sleep:60000"], stdout=subprocess.PIPE, text=True)
            assert holder.stdout is not None and holder.stdout.readline().startswith("ready")
            deadline = time.monotonic() + 10
            while _objects(gt) < 1:                 # probed before the attack
                assert time.monotonic() < deadline, "the test bed's runtime was not probed"
                time.sleep(0.1)
        elif mode == "chmod":
            target = nobody_dir / "libcudart.so.12"
            shutil.copy(testbed.libcudart, target)
            os.chown(target, NOBODY, NOBODY)
        t0 = time.monotonic()
        attackers = _attackers(target, mode)
        totals = _victims(gt, workloads, _copies(testbed, tmp_path, VICTIMS), tmp_path)
        time.sleep(max(0.0, t0 + 6.0 - time.monotonic()))     # 6 s of attack at least: 12 refreshes
        stopping = time.monotonic()
        rc = gt.stop()
        stop_s = time.monotonic() - stopping
        mappings = sum(int(p.stdout.read().split()[-1]) for p in attackers if p.stdout is not None)
    finally:
        for p in (holder, *attackers):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        if rc is None:
            gt.stop()
    assert mappings > (10_000 if mode == "fork" else 100_000), mappings     # the attack ran
    lost = {tenant: kinds for _, snap in gt.lines
            for tenant, kinds in (snap["sources"]["bpf"].get("dropped_by_tenant") or {}).items()}
    assert set(lost) <= {f"uid:{NOBODY}"}, lost       # nobody else lost an event
    if mode == "fork":                                # 2,048 events a second: the rest are its loss
        assert lost[f"uid:{NOBODY}"]["events"] > 1000, lost
    assert list(totals.values()) == [LAUNCHES] * VICTIMS, totals
    gaps = gt.gaps_after(t0)
    assert len(gaps) >= 10 and max(gaps) < 2 * INTERVAL_S, f"a refresh came {max(gaps):.2f} s after the one before"
    assert rc == 0 and stop_s < 10, (rc, stop_s)
