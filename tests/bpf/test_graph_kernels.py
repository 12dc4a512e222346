"""Kernels inside CUDA graphs (issue "What the GPU really runs", part 2), with real probes.

A graph replay is one cudaGraphLaunch whose kernels pass no entry point: gputop follows how each
graph is built (captures, nodes, child graphs, clones, instantiation, updates) and counts each
launch's kernels. Without a driver every real graph call fails, so the real libraries show what is
counted at entry (graph launches of unknown graphs); the shim runtime (tests/native/shim_runtime.c),
whose graph calls succeed and enter the real libcuda.so.1's twins first, shows the rest.
"""

from __future__ import annotations

import os

import pytest

FUSED = "fused_step(float*, float*, int)"
UNFUSED = "unfused_step(float const*, float*, int)"
SAXPY = "gputop::test::saxpy_kernel(float, float const*, float*)"


def _shim(run_workload, workloads, testbed, *ops: str):  # type: ignore[no-untyped-def]
    return run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, *ops],
                        env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()


def _graph(raw) -> tuple[int, int, int, int]:  # type: ignore[no-untyped-def]
    c = raw.counters
    return c["graph_launches"], c["graph_kernel_launches"], c["graph_unknown_launches"], c["launches"]


def _per_kernel(raw) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {k.name: k.graph_launches for k in raw.kernels if k.graph_launches}


def test_a_captured_graph_replayed_counts_its_kernels(run_workload, workloads, testbed) -> None:
    """30 + 12 launches captured into one graph (the second part through cudaStreamBeginCaptureToGraph),
    instantiated once and launched 25 times: 1,050 kernels, each launch counted once although the
    shim's runtime calls enter the real driver's cuStreamEndCapture, cuGraphInstantiateWithFlags and
    cuGraphLaunch first."""
    raw = _shim(run_workload, workloads, testbed, "g_capture:30:0", "g_capture_to:12:1", "g_inst:1:0", "g_launch:25")
    assert raw.counters["captured_launches"] == 42
    assert _graph(raw) == (25, 25 * 42, 0, 0)
    assert _per_kernel(raw) == {FUSED: 25 * 30, UNFUSED: 25 * 12}
    assert raw.graph_kernels_known


def test_graphs_built_node_by_node_with_children_clones_and_updates(run_workload, workloads, testbed) -> None:
    """A = 5 saxpy + 3 fused (kernel nodes, cudaGraphAddNode); B = 2 unfused + A twice as a child; C =
    a clone of B plus one unfused node (the clone keeps B's content, the node goes to C only). C's
    exec runs 10 times, B's (WithParams) 7 times; then B gets 4 fused nodes (B's exec keeps the
    content it was instantiated from) and cudaGraphExecUpdate gives them to it: 2 more launches."""
    raw = _shim(run_workload, workloads, testbed,
                "g_create:1", "g_kernel:5:2", "g_node:3:0",                 # A
                "g_create:1", "g_kernel:2:1", "g_child:2",                  # B = 2 unfused + 2 x A
                "g_clone:1", "g_kernel:1:1", "g_inst:1:1", "g_launch:10",   # C = B + 1 unfused: 19 kernels
                "g_destroy:1", "g_inst:1:2", "g_launch:7",                  # B: 18 kernels
                "g_kernel:4:0", "g_launch:3", "g_update:1", "g_launch:2")   # B + 4 fused: 22 kernels
    assert _graph(raw) == (22, 10 * 19 + 10 * 18 + 2 * 22, 0, 0)
    assert _per_kernel(raw) == {SAXPY: 10 * 10 + 10 * 10 + 2 * 10,
                                FUSED: 10 * 6 + 10 * 6 + 2 * 10,
                                UNFUSED: 10 * 3 + 10 * 2 + 2 * 2}


def test_a_graph_launched_into_a_capture_is_a_child_not_a_launch(run_workload, workloads, testbed) -> None:
    """G1 = 4 captured launches; its exec launched 3 times into a second capture with 2 launches:
    G2 holds 3 x 4 + 2 kernels. Only G2's 5 launches are graph launches: 70 kernels."""
    raw = _shim(run_workload, workloads, testbed, "g_capture:4:0", "g_inst:1:0", "g_launch_capture:3:2",
                "g_inst:1:0", "g_launch:5")
    assert raw.counters["captured_launches"] == 6
    assert _graph(raw) == (5, 70, 0, 0)
    assert _per_kernel(raw) == {FUSED: 70}


