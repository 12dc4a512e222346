"""`gputop doctor --selftest`: on a GPU host, known CUDA work in gputop's own process, checked exactly.

A tiny PTX kernel (no compiler needed) is loaded through the driver API with ctypes and launched
exactly N times through ``cuLaunchKernel`` and N times through the runtime (``cudaLaunchKernel``
with a ``cudaKernel_t`` from ``cudaLibraryGetKernel``, CUDA 12+); known bytes are copied host to
device and back through both layers; both layers synchronise once. gputop's BPF collector traces
this very process, and every figure it counted is printed beside the expected one. The exit status
is 0 only when every figure is exact.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from gputop.errors import EX_NOPERM, GputopError
from gputop.textsafe import sanitize

KERNEL = "gputop_selftest"
#: an empty kernel; PTX is compiled by the driver for whatever GPU is there
PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry gputop_selftest()
{
    ret;
}
\0"""
GRID = (7, 1, 1)
BLOCK = (96, 1, 1)
COPY_BYTES = 1 << 20
H2D, D2H = 1, 2          # cudaMemcpyKind

#: where a runtime may live when the loader does not know it: CUDA toolkits, pip wheels (PyTorch's)
_RUNTIME_GLOBS = (
    "/usr/local/cuda*/lib64/libcudart.so.1[0-9]*",
    "/usr/local/cuda*/targets/*/lib/libcudart.so.1[0-9]*",
    "/usr/lib/*-linux-gnu/libcudart.so.1[0-9]*",
    "/usr/lib*/python3*/site-packages/nvidia/*/lib/libcudart.so.1[0-9]*",
    "/usr/local/lib*/python3*/*-packages/nvidia/*/lib/libcudart.so.1[0-9]*",
    "/opt/conda/lib/libcudart.so.1[0-9]*",
    "/opt/conda/lib/python3*/site-packages/nvidia/*/lib/libcudart.so.1[0-9]*",
)


class NoGpu(Exception):
    """No GPU to test on; the message says why, in one line."""


@dataclass(frozen=True)
class Figure:
    what: str
    expected: int
    counted: int | None      # None: gputop has no record of it

    @property
    def exact(self) -> bool:
        return self.counted == self.expected


class _Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def find_runtime(patterns: tuple[str, ...] = _RUNTIME_GLOBS, loader: bool = True) -> str | None:
    """The newest libcudart this host has, by soname major version."""
    found: list[str] = []
    name = ctypes.util.find_library("cudart") if loader else None
    if name and name.rsplit(".so.", 1)[-1].split(".")[0].isdigit():
        found.append(name)
    for pattern in patterns:
        found += [p for p in glob.glob(pattern) if p.rsplit(".so.", 1)[-1].split(".")[0].isdigit()]

    def major(path: str) -> int:
        return int(path.rsplit(".so.", 1)[-1].split(".")[0])
    return max(found, key=major) if found else None


def _check(rc: int, call: str) -> None:
    if rc != 0:
        raise GputopError(f"selftest: {call} returned CUDA error {rc}",
                          "run 'nvidia-smi' and check that this user can use the GPU")


