"""Prefetches and batch calls on both CUDA runtimes of the test bed (12.9 and 13.0).

Rules (docs/collector.md): the plain ``cudaMemPrefetchAsync`` takes a device number in CUDA 12 and
a ``cudaMemLocation`` in CUDA 13; one batch call counts each of its copies or prefetched ranges, with
its own size (the first 64 of a call; the rest are counted as dropped, kind "batch").
"""

from __future__ import annotations

import pytest
from support import runtime

H2D, D2H, D2D, H2H, UNK = range(5)


@pytest.mark.both_runtimes
def test_prefetch_plain_takes_the_runtimes_signature(run_workload, workloads, rt) -> None:
    ops = ["prefetch:3:4096:0", "prefetch:2:100:-1"]
    if rt.major == 12:      # CUDA 13 has no _v2: its plain name took over the location signature
        ops += ["prefetch_v2:4:50:0", "prefetch_v2:5:7:-1"]
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, *ops]).go_and_wait()
    if rt.major == 12:
        assert raw.prefetch_calls == (3 + 4, 2 + 5)
        assert raw.prefetch_bytes == (3 * 4096 + 4 * 50, 2 * 100 + 5 * 7)
    else:
        assert raw.prefetch_calls == (3, 2)
        assert raw.prefetch_bytes == (3 * 4096, 2 * 100)


def test_prefetch_batch_counts_each_range_at_its_location(run_workload, workloads, testbed, bpf_source) -> None:
    rt = runtime(testbed, 13)       # cudaMemPrefetchBatchAsync is new in CUDA 13 (libcudart 12.9 has none)
    before = bpf_source.dropped()["batch"]
    # 3 calls of 10 ranges of 100*(i+1) bytes: ranges 1-5 to device 0, 6-10 to the host;
    # then one call of 100 ranges of (i+1) bytes: 1-50 to the device, 51-64 to the host, 36 dropped
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, "prefetch_batch:3:10:100",
                        "prefetch_batch:1:100:1"]).go_and_wait()
    assert raw.prefetch_calls == (3 * 5 + 50, 3 * 5 + 14)
    assert raw.prefetch_bytes == (3 * 100 * 15 + 50 * 51 // 2, 3 * 100 * 40 + (51 + 64) * 14 // 2)
    assert bpf_source.dropped()["batch"] - before == 36


@pytest.mark.both_runtimes
def test_memcpy_batch_counts_each_copy(run_workload, workloads, rt, bpf_source) -> None:
    before = bpf_source.dropped()["batch"]
    # 4 calls of 6 copies of 10*(i+1) bytes; one of 100 copies of (i+1) bytes (64 counted).
    # Nothing was allocated through gputop's eyes, so no copy can be classified: all "unknown".
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, "memcpy_batch:4:6:10",
                        "memcpy_batch:1:100:1"]).go_and_wait()
    assert raw.memcpy_calls == (0, 0, 0, 0, 4 * 6 + 64)
    assert raw.memcpy_bytes == (0, 0, 0, 0, 4 * 210 + 64 * 65 // 2)
    assert sum(raw.copy_hist[UNK]) == 4 * 6 + 64
    assert bpf_source.dropped()["batch"] - before == 36


def test_memcpy_batch_copies_classified_from_tracked_allocations(run_workload, workloads, testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "classify_batch:7:4096"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    assert raw.memcpy_calls == (7, 7, 7, 0, 7)
    assert raw.memcpy_bytes == (7 * 4096, 7 * 4096, 7 * 4096, 0, 7 * 4096)