def test_kernels_of_graphs_gputop_cannot_know_are_unknown(run_workload, workloads, testbed) -> None:
    """A conditional node (its body runs 0..n times) and a node turned off or on in an exec
    (cudaGraphNodeSetEnabled): the launches of those execs count as graph launches of unknown
    kernels, never a guess (4, then 3, then the first exec once more after the second is destroyed)."""
    raw = _shim(run_workload, workloads, testbed,
                "g_create:1", "g_kernel:3:0", "g_cond:1", "g_inst:1:0", "g_launch:4",     # conditional
                "g_capture:2:0", "g_inst:1:0", "g_launch:6", "g_enable:1", "g_launch:3",  # 6 known, then off
                "g_exec_destroy:1", "g_launch:1")                                          # the first again
    assert _graph(raw) == (14, 6 * 2, 4 + 3 + 1, 0)
    assert _per_kernel(raw) == {FUSED: 12}


def test_graph_launches_through_the_real_runtime_are_of_unknown_kernels(run_workload, workloads, rt) -> None:
    """The real libcudart without a driver: cudaGraphCreate, capture and instantiation fail, so every
    graph launch (counted at entry) is one of unknown kernels; nothing is captured."""
    raw = run_workload([workloads.dlopen, "--cudart", rt.lib, "g_create:1", "g_kernel:3:0", "g_node:2:1",
                        "g_capture:5:0", "g_inst:1:1", "g_launch:6", "g_launch_ptsz:2"]).go_and_wait()
    assert raw.counters["captured_launches"] == 0
    assert _graph(raw) == (8, 0, 8, 5)
    assert _per_kernel(raw) == {}


def test_driver_graphs_by_function_and_kernel_handle(run_workload, workloads, testbed) -> None:
    """cuGraphAddKernelNode_v2 with a CUkernel (no CUfunction) and cuGraphAddNode with a CUfunction,
    instantiated and launched through the driver: 6 launches of 5 kernels, by handle."""
    raw = run_workload([workloads.dlopen, "--cuda", workloads.shim_runtime, "cu_g_create:1", "cu_g_kernel:3:beef0",
                        "cu_g_node:2:cafe0", "cu_g_inst:1", "cu_g_launch:6"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    assert _graph(raw) == (6, 30, 0, 0)
    assert {k.key: k.graph_launches for k in raw.kernels} == {0xbeef0: 18, 0xcafe0: 12}


def test_batch_json_graph_kernels_per_interval_and_kernel(workloads, testbed, tmp_path) -> None:
    """The real `gputop -b -f json`: the intervals' graph kernels add up to the total (25 launches of
    42 kernels), their rates are the counts over interval_s, and the last row (the process exited:
    its tables are gone) still names each kernel with its graph launches."""
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent.parent
    gt = subprocess.Popen([sys.executable, "-m", "gputop.cli", "-b", "-f", "json", "-d", "0.5", "--no-nvml", "--bpf"],
                          stdout=subprocess.PIPE, text=True, cwd=root)
    assert gt.stdout is not None
    try:
        first = json.loads(gt.stdout.readline())
        assert first["sources"]["bpf"]["status"] == "ok"
        go = tmp_path / "go"
        wl = subprocess.Popen([str(workloads.dlopen), "--wait", str(go), "--cudart", str(workloads.shim_runtime),
                               "g_capture:30:0", "g_capture_to:12:1", "g_inst:1:0", "sleep:1500", "g_launch:10",
                               "sleep:1500", "g_launch:15", "sleep:1200"], stdout=subprocess.PIPE,
                              env={**os.environ, "SHIM_LIBCUDA": str(testbed.libcuda)})
        intervals = []
        deadline = time.monotonic() + 60
        for line in gt.stdout:
            snap = json.loads(line)
            p = {q["pid"]: q for q in snap["processes"]}.get(wl.pid)
            if p is None:
                assert time.monotonic() < deadline, "gputop never listed the workload"
                continue
            if not go.exists():          # listed: the exec event attached gputop to it (a fixed 1 s was short
                go.touch()               # on a loaded host); the bursts 1.5 s apart, three intervals or more
            n = p["interval"]["graph_kernel_launches"]
            intervals.append(n)
            assert p["rates"]["graph_kernel_launches_per_s"] == pytest.approx(n / snap["interval_s"], rel=1e-12)
            if p["state"] == "exited":
                break
        wl.wait()
        assert p["total"]["graph_kernel_launches"] == sum(intervals) == 25 * 42
        assert p["total"]["graph_launches"] == 25 and p["total"]["launches"] == 0
        assert {k["name"]: k["graph_launches"] for k in p["kernels"]} == {FUSED: 25 * 30, UNFUSED: 25 * 12}
        assert [x for x in intervals if x] == [420, 630]        # the two bursts, apart
    finally:
        gt.terminate()
        gt.wait()
