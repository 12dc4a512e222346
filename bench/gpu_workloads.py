"""The workloads of bench/gpu_validate.py, one per process, each measuring itself.

    python3 bench/gpu_workloads.py NAME REPORT [--ready FILE] [--go FILE] [--cudart PATH] [--trace FILE]

Runs under the Python that has PyTorch (the GPU host's own; not gputop's), stdlib and torch only, so
it needs nothing of gputop's. Each workload: set up and warm up (imports, cuBLAS handles, compiles,
Triton's JIT, allocator pools: nothing lazy is left for the measured phase), make --ready, wait for --go,
stay idle GAP_S, then run its measured phase, under PyTorch's profiler (Kineto/CUPTI) where it has a
GPU, stay idle GAP_S again, and write REPORT (JSON) at the start of that second idle time:

    {"pid", "phase": [t_start, t_end] (unix seconds), "trace": the profiler's Chrome trace or null,
     "own": {metric: count} (what the workload itself asked for, where the profiler does not see it),
     "env": {...}, "error": null or one line}

The idle times let bench/gpu_validate.py take gputop's counts of exactly the phase: the process's
totals in a snapshot inside each idle time, subtracted. `testbed` runs without a GPU (the test bed's
libcudart: every call fails after its entry probe fired) and has only `own` counts; CI runs it.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: idle seconds before and after the measured phase (bench/gpu_validate.py reads a snapshot in each)
GAP_S = 1.5
#: elements of the elementwise chains' tensors (16 MiB of float32)
N = 1 << 22
Step = Callable[[], Any]


@dataclass(frozen=True)
class Workload:
    step: Step                  # one step of the measured phase
    reps: int                   # steps in the phase
    own: dict[str, int] = field(default_factory=dict)   # the workload's own counts (see the module's doc)
    warm: Step | None = None    # the warm-up's step, when it is not `step` (a capture stays in the phase)
    #: gputop's figures the profiler has no oracle for in this workload (shown as info)
    no_oracle: tuple[str, ...] = ()
    #: run once after --go, before the idle time that precedes the phase (gputop is running by then)
    after_go: Step | None = None


def _torch() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
    return torch


def _chain(t: Any) -> Any:
    return (t * 2.0 + 1.0).relu().sin()


def idle() -> Workload:
    """Nothing in the phase but the profiler's own start and stop: every figure 0 on both sides (a
    CUDA call the profiler makes itself and does not record would show here)."""
    _torch()
    return Workload(lambda: None, 1)


def eager() -> Workload:
    """An eager elementwise chain: four kernels a step."""
    torch = _torch()
    x = torch.randn(N, device="cuda")
    return Workload(lambda: _chain(x), 200)


def compiled() -> Workload:
    """The same chain under torch.compile (Inductor fuses it into one Triton kernel)."""
    torch = _torch()
    x = torch.randn(N, device="cuda")
    fn = torch.compile(_chain)
    return Workload(lambda: fn(x), 200)


def gemm() -> Workload:
    """cuBLAS GEMMs: fp32 and bf16, two shapes."""
    torch = _torch()
    a, b = torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")
    c, d = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16), torch.randn(
        1024, 4096, device="cuda", dtype=torch.bfloat16)
    return Workload(lambda: (a @ b, c @ d), 50)


def triton_kernel() -> Workload:
    """A hand-written Triton kernel (launched through the driver API)."""
    torch = _torch()
    import triton
    import triton.language as tl

    @triton.jit
    def gputop_axpy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):   # type: ignore[no-untyped-def]  # Triton reads annotations
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(y_ptr + i, 2.0 * tl.load(x_ptr + i, mask=m) + 1.0, mask=m)

    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    grid = (triton.cdiv(N, 1024),)
    return Workload(lambda: gputop_axpy[grid](x, y, N, BLOCK=1024), 200)


def _looked_up_before(torch: Any) -> Step:
    """A step of driver-API kernels, every one looked up (cuModuleLoadData, cuModuleGetFunction) in the
    warm-up: a hand-written Triton kernel, the chain under torch.compile (Inductor's Triton kernels) and a
    cuBLAS GEMM."""
    import triton
    import triton.language as tl

    @triton.jit
    def gputop_before_axpy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):   # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(y_ptr + i, 3.0 * tl.load(x_ptr + i, mask=m) - 1.0, mask=m)

    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    a, b = torch.randn(1024, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda")
    grid = (triton.cdiv(N, 1024),)
    fn = torch.compile(_chain)
    return lambda: (gputop_before_axpy[grid](x, y, N, BLOCK=1024), fn(x), a @ b)


def driver_before() -> Workload:
    """Driver-API kernels looked up before gputop started (issue 34): the hand-written Triton kernel and the
    chain under torch.compile (Inductor's Triton kernels), loaded (cuModuleLoadData, cuModuleGetFunction) in
    the warm-up, before gputop; and a cuBLAS GEMM. After --go, two Triton kernels new to the process are
    looked up and launched once each: handles gputop sees looked up, which it learns the driver's layout
    from (gputop/sources/bpf/names/handles.py). The phase launches the first ones: gputop must show each by
    its name, the profiler's (the per-name lines), none by address (`kernels shown as addresses`, 0)."""
    torch = _torch()
    import triton
    import triton.language as tl

    @triton.jit
    def gputop_seen_a(x_ptr, n, BLOCK: tl.constexpr):   # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)

    @triton.jit
    def gputop_seen_b(x_ptr, n, BLOCK: tl.constexpr):   # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2.0, mask=i < n)

    y = torch.empty(N, device="cuda")
    grid = (triton.cdiv(N, 1024),)

    def seen() -> None:
        gputop_seen_a[grid](y, N, BLOCK=1024)
        gputop_seen_b[grid](y, N, BLOCK=1024)
        torch.cuda.synchronize()
    return Workload(_looked_up_before(torch), 100, own={"kernels shown as addresses": 0}, after_go=seen)


#: the first argument that runs this script as driver_peer_before's other process (peer()), not a workload
PEER = "--driver-peer"


def driver_peer_before() -> Workload:
    """Driver-API kernels looked up before gputop started, named from another process's look-ups (issue 34
    item 4): driver_before's kernels, all looked up in the warm-up, and none looked up here after --go;
    instead another process (this script with PEER: started after gputop, the same libcuda and user) looks
    up three Triton kernels new to it and launches them once each, then lives as long as this one. The
    phase launches this process's kernels: gputop must show each by its name, the profiler's (the per-name
    lines), none by address (`kernels shown as addresses`, 0). bench/gpu_validate.py runs its phase before
    driver_before's, whose own look-ups would teach gputop the layout otherwise."""
    torch = _torch()
    step = _looked_up_before(torch)
    return Workload(step, 100, own={"kernels shown as addresses": 0},
                    after_go=lambda: start_peer([sys.executable, os.path.abspath(__file__), PEER]))


#: driver_peer_before's other process, kept until this one exits (its stdin's pipe closes then: it exits)
_PEERS: list[subprocess.Popen[str]] = []


def start_peer(argv: list[str]) -> None:
    """Starts ``argv`` with a pipe as its standard input and waits for its line "ready" (its standard error
    is this process's). It exits when that pipe closes: when this process exits, however it ends."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _PEERS.append(p)
    assert p.stdout is not None
    for line in p.stdout:
        if line.strip() == "ready":
            return
    raise RuntimeError(f"driver_peer_before's other process exited ({p.wait()}) before it was ready")


def peer() -> int:
    """driver_peer_before's other process: three Triton kernels new to it, each looked up
    (cuModuleGetFunction) and launched once, then "ready"; it waits for the end of its standard input."""
    torch = _torch()
    import triton
    import triton.language as tl

    @triton.jit
    def gputop_peer_a(x_ptr, n, BLOCK: tl.constexpr):   # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 2.0, mask=i < n)

    @triton.jit
    def gputop_peer_b(x_ptr, n, BLOCK: tl.constexpr):   # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 3.0, mask=i < n)

    @triton.jit
    def gputop_peer_c(x_ptr, n, BLOCK: tl.constexpr):   # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) - 4.0, mask=i < n)

    x = torch.zeros(N, device="cuda")
    grid = (triton.cdiv(N, 1024),)
    for kernel in (gputop_peer_a, gputop_peer_b, gputop_peer_c):
        kernel[grid](x, N, BLOCK=1024)
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.read()
    return 0


def cudagraph() -> Workload:
    """torch.cuda.CUDAGraph: the chain captured once in the phase (its first step), then replayed."""
    torch = _torch()
    x = torch.randn(N, device="cuda")
    side = torch.cuda.Stream()

    def warm() -> None:                  # on a side stream, as PyTorch's docs warm up before a capture
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _chain(x)
        torch.cuda.current_stream().wait_stream(side)

    graph: list[Any] = []

    def step() -> None:
        if not graph:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                _chain(x)
            graph.append(g)
        graph[0].replay()
    return Workload(step, 100, warm=warm)


def reduce_overhead() -> Workload:
    """torch.compile(mode="reduce-overhead"): Inductor's kernels in CUDA graphs (captured in warm-up)."""
    torch = _torch()
    x = torch.randn(N, device="cuda")
    fn = torch.compile(_chain, mode="reduce-overhead")
    for _ in range(5):                   # cudagraph trees record on the second or third call
        fn(x)

    def step() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        fn(x)
    return Workload(step, 100)


def copies() -> Workload:
    """H2D from pageable and pinned memory (non_blocking), D2H into pinned, D2D: 4 MiB each."""
    torch = _torch()
    pageable = torch.randn(1 << 20)
    pinned = torch.randn(1 << 20).pin_memory()
    dev = torch.empty(1 << 20, device="cuda")
    dev2 = torch.empty_like(dev)
    back = torch.empty(1 << 20).pin_memory()

    def step() -> None:
        dev.copy_(pageable)
        dev.copy_(pinned, non_blocking=True)
        back.copy_(dev, non_blocking=True)
        dev2.copy_(dev)
        torch.cuda.current_stream().synchronize()
    return Workload(step, 25)


def malloc_async() -> Workload:
    """PyTorch on cudaMallocAsync (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, set by the harness)."""
    torch = _torch()

    def step() -> None:
        t = torch.empty(1 << 20, device="cuda")
        t.fill_(1.0)
        del t
    return Workload(step, 50)


def expandable() -> Workload:
    """PyTorch's expandable segments (cuMemCreate/cuMemMap; PYTORCH_CUDA_ALLOC_CONF set by the harness):
    each step grows the pool by a new 64 MiB tensor kept alive, then copies into it."""
    torch = _torch()
    keep: list[Any] = []
    src = torch.randn(1 << 24)

    def step() -> None:
        t = torch.empty(1 << 24, device="cuda")
        t.copy_(src)
        keep.append(t)
    # its allocations are cuMemCreate/cuMemMap driver calls, which the profiler does not record, in
    # pieces of PyTorch's choosing: no oracle for the allocation count
    return Workload(step, 8, no_oracle=("alloc_calls",))


class _Runtime:
    """The CUDA runtime that this process already loaded (PyTorch's), through ctypes."""

    def __init__(self) -> None:
        import torch

        torch.cuda.init()
        path = next((line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                     if "libcudart.so" in line), None)
        if path is None:
            raise RuntimeError("no libcudart.so mapped in this process")
        self.lib = ctypes.CDLL(path)
        self.path = path

    def check(self, rc: int, call: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{call} returned CUDA error {rc}")


def managed(prefetch: bool) -> Workload:
    """cudaMallocManaged (8 MiB, well under what the card has free), touched by a kernel; with
    prefetch, cudaMemPrefetchAsync to the device before and to the host after."""
    torch = _torch()
    rt = _Runtime()
    size = 8 << 20
    reps = 4
    own = {"managed_alloc_calls": reps, "managed_alloc_bytes": reps * size}
    if prefetch:
        own |= {"prefetch_to_device_calls": reps, "prefetch_to_device_bytes": reps * size,
                "prefetch_to_host_calls": reps, "prefetch_to_host_bytes": reps * size}
    version = ctypes.c_int(0)
    rt.check(rt.lib.cudaRuntimeGetVersion(ctypes.byref(version)), "cudaRuntimeGetVersion")

    class Location(ctypes.Structure):      # cudaMemLocation (CUDA 13's cudaMemPrefetchAsync takes one)
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    def prefetch_to(ptr: ctypes.c_void_p, device: int) -> None:
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if version.value >= 13000:
            # cudaMemLocationTypeDevice 1, cudaMemLocationTypeHost 2
            loc = Location(1, device) if device >= 0 else Location(2, 0)
            rt.lib.cudaMemPrefetchAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, Location, ctypes.c_uint,
                                                    ctypes.c_void_p]
            rt.check(rt.lib.cudaMemPrefetchAsync(ptr, size, loc, 0, stream), "cudaMemPrefetchAsync")
        else:
            rt.lib.cudaMemPrefetchAsync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            rt.check(rt.lib.cudaMemPrefetchAsync(ptr, size, device, stream), "cudaMemPrefetchAsync")

    def step() -> None:
        ptr = ctypes.c_void_p()
        rt.check(rt.lib.cudaMallocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1), "cudaMallocManaged")
        host = (ctypes.c_float * (size // 4)).from_address(ptr.value or 0)
        host[0] = 1.0                    # a CPU touch before the GPU's
        if prefetch:
            prefetch_to(ptr, 0)
        rt.check(rt.lib.cudaMemset(ptr, 0, ctypes.c_size_t(size)), "cudaMemset")   # the GPU writes every page
        if prefetch:
            prefetch_to(ptr, -1)
        rt.check(rt.lib.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
        _ = host[size // 4 - 1]           # the CPU reads the last page back
        rt.check(rt.lib.cudaFree(ptr), "cudaFree")
    return Workload(step, reps, own)


def ptds_capture() -> Workload:
    """A capture on the per-thread default stream (cudaStreamPerThread) through the runtime: the chain's
    kernels launched by PyTorch on that stream while it captures (the phase's first step), then the
    graph replayed there."""
    torch = _torch()
    rt = _Runtime()
    x = torch.randn(N, device="cuda")
    per_thread = torch.cuda.ExternalStream(2)      # cudaStreamPerThread's handle is 0x2
    graph, exe = ctypes.c_void_p(), ctypes.c_void_p()
    rt.lib.cudaGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    def warm() -> None:
        with torch.cuda.stream(per_thread):
            _chain(x)

    def step() -> None:
        if not exe.value:
            with torch.cuda.stream(per_thread):
                # cudaStreamCaptureModeRelaxed 2: PyTorch's allocator may query events while it captures
                rt.check(rt.lib.cudaStreamBeginCapture(ctypes.c_void_p(2), 2), "cudaStreamBeginCapture")
                _chain(x)
                rt.check(rt.lib.cudaStreamEndCapture(ctypes.c_void_p(2), ctypes.byref(graph)),
                         "cudaStreamEndCapture")
            rt.check(rt.lib.cudaGraphInstantiate(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)),
                     "cudaGraphInstantiate")
        rt.check(rt.lib.cudaGraphLaunch(exe, ctypes.c_void_p(2)), "cudaGraphLaunch")
    return Workload(step, 50, warm=warm)


class Dim3(ctypes.Structure):
    """CUDA's dim3, passed by value."""
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def torch_cudart() -> str | None:
    """The libcudart that this Python's PyTorch brought (its nvidia-* wheels), the newest major."""
    try:
        import torch
    except ImportError:
        return None
    found = sorted(glob.glob(str(Path(torch.__file__).parent.parent / "nvidia" / "*" / "lib" / "libcudart.so.1[0-9]*")))
    return os.path.realpath(found[-1]) if found else None


def testbed(cudart: str) -> Workload:
    """Known runtime calls through a libcudart without a GPU (the test bed): each fails after its entry
    probe fired. Counts are the workload's own; CI runs this one."""
    lib = ctypes.CDLL(cudart)
    lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_void_p]
    lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    buf = ctypes.create_string_buffer(4096)
    grid, block = Dim3(40, 2, 1), Dim3(128, 1, 1)
    reps = 300

    def step() -> None:
        for _ in range(10):
            lib.cudaLaunchKernel(ctypes.cast(lib.cudaLaunchKernel, ctypes.c_void_p), grid, block, None, 0, None)
        lib.cudaMemcpy(buf, buf, 1000, 1)           # cudaMemcpyHostToDevice
        lib.cudaMemcpy(buf, buf, 500, 2)            # cudaMemcpyDeviceToHost
        lib.cudaDeviceSynchronize()
    own = {"launches": 10 * reps, "grid_blocks_sum": 10 * reps * 80, "block_threads_sum": 10 * reps * 128,
           "memcpy_h2d_calls": reps, "memcpy_h2d_bytes": 1000 * reps,
           "memcpy_d2h_calls": reps, "memcpy_d2h_bytes": 500 * reps, "sync_calls": reps}
    return Workload(step, reps, own)


WORKLOADS: dict[str, Callable[[], Workload]] = {
    "idle": idle, "eager": eager, "before": eager, "driver_before": driver_before,
    "driver_peer_before": driver_peer_before, "compiled": compiled,
    "gemm": gemm, "triton": triton_kernel,
    "cudagraph": cudagraph, "reduce_overhead": reduce_overhead, "copies": copies, "malloc_async": malloc_async,
    "expandable": expandable, "managed": lambda: managed(False), "managed_prefetch": lambda: managed(True),
    "ptds_capture": ptds_capture,
}
#: the test bed's workloads (no GPU; the second is started before gputop by bench/gpu_validate.py)
TESTBED = ("testbed_before", "testbed")
#: PYTORCH_CUDA_ALLOC_CONF each workload runs with (the harness sets it at exec: PyTorch reads it once)
ALLOC_CONF = {"malloc_async": "backend:cudaMallocAsync", "expandable": "expandable_segments:True"}


def _wait_for(go: Path) -> None:
    while not go.exists():
        time.sleep(0.05)


#: the workload, kept until the process exits: what it holds (a CUDA graph, its memory pool) must not be
#: destroyed in the idle time after the phase, where gputop's second reading is taken
_KEEP: list[Workload] = []


def run(name: str, go: Path | None, ready: Path | None, cudart: str | None, trace: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {"pid": os.getpid(), "name": name, "phase": None, "trace": None, "own": {},
                           "env": {"alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}, "error": None}
    gpu = name not in TESTBED
    wl = testbed(cudart or "libcudart.so") if not gpu else WORKLOADS[name]()
    out["own"], out["no_oracle"] = wl.own, list(wl.no_oracle)
    _KEEP.append(wl)
    if gpu:
        import torch

        out["env"] |= {"torch": torch.__version__, "cuda": torch.version.cuda,
                       "device": torch.cuda.get_device_name(0)}
        for _ in range(3):              # warm-up: every lazy thing happens here, not in the phase
            (wl.warm or wl.step)()
        torch.cuda.synchronize()
    if ready is not None:
        ready.touch()
    if go is not None:
        _wait_for(go)
    if wl.after_go is not None:
        wl.after_go()
    time.sleep(GAP_S)
    t0 = time.time()
    if gpu:
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(wl.reps):
                wl.step()
            torch.cuda.synchronize()
        t1 = time.time()
        if trace is not None:
            prof.export_chrome_trace(str(trace))
            out["trace"] = str(trace)
    else:
        for _ in range(wl.reps):
            wl.step()
        t1 = time.time()
    out["phase"] = [t0, t1]
    return out


def main() -> int:
    if sys.argv[1:] == [PEER]:
        return peer()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=[*WORKLOADS, *TESTBED])
    ap.add_argument("report", type=Path)
    ap.add_argument("--go", type=Path, help="wait for this file before the measured phase")
    ap.add_argument("--ready", type=Path, help="make this file once warmed up (before waiting for --go)")
    ap.add_argument("--cudart", help="testbed: the libcudart to call")
    ap.add_argument("--trace", type=Path, help="where the profiler's Chrome trace goes")
    args = ap.parse_args()
    t_fail = time.time()
    try:
        out = run(args.name, args.go, args.ready, args.cudart, args.trace)
    except Exception as e:       # one line in the report: the harness says which workload failed
        out = {"pid": os.getpid(), "name": args.name, "phase": None, "trace": None, "own": {}, "env": {},
               "error": f"{type(e).__name__}: {e}".splitlines()[0][:300], "failed_at": t_fail}
    tmp = args.report.with_suffix(".tmp")
    tmp.write_text(json.dumps(out))
    tmp.rename(args.report)          # the harness reads it whole, inside the second idle time
    if out["phase"] is not None:
        time.sleep(GAP_S)
    return 0 if out["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
