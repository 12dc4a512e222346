"""NvmlSource against the REAL libnvidia-ml.so.1 of the test bed, on this GPU-less machine.

Each test runs in a fresh interpreter: pynvml keeps the loaded library in a module global, so a clean
process shows what a user's gputop would do with that library and nothing else loaded before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import support

READ = """
import json, sys
from gputop.sources.nvml import NvmlSource
src = NvmlSource(sys.argv[1] if len(sys.argv) > 1 else None)
r1 = src.read()
src.INIT_RETRY_S = 0.0
r2 = src.read()          # tries nvmlInit again
src.close(); src.close()
print(json.dumps({"status": [r1.status.status, r1.status.reason, r2.status.status, r2.status.reason],
                  "gpus": len(r1.gpus) + len(r2.gpus), "procs": len(r1.procs) + len(r2.procs),
                  "calls": src.calls}))
"""


def _run(*args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", READ, *args],
        cwd=support.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_real_library_without_driver_is_unavailable(testbed: support.Testbed) -> None:
    r = _run(str(testbed.libnvidia_ml))
    # what libnvidia-ml 535 says here: nvmlInit returns NVML_ERROR_DRIVER_NOT_LOADED
    assert r == {
        "status": ["unavailable", "Driver Not Loaded", "unavailable", "Driver Not Loaded"],
        "gpus": 0,
        "procs": 0,
        "calls": 2,  # one nvmlInit per read, nothing else
    }


def test_real_library_from_environment(testbed: support.Testbed) -> None:
    env = dict(os.environ, GPUTOP_NVML_LIBRARY=str(testbed.libnvidia_ml))
    env.pop("FAKE_NVML_SCRIPT", None)
    r = _run(env=env)
    assert r["status"] == ["unavailable", "Driver Not Loaded", "unavailable", "Driver Not Loaded"]


def test_real_library_by_ld_library_path(testbed: support.Testbed) -> None:
    """Without a path, pynvml opens libnvidia-ml.so.1 by name: LD_LIBRARY_PATH finds the test bed's."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(testbed.nvidia_dir))
    env.pop("GPUTOP_NVML_LIBRARY", None)
    r = _run(env=env)
    assert r["status"] == ["unavailable", "Driver Not Loaded", "unavailable", "Driver Not Loaded"]


def test_no_library_on_the_machine() -> None:
    """This machine has no libnvidia-ml installed system-wide (the test bed is unpacked, not installed)."""
    import ctypes.util

    assert ctypes.util.find_library("nvidia-ml") is None
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "GPUTOP_NVML_LIBRARY")}
    r = _run(env=env)
    assert r["status"] == [
        "unavailable",
        "NVML Shared Library Not Found",
        "unavailable",
        "NVML Shared Library Not Found",
    ]
