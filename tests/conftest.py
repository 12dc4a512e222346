"""Shared fixtures: the GPU-less test bed (real NVIDIA user-space libraries) and native builds."""

from __future__ import annotations

import subprocess

import pytest
from support import ROOT, TESTBED, Runtime, Testbed, Workloads, build_native, runtime


@pytest.fixture(scope="session")
def testbed() -> Testbed:
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia", TESTBED / "cudart13")
    if not all(p.exists() for p in (tb.libcudart, tb.cudart13_dir / "libcudart.so.13", tb.libcuda,
                                    tb.libnvidia_ml)):
        subprocess.run([str(ROOT / "scripts" / "testbed.sh")], check=True)
    return tb


@pytest.fixture(scope="session", params=[12, 13], ids=["cuda12", "cuda13"])
def rt(request: pytest.FixtureRequest, testbed: Testbed) -> Runtime:
    """Each CUDA runtime of the test bed (12.9 and 13.0), with workloads built against it: a test
    that uses it runs on both."""
    return runtime(testbed, request.param)


@pytest.fixture(scope="session")
def workloads(testbed: Testbed) -> Workloads:
    r12 = runtime(testbed, 12)
    return Workloads(
        dynamic=r12.dynamic,
        static=r12.static,
        dlopen=build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread"),
        shim_runtime=build_native("shim_runtime.c", "libshimcudart.so", "-shared", "-fPIC", "-ldl"),
    )
