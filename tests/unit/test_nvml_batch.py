"""The fake NVML through the whole program: `gputop -b -f json` shows the scripted GPUs and joins
NVML's processes with host data, launch fields null when BPF is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import ROOT, build_native
from test_nvml import BASE

# GPU 0 of test_nvml's script, with a real process (a `sleep`) on it
SCRIPT = "".join(line + "\n" for line in BASE.splitlines() if line.startswith(("driver ", "gpu 0 "))) + (
    "proc 0 {pid} 1073741824\nputil 0 {pid} 37 5\n")


def test_batch_json_carries_scripted_nvml_values(tmp_path: Path) -> None:
    lib = build_native("fake_nvml.c", "fake_nvml/libnvidia-ml.so.1", "-shared", "-fPIC")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        script = tmp_path / "nvml.txt"
        script.write_text(SCRIPT.format(pid=sleeper.pid))
        env = {**os.environ, "GPUTOP_NVML_LIBRARY": str(lib), "FAKE_NVML_SCRIPT": str(script)}
        res = subprocess.run([sys.executable, "-m", "gputop.cli", "-b", "-n", "1", "-d", "0.3", "-f", "json",
                              "--no-bpf"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    assert snap["sources"]["nvml"] == {"status": "ok", "reason": None}
    (gpu,) = snap["gpus"]
    assert (gpu["name"], gpu["util_pct"], gpu["mem_used_bytes"], gpu["mem_total_bytes"]) == (
        "NVIDIA H100 80GB HBM3", 87.0, 40 << 30, 80 << 30)
    assert (gpu["temp_c"], gpu["power_w"], gpu["power_limit_w"], gpu["sm_clock_mhz"]) == (61.0, 412.345, 700.0, 1980.0)
    assert (gpu["pcie_tx_bytes_per_s"], gpu["pcie_rx_bytes_per_s"], gpu["ecc_volatile_errors"]) == (
        1500 * 1024.0, 250 * 1024.0, 2)
    (proc,) = snap["processes"]
    assert (proc["pid"], proc["comm"], proc["gpu_index"], proc["gpu_mem_bytes"], proc["gpu_util_pct"]) == (
        sleeper.pid, "sleep", 0, 1 << 30, 37.0)
    assert proc["interval"] is None and proc["total"] is None and proc["rates"] is None   # BPF off: null
    assert proc["launch_bound"] is None
