"""bench/gpu_validate.py's reading of PyTorch's profiler trace and its phase accounting.

No GPU here, so no real Kineto trace: the trace below is shaped as Kineto writes one (libkineto's
CuptiActivity.cpp: categories `cuda_runtime`, `cuda_driver`, `kernel`, `gpu_memcpy`; a kernel's
`grid`, `block` and `correlation`, a copy's `bytes`, an API call's `cbid` and `correlation`). The
real traces are read on a GPU host (docs/GPU-VALIDATION.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
_spec = importlib.util.spec_from_file_location("gpu_validate", ROOT / "bench" / "gpu_validate.py")
assert _spec is not None and _spec.loader is not None
gpu_validate = importlib.util.module_from_spec(_spec)
sys.modules["gpu_validate"] = gpu_validate      # its dataclasses look their module up there
_spec.loader.exec_module(gpu_validate)
GAP_S = gpu_validate.GAP_S


def api(name: str, ts: float, dur: float, corr: int, tid: int = 7, cat: str = "cuda_runtime") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid,
            "args": {"cbid": 211, "correlation": corr}}


def kernel(name: str, corr: int, grid: list[int], block: list[int]) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": 1000.0 + corr, "dur": 3.0,
            "args": {"correlation": corr, "grid": grid, "block": block, "stream": 7}}


def memcpy(name: str, corr: int, nbytes: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "gpu_memcpy", "name": name, "ts": 2000.0 + corr, "dur": 1.0,
            "args": {"correlation": corr, "bytes": nbytes}}


TRACE = {"traceEvents": [
    # two direct launches; the first runtime call's own driver call (nested, same thread) is not a second
    api("cudaLaunchKernel", 10, 5, 1), api("cuLaunchKernel", 11, 2, 2, cat="cuda_driver"),
    kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
           "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
           1, [64, 1, 1], [128, 1, 1]),
    api("cuLaunchKernel", 20, 3, 3, tid=8, cat="cuda_driver"), kernel("gputop_axpy", 3, [4096, 1, 1], [128, 1, 1]),
    # a launch while capturing: no kernel ran for it
    api("cudaStreamBeginCapture", 30, 1, 4), api("cudaLaunchKernel", 32, 1, 5), api("cudaStreamEndCapture", 34, 1, 6),
    # a graph launch that ran two kernels
    api("cudaGraphLaunch", 40, 4, 9), kernel("k1", 9, [1, 1, 1], [32, 1, 1]), kernel("k2", 9, [2, 1, 1], [32, 1, 1]),
    # copies
    api("cudaMemcpyAsync", 50, 2, 10), memcpy("Memcpy HtoD (Pinned -> Device)", 10, 4096),
    api("cudaMemcpyAsync", 53, 2, 11), memcpy("Memcpy DtoH (Device -> Pageable)", 11, 1000),
    api("cudaMemcpyAsync", 56, 2, 12), memcpy("Memcpy DtoD (Device -> Device)", 12, 64),
    api("cudaStreamSynchronize", 60, 9, 13), api("cuStreamSynchronize", 61, 7, 14, cat="cuda_driver"),
    api("cudaMallocAsync", 70, 1, 15), api("cudaFreeAsync", 72, 1, 16),
    # a launch outside any capture whose kernel the trace lacks (the profiler lost it): not a capture
    api("cudaLaunchKernel", 80, 1, 17),
    # a copy no memcpy call asked for (the driver's own migration) is not an application copy
    memcpy("Memcpy HtoD (Pageable -> Device)", 40, 1 << 20),
    {"ph": "i", "cat": "cpu_instant_event", "name": "Iteration Start", "ts": 0},
]}


def test_the_profiler_trace_read_as_gputop_counts() -> None:
    got = {k: v[0] for k, v in gpu_validate.profiler_counts(TRACE).items()}
    assert got == {
        "launches": 2, "grid_blocks_sum": 64 + 4096, "block_threads_sum": 256,
        "graph_kernel_launches": 2, "graph_launches": 1, "captured_launches": 1,
        "sync_calls": 1, "alloc_calls": 1, "profiler: kernels missing": 1,
        "memcpy.h2d.calls": 1, "memcpy.h2d.bytes": 4096, "memcpy.d2h.calls": 1, "memcpy.d2h.bytes": 1000,
        "memcpy.d2d.calls": 1, "memcpy.d2d.bytes": 64,
        "kernel voidat::native::vectorized_elementwise_kernel<4,at::native::FillFunctor<float>,"
        "at::detail::Array<char*,1>>(int,at::native::FillFunctor<float>,at::detail::Array<char*,1>)": 1,
        "kernel gputop_axpy": 1, "graph kernel k1": 1, "graph kernel k2": 1}


def row(t_launches: int, kernels: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"total": {"launches": t_launches, "sync_calls": 0, "uvm_gpu_faults": None,
                      "memcpy": {"h2d": {"calls": 1, "bytes": 10}}}, "kernels": kernels or []}


def test_the_phase_is_the_difference_of_the_idle_times_rows() -> None:
    t0, t1 = 100.0, 104.0
    rows = [(t0 - GAP_S - 0.1, row(0)),          # before the idle time: not used
            (t0 - GAP_S + 0.5, row(5)),
            (t0 - 0.5, row(7, [{"name": "k", "launches": 7}])),   # the last row inside it: the baseline
            (t0 + 1.0, row(50)),                                   # in the phase
            # two rows of one name but for its white space (a stub's and a handle's): one name, added up
            (t1 + 0.3, row(107, [{"name": "k", "launches": 100}, {"name": "new  one", "launches": 7},
                                 {"name": "new one", "launches": 2}])),
            (t1 + GAP_S + 0.5, row(999))]             # after the idle time (the exit): not used
    counts = gpu_validate.phase_counts(rows, (t0, t1))
    assert counts == {"launches": 100, "sync_calls": 0, "uvm_gpu_faults": None,
                      "memcpy.h2d.calls": 0, "memcpy.h2d.bytes": 0, "kernel k": 93, "kernel newone": 9,
                      "graph kernel k": None, "graph kernel newone": None,
                      **{k: None for k in ("graph_launches", "captured_launches", "graph_kernel_launches",
                                           "grid_blocks_sum", "block_threads_sum", "alloc_calls", "alloc_bytes",
                                           "free_calls", "managed_alloc_calls", "managed_alloc_bytes",
                                           "uvm_cpu_faults")}}
    # a row only at the edge of an idle time is not trusted (map reads lag a snapshot's time)
    edge = [(t0 - 0.1, row(7)), (t1 + 0.3, row(107))]
    assert gpu_validate.phase_counts(edge, (t0, t1)) == (
        "no gputop snapshot of the process in the idle time before its phase (2 rows in all)")
