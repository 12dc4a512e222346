"""Every allocation and copy path (issue "What the GPU really runs", part 3), on the real libraries.

Without a driver every call fails after its entry, so the real libraries show what is counted at
entry (calls, bytes asked for, copies and their directions); the shim runtime (tests/native/
shim_runtime.c), whose calls succeed, shows what is known only at return (live bytes, pitches,
virtual-memory handles and the ranges they are mapped at) and that calls a runtime makes to its own
public entry points are not the application's.
"""

from __future__ import annotations

import pytest

H2D, D2H, D2D, H2H, UNK = range(5)
MIB2 = 2 * 1024 * 1024


@pytest.mark.both_runtimes
def test_runtime_paths_counted_at_entry(run_workload, workloads, rt, bpf_source) -> None:
    before = bpf_source.dropped()["array"]
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib,
                        "malloc_async:3:1000", "malloc_pool:2:500", "free_async:4", "malloc_pitch:5:100:7",
                        "malloc_3d:2:10:20:3", "to_symbol:6:64:1", "to_symbol:2:8:3", "from_symbol:3:32:2",
                        "from_symbol:1:16:3", "memcpy3d:4:10:2:3:1", "memcpy3d:2:5:5:1:2", "memcpy3d_array:3",
                        "memcpy3d_peer:2:8:2:2"]).go_and_wait()
    c = raw.counters
    # asked for: 3 x 1000, 2 x 500, 5 pitched 100 x 7, 2 of 10 x 20 x 3; none succeeded
    assert (c["alloc_calls"], c["alloc_bytes"], c["free_calls"], c["live_bytes"]) == (12, 8700, 4, 0)
    # h2d: 6 to a symbol (64 B), 4 3D copies of 10x2x3; d2h: 3 from a symbol (32 B), 2 of 5x5x1;
    # d2d: 2 to and 1 from a symbol (8 and 16 B), 2 3D peer copies of 8x2x2
    assert raw.memcpy_calls == (10, 5, 5, 0, 0)
    assert raw.memcpy_bytes == (6 * 64 + 4 * 60, 3 * 32 + 2 * 25, 2 * 8 + 16 + 2 * 32, 0, 0)
    assert bpf_source.dropped()["array"] - before == 3       # copies from a CUDA array: bytes unknown


def test_driver_paths_counted_at_entry(run_workload, workloads, testbed, bpf_source) -> None:
    before = bpf_source.dropped()["array"]
    raw = run_workload([workloads.dlopen, "--cuda", testbed.libcuda,
                        "cu_alloc_async:3:100", "cu_free_async:2", "cu_alloc_pitch:2:64:3",
                        f"cu_create:2:{MIB2}:1", f"cu_map:1:{MIB2}", f"cu_unmap:1:{MIB2}", "cu_release:2",
                        "cu_memcpy2d:3:10:4:1:2", "cu_memcpy2d:1:8:8:2:1", "cu_memcpy3d:2:4:3:2:2,2",
                        "cu_memcpy2d:1:4:4:3:2", "cu_alloc32:2:4096", "cu_free32:1", "cu_htod32:2:100",
                        "cu_dtoh32:1:50", "cu_dtod32:1:30"]).go_and_wait()
    c = raw.counters
    # cuMemAllocAsync 3 x 100, cuMemAllocPitch 2 x 64 x 3, cuMemCreate 2 x 2 MiB, legacy cuMemAlloc 2 x 4096;
    # frees: cuMemFreeAsync 2, cuMemRelease 2, legacy cuMemFree 1 (cuMemMap and cuMemUnmap are neither)
    assert (c["alloc_calls"], c["alloc_bytes"]) == (9, 300 + 384 + 2 * MIB2 + 8192)
    assert (c["free_calls"], c["live_bytes"]) == (5, 0)
    # h2d: 3 2D copies of 10 x 4 (host -> device), 2 legacy HtoD of 100; d2h: one 8 x 8, one legacy of 50;
    # d2d: 2 3D copies of 4 x 3 x 2, one legacy of 30; a 2D copy from an array is dropped
    assert raw.memcpy_calls == (5, 2, 3, 0, 0)
    assert raw.memcpy_bytes == (3 * 40 + 200, 64 + 50, 2 * 24 + 30, 0, 0)
    assert bpf_source.dropped()["array"] - before == 1


def test_successful_paths_live_bytes_handles_and_mapped_ranges(run_workload, workloads, testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", workloads.shim_runtime,
                        "malloc_pitch:1:100:10", "malloc_3d:1:100:4:2", "malloc_async:1:3000", "device_reset:2",
                        "free_async:1", "cu_create:1:4096:2", f"cu_create:1:{MIB2}:1", f"cu_map:1:{MIB2}",
                        "cu_memcpy2d:2:64:2:1:4", "cu_memcpy2d:1:32:1:4:1", f"cu_unmap:1:{MIB2}",
                        "cu_memcpy2d:1:16:1:1:4", "cu_release:1"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    c = raw.counters
    # asked: pitched 100 x 10, 3D 100 x 4 x 2, async 3000, handles of 4096 (host) and 2 MiB (device).
    # cudaMalloc3D -> cudaMallocPitch -> cudaMalloc and cudaMallocAsync -> cudaMalloc inside the shim,
    # and the shim's cudaDeviceReset's own cudaMalloc/cudaFree, are the runtime's calls: not counted
    assert (c["alloc_calls"], c["alloc_bytes"]) == (5, 1000 + 800 + 3000 + 4096 + MIB2)
    # live: a pitch of 512 x 10 rows, 512 x 4 x 2 for the 3D one, the host handle; the async allocation
    # and the device handle were freed (cudaFreeAsync, cuMemRelease)
    assert (c["free_calls"], c["live_bytes"]) == (2, 512 * 10 + 512 * 8 + 4096)
    # copies into and out of the mapped device handle are h2d/d2h; after cuMemUnmap, unknown
    assert raw.memcpy_calls == (2, 1, 0, 0, 1)
    assert raw.memcpy_bytes == (256, 32, 0, 0, 16)


def test_a_wrapper_preloaded_in_front_of_the_runtime_counts_once(run_workload, rt, tmp_path) -> None:
    """A GPU-sharing layer exporting cudaLaunchKernel (tests/native/launch_wrapper.c) in front of the
    real runtime: each launch passes both, and counts once, with its kernel's name."""
    from support import build_native

    wrapper = build_native("launch_wrapper.c", "liblaunchwrap.so", "-shared", "-fPIC", "-ldl")
    raw = run_workload([rt.dynamic, "launch:2500:4,1,1:64,1,1:0", "launch_ptsz:500:1,1,1:32,1,1:1",
                        "memcpy:3:1:100"], env={"LD_PRELOAD": str(wrapper)}).go_and_wait()
    assert raw.counters["launches"] == 3000
    by_name = {k.name: k.launches for k in raw.kernels}
    assert by_name == {"fused_step(float*, float*, int)": 2500, "unfused_step(float const*, float*, int)": 500}
    assert raw.memcpy_calls == (3, 0, 0, 0, 0)
