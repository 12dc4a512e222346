"""The support matrix (docs/support.md): every driver branch and CUDA runtime of the test bed
(scripts/testbed_libs.py fetches them) and, pinned here, what each one lacks: the families of entry
points (gputop.sources.bpf.attach.catalogue.FEATURES, named by their first symbol) it does not define, and those
it defines that gputop does not count. Tests check the libraries against this table, then count on
each what it has."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from support import ROOT, TESTBED


def _libs():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("testbed_libs", ROOT / "scripts" / "testbed_libs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("testbed_libs", mod)
    spec.loader.exec_module(mod)
    return mod


testbed_libs = _libs()
BRANCHES: tuple[str, ...] = tuple(b.branch for b in testbed_libs.BRANCHES)
RUNTIMES: tuple[str, ...] = tuple(r.minor for r in testbed_libs.RUNTIMES)
#: the runtimes whose wheel ships libcudart_static.a (12.9 and every 13.x; the older 12.x wheels do not)
STATIC_RUNTIMES: tuple[str, ...] = tuple(m for m in RUNTIMES if m == "12.9" or m.startswith("13."))
#: the driver branches with cuGetProcAddress_v2 (how CUDA 12 runtimes and Triton reach the driver)
PROC_BRANCHES: tuple[str, ...] = tuple(b for b in BRANCHES if b != "470")

_D_NEW = ("cuMemcpyBatchAsync", "cuMemcpyWithAttributesAsync", "cuMemPrefetchBatchAsync")
#: driver branch -> the counted families its libcuda.so.1 does not define
DRIVER_ABSENT: dict[str, frozenset[str]] = {
    "470": frozenset({"cuLaunchKernelEx", "cuStreamBeginCaptureToGraph", "cuGraphAddNode", "cuGraphAddKernelNode_v2",
                      "cuMemPrefetchAsync_v2", "cuLibraryGetKernel", *_D_NEW}),
    "535": frozenset({"cuStreamBeginCaptureToGraph", *_D_NEW}),
    "550": frozenset(_D_NEW),
    "555": frozenset(_D_NEW),
}

#: driver branch -> the families its libcuda.so.1 defines that gputop does not count (the same on every branch)
DRIVER_UNCOUNTED: dict[str, frozenset[str]] = {
    b: frozenset({"cuMemcpyHtoA_v2", "cuLaunch", "cuLaunchCooperativeKernelMultiDevice"}) for b in BRANCHES
}

_R12_OLD = ("cudaMemcpyBatchAsync", "cudaMemcpyWithAttributesAsync", "cudaMemPrefetchBatchAsync",
            "cudaLibraryGetKernel")
_R12_0 = ("cudaStreamBeginCaptureToGraph", "cudaGraphAddNode", "cudaMemPrefetchAsync_v2", *_R12_OLD)
#: runtime minor -> the counted families its libcudart does not define
RUNTIME_ABSENT: dict[str, frozenset[str]] = {
    "12.0": frozenset({"cudaGetKernel", *_R12_0}),
    "12.1": frozenset(_R12_0),
    "12.2": frozenset({"cudaStreamBeginCaptureToGraph", *_R12_OLD}),
    **{m: frozenset(_R12_OLD) for m in ("12.3", "12.4", "12.5", "12.6")},
    **{m: frozenset({"cudaMemcpyWithAttributesAsync", "cudaMemPrefetchBatchAsync"}) for m in ("12.8", "12.9")},
    **{m: frozenset({"cudaMemcpyWithAttributesAsync", "cudaMemPrefetchAsync_v2"}) for m in ("13.0", "13.1")},
    **{m: frozenset({"cudaMemPrefetchAsync_v2"}) for m in ("13.2", "13.3", "13.4", "13.5")},
}
#: runtime minor -> the families it defines that gputop does not count
RUNTIME_UNCOUNTED: dict[str, frozenset[str]] = {
    m: frozenset({"cudaMemcpy2DToArray",
                  *(("cudaLaunchCooperativeKernelMultiDevice",) if m < "13" else ()),
                  *(("cudaMemcpy3DBatchAsync",) if m >= "12.8" else ()),
                  *(("cudaMemcpy3DWithAttributesAsync",) if m >= "13.2" else ())})
    for m in RUNTIMES
}


@dataclass(frozen=True)
class DriverBranch:
    branch: str
    dir: Path

    @property
    def libcuda(self) -> Path:
        return self.dir / "libcuda.so.1"

    @property
    def libnvidia_ml(self) -> Path:
        return self.dir / "libnvidia-ml.so.1"

    @property
    def version(self) -> str:
        """The upstream version of the Debian package (``470.256.02`` of ``470.256.02-1~deb12u1``)."""
        return (self.dir / "VERSION").read_text().strip().split("-")[0]

    def has(self, symbol: str) -> bool:
        return symbol not in DRIVER_ABSENT[self.branch]


@dataclass(frozen=True)
class CudaRuntime:
    minor: str
    dir: Path

    @property
    def major(self) -> int:
        return int(self.minor.split(".")[0])

    @property
    def lib(self) -> Path:
        return self.dir / f"libcudart.so.{self.major}"

    @property
    def version(self) -> str:
        return (self.dir / "VERSION").read_text().strip()

    def has(self, symbol: str) -> bool:
        return symbol not in RUNTIME_ABSENT[self.minor]


def driver_branch(branch: str) -> DriverBranch:
    return DriverBranch(branch, TESTBED / "drivers" / branch)


def cuda_runtime(minor: str) -> CudaRuntime:
    return CudaRuntime(minor, TESTBED / "runtimes" / minor)


# ------------------------------------------------------------------ docs/support.md's tables

#: families whose counts tests/bpf/test_support_table.py asserts exactly on every library that has them
DRIVER_EXERCISED = frozenset({"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel_ptsz", "cuMemPrefetchAsync_v2",
                              "cuGraphLaunch", "cuMemcpyHtoD_v2", "cuMemAlloc_v2",
                              "cuMemAllocAsync", "cuMemCreate", "cuMemPrefetchAsync", "cuCtxSynchronize",
                              "cuMemsetD8_v2"})
RUNTIME_EXERCISED = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernel_ptsz", "cudaGraphLaunch",
                               "cudaMemcpy", "cudaMemcpyBatchAsync", "cudaMemcpyWithAttributesAsync", "cudaMalloc",
                               "cudaMemPrefetchAsync", "cudaMemPrefetchAsync_v2", "cudaMemPrefetchBatchAsync",
                               "cudaStreamSynchronize", "__cudaRegisterFunction", "cudaMemset"})
#: exact: counted exactly by a named test; probed: defined and probed, its counts proven on other libraries
#: (tests/bpf/test_counts.py, test_graph_kernels.py...); absent: not defined, not probed; not counted: defined,
#: known, not counted by gputop
CELL = {"exact": "✓", "probed": "p", "absent": "—", "uncounted": "✗"}


def cell(feature_symbol: str, counted: bool, absent: frozenset[str], uncounted: frozenset[str],
         exercised: frozenset[str]) -> str:
    if not counted:
        return CELL["uncounted"] if feature_symbol in uncounted else CELL["absent"]
    if feature_symbol in absent:
        return CELL["absent"]
    return CELL["exact"] if feature_symbol in exercised else CELL["probed"]


def render_table(layer: str) -> str:
    """The matrix of ``layer`` ("driver" or "runtime") as docs/support.md shows it: a row per family of
    catalogue.FEATURES, a column per branch or runtime."""
    from gputop.sources.bpf.attach import catalogue

    if layer == "driver":
        cols: tuple[str, ...] = BRANCHES
        absent, uncounted, exercised = DRIVER_ABSENT, DRIVER_UNCOUNTED, DRIVER_EXERCISED
    else:
        cols, absent, uncounted, exercised = RUNTIMES, RUNTIME_ABSENT, RUNTIME_UNCOUNTED, RUNTIME_EXERCISED
    lines = ["| family | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for f in catalogue.FEATURES:
        if f.layer != layer:
            continue
        lines.append(f"| {f.name} | " + " | ".join(
            cell(f.symbols[0], f.counted, absent[c], uncounted[c], exercised) for c in cols) + " |")
    return "\n".join(lines) + "\n"
