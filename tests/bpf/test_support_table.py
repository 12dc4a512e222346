"""The support matrix (docs/support.md): gputop's real collector (BpfSource, real uprobes) counting
known work exactly on every driver branch's real libcuda.so.1 (470, 535, 550, 555) and on every CUDA
runtime minor's real libcudart (12.0 ... 12.9, 13.0 ... 13.5), fetched by scripts/testbed.sh
(scripts/testbed_libs.py). What a library does not define is neither called nor expected: the matrix
pinned in tests/support_matrix.py says what each lacks (tests/unit/test_library_coverage.py checks it
against the libraries' symbols, and `gputop doctor` names it absent); every count asserted is exact.

One BpfSource for the module, attached as gputop attaches on this kernel (uprobe_multi links where
the kernel has them, as the everyday tests; the per-probe perf path is the tests marked attach_modes'
and the QEMU tier's): 19 libraries of about 100 probes each would otherwise take minutes to detach."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import support
import support_matrix as sm
from support import SCAN_WAIT_S, Workloads
from support_matrix import CudaRuntime, DriverBranch

from gputop.sources.bpf import BpfSource, BpfUnavailable, RawProc, has_privileges, load_bcc

H2D, D2H, D2D, H2H, UNK = range(5)
FUSED = "fused_step(float*, float*, int)"
UNFUSED = "unfused_step(float const*, float*, int)"
REGISTERED = "matrix_kernel(float*)"
SAXPY = "gputop::test::saxpy_kernel(float, float const*, float*)"


def _precondition() -> str | None:
    if not has_privileges():
        return "BPF tests need root (or CAP_BPF + CAP_PERFMON)"
    try:
        load_bcc()
    except BpfUnavailable as e:
        return e.reason
    return None


@pytest.fixture(scope="module")
def source() -> Iterator[BpfSource]:
    """gputop's source as gputop starts it here (uprobe_multi links where the kernel has them)."""
    why = _precondition()
    if why:
        pytest.skip(why)
    src = BpfSource()
    src.start()
    yield src
    src.close()


def run(src: BpfSource, argv: list[str | Path], tmp: Path, env: dict[str, str] | None = None) -> RawProc:
    """Start a workload waiting on a file, scan it (as the exec event does), let it go, and read its
    record once it has exited."""
    go = tmp / f"go-{time.monotonic_ns()}"
    full = [str(argv[0]), "--wait", str(go), *map(str, argv[1:])]
    proc = subprocess.Popen(full, stdout=subprocess.PIPE, env={**os.environ, **(env or {})})
    try:
        line = proc.stdout.readline().decode() if proc.stdout else ""
        assert line.startswith("ready"), f"workload did not start: {line!r}"
        pid = int(line.split()[1])
        src.scan([pid], wait_s=SCAN_WAIT_S)
        go.touch()
        deadline = time.monotonic() + 60
        while proc.poll() is None:
            src.poll(0.02)
            assert time.monotonic() < deadline, "workload timed out"
        assert proc.returncode == 0, f"workload failed: {proc.returncode}"
        raw = src.read().procs[pid]
        src.forget(pid)
        return raw
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def by_name(raw: RawProc) -> dict[str | None, tuple[int, int, int]]:
    return {k.name: (k.launches, k.grid_sum, k.block_sum) for k in raw.kernels}


