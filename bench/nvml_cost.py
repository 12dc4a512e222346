"""Cost of one NVML refresh: calls and time per ``NvmlSource.read()``.

The fake libnvidia-ml.so.1 (tests/native/fake_nvml.c) serves 8 GPUs and 64 processes, so the figures
are gputop's own cost around NVML (Python, pynvml, ctypes) plus a near-zero library; on a real driver
every call also goes to the kernel, and ``nvmlDeviceGetPcieThroughput`` samples for ~20 ms per call.
Side by side in the same run: the same pynvml calls made in a bare loop, without the source's
bookkeeping (the floor any pynvml-based reader pays).

    .venv/bin/python bench/nvml_cost.py [--reads 200] [--gpus 8] [--procs 64]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import benchjson  # noqa: E402

from gputop.sources.nvml import NvmlSource  # noqa: E402


def build_fake() -> Path:
    src = ROOT / "tests" / "native" / "fake_nvml.c"
    out = ROOT / ".cache" / "native" / "fake_nvml" / "libnvidia-ml.so.1"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        cc = shutil.which("gcc") or "cc"
        subprocess.run([cc, "-O1", "-g", "-Wall", "-o", str(out), str(src), "-shared", "-fPIC"], check=True)
    return out


def script(gpus: int, procs: int) -> str:
    lines = []
    for i in range(gpus):
        lines += [
            f"gpu {i} name NVIDIA H100 80GB HBM3",
            f"gpu {i} uuid GPU-{i:08x}-0000-0000-0000-000000000000",
            f"gpu {i} util {10 * i % 100} {5 * i % 100}",
            f"gpu {i} memory 85899345920 {(i + 1) << 30}",
            f"gpu {i} temp {40 + i}",
            f"gpu {i} power {300000 + i}",
            f"gpu {i} power_limit 700000",
            f"gpu {i} sm_clock 1980",
            f"gpu {i} pcie {1000 * i} {2000 * i}",
            f"gpu {i} ecc 0 0",
        ]
    for n in range(procs):
        pid, gpu = 10000 + n, n % gpus
        lines += [f"proc {gpu} {pid} {(n + 1) * 1048576}", f"putil {gpu} {pid} {n % 100} {n % 50}"]
    return "\n".join(lines) + "\n"


def bare_read(nv: Any, handles: list[Any]) -> None:
    """The pynvml calls of one read, without NvmlSource's error handling and bookkeeping."""
    for h in handles:
        nv.nvmlDeviceGetUtilizationRates(h)
        nv.nvmlDeviceGetMemoryInfo(h, nv.nvmlMemory_v2)
        nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        nv.nvmlDeviceGetPowerUsage(h)
        nv.nvmlDeviceGetEnforcedPowerLimit(h)
        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)
        nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)
        nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
        nv.nvmlDeviceGetMigMode(h)
        nv.nvmlDeviceGetComputeRunningProcesses(h)
        nv.nvmlDeviceGetMPSComputeRunningProcesses(h)
        nv.nvmlDeviceGetProcessUtilization(h, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=200, help="reads to time (median reported)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=64)
    benchjson.add_argument(ap)
    args = ap.parse_args()

    lib_path = build_fake()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nvml.script"
        path.write_text(script(args.gpus, args.procs))
        os.environ["FAKE_NVML_SCRIPT"] = str(path)

        fake = ctypes.CDLL(str(lib_path))
        fake.fake_nvml_calls.restype = ctypes.c_ulonglong
        src = NvmlSource(str(lib_path))
        first = src.read()  # initialisation, handles, event registration
        assert first.status.status == "ok", first.status
        sizes = (len(first.gpus), len(first.procs))
        assert sizes == (args.gpus, args.procs), sizes

        times, c_calls, py_calls = [], [], []
        for _ in range(args.reads):
            c0, p0 = fake.fake_nvml_calls(), src.calls
            t0 = time.perf_counter()
            src.read()
            times.append(time.perf_counter() - t0)
            c_calls.append(fake.fake_nvml_calls() - c0)
            py_calls.append(src.calls - p0)

        import pynvml

        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(args.gpus)]
        bare = []
        for _ in range(args.reads):
            t0 = time.perf_counter()
            bare_read(pynvml, handles)
            bare.append(time.perf_counter() - t0)
        src.close()

    med, bare_med = statistics.median(times), statistics.median(bare)
    cmd = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/nvml_cost.py", *sys.argv[1:]])
    print(f"command: {cmd}")
    py = sys.version.split()[0]
    print(f"fake NVML: {args.gpus} GPUs, {args.procs} processes; {args.reads} reads, python {py}")
    print(f"NVML calls per read (C entry points):      {statistics.median(c_calls):.0f}")
    print(f"pynvml calls per read (via query helper):  {statistics.median(py_calls):.0f}")
    print(
        f"time per read, NvmlSource.read():          median {med * 1e3:.3f} ms"
        f" (min {min(times) * 1e3:.3f}, max {max(times) * 1e3:.3f})"
    )
    print(f"time per read, bare pynvml loop:           median {bare_med * 1e3:.3f} ms")
    print(f"NvmlSource / bare pynvml:                  {med / bare_med:.2f}x")
    print(f"per C call, NvmlSource:                    {med / statistics.median(c_calls) * 1e6:.1f} us")
    benchjson.write(args.json, {
        "gpus": args.gpus, "procs": args.procs, "reads": args.reads, "c_calls_per_read": statistics.median(c_calls),
        "pynvml_calls_per_read": statistics.median(py_calls), "read_s": med, "read_min_s": min(times),
        "read_max_s": max(times), "bare_read_s": bare_med, "source_over_bare": med / bare_med,
        "per_c_call_s": med / statistics.median(c_calls)})


if __name__ == "__main__":
    main()
