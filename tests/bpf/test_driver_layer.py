"""Rule 7 (docs/collector.md): a driver-level interception layer preloaded in front of the real
libcuda.so.1 (tests/native/driver_layer.c, built as GPU-sharing layers are: exporting the driver's
entry points, hooking dlsym and cuGetProcAddress, forwarding each call) counts each call once, where
the application made it — reached by symbol, by dlsym or through cuGetProcAddress; alone, behind the
runtime, and behind a runtime-level layer too; forwarding by a tail call (a jump: the driver sees the
application's return address) or by a call. Before rule 7 the tail-call layer counted everything twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import support
from support import Workloads, build_native

H2D, D2H, D2D, H2H, UNK = range(5)


@pytest.fixture(scope="module", params=["tail", "call"])
def layer(request: pytest.FixtureRequest) -> Path:
    extra = () if request.param == "tail" else ("-DNO_TAIL",)
    return build_native("driver_layer.c", f"driver_layer_{request.param}/libvgpu_test.so", "-O2", "-shared",
                        "-fPIC", "-ldl", *extra)


@pytest.fixture(scope="module")
def linked_driver(testbed: support.Testbed) -> Path:
    """The workload with the driver's functions bound by symbol (linked against libcuda.so.1)."""
    nv = testbed.nvidia_dir
    return build_native("cuda_workload.c", "wl_linked_cuda", "-DLINKED_CUDA", f"-L{nv}", "-l:libcuda.so.1",
                        f"-Wl,-rpath,{nv}", "-ldl", "-lpthread")


DRIVER_OPS = ["cu_launch:300:2,1,1:64,1,1:0", "cu_launch_ex:20:1,1,1:1,1,1:0", "cu_g_launch:7", "cu_htod:3:100",
              "cu_dtoh:4:10", "cu_dtod:5:1", "cu_alloc_async:2:4096", "cu_free_async:1", "cu_ctx_sync:6"]


def check_driver_ops(raw) -> None:  # type: ignore[no-untyped-def]
    assert raw.counters["launches"] == 320
    assert raw.counters["graph_launches"] == 7
    assert (raw.memcpy_calls[H2D], raw.memcpy_bytes[H2D]) == (3, 300)
    assert (raw.memcpy_calls[D2H], raw.memcpy_bytes[D2H]) == (4, 40)
    assert (raw.memcpy_calls[D2D], raw.memcpy_bytes[D2D]) == (5, 5)
    assert (raw.counters["alloc_calls"], raw.counters["alloc_bytes"]) == (2, 8192)
    assert raw.counters["sync_calls"] == 6


def env(layer: Path, testbed: support.Testbed, *more: Path) -> dict[str, str]:
    return {"LD_PRELOAD": ":".join(str(p) for p in (*more, layer)), "LAYER_LIBCUDA": str(testbed.libcuda)}


def test_application_reaches_the_layer_by_symbol(run_workload, linked_driver, testbed, layer) -> None:
    check_driver_ops(run_workload([linked_driver, *DRIVER_OPS], env=env(layer, testbed)).go_and_wait())


def test_application_reaches_the_layer_by_dlsym(run_workload, workloads: Workloads, testbed, layer) -> None:
    raw = run_workload([workloads.dlopen, "--cuda", testbed.libcuda, *DRIVER_OPS],
                       env=env(layer, testbed)).go_and_wait()
    check_driver_ops(raw)


def test_application_reaches_the_layer_through_cugetprocaddress(run_workload, workloads: Workloads, testbed,
                                                               layer) -> None:
    raw = run_workload([workloads.dlopen, "--cuda-proc", testbed.libcuda, *DRIVER_OPS],
                       env=env(layer, testbed)).go_and_wait()
    check_driver_ops(raw)


RUNTIME_OPS = ["launch:1500:6,1,1:32,1,1:0", "cu_launch:100:1,1,1:1,1,1:aa00", "memcpy:5:1:100", "memcpy:6:2:10",
               "cu_htod:2:1", "sync:3"]


def check_runtime_ops(raw) -> None:  # type: ignore[no-untyped-def]
    assert raw.counters["launches"] == 1600
    assert (raw.memcpy_calls[H2D], raw.memcpy_bytes[H2D]) == (7, 502)
    assert raw.memcpy_calls[D2H] == 6
    assert raw.counters["sync_calls"] == 3


def test_the_layer_behind_the_runtime(run_workload, workloads: Workloads, testbed, layer) -> None:
    """The runtime (the test bed's shim: it calls the driver, as the real one does on a GPU host) finds
    the layer's functions through dlsym; the application also calls the driver itself."""
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", testbed.libcuda, *RUNTIME_OPS],
                       env={**env(layer, testbed), "SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    check_runtime_ops(raw)


def test_the_layer_behind_the_runtime_and_a_runtime_level_layer(run_workload, workloads: Workloads, testbed,
                                                                layer) -> None:
    """Both layers preloaded (rule 6's wrapper in front of the runtime, rule 7's in front of the driver)."""
    wrapper = build_native("launch_wrapper.c", "liblaunchwrap.so", "-shared", "-fPIC", "-ldl")
    raw = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "--cuda", testbed.libcuda, *RUNTIME_OPS],
                       env={**env(layer, testbed, wrapper), "SHIM_LIBCUDA": str(testbed.libcuda)}).go_and_wait()
    check_runtime_ops(raw)


def test_a_driver_call_after_a_layer_call_from_the_same_place_still_counts(run_workload, workloads: Workloads,
                                                                          testbed, layer) -> None:
    """After a call through the layer, the same thread calls the real driver directly (a function the
    layer does not hook, looked up past it): it counts. (cuMemcpy: the layer exports no cuMemcpy.)"""
    raw = run_workload([workloads.dlopen, "--cuda", testbed.libcuda, "cu_htod:1:8", "cu_memcpy:4:16", "cu_htod:1:8",
                        "cu_memcpy:4:16"], env=env(layer, testbed)).go_and_wait()
    assert raw.memcpy_calls[H2D] == 2
    assert sum(raw.memcpy_calls) == 10
    assert sum(raw.memcpy_bytes) == 2 * 8 + 8 * 16


def test_the_layer_is_told_from_the_driver_by_the_debugger_interface(testbed: support.Testbed, layer: Path) -> None:
    from gputop.sources.bpf.attach.symbols import read_symbols

    driver, shim = read_symbols(str(testbed.libcuda)), read_symbols(str(layer))
    assert driver is not None and shim is not None
    assert (driver.driver_layer, shim.driver_layer) == (False, True)
    # the layer's whole text is its own code: a call into the driver from any of it is not the application's
    assert shim.cuda_code_runs() == [(vaddr, vaddr + size) for vaddr, _off, size in shim.segments]
