"""The real `gputop -b` against real workloads: exact numbers in the JSON and the text table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support import table_rows

from gputop.sources.bpf.program.privileges import ENABLE_HINT

GPUTOP = [sys.executable, "-m", "gputop.cli"]
ROOT = Path(__file__).resolve().parent.parent.parent


def _reader(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)


def test_batch_json_exact_counts_and_exit(workloads, tmp_path) -> None:
    gt = subprocess.Popen([*GPUTOP, "-b", "-f", "json", "-d", "0.5", "--no-nvml", "--bpf"], stdout=subprocess.PIPE,
                          text=True, cwd=ROOT)
    snaps = _reader(gt)
    try:
        first = next(snaps)
        assert first["schema"] == "gputop/1" and first["sources"]["bpf"]["status"] == "ok"
        go = tmp_path / "go"
        wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0",
                               "memcpy:4:1:1000", "memcpy:2:2:500", "sync:3", "sleep:1200"], stdout=subprocess.PIPE)
        interval_launches = 0
        seen_running = None
        deadline = time.monotonic() + 60
        for snap in snaps:
            procs = {p["pid"]: p for p in snap["processes"]}
            p = procs.get(wl.pid)
            if p is None:
                assert go.exists() or time.monotonic() < deadline, "gputop never listed the workload"
                continue
            if not go.exists():          # listed: the exec event attached gputop to it (a fixed second was
                go.touch()               # short on a loaded host: its syncs were lost)
            interval_launches += p["interval"]["launches"]
            if p["state"] == "running":
                seen_running = p
            else:
                break
        wl.wait()
        assert seen_running is not None, "the process was never shown while running"
        assert p["state"] == "exited"
        assert p["total"]["launches"] == 6000 and interval_launches == 6000
        assert p["total"]["memcpy"]["h2d"] == {"calls": 4, "bytes": 4000}
        assert p["total"]["memcpy"]["d2h"] == {"calls": 2, "bytes": 1000}
        assert p["total"]["sync_calls"] == 3
        assert p["total"]["uvm_gpu_faults"] is None        # unknown here, never 0
        assert p["grid_blocks_hist"] == {"2^6": 6000} and p["block_threads_hist"] == {"2^7": 6000}
        # sums compose: a whole run's average is total sum / total launches
        assert (p["total"]["grid_blocks_sum"], p["total"]["block_threads_sum"]) == (6000 * 80, 6000 * 128)
        k = p["kernels"][0]
        assert (k["name"], k["launches"], k["grid_blocks_avg"], k["block_threads_avg"]) == (
            "fused_step(float*, float*, int)", 6000, 80.0, 128.0)
        assert seen_running["comm"] == "wl_dynamic" and seen_running["user"] == "root"
        nxt = next(snaps)                # shown exited once, then gone
        assert wl.pid not in {q["pid"] for q in nxt["processes"]}
        assert nxt["sources"]["bpf"]["probe_hits_per_s"] is not None
    finally:
        gt.terminate()
        gt.wait()


def test_batch_table_with_pid_filter_on_a_running_process(workloads, tmp_path) -> None:
    go = tmp_path / "go"
    # paced for 60 s, stopped once gputop is done: its start (a BPF compile beside the QEMU guests) may take longer
    # than a short workload lives, and the last frame is to show it running
    wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "paced:2000:120000"], stdout=subprocess.PIPE)
    other = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "paced:500:30000"], stdout=subprocess.PIPE)
    try:
        assert wl.stdout is not None and wl.stdout.readline().startswith(b"ready")
        go.touch()
        out = subprocess.run([*GPUTOP, "-b", "-n", "2", "-d", "1", "-p", str(wl.pid), "--no-nvml"],
                             capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    finally:
        for p in (wl, other):
            p.kill()
            p.wait()
    rows = table_rows(out)
    assert {int(r["PID"]) for r in rows} == {wl.pid}    # -p hides the other process
    last = rows[-1]
    assert last["COMMAND"] == f"wl_dynamic --wait {go} paced:2000:120000"    # whole, last
    assert (last["USER"], last["GPU"]) == ("root", "N/A")
    rate = float(last["LAUNCH/s"].rstrip("k")) * (1000 if last["LAUNCH/s"].endswith("k") else 1)
    assert 1500 <= rate <= 2500                         # paced at 2000/s over a 1 s refresh


#: root without capabilities (its tracefs is its own: CAP_DAC_READ_SEARCH is not needed)
NOPERM = ("tracing needs CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH (root has them): missing CAP_BPF, "
          "CAP_PERFMON")


def test_bpf_required_without_privileges_exits_77(tmp_path) -> None:
    # root without capabilities, as in a container without CAP_BPF
    cmd = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *GPUTOP, "-b", "-n", "1", "-f", "json", "--no-nvml"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([*cmd, "--bpf"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert res.returncode == 77
    lines = res.stderr.splitlines()
    assert lines == [f"gputop: error: {NOPERM}", f"hint: {ENABLE_HINT}"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert res.returncode == 0, res.stderr
    # without --bpf: one line says why tracing is off and how to turn it on, the snapshot follows
    assert res.stderr == f"gputop: tracing is off ({NOPERM}): NVML and host data only. To trace: {ENABLE_HINT}\n"
    snap = json.loads(res.stdout)
    assert snap["sources"]["bpf"] == {"status": "unavailable", "reason": NOPERM, "objects": None, "probes": None,
                                      "dropped": None, "dropped_by_tenant": None, "overhead_ns_per_s": None,
                                      "probe_hits_per_s": None,
                                      "cost_ns_per_s": None, "trap_ns": None, "stats_age_s": None, "headers": None,
                                      "attach": None, "probes_failed": None}
