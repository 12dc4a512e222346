"""bench/gpu_validate.py, the GPU validation's harness, on the test bed (no GPU): its phase
accounting (a process's totals in the idle time after its phase, less those before), a process
started before gputop, its table and verdict, against the real gputop and the real libcudart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from support import ROOT, TESTBED

HARNESS = [sys.executable, str(ROOT / "bench" / "gpu_validate.py"), "--testbed",
           "--cudart", str(TESTBED / "cudart" / "libcudart.so.12")]
OWN = {"launches": 3000, "grid_blocks_sum": 240000, "block_threads_sum": 384000, "memcpy.h2d.calls": 300,
       "memcpy.h2d.bytes": 300000, "memcpy.d2h.calls": 300, "memcpy.d2h.bytes": 150000, "sync_calls": 300}


def test_the_harness_counts_each_phase_exactly(tmp_path: Path) -> None:
    res = subprocess.run([*HARNESS, "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[-1] == "gpu validation: 16/16 exact"
    results = json.loads((tmp_path / "results.json").read_text())
    for workload in ("testbed_before", "testbed"):
        mine = {r["metric"]: r for r in results if r["workload"] == workload}
        assert {m: r["gputop"] for m, r in mine.items() if r["source"] == "own"} == OWN
        assert mine["uvm_gpu_faults"] == {"workload": workload, "metric": "uvm_gpu_faults", "oracle": None,
                                          "source": "info", "gputop": None, "exact": False}    # unknown: N/A
    # the first was running before gputop: its warm-up (its library loaded) came before gputop's first snapshot
    first = json.loads((tmp_path / "snapshots.jsonl").read_text().splitlines()[0])
    pid = json.loads((tmp_path / "testbed_before.report.json").read_text())["pid"]
    assert pid in {p["pid"] for p in first["processes"]}
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("testbed  launches"))
    assert line.split() == ["testbed", "launches", "3000", "(own)", "3000", "exact"]


def test_what_gputop_did_not_see_fails_the_validation(tmp_path: Path) -> None:
    # gputop shown only PID 1: it has no row of either workload, and the harness says so
    res = subprocess.run([*HARNESS, "--out", str(tmp_path), "--gputop", f"{sys.executable} -m gputop.cli -p 1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert [ln.split() for ln in res.stdout.splitlines()] == [
        ["testbed_before", "seen", "in", "both", "idle", "times", "1", "(own)", "0", "DIFF"],
        ["testbed", "seen", "in", "both", "idle", "times", "1", "(own)", "0", "DIFF"],
        ["gpu", "validation:", "0/2", "exact"]]
    assert res.stderr.splitlines() == [
        f"{w}: no gputop snapshot of the process in the idle time before its phase (0 rows in all)"
        for w in ("testbed_before", "testbed")]


def test_launch_cost_and_probe_hits_per_launch(tmp_path: Path) -> None:
    """bench/gpu_launch_cost.py on the test bed: rounds without and with gputop, and one probe hit per
    runtime launch (only cudaLaunchKernel's probe fires here; on a GPU host the figure says whether the
    runtime's own driver call is probed too). Hits are sampled in gputop's statistics windows: a ratio
    of rates, hence two percent either way."""
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_launch_cost.py"), "--testbed",
                          "--cudart", str(TESTBED / "cudart" / "libcudart.so.12"),
                          "--gputop", f"{sys.executable} -m gputop.cli", "--rounds", "1", "--seconds", "6"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("round 1: ") and " ns per launch without gputop, " in lines[0]
    assert lines[1].startswith("cudaLaunchKernel (")
    assert lines[1].endswith("batches of 500, medians of 1 rounds A B A B:")
    assert lines[2].startswith("  without gputop ") and " ns per launch (" in lines[2]
    assert 0.98 <= float(lines[3].split(": ")[1].split()[0]) <= 1.02, lines[3]


def test_a_time_limit_keeps_what_was_compared(tmp_path: Path) -> None:
    """The GPU host's run gives the validation a time limit (bench/gpu_session.sh): at SIGTERM the harness
    keeps the lines of the workloads it compared, says it stopped early, and leaves no gputop behind."""
    proc = subprocess.Popen([*HARNESS, "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    assert proc.stdout is not None
    first = [proc.stdout.readline() for _ in range(12)]        # testbed_before's 12 lines, printed when compared
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert [ln.split()[0] for ln in first] == ["testbed_before"] * 12
    assert out.splitlines()[-1] == "gpu validation: 8/8 exact (stopped early)"
    assert "stopped (SIGTERM): the workloads not yet compared are left out" in err
    assert len(json.loads((tmp_path / "results.json").read_text())) == 12
    gputop = int((tmp_path / "snapshots.pid").read_text())
    assert not Path(f"/proc/{gputop}").exists()          # stopped and reaped


def test_without_bpf_only_nvmls_view_is_compared(tmp_path: Path) -> None:
    """Where gputop cannot trace (a sandbox without eBPF), the GPU host's run still compares NVML's
    per-process memory with nvidia-smi's: gputop runs with --no-bpf and no counted figure is asked of it.
    Here there is neither NVML nor nvidia-smi: each workload's one line is info, and nothing is exact."""
    res = subprocess.run([*HARNESS, "--no-bpf", "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert [ln.split() for ln in res.stdout.splitlines()] == [
        ["testbed_before", "gpu_mem_mib", "N/A", "(info)", "N/A", "info"],
        ["testbed", "gpu_mem_mib", "N/A", "(info)", "N/A", "info"],
        ["gpu", "validation:", "0/0", "exact"]]
    first = json.loads((tmp_path / "snapshots.jsonl").read_text().splitlines()[0])
    assert first["sources"]["bpf"]["status"] == "unavailable"


def test_an_earlier_runs_folder_is_refused(tmp_path: Path) -> None:
    """--out of an earlier run holds its go, ready and report files, which would stand for this run's."""
    (tmp_path / "before.report.json").write_text("{}")
    res = subprocess.run([*HARNESS, "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr.splitlines() == [f"gputop: error: {tmp_path} is not empty",
                                       "hint: give --out a new or empty folder"]
