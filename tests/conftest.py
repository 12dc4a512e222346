"""Shared fixtures: the GPU-less test bed (real NVIDIA user-space libraries) and native builds."""

from __future__ import annotations

import os
import subprocess

import pytest
from support import NCCL_VERSIONS, ROOT, TESTBED, Runtime, Testbed, Workloads, build_native, runtime


@pytest.fixture(scope="session")
def testbed() -> Testbed:
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia", TESTBED / "cudart13")
    if not all(p.exists() for p in (tb.libcudart, tb.cudart13_dir / "libcudart.so.13", tb.libcuda,
                                    tb.libnvidia_ml, *(tb.libnccl(v) for v in NCCL_VERSIONS))):
        subprocess.run([str(ROOT / "scripts" / "testbed.sh")], check=True)
    return tb


#: the artefacts tier (marker ``artefacts``): tests of what ships beside the code (deploy files, docs,
#: bench, scripts), many with a tool of their own (systemd-analyze, promtool, a real Prometheus,
#: hadolint, kubernetes-validate). ``./test.sh`` runs them as a tier; ``./test.sh --quick`` leaves them out.
ARTEFACTS = frozenset({
    "test_deploy.py", "test_deploy_kubernetes.py", "test_systemd_security.py", "test_grafana.py",
    "test_prometheus_rules.py",                                     # deploy/
    "test_architecture_doc.py", "test_perfdoc.py",                  # docs/ (PERFORMANCE.md: bench/performance.py)
    "test_gpu_validate_oracle.py",                                  # bench/
    "test_offline_scripts.py", "test_privapt.py", "test_matrix_vm.py",  # scripts/
})


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.path.name in ARTEFACTS and item.path.parent.name == "unit":
        item.add_marker(pytest.mark.artefacts)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``rt`` on the test bed's CUDA 12 runtime; on both (12.9 and 13.0) where a test is marked
    ``both_runtimes`` (where they differ: signatures, sonames, the entry points the support table does
    not call). tests/bpf/test_support_table.py counts every runtime minor."""
    if "rt" not in metafunc.fixturenames:
        return
    majors = [12, 13] if metafunc.definition.get_closest_marker("both_runtimes") else [12]
    metafunc.parametrize("rt", majors, ids=[f"cuda{m}" for m in majors], indirect=True, scope="session")


@pytest.fixture(scope="session")
def rt(request: pytest.FixtureRequest, testbed: Testbed) -> Runtime:
    """A CUDA runtime of the test bed (12.9, or 13.0 too: ``both_runtimes``), with workloads built
    against it."""
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


#: the PyTorch tier (tests/torch) runs on demand only: ./test.sh --torch
collect_ignore = [] if os.environ.get("GPUTOP_TORCH") else ["torch"]
