"""The demo's workload on a real GPU: y = relu(a*x + b) over 4M floats, unfused or fused.

Usage: PYTHON gpu_worker.py cupy|torch unfused|fused STEPS_PER_S   (any Python with CuPy or PyTorch: it needs
nothing of gputop's; gputop demo picks the Python, demo.interpreters())
CuPy: three ElementwiseKernels against one fused ElementwiseKernel. PyTorch: three eager ops
against the same function compiled by torch.compile (Inductor fuses it into one kernel).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any


def _cupy(fused: bool) -> Callable[[], Any]:
    import cupy as cp

    x = cp.random.standard_normal(1 << 22, dtype=cp.float32)
    y = cp.empty_like(x)
    if fused:
        k = cp.ElementwiseKernel("float32 x", "float32 y", "y = max(2.0f * x + 1.0f, 0.0f)", "fused_scale_bias_relu")
        return lambda: k(x, y)
    scale = cp.ElementwiseKernel("float32 x", "float32 y", "y = 2.0f * x", "unfused_scale")
    bias = cp.ElementwiseKernel("float32 x", "float32 y", "y = x + 1.0f", "unfused_bias")
    relu = cp.ElementwiseKernel("float32 x", "float32 y", "y = max(x, 0.0f)", "unfused_relu")
    return lambda: relu(bias(scale(x, y), y), y)


def _torch(fused: bool) -> Callable[[], Any]:
    import torch

    x = torch.randn(1 << 22, device="cuda")

    def chain(t: Any) -> Any:
        return torch.relu(t * 2.0 + 1.0)

    fn = torch.compile(chain) if fused else chain
    return lambda: fn(x)


def main() -> int:
    backend, mode, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
    step = (_cupy if backend == "cupy" else _torch)(mode == "fused")
    t0 = time.monotonic()
    done = 0
    while True:
        due = int((time.monotonic() - t0) * rate)
        while done < due:
            step()
            done += 1
        time.sleep(0.001)


if __name__ == "__main__":
    raise SystemExit(main())