class Driver:
    """The driver API through ctypes: just what the self-test calls."""

    def __init__(self) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise NoGpu(f"no NVIDIA driver here (libcuda.so.1 cannot be loaded: {e})") from e
        rc = self.lib.cuInit(0)
        if rc != 0:
            raise NoGpu(f"no usable GPU here: cuInit returned {self.error_name(rc)}")
        count = ctypes.c_int(0)
        if self.lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            raise NoGpu("no GPU here: the driver reports 0 devices")
        self.dev = ctypes.c_int(0)
        _check(self.lib.cuDeviceGet(ctypes.byref(self.dev), 0), "cuDeviceGet")
        name = ctypes.create_string_buffer(256)
        self.lib.cuDeviceGetName(name, 256, self.dev)
        self.name = name.value.decode(errors="replace")
        version = ctypes.c_int(0)
        self.lib.cuDriverGetVersion(ctypes.byref(version))
        self.version = f"{version.value // 1000}.{version.value % 1000 // 10}"

    def error_name(self, rc: int) -> str:
        name = ctypes.c_char_p()
        if self.lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
            return f"{name.value.decode(errors='replace')} ({rc})"
        return f"CUDA error {rc}"

    def run(self, launches: int, copies: int) -> None:
        lib = self.lib
        ctx = ctypes.c_void_p()
        _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.dev), "cuDevicePrimaryCtxRetain")
        _check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
        _check(lib.cuModuleGetFunction(ctypes.byref(fn), mod, KERNEL.encode()), "cuModuleGetFunction")
        lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        for _ in range(launches):
            _check(lib.cuLaunchKernel(fn, *GRID, *BLOCK, 0, None, None, None), "cuLaunchKernel")
        dptr = ctypes.c_uint64(0)
        _check(lib.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(COPY_BYTES)), "cuMemAlloc_v2")
        host = ctypes.create_string_buffer(bytes(range(256)) * (COPY_BYTES // 256))
        lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        for _ in range(copies):
            _check(lib.cuMemcpyHtoD_v2(dptr, host, COPY_BYTES), "cuMemcpyHtoD_v2")
        back = ctypes.create_string_buffer(COPY_BYTES)
        for _ in range(copies):
            _check(lib.cuMemcpyDtoH_v2(back, dptr, COPY_BYTES), "cuMemcpyDtoH_v2")
        _check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        if back.raw != host.raw[:COPY_BYTES]:
            raise GputopError("selftest: the bytes copied back differ from those copied in",
                              "the GPU or its driver is unhealthy: check 'nvidia-smi -q' for XID errors")
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        lib.cuMemFree_v2(dptr)


class Runtime:
    """The runtime API through ctypes: launches by kernel handle (cudaLibraryGetKernel, CUDA 12+)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lib = ctypes.CDLL(path)
        if not hasattr(self.lib, "cudaLibraryLoadData"):
            raise GputopError(f"selftest: {path} has no cudaLibraryLoadData (a runtime older than CUDA 12)",
                              "point --cudart at a CUDA 12 or newer libcudart.so")

    def run(self, launches: int, copies: int) -> None:
        lib = self.lib
        _check(lib.cudaSetDevice(0), "cudaSetDevice")
        library, kernel = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib.cudaLibraryLoadData(ctypes.byref(library), ctypes.c_char_p(PTX), None, None, 0, None, None, 0),
               "cudaLibraryLoadData")
        _check(lib.cudaLibraryGetKernel(ctypes.byref(kernel), library, KERNEL.encode()), "cudaLibraryGetKernel")
        lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, _Dim3, _Dim3, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.c_void_p]
        grid, block = _Dim3(*GRID), _Dim3(*BLOCK)
        for _ in range(launches):
            _check(lib.cudaLaunchKernel(kernel, grid, block, None, 0, None), "cudaLaunchKernel")
        dptr = ctypes.c_void_p()
        _check(lib.cudaMalloc(ctypes.byref(dptr), ctypes.c_size_t(COPY_BYTES)), "cudaMalloc")
        host = ctypes.create_string_buffer(bytes(reversed(range(256))) * (COPY_BYTES // 256))
        back = ctypes.create_string_buffer(COPY_BYTES)
        lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        for _ in range(copies):
            _check(lib.cudaMemcpy(dptr, host, COPY_BYTES, H2D), "cudaMemcpy")
        for _ in range(copies):
            _check(lib.cudaMemcpy(back, dptr, COPY_BYTES, D2H), "cudaMemcpy")
        _check(lib.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
        if back.raw != host.raw[:COPY_BYTES]:
            raise GputopError("selftest: the bytes copied back differ from those copied in",
                              "the GPU or its driver is unhealthy: check 'nvidia-smi -q' for XID errors")
        lib.cudaFree(dptr)


def expected_figures(launches: int, copies: int, layers: int) -> list[tuple[str, int, Callable[..., int | None]]]:
    """What, how much, and how to read it from gputop's record of this process (a RawProc)."""
    n = launches * layers
    c = copies * layers

    def kernel(attr: str) -> Callable[..., int | None]:
        def get(raw: object) -> int | None:
            ks = [k for k in getattr(raw, "kernels", ()) if k.name == KERNEL]
            return sum(getattr(k, attr) for k in ks) if ks else None
        return get
    return [
        ("kernel launches", n, lambda raw: raw.counters["launches"]),
        (f"launches of kernel {KERNEL}", n, kernel("launches")),
        ("grid blocks (sum)", n * GRID[0] * GRID[1] * GRID[2], lambda raw: raw.counters["grid_sum"]),
        ("block threads (sum)", n * BLOCK[0] * BLOCK[1] * BLOCK[2], lambda raw: raw.counters["block_sum"]),
        ("memcpy h2d calls", c, lambda raw: raw.memcpy_calls[0]),
        ("memcpy h2d bytes", c * COPY_BYTES, lambda raw: raw.memcpy_bytes[0]),
        ("memcpy d2h calls", c, lambda raw: raw.memcpy_calls[1]),
        ("memcpy d2h bytes", c * COPY_BYTES, lambda raw: raw.memcpy_bytes[1]),
        ("graph launches", 0, lambda raw: raw.counters["graph_launches"]),
        ("sync calls", layers, lambda raw: raw.counters["sync_calls"]),
    ]


def run(out: TextIO, launches: int = 1000, copies: int = 8, cudart: str | None = None) -> int:
    """The self-test; returns the exit status (0: every figure exact)."""
    try:
        driver = Driver()
    except NoGpu as e:     # printed by the CLI as 'gputop: error: ...' and its hint, exit 1
        raise GputopError(f"selftest: {e}", "run the self-test on a host with an NVIDIA GPU and its driver; "
                          "'gputop doctor' (without --selftest) checks everything else here") from None
    from gputop.modes.common import no_privileges
    from gputop.sources.bpf import BpfSource, BpfUnavailable

    refusal = no_privileges()       # the words of gputop --bpf, demo and doctor
    if refusal is not None:
        raise GputopError(f"selftest: {refusal[0]}", refusal[1], EX_NOPERM)
    path = cudart or find_runtime()
    runtime = Runtime(path) if path else None
    out.write(f"gputop selftest: {sanitize(driver.name)}, driver API {driver.version}, "
              f"runtime {sanitize(path) if path else 'none found (pass --cudart PATH)'}\n")
    src = BpfSource()
    try:
        src.start()
    except BpfUnavailable as e:
        raise GputopError(f"selftest: BPF cannot run here: {e.reason}", e.hint or "run 'gputop doctor'",
                          EX_NOPERM if e.noperm else 1) from e
    me = os.getpid()
    try:
        src.scan([me])
        driver.run(launches, copies)
        if runtime is not None:
            src.scan([me])              # the runtime maps libraries of its own on first use
            runtime.run(launches, copies)
        src.poll(0.0)
        raw = src.read().procs.get(me)
    finally:
        src.close()
    layers = 2 if runtime is not None else 1
    figures = [Figure(what, want, get(raw) if raw is not None else None)
               for what, want, get in expected_figures(launches, copies, layers)]
    out.write(f"{'figure':<36} {'expected':>14} {'counted':>14}  exact\n")
    for f in figures:
        counted = "N/A" if f.counted is None else str(f.counted)
        out.write(f"{f.what:<36} {f.expected:>14} {counted:>14}  {'yes' if f.exact else 'NO'}\n")
    if runtime is None:
        out.write("runtime launches and copies not checked: no libcudart found (pass --cudart PATH)\n")
    good = sum(f.exact for f in figures)
    out.write(f"selftest: {good}/{len(figures)} exact\n")
    return 0 if good == len(figures) else 1

