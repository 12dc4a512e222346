"""Exact counts from real uprobes on the real NVIDIA libraries (no GPU: calls fail after entry)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support import SCAN_WAIT_S

from gputop import latency
from gputop.sources.bpf import BpfSource, RawProc

FUSED = "fused_step(float*, float*, int)"
UNFUSED = "unfused_step(float const*, float*, int)"
SAXPY = "gputop::test::saxpy_kernel(float, float const*, float*)"
H2D, D2H, D2D, H2H, UNK = range(5)


def kernel(raw: RawProc, name: str):  # type: ignore[no-untyped-def]
    found = [k for k in raw.kernels if k.name == name]
    assert len(found) == 1, f"{name} not in {[k.name for k in raw.kernels]}"
    return found[0]


@pytest.mark.attach_modes("links", "perf")
@pytest.mark.both_runtimes
def test_runtime_launches_exact_with_grid_block_and_names(run_workload, rt) -> None:
    raw = run_workload([rt.dynamic, "launch:12345:40,2,1:128,1,1:0", "launch:500:3,3,3:16,16,1:1"]).go_and_wait()
    c = raw.counters
    assert c["launches"] == 12345 + 500
    assert c["grid_sum"] == 12345 * 80 + 500 * 27
    assert c["block_sum"] == 12345 * 128 + 500 * 256
    fused = kernel(raw, FUSED)
    assert (fused.launches, fused.grid_sum / fused.launches, fused.block_sum / fused.launches) == (12345, 80, 128)
    unfused = kernel(raw, UNFUSED)
    assert (unfused.launches, unfused.grid_sum, unfused.block_sum) == (500, 500 * 27, 500 * 256)
    assert fused.object is not None and fused.object.endswith(rt.dynamic.name)
    # log2 histograms: 80 blocks -> 2^6, 27 -> 2^4; 128 threads -> 2^7, 256 -> 2^8
    assert raw.grid_hist[6] == 12345 and raw.grid_hist[4] == 500 and sum(raw.grid_hist) == 12845
    assert raw.block_hist[7] == 12345 and raw.block_hist[8] == 500 and sum(raw.block_hist) == 12845
    assert raw.exited


def test_ptsz_from_four_threads(run_workload, rt) -> None:
    raw = run_workload([rt.dynamic, "--threads", "4", "launch_ptsz:2500:7,1,1:64,2,1:2"]).go_and_wait()
    assert raw.counters["launches"] == 10000
    k = kernel(raw, SAXPY)
    assert (k.launches, k.grid_sum, k.block_sum) == (10000, 70000, 1280000)


def test_several_processes_counted_apart(run_workload, workloads, bpf_source) -> None:
    before = set(bpf_source.read().procs)
    run = run_workload([workloads.dynamic, "--procs", "3", "launch:1111:2,1,1:32,1,1:0"])
    run.go_and_wait()
    new = {pid: raw for pid, raw in bpf_source.read().procs.items() if pid not in before}
    assert len(new) == 3 and run.pid in new
    assert sorted(raw.counters["launches"] for raw in new.values()) == [1111, 1111, 1111]
    bpf_source.forget(*new)


def test_launch_exc_cooperative_and_internal_each_once(run_workload, rt) -> None:
    raw = run_workload([rt.dynamic, "launch_exc:77:2,3,4:8,4,2:0", "launch_coop:11:5,1,1:32,1,1:1",
                        "launch_internal:13:1,1,1:1,1,1:2"]).go_and_wait()
    assert raw.counters["launches"] == 77 + 11 + 13
    assert kernel(raw, FUSED).grid_sum == 77 * 24
    assert kernel(raw, FUSED).block_sum == 77 * 64
    assert kernel(raw, UNFUSED).launches == 11
    assert kernel(raw, SAXPY).launches == 13


def test_driver_launches(run_workload, workloads, testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cuda", testbed.libcuda, "cu_launch:3000:16,16,1:256,1,1:abc0",
                        "cu_launch_ex:42:4,1,1:32,4,1:def0"]).go_and_wait()
    assert raw.counters["launches"] == 3042
    by_key = {k.key: k for k in raw.kernels}
    assert (by_key[0xABC0].launches, by_key[0xABC0].grid_sum, by_key[0xABC0].block_sum) == (3000, 768000, 768000)
    assert (by_key[0xDEF0].launches, by_key[0xDEF0].grid_sum, by_key[0xDEF0].block_sum) == (42, 168, 5376)
    assert by_key[0xABC0].name is None      # a driver handle nobody named


def test_memcpy_every_kind(run_workload, workloads, testbed, rt) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, "--cuda", testbed.libcuda,
                        "memcpy:3:1:1000", "memcpy:4:2:10", "memcpy:5:3:7", "memcpy:6:0:1", "memcpy:7:4:64",
                        "memcpy_async:2:1:4096", "memcpy2d:2:100:10:3", "memcpy_peer:3:555",
                        "cu_htod:8:11", "cu_dtoh:9:12", "cu_dtod:10:13", "cu_memcpy:11:14"]).go_and_wait()
    assert raw.memcpy_calls == (3 + 2 + 8, 4 + 9, 5 + 2 + 3 + 10, 6, 7 + 11)
    assert raw.memcpy_bytes == (3000 + 8192 + 88, 40 + 108, 35 + 2000 + 1665 + 130, 6, 448 + 154)
    # copy sizes by direction in log2 buckets: 1000 B -> 2^9, 4096 -> 2^12, 11 -> 2^3
    assert (raw.copy_hist[H2D][9], raw.copy_hist[H2D][12], raw.copy_hist[H2D][3]) == (3, 2, 8)


#: every memset entry point, once or twice: (op, calls, bytes); widths of the 2D and 3D ones in bytes (runtime) or
#: elements (driver), the driver's v1 names called with garbage in the registers' upper halves
MEMSETS = (
    ("memset:2:plain:100", 2, 200), ("memset:1:async:10", 1, 10), ("memset:1:ptds:10", 1, 10),
    ("memset:1:ptsz:10", 1, 10),
    ("memset2d:2:plain:4:5", 2, 40), ("memset2d:1:async:4:5", 1, 20), ("memset2d:1:ptds:4:5", 1, 20),
    ("memset2d:1:ptsz:4:5", 1, 20),
    ("memset3d:1:plain:4:5:6", 1, 120), ("memset3d:1:async:4:5:6", 1, 120), ("memset3d:3:ptds:4:5:6", 3, 360),
    ("memset3d:1:ptsz:2:5:7", 1, 70),
    ("cu_memset:1:plain:8:7", 1, 7), ("cu_memset:2:plain:16:7", 2, 28), ("cu_memset:1:plain:32:7", 1, 28),
    ("cu_memset:1:v1:8:9", 1, 9), ("cu_memset:1:v1:16:7", 1, 14), ("cu_memset:1:v1:32:5", 1, 20),
    ("cu_memset:1:ptds:32:7", 1, 28), ("cu_memset:1:ptsz:32:7", 1, 28), ("cu_memset:1:async:16:3", 1, 6),
    ("cu_memset2d:1:plain:8:3:4", 1, 12), ("cu_memset2d:1:plain:16:3:4", 1, 24), ("cu_memset2d:1:plain:32:3:4", 1, 48),
    ("cu_memset2d:1:v1:8:3:4", 1, 12), ("cu_memset2d:1:v1:16:3:4", 1, 24), ("cu_memset2d:1:v1:32:3:4", 1, 48),
    ("cu_memset2d:1:ptsz:16:3:4", 1, 24), ("cu_memset2d:1:ptds:16:3:4", 1, 24), ("cu_memset2d:1:async:8:3:4", 1, 12),
)


@pytest.mark.attach_modes("links", "perf")
@pytest.mark.both_runtimes
def test_memsets_every_entry_point(run_workload, workloads, testbed, rt) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, "--cuda", testbed.libcuda,
                        *(op for op, _calls, _bytes in MEMSETS)]).go_and_wait()
    c = raw.counters
    assert (c["memset_calls"], c["memset_bytes"]) == (sum(m[1] for m in MEMSETS), sum(m[2] for m in MEMSETS))
    assert (c["memset_calls"], c["memset_bytes"]) == (35, 1396)
    assert raw.memcpy_calls == (0, 0, 0, 0, 0) and c["launches"] == 0


def test_a_runtime_memset_through_the_driver_counts_once(run_workload, workloads, testbed) -> None:
    """The shim runtime's cudaMemset(Async) and cudaMemset2D call the real driver's cuMemsetD8_v2 (Async) and
    cuMemsetD2D8_v2, as the runtime does on a GPU host: each counted where the application called."""
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", testbed.libcuda,
                        "memset:3:plain:1000", "memset:2:async:10", "memset2d:1:plain:8:8", "cu_memset:4:plain:32:2"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    assert (raw.counters["memset_calls"], raw.counters["memset_bytes"]) == (10, 3000 + 20 + 64 + 32)


def test_allocations_and_sync(run_workload, rt) -> None:
    raw = run_workload([rt.dynamic, "malloc:6:4096", "malloc_host:2:100", "malloc_managed:3:8192",
                        "free:4", "sync:9", "device_sync:2"]).go_and_wait()
    c = raw.counters
    assert (c["alloc_calls"], c["alloc_bytes"]) == (11, 6 * 4096 + 200 + 3 * 8192)
    assert (c["managed_alloc_calls"], c["managed_alloc_bytes"]) == (3, 3 * 8192)
    assert c["free_calls"] == 4
    assert c["live_bytes"] == 0          # every allocation failed: nothing is live
    assert c["sync_calls"] == 11
    assert c["sync_ns"] > 0


def test_statically_linked_runtime(run_workload, rt) -> None:
    raw = run_workload([rt.static, "launch:4321:9,1,1:32,1,1:0", "launch_internal:5:1,1,1:1,1,1:1",
                        "memcpy:3:2:100"]).go_and_wait()
    assert raw.counters["launches"] == 4326
    assert kernel(raw, FUSED).launches == 4321
    assert kernel(raw, UNFUSED).launches == 5
    assert raw.memcpy_calls[D2H] == 3


@pytest.mark.attach_modes("links", "perf")
@pytest.mark.both_runtimes
def test_late_dlopen_attached_by_mmap_event(run_workload, workloads, rt, bpf_source, tmp_path) -> None:
    # a private copy: a new inode that no probe covers yet
    lib = tmp_path / f"libcudart-late.so.{rt.major}"
    shutil.copy(rt.lib, lib)
    run = run_workload([workloads.dlopen, "--dlopen-delay-ms", "300", "--cudart", lib,
                        "sleep:400", "launch:2222:2,1,1:64,1,1:0"])
    run.go.touch()                  # go right away: the library is not even loaded yet
    deadline = time.monotonic() + 30
    while run.proc.poll() is None:  # only the ring buffer's mmap event can attach in time
        bpf_source.poll(0.02)
        assert time.monotonic() < deadline
    reading = bpf_source.read()
    assert reading.procs[run.pid].counters["launches"] == 2222
    assert str(lib) in bpf_source.objects.values()


@pytest.mark.both_runtimes
def test_preexisting_process_found_at_start(rt, tmp_path) -> None:
    go = tmp_path / "go"
    proc = subprocess.Popen([str(rt.dynamic), "--wait", str(go), "launch:777:1,1,1:1,1,1:0"],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
    src = BpfSource()
    src.start()                     # the initial scan finds the running process's libcudart
    try:
        go.touch()
        proc.wait(timeout=30)
        assert src.read().procs[proc.pid].counters["launches"] == 777
    finally:
        src.close()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is not installed")
def test_mount_namespaced_process(run_workload, workloads, rt, tmp_path) -> None:
    hidden = tmp_path / "ns-only"
    hidden.mkdir()
    script = (f"mount -t tmpfs tmpfs {hidden} && cp {rt.lib} {hidden}/{rt.lib.name} && "
              f"exec \"$@\"")
    run = run_workload([workloads.dlopen, "--cudart", f"{hidden}/{rt.lib.name}", "launch:999:3,1,1:96,1,1:2"],
                       prefix=["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"])
    assert not (hidden / rt.lib.name).exists()     # invisible from the host namespace
    raw = run.go_and_wait()
    assert raw.counters["launches"] == 999
    assert kernel(raw, SAXPY).block_sum == 999 * 96


def test_runtime_calling_driver_counts_once(run_workload, workloads, testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", testbed.libcuda,
                        "launch:1500:6,1,1:32,1,1:0", "cu_launch:100:1,1,1:1,1,1:aa00",
                        "memcpy:5:1:100", "memcpy:6:2:10", "cu_htod:2:1", "sync:3"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda), "SHIM_SYNC_MS": "20"}).go_and_wait()
    assert raw.counters["launches"] == 1600
    assert kernel(raw, FUSED).launches == 1500      # named by the runtime's host stub, not the driver
    assert raw.memcpy_calls[H2D] == 7 and raw.memcpy_bytes[H2D] == 502
    assert raw.memcpy_calls[D2H] == 6
    assert raw.counters["sync_calls"] == 3
    assert 3 * 20e6 <= raw.counters["sync_ns"] < 3 * 20e6 + 2e9


def test_direct_driver_launches_after_the_runtime_initialised(run_workload, workloads, testbed, rt) -> None:
    """PyTorch and Triton in one process: the runtime initialised (it called into the driver), then
    the application calls cuLaunchKernel(Ex) itself. Handle 0: the real driver, once initialised,
    dereferences other made-up handles and the workload would crash."""
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, "--cuda", testbed.libcuda,
                        "launch:5:1,1,1:1,1,1:0", "cu_launch:100:4,1,1:128,1,1:0",
                        "cu_launch_ex:7:1,1,1:1,1,1:0"]).go_and_wait()
    assert raw.counters["launches"] == 112


def test_default_copies_classified_from_tracked_allocations(run_workload, workloads, testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "classify:50:65536"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    assert raw.memcpy_calls == (50, 50, 50, 50, 51)
    assert raw.counters["alloc_calls"] == 4
    assert raw.counters["free_calls"] == 1
    assert raw.counters["live_bytes"] == 3 * 65536


def test_launches_into_a_capturing_stream_are_captured_not_run(run_workload, workloads, testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "capture:40:7"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    c = raw.counters
    assert (c["captured_launches"], c["launches"], c["graph_launches"]) == (40, 7, 1)


def test_streams_joining_a_capture_through_events_are_captured_until_it_ends(run_workload, workloads,
                                                                              testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "capture_fork:30:9"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    c = raw.counters
    assert (c["captured_launches"], c["launches"], c["graph_launches"]) == (31, 18, 1)


def test_failed_capture_captures_nothing(run_workload, workloads, rt) -> None:
    # the real runtime without a driver: cudaStreamBeginCapture fails, so every launch is a launch
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, "capture:40:7"]).go_and_wait()
    c = raw.counters
    assert (c["captured_launches"], c["launches"], c["graph_launches"]) == (0, 47, 1)


def test_launch_by_handle_named_through_get_kernel(run_workload, workloads, testbed) -> None:
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", testbed.libcuda,
                        "by_handle:321:1"], env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    assert raw.counters["launches"] == 321
    (k,) = raw.kernels
    assert (k.launches, k.name) == (321, UNFUSED)      # the heap handle stands for the host stub


def _sorted_buckets(hist: tuple[int, ...]) -> list[int]:
    return [i for i, n in enumerate(hist) for _ in range(n)]


def test_sync_latency_histograms_by_api(run_workload, workloads, testbed, bpf_source, tmp_path: Path) -> None:
    """The shim runtime's syncs block known times (90 of 1 ms, 9 of 10 ms, 1 of 100 ms through
    cudaStreamSynchronize, then 1 ms each through cudaDeviceSynchronize and cudaEventSynchronize, which
    enter the real driver's cuCtxSynchronize and cuEventSynchronize: counted once, as the outer API) and log
    each one's time as the shim saw it; cuCtxSynchronize called directly fails at once. Each histogram holds
    every sync of its API, in the buckets of the shim's times: never below (the probes time the whole call,
    the shim's part of it and more), above by at most the time to return through the probe (5 ms allowed).
    The workload runs at a real-time priority (SCHED_FIFO): a thread woken from its sync returns through the
    probe at once, whatever else the machine runs (./test.sh runs two QEMU guests and the UI tests beside
    this tier; at normal priority a wake-up there once came later than 5 ms)."""
    log = tmp_path / "syncs"
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", testbed.libcuda,
                        "sync:100", "device_sync:4", "event_sync:3", "cu_ctx_sync:5"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda), "SHIM_SYNC_SCHEDULE": "1000*90,10000*9,100000*1",
                            "SHIM_SYNC_LOG": str(log)}, prefix=["chrt", "--fifo", "10"]).go_and_wait()
    assert raw.counters["sync_calls"] == 112
    times = [int(x) for x in log.read_text().split()]
    assert len(times) == 107
    shim = {"stream": times[:100], "device": times[100:104], "event": times[104:]}
    assert sorted(raw.sync_hist) == ["context", "device", "event", "stream"]
    context_sum, context = raw.sync_hist["context"]
    assert sum(context) == 5 and context_sum < 5 * 5_000_000
    slack = 5_000_000
    for api, ts in shim.items():
        total_ns, hist = raw.sync_hist[api]
        assert len(hist) == latency.BUCKETS and sum(hist) == len(ts), api
        assert sum(ts) <= total_ns <= sum(ts) + len(ts) * slack, api
        got = _sorted_buckets(hist)
        low = sorted(latency.bucket_of(t) for t in ts)
        high = sorted(latency.bucket_of(t + slack) for t in ts)
        assert all(lo <= g <= hi for lo, g, hi in zip(low, got, high)), (api, got, low)
    assert raw.counters["sync_ns"] == sum(s for s, _h in raw.sync_hist.values())
    # the figures: p50 and p90 of 1 ms, p99 of 10 ms, a maximum of 100 ms, each within its bucket
    s = latency.sync_latency(raw.sync_hist, None)
    assert s is not None
    stream = s.total["stream"]
    ranked = sorted(shim["stream"])
    for got_s, true_ns in ((stream.p50_s, ranked[49]), (stream.p90_s, ranked[89]), (stream.p99_s, ranked[98]),
                           (stream.max_s, ranked[99])):
        assert got_s is not None and true_ns * 0.9375 <= got_s * 1e9 <= (true_ns + slack) * 1.0625
    assert s.total["all"].calls == 112 and s.interval == s.total
    assert s.histograms["stream"].le_counts[-1] == 100 and s.histograms["stream"].calls == 100
    # at its exit its last record was read with its four histograms; they leave the kernel (by key) once it
    # was shown exited (a read or two later)
    table = bpf_source.program.table("sync_hist")
    deadline = time.monotonic() + 10
    while [k for k in table if int(k.tgid) == raw.pid] and time.monotonic() < deadline:
        bpf_source.read()
        bpf_source.poll(0.05)
    assert [k for k in table if int(k.tgid) == raw.pid] == []


def test_time_blocked_in_a_sync_that_has_not_returned(run_workload, workloads, testbed, bpf_source) -> None:
    run = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "sync:1"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda), "SHIM_SYNC_MS": "3000"})
    bpf_source.scan([run.pid], wait_s=SCAN_WAIT_S)
    run.go.touch()
    time.sleep(1.0)
    during = bpf_source.read().procs[run.pid].counters
    assert during["sync_calls"] == 1 and 0.7e9 <= during["sync_ns"] <= 2.9e9     # still blocked, and it shows
    raw = run.go_and_wait()
    assert raw.counters["sync_calls"] == 1 and raw.counters["sync_ns"] >= 3e9


def test_forked_worker_counts_once_with_inherited_code_ranges(run_workload, workloads, testbed, bpf_source) -> None:
    run = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", testbed.libcuda,
                        "fork:250"], env={"SHIM_LIBCUDA": str(testbed.libcuda)})
    bpf_source.scan([run.pid], wait_s=SCAN_WAIT_S)
    run.go.touch()
    assert run.proc.stdout is not None
    child = int(run.proc.stdout.readline().split()[1])
    deadline = time.monotonic() + 30
    while run.proc.poll() is None:           # the fork event makes gputop scan the child in time
        bpf_source.poll(0.02)
        assert time.monotonic() < deadline
    raw = bpf_source.read().procs[child]
    assert raw.counters["launches"] == 250   # runtime -> driver, once each
    bpf_source.forget(child)


def test_names_of_a_process_that_never_launched_are_forgotten_at_exit(run_workload, workloads, testbed,
                                                                     bpf_source) -> None:
    run = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "register:2:_Z6unusedv"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)})
    bpf_source.scan([run.pid], wait_s=SCAN_WAIT_S)
    run.go.touch()
    run.proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(k.tgid == run.pid for k in bpf_source.table("names")):
        bpf_source.poll(0.05)                # the exit event of an untracked-by-record process
        assert time.monotonic() < deadline, "names of the exited process were not removed"
    assert run.pid not in bpf_source.read().procs


def test_cpu_faults_on_managed_memory(run_workload, workloads, testbed, bpf_source) -> None:
    assert bpf_source.uvm_cpu_faults, "tracepoint exceptions:page_fault_user should be on this machine"
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "managed_touch:37"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    assert raw.counters["managed_alloc_calls"] == 1
    assert raw.counters["uvm_cpu_faults"] == 37


def test_process_exit_removes_records(run_workload, workloads, bpf_source) -> None:
    run = run_workload([workloads.dynamic, "launch:10:1,1,1:1,1,1:0", "malloc:1:1"])
    raw = run.go_and_wait()
    assert raw.exited
    bpf_source.forget(run.pid)
    assert run.pid not in bpf_source.read().procs
    assert not [k for k in bpf_source.table("kernels") if k.tgid == run.pid]


def test_dropped_kernels_are_counted(workloads, tmp_path) -> None:
    src = BpfSource(limits={"MAX_KERNELS": 2, "TENANT_SHARE_PCT": 100})
    src.start()
    try:
        go = tmp_path / "go"
        proc = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:5:1,1,1:1,1,1:0",
                                 "launch:6:1,1,1:1,1,1:1", "launch:7:1,1,1:1,1,1:2"], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
        src.scan([proc.pid], wait_s=SCAN_WAIT_S)
        go.touch()
        proc.wait(timeout=30)
        reading = src.read()
        assert reading.procs[proc.pid].counters["launches"] == 18
        assert sorted(k.launches for k in reading.procs[proc.pid].kernels) == [5, 6]
        assert src.dropped()["kernels"] == 7
        assert reading.status.dropped == 7
    finally:
        src.close()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_built_program(run_workload, tmp_path: Path) -> None:
    src = Path(__file__).parent.parent / "native" / "vector_add.cu"
    exe = tmp_path / "vector_add"
    subprocess.run(["nvcc", "-o", str(exe), str(src)], check=True)
    raw = run_workload([exe, "3210"]).go_and_wait()
    assert raw.counters["launches"] == 3210
    names = {k.name: k for k in raw.kernels}
    k = names["vector_add(float const*, float const*, float*, int)"]
    assert (k.launches, k.grid_sum, k.block_sum) == (3210, 3210 * 64, 3210 * 256)


def test_capture_on_the_per_thread_default_stream_is_that_threads_own(run_workload, workloads, testbed) -> None:
    """Thread A captures its per-thread default stream (cudaStreamPerThread, or stream 0 through the
    _ptsz entry points of --default-stream per-thread code); thread B's launches into its own
    per-thread stream meanwhile run: 25 captured, 2 x 40 launched, either way."""
    for mode in (0, 1):
        raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, f"capture_threads:25:40:{mode}"],
                           env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
        c = raw.counters
        assert (c["captured_launches"], c["launches"]) == (25, 80), f"mode {mode}"
        assert {k.name: k.launches for k in raw.kernels} == {"unfused_step(float const*, float*, int)": 80}


def test_kernel_names_at_pytorch_scale(run_workload, workloads, rt, bpf_source) -> None:
    """Four processes each register 100,000 kernels through the real runtime (as `import torch`
    does) and launch three: while they run, every launched kernel has its registered name in every
    process (read from the process's memory, lazily), and no name is dropped."""
    import os
    import signal

    import psutil

    before = bpf_source.dropped()["names"]
    run = run_workload([workloads.dlopen, "--procs", "4", "--cudart", rt.lib, "register_many:100000:torch_kernel",
                        "launch:5:1,1,1:1,1,1:0", "launch:7:1,1,1:1,1,1:1", "launch:9:1,1,1:1,1,1:2", "sleep:60000"])
    bpf_source.scan([run.pid], wait_s=SCAN_WAIT_S)
    run.go.touch()
    want = {"torch_kernel_0": 5, "torch_kernel_1": 7, "torch_kernel_2": 9}
    deadline = time.monotonic() + 120
    while True:
        bpf_source.poll(0.1)
        pids = [run.pid, *(c.pid for c in psutil.Process(run.pid).children())]
        procs = bpf_source.read().procs
        if len(pids) == 4 and all(p in procs and procs[p].counters["launches"] == 21 for p in pids):
            break
        assert time.monotonic() < deadline, "the four processes did not launch in time"
    try:
        for pid in pids:
            assert {k.name: k.launches for k in procs[pid].kernels} == want, pid
        assert bpf_source.dropped()["names"] == before
    finally:
        for pid in pids:                # they sleep a minute: long enough to be read however loaded
            os.kill(pid, signal.SIGKILL)
        run.proc.wait(timeout=60)
    bpf_source.forget(*pids)
