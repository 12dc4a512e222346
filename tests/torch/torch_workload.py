"""Run by the PyTorch tier's own interpreter (the default torch wheel, a CUDA 13 build): `import torch`
(which registers every kernel of libtorch_cuda.so with the real libcudart.so.13), then, for each line
``ADDR N`` on stdin, N launches of the host stub at ADDR through that runtime's cudaLaunchKernel (it
fails for want of a driver after gputop's probe has counted it); ``done`` is printed after each batch
of lines ending in an empty line. Kept to the standard library and ctypes: the tier's venv has torch only."""

from __future__ import annotations

import ctypes
import os
import sys


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def main() -> int:
    import torch  # noqa: F401  (registers libtorch_cuda.so's kernels)

    cudart = ctypes.CDLL("libcudart.so.13")         # the one torch loaded (its soname)
    launch = cudart.cudaLaunchKernel
    launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    launch.restype = ctypes.c_int
    print("ready", os.getpid(), flush=True)
    for line in sys.stdin:
        if not line.strip():
            print("done", flush=True)
            continue
        addr, n = (int(x, 0) for x in line.split())
        for _ in range(n):
            launch(addr, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 0, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