def _need(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not in the test bed (scripts/testbed.sh fetches it; driver branches on Debian only)")


def _branch(name: str) -> DriverBranch:
    b = sm.driver_branch(name)
    _need(b.libcuda)
    return b


def _runtime(minor: str) -> CudaRuntime:
    rt = sm.cuda_runtime(minor)
    _need(rt.lib)
    return rt


@pytest.fixture(scope="module", params=sm.BRANCHES, ids=[f"driver{b}" for b in sm.BRANCHES])
def branch(request: pytest.FixtureRequest) -> DriverBranch:
    return _branch(request.param)


@pytest.fixture(scope="module", params=sm.PROC_BRANCHES, ids=[f"driver{b}" for b in sm.PROC_BRANCHES])
def proc_branch(request: pytest.FixtureRequest) -> DriverBranch:
    return _branch(request.param)


@pytest.fixture(scope="module", params=sm.RUNTIMES, ids=[f"cudart{m}" for m in sm.RUNTIMES])
def cudart(request: pytest.FixtureRequest) -> CudaRuntime:
    return _runtime(request.param)


@pytest.fixture(scope="module", params=sm.STATIC_RUNTIMES, ids=[f"cudart{m}" for m in sm.STATIC_RUNTIMES])
def static_cudart(request: pytest.FixtureRequest) -> CudaRuntime:
    return _runtime(request.param)


# ------------------------------------------------------------------ driver branches

def driver_ops(b: DriverBranch, proc: bool = False) -> list[str]:
    """The driver calls of a branch's run; ``proc``: looked up through cuGetProcAddress_v2, which picks
    the per-thread and _v2 variants by flags and version itself (so they are called by name only here)."""
    ops = ["cu_launch:300:2,1,1:64,1,1:abc0",
           "cu_htod:3:100", "cu_dtoh:4:10", "cu_dtod:5:1", "cu_memcpy:6:14", "cu_htod32:2:8", "cu_dtoh32:1:4",
           "cu_memcpy2d:2:16:4:1:2",
           "cu_alloc_async:2:4096", "cu_alloc_pitch:1:64:8", "cu_create:1:2097152:1", "cu_free_async:1",
           "cu_prefetch:3:4096:0", "cu_prefetch:2:100:-1",
           "cu_ctx_sync:6", "cu_g_launch:7", "cu_memset:2:plain:32:5", "cu_memset2d:1:plain:16:3:4"]
    if b.has("cuLaunchKernelEx"):
        ops.append("cu_launch_ex:20:4,1,1:32,4,1:def0")
    if not proc:
        ops.append("cu_launch_ptsz:50:3,1,1:16,1,1:abc1")
        if b.has("cuMemPrefetchAsync_v2"):
            ops += ["cu_prefetch_v2:2:512:0", "cu_prefetch_v2:1:64:-1"]
    return ops


def check_driver(raw: RawProc, b: DriverBranch, proc: bool = False) -> None:
    ex = 20 if b.has("cuLaunchKernelEx") else 0
    ptsz = 0 if proc else 50
    v2 = not proc and b.has("cuMemPrefetchAsync_v2")
    c = raw.counters
    assert c["launches"] == 300 + ex + ptsz
    keys = {k.key: (k.launches, k.grid_sum, k.block_sum, k.name) for k in raw.kernels}
    # a driver handle nobody named stays unnamed (None: N/A), never a guess
    assert keys == {0xABC0: (300, 600, 19200, None), **({0xDEF0: (20, 80, 2560, None)} if ex else {}),
                    **({0xABC1: (50, 150, 800, None)} if ptsz else {})}
    assert raw.memcpy_calls == (3 + 2 + 2, 4 + 1, 5, 0, 6)
    assert raw.memcpy_bytes == (300 + 16 + 128, 40 + 4, 5, 0, 84)
    assert (c["alloc_calls"], c["alloc_bytes"], c["free_calls"]) == (4, 8192 + 512 + 2097152, 1)
    assert c["live_bytes"] == 0                     # every allocation failed: nothing is live
    assert (raw.prefetch_calls, raw.prefetch_bytes) == ((3 + 2 * v2, 2 + v2), (3 * 4096 + 1024 * v2, 200 + 64 * v2))
    assert c["sync_calls"] == 6
    assert (c["memset_calls"], c["memset_bytes"]) == (3, 2 * 20 + 24)
    # graph launches of execs gputop never saw built: counted, their kernels unknown (null), not 0
    assert (c["graph_launches"], c["graph_unknown_launches"]) == (7, 7)


def test_driver_api_counted_exactly_on_each_branch(source, branch: DriverBranch, workloads: Workloads,
                                                   tmp_path: Path) -> None:
    raw = run(source, [workloads.dlopen, "--cuda", branch.libcuda, *driver_ops(branch)], tmp_path)
    check_driver(raw, branch)
    probed = [path for path in source.objects.values() if path == str(branch.libcuda)]
    assert probed == [str(branch.libcuda)]
    assert source.read().status.probes_failed == 0         # every entry point of the branch took its probe


def test_cugetprocaddress_is_on_the_branches_said(branch: DriverBranch) -> None:
    """cuGetProcAddress_v2: 535 and later; 470 has none (and so no CUDA 12 runtime runs on it)."""
    from gputop.sources.bpf.attach.symbols import read_symbols

    syms = read_symbols(str(branch.libcuda))
    assert syms is not None
    assert ("cuGetProcAddress_v2" in syms.functions) == (branch.branch in sm.PROC_BRANCHES)


def test_driver_api_through_cugetprocaddress_on_each_branch(source, proc_branch: DriverBranch, workloads: Workloads,
                                                           tmp_path: Path) -> None:
    """How the CUDA runtime and Triton reach the driver (cuGetProcAddress_v2, on the branches that have it)."""
    raw = run(source, [workloads.dlopen, "--cuda-proc", proc_branch.libcuda, *driver_ops(proc_branch, proc=True)],
              tmp_path)
    check_driver(raw, proc_branch, proc=True)


def test_runtime_calling_each_branch_counts_once(source, branch: DriverBranch, workloads: Workloads,
                                                 tmp_path: Path) -> None:
    """The shim runtime calls the branch's real cuLaunchKernel, cuMemcpyHtoD_v2 ... cuStreamSynchronize
    (as the real runtime does on a GPU host): each call is counted once, where the application made it;
    runtime launches are named by the runtime's host stub."""
    raw = run(source, [workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", branch.libcuda,
                       "launch:1500:6,1,1:32,1,1:0", "cu_launch:100:1,1,1:1,1,1:aa00", "memcpy:5:1:100",
                       "memcpy:6:2:10", "cu_htod:2:1", "sync:3"],
              tmp_path, env={"SHIM_LIBCUDA": str(branch.libcuda), "SHIM_SYNC_MS": "5"})
    assert raw.counters["launches"] == 1600
    assert by_name(raw)[FUSED] == (1500, 1500 * 6, 1500 * 32)
    assert (raw.memcpy_calls[H2D], raw.memcpy_bytes[H2D]) == (7, 502)
    assert (raw.memcpy_calls[D2H], raw.memcpy_bytes[D2H]) == (6, 60)
    assert raw.counters["sync_calls"] == 3


def test_graph_kernels_with_each_branch_under_the_runtime(source, branch: DriverBranch, workloads: Workloads,
                                                          tmp_path: Path) -> None:
    """Kernels inside graphs, with the shim runtime entering the branch's real cuStreamEndCapture,
    cuGraphInstantiateWithFlags, cuGraphLaunch (and, where the branch has it, cuGraphAddKernelNode_v2)
    first, as the real runtime does: 30 + 12 launches captured, instantiated, launched 25 times → 1,050
    kernels, each graph launch counted once; 5 kernel nodes launched 4 times more where the branch can."""
    ops = ["g_capture:30:0", "g_capture_to:12:1", "g_inst:1:0", "g_launch:25"]
    nodes = branch.has("cuGraphAddKernelNode_v2")
    if nodes:
        ops += ["g_create:1", "g_kernel:5:2", "g_inst:1:1", "g_launch:4"]
    raw = run(source, [workloads.dlopen, "--cudart", workloads.shim_runtime, *ops], tmp_path,
              env={"SHIM_LIBCUDA": str(branch.libcuda)})
    c = raw.counters
    assert (c["captured_launches"], c["launches"]) == (42, 0)
    assert (c["graph_launches"], c["graph_kernel_launches"], c["graph_unknown_launches"]) == \
        (25 + 4 * nodes, 1050 + 20 * nodes, 0)
    graph = {k.name: k.graph_launches for k in raw.kernels if k.graph_launches}
    assert graph == {FUSED: 750, UNFUSED: 300, **({SAXPY: 20} if nodes else {})}


def test_nvml_of_each_branch_fails_cleanly_without_a_gpu(branch: DriverBranch) -> None:
    """pynvml on the branch's real libnvidia-ml.so.1 (a fresh interpreter each: pynvml keeps the library
    loaded): unavailable, with NVML's own reason, and one call per read."""
    import json
    import sys

    from support import ROOT

    code = ("import json, sys\nfrom gputop.sources.nvml import NvmlSource\nsrc = NvmlSource(sys.argv[1])\n"
            "r = src.read(); src.close()\n"
            "print(json.dumps([r.status.status, r.status.reason, len(r.gpus), len(r.procs), src.calls]))")
    out = subprocess.run([sys.executable, "-c", code, str(branch.libnvidia_ml)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == ["unavailable", "Driver Not Loaded", 0, 0, 1]


def test_doctor_names_the_branch_it_probes(branch: DriverBranch, workloads: Workloads, tmp_path: Path) -> None:
    """`gputop doctor` with a process mapping the branch's libcuda: the library's line names the driver's
    version and what the branch lacks."""
    from gputop.modes import doctor

    go = tmp_path / "go"
    proc = subprocess.Popen([str(workloads.dlopen), "--cuda", str(branch.libcuda), "--wait", str(go), "cu_ctx_sync:1"],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
        checks = doctor._cuda_objects(dirs=())
    finally:
        go.touch()
        proc.wait(timeout=30)
    lines = [c.detail for c in checks if c.name == "  library" and c.detail.endswith(str(branch.libcuda))]
    assert len(lines) == 1, [c.detail for c in checks]
    assert lines[0].startswith(f"libcuda.so.1 (driver {branch.version}): ")
    if branch.branch == "470":
        assert "absent here, not probed: launches with attributes (cuLaunchKernelEx)" in lines[0]
    else:
        assert "cuLaunchKernelEx" not in lines[0]


# ------------------------------------------------------------------ runtimes

def runtime_ops(rt: CudaRuntime) -> list[str]:
    ops = ["register:2:_Z13matrix_kernelPf",
           "launch:1000:40,2,1:128,1,1:0", "launch_ptsz:300:7,1,1:64,2,1:1", "launch_exc:77:2,3,4:8,4,2:2",
           "launch_coop:11:5,1,1:32,1,1:1", "launch_internal:13:1,1,1:1,1,1:0",
           "memcpy:3:1:1000", "memcpy:4:2:10", "memcpy:5:3:7", "memcpy:6:0:1", "memcpy:7:4:64",
           "memcpy_async:2:1:4096", "memcpy2d:2:100:10:3", "memcpy_peer:3:555", "to_symbol:2:64:1",
           "from_symbol:2:32:2",
           "malloc:6:4096", "malloc_host:2:100", "malloc_managed:3:8192", "malloc_async:2:512", "malloc_pitch:1:64:8",
           "free:4", "free_async:1", "sync:9", "device_sync:2", "graph_launch:5",
           "capture:40:7",                          # no driver: the capture fails, so its 40 launches run
           "prefetch:4:4096:0", "prefetch:3:100:-1",
           "memset:3:plain:100", "memset2d:1:async:8:2", "memset3d:1:plain:2:3:4"]
    if rt.has("cudaMemPrefetchAsync_v2"):
        ops += ["prefetch_v2:2:256:0", "prefetch_v2:1:8:-1"]
    if rt.has("cudaMemPrefetchBatchAsync"):
        ops.append("prefetch_batch:2:4:16")         # ranges of 16, 32 to device 0 and 48, 64 to the host
    if rt.has("cudaMemcpyBatchAsync"):
        ops.append("memcpy_batch:2:3:10")           # copies of 10, 20, 30 bytes, untracked: unknown
    if rt.has("cudaMemcpyWithAttributesAsync"):
        ops.append("memcpy_attr:5:48")              # untracked pointers: unknown
    return ops


def test_runtime_api_counted_exactly_on_each_runtime(source, cudart: CudaRuntime, workloads: Workloads,
                                                     tmp_path: Path) -> None:
    raw = run(source, [workloads.dlopen, "--cudart", cudart.lib, *runtime_ops(cudart)], tmp_path)
    assert source.read().status.probes_failed == 0
    c = raw.counters
    assert c["launches"] == 1000 + 300 + 77 + 11 + 13 + 47
    assert c["captured_launches"] == 0
    names = by_name(raw)
    assert names[FUSED] == (1060, 1000 * 80 + 60, 1000 * 128 + 60)
    assert names[UNFUSED] == (311, 300 * 7 + 11 * 5, 300 * 128 + 11 * 32)
    assert names[REGISTERED] == (77, 77 * 24, 77 * 64)          # the name registered, not the stub's symbol
    assert len(names) == 3
    batch = cudart.has("cudaMemcpyBatchAsync")
    attr = cudart.has("cudaMemcpyWithAttributesAsync")
    assert raw.memcpy_calls == (3 + 2 + 2, 4 + 2, 5 + 2 + 3, 6, 7 + 6 * batch + 5 * attr)
    assert raw.memcpy_bytes == (3000 + 8192 + 128, 40 + 64, 35 + 2000 + 1665, 6, 448 + 120 * batch + 240 * attr)
    assert (c["alloc_calls"], c["alloc_bytes"]) == (14, 6 * 4096 + 200 + 3 * 8192 + 1024 + 512)
    assert (c["managed_alloc_calls"], c["managed_alloc_bytes"]) == (3, 3 * 8192)
    assert (c["free_calls"], c["live_bytes"]) == (5, 0)
    assert c["sync_calls"] == 11
    assert (c["memset_calls"], c["memset_bytes"]) == (5, 300 + 16 + 24)
    assert (c["graph_launches"], c["graph_unknown_launches"]) == (6, 6)
    v2 = cudart.has("cudaMemPrefetchAsync_v2")
    bp = cudart.has("cudaMemPrefetchBatchAsync")
    assert raw.prefetch_calls == (4 + 2 * v2 + 4 * bp, 3 + v2 + 4 * bp)
    assert raw.prefetch_bytes == (4 * 4096 + 512 * v2 + 96 * bp, 300 + 8 * v2 + 224 * bp)


def test_runtime_linked_by_each_runtime_s_static_library(source, static_cudart: CudaRuntime, tmp_path: Path) -> None:
    """Where the wheel ships libcudart_static.a (12.9 and every 13.x): a program with it linked in."""
    from support import build_native

    cudart = static_cudart
    static = cudart.dir / "libcudart_static.a"
    assert static.exists(), f"the {cudart.version} wheel's libcudart_static.a is not in the test bed"
    exe = build_native("cuda_workload.c", f"wl_static_{cudart.minor}", "-DLINKED", "-DHAVE_INTERNAL_LAUNCH",
                       str(static), "-ldl", "-lpthread", "-lrt")
    raw = run(source, [exe, "launch:4321:9,1,1:32,1,1:0", "launch_internal:5:1,1,1:1,1,1:1", "memcpy:3:2:100"],
              tmp_path)
    assert raw.counters["launches"] == 4326
    assert by_name(raw)[FUSED] == (4321, 4321 * 9, 4321 * 32)
    assert by_name(raw)[UNFUSED] == (5, 5, 5)
    assert (raw.memcpy_calls[D2H], raw.memcpy_bytes[D2H]) == (3, 300)


def test_testbed_holds_what_the_matrix_names(testbed: support.Testbed) -> None:
    """Every runtime of the matrix is its pinned wheel's (the driver branches may be missing off Debian)."""
    for minor in sm.RUNTIMES:
        rt = sm.cuda_runtime(minor)
        _need(rt.lib)
        assert rt.version.startswith(minor + ".")


def test_the_oldest_branch_and_runtime_with_a_perf_event_per_probe(workloads: Workloads, tmp_path: Path) -> None:
    """Hosts with driver 470 or a CUDA 12.0 runtime often run kernels without uprobe_multi links
    (Linux < 6.6): the same exact counts with a perf event per probe, as gputop attaches there."""
    why = _precondition()
    if why:
        pytest.skip(why)
    b, rt = sm.driver_branch("470"), sm.cuda_runtime("12.0")
    _need(b.libcuda)
    _need(rt.lib)
    src = BpfSource(uprobe_links=False)
    src.start()
    try:
        assert src.uprobes is not None and src.uprobes.mode == "perf"
        check_driver(run(src, [workloads.dlopen, "--cuda", b.libcuda, *driver_ops(b)], tmp_path), b)
        raw = run(src, [workloads.dlopen, "--cudart", rt.lib, *runtime_ops(rt)], tmp_path)
        assert raw.counters["launches"] == 1448
        assert by_name(raw)[REGISTERED] == (77, 77 * 24, 77 * 64)
        assert raw.memcpy_calls == (7, 6, 10, 6, 7)
        assert (raw.prefetch_calls, raw.prefetch_bytes) == ((4, 3), (4 * 4096, 300))
        assert src.read().status.probes_failed == 0
    finally:
        src.close()
