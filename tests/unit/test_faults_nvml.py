"""NVML reports a GPU lost mid-run (NVML_ERROR_GPU_IS_LOST, as after XID 79), through the whole
program: batch mode keeps running (exit 0, nothing on stderr), the lost GPU's every value becomes null
with reason "GPU is lost" while the other GPU's values stay exact, its processes leave the GPU view,
and once NVML answers again the GPU is back with its values. The fake NVML (tests/native/fake_nvml.c)
re-reads its script at every call; the rest is the real program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support import ROOT, build_native
from test_nvml import BASE

GPU_FIELDS = ("util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "temp_c", "power_w", "power_limit_w",
              "sm_clock_mhz", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "ecc_volatile_errors")


def values(gpu: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(gpu[f] for f in GPU_FIELDS)


def test_a_gpu_lost_mid_run_and_back(tmp_path: Path) -> None:
    lib = build_native("fake_nvml.c", "fake_nvml/libnvidia-ml.so.1", "-shared", "-fPIC")
    sleeper = subprocess.Popen(["sleep", "60"])
    base = "".join(ln + "\n" for ln in BASE.splitlines() if ln.startswith(("driver ", "gpu "))) + (
        f"proc 1 {sleeper.pid} 4294967296\n")
    script = tmp_path / "nvml.txt"
    script.write_text(base)
    env = {**os.environ, "GPUTOP_NVML_LIBRARY": str(lib), "FAKE_NVML_SCRIPT": str(script)}
    p = subprocess.Popen([sys.executable, "-m", "gputop.cli", "-b", "-f", "json", "-d", "0.3", "-n", "9", "--no-bpf"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    snaps = []
    try:
        assert p.stdout is not None
        for i in range(9):
            snaps.append(json.loads(p.stdout.readline()))
            if i == 2:
                script.write_text(base + "gpu 1 lost\n")        # from the 4th refresh on
            elif i == 5:
                script.write_text(base)                          # back from the 7th
            time.sleep(0.05)
        out, err = p.communicate(timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
        if p.poll() is None:
            p.kill()
    assert (p.returncode, out, err) == (0, "", "")
    before, lost, back = snaps[1], snaps[4], snaps[8]
    gpu0 = values(before["gpus"][0])
    assert gpu0 == (87.0, 45.0, 40 << 30, 80 << 30, 61.0, 412.345, 700.0, 1980.0, 1500 * 1024.0, 250 * 1024.0, 2)
    assert values(before["gpus"][1]) == (3.0, 1.0, 1 << 30, 16 << 30, 35.0, 56.0, 300.0, 1530.0, 0.0, 12 * 1024.0, 0)
    assert [(q["pid"], q["gpu_index"], q["gpu_mem_bytes"]) for q in before["processes"]] == [(sleeper.pid, 1, 4 << 30)]

    g0, g1 = lost["gpus"]
    assert values(g0) == gpu0                                    # the other GPU is unaffected
    assert (g1["index"], g1["uuid"], g1["name"]) == (1, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
                                                     "Tesla V100-SXM2-16GB")
    assert values(g1) == (None,) * len(GPU_FIELDS)               # unknown, never 0
    assert {g1["reasons"][f] for f in GPU_FIELDS} == {"GPU is lost"}
    assert lost["processes"] == []                               # nothing is known to run on it now
    assert lost["sources"]["nvml"]["status"] == "ok"

    assert [values(g) for g in back["gpus"]] == [gpu0, values(before["gpus"][1])]
    assert [(q["pid"], q["gpu_index"]) for q in back["processes"]] == [(sleeper.pid, 1)]
