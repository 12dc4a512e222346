"""`gputop doctor --selftest` where no GPU is: one line, exit 1; its usage errors; its arithmetic.

The self-test's GPU path runs on a GPU host (docs/GPU-VALIDATION.md); here the real NVIDIA driver
library of the test bed answers cuInit with CUDA_ERROR_NO_DEVICE, as it does on any host without a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from gputop.modes import selftest


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    code = "import sys; from gputop.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={**base, **(env or {})})


HINT = ("hint: run the self-test on a host with an NVIDIA GPU and its driver; 'gputop doctor' (without --selftest) "
        "checks everything else here")


def test_without_a_driver_an_error_and_a_hint_exit_1() -> None:
    r = _run("doctor", "--selftest")
    assert r.returncode == 1
    assert r.stdout == ""
    line, hint = r.stderr.splitlines()
    assert line.startswith("gputop: error: selftest: no NVIDIA driver here (libcuda.so.1 cannot be loaded")
    assert hint == HINT


def test_with_the_real_driver_library_but_no_gpu(testbed) -> None:
    r = _run("doctor", "--selftest", env={"LD_LIBRARY_PATH": str(testbed.nvidia_dir)})
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == ("gputop: error: selftest: no usable GPU here: cuInit returned CUDA_ERROR_NO_DEVICE (100)\n"
                        f"{HINT}\n")


def test_usage_errors_exit_2() -> None:
    for args, message in ((["--bogus"], "unrecognized arguments: --bogus"),
                          (["-n", "5"], "-n and --cudart apply to --selftest only"),
                          (["--selftest", "-n", "0"], "-n must be from 1 to 10000000, not 0"),
                          (["--selftest", "-n", "x"], "argument -n: invalid int value: 'x'")):
        r = _run("doctor", *args)
        assert r.returncode == 2, args
        assert r.stderr.splitlines() == [f"gputop: error: {message}",
                                         "hint: run: gputop doctor [--selftest [-n N] [--cudart PATH]]"]


def test_the_newest_runtime_is_chosen(tmp_path: Path) -> None:
    for rel in ("cuda-12.4/lib64/libcudart.so.12", "cuda-12.4/lib64/libcudart.so.12.4.127",
                "site/nvidia/cu13/lib/libcudart.so.13", "site/nvidia/cuda_runtime/lib/libcudart.so.12",
                "other/libcudart.so.notaversion"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    patterns = (f"{tmp_path}/cuda-*/lib64/libcudart.so.1[0-9]*", f"{tmp_path}/site/nvidia/*/lib/libcudart.so.1[0-9]*",
                f"{tmp_path}/other/libcudart.so.*")
    assert selftest.find_runtime(patterns, loader=False) == f"{tmp_path}/site/nvidia/cu13/lib/libcudart.so.13"
    assert selftest.find_runtime((f"{tmp_path}/nothing/*",), loader=False) is None


def test_expected_figures_of_both_layers() -> None:
    n, c = 1000, 8
    kernels = (SimpleNamespace(name="gputop_selftest", launches=n, grid_sum=7 * n, block_sum=96 * n),
               SimpleNamespace(name="gputop_selftest", launches=n, grid_sum=7 * n, block_sum=96 * n))
    raw = SimpleNamespace(counters={"launches": 2 * n, "grid_sum": 14 * n, "block_sum": 192 * n, "graph_launches": 0,
                                    "sync_calls": 2},
                          memcpy_calls=(2 * c, 2 * c, 0, 0, 0),
                          memcpy_bytes=(2 * c << 20, 2 * c << 20, 0, 0, 0), kernels=kernels)
    figures = [selftest.Figure(what, want, get(raw)) for what, want, get in selftest.expected_figures(n, c, 2)]
    assert all(f.exact for f in figures), [f for f in figures if not f.exact]
    # one launch too many through either layer is caught, and so is a kernel gputop never named
    raw.counters["launches"] += 1
    raw.kernels = (SimpleNamespace(name=None, launches=2 * n, grid_sum=0, block_sum=0),)
    bad = [f.what for what, want, get in selftest.expected_figures(n, c, 2)
           for f in [selftest.Figure(what, want, get(raw))] if not f.exact]
    assert bad == ["kernel launches", "launches of kernel gputop_selftest"]
