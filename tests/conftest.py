"""Shared fixtures: the GPU-less test bed (real NVIDIA user-space libraries) and native builds."""

from __future__ import annotations

import subprocess

import pytest
from support import ROOT, TESTBED, Testbed, Workloads, build_native


@pytest.fixture(scope="session")
def testbed() -> Testbed:
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia")
    if not (tb.libcudart.exists() and tb.libcuda.exists() and tb.libnvidia_ml.exists()):
        subprocess.run([str(ROOT / "scripts" / "testbed.sh")], check=True)
    return tb


@pytest.fixture(scope="session")
def workloads(testbed: Testbed) -> Workloads:
    cudart = str(testbed.cudart_dir)
    src = "cuda_workload.c"
    linked = ("-DLINKED", "-DHAVE_INTERNAL_LAUNCH")
    return Workloads(
        dynamic=build_native(src, "wl_dynamic", *linked, f"-L{cudart}", "-l:libcudart.so.12",
                             f"-Wl,-rpath,{cudart}", "-ldl", "-lpthread"),
        static=build_native(src, "wl_static", *linked, str(testbed.libcudart_static), "-ldl", "-lpthread", "-lrt"),
        dlopen=build_native(src, "wl_dlopen", "-ldl", "-lpthread"),
        shim_runtime=build_native("shim_runtime.c", "libshimcudart.so", "-shared", "-fPIC", "-ldl"),
    )
