"""Kernel names demangled as PyTorch's own names are (issue 34 item 2): binutils' c++filt, the form of
``abi::__cxa_demangle`` that PyTorch's profiler shows; LLVM's llvm-cxxfilt for what c++filt leaves mangled
(a CUTLASS GEMM of PyTorch 2.15's libtorch_cuda.so, one of 475 there, registered under a 1,203-byte name);
nvcc's prefix of internal-linkage kernels dropped. The names are real ones, registered at `import torch`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gputop.sources.bpf.attach import symbols

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture
def demangler() -> symbols.Demangler:
    symbols.llvm_cxxfilt_path.cache_clear()
    return symbols.Demangler()


def test_a_cutlass_gemm_that_cfilt_cannot_demangle_is_demangled_by_llvm(demangler: symbols.Demangler) -> None:
    name = (DATA / "cutlass_gemm_kernel.txt").read_text().strip()
    assert len(name) == 1203 and symbols._cxxfilt(name) == name          # binutils leaves it as it is
    llvm = shutil.which("llvm-cxxfilt")
    assert llvm is not None
    whole = subprocess.run([llvm], input=name, capture_output=True, text=True, check=True).stdout.strip()
    assert len(whole) == 5028 and whole.startswith("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<")
    # cut at the documented cap, and marked
    assert demangler(name) == whole[:symbols.DEMANGLED_MAX] + "…"
    assert demangler.settled(name)


def test_lambdas_are_named_as_pytorchs_profiler_names_them(demangler: symbols.Demangler) -> None:
    name = ("_ZN2at6native29vectorized_elementwise_kernelILi8EZZZNS0_15tan_kernel_cudaERNS_18TensorIteratorBase"
            "EENKUlvE0_clEvENKUlvE1_clEvEUlN3c104HalfEE_St5arrayIPcLm2EELb1EEEviT0_T1_")
    assert demangler(name) == (
        "void at::native::vectorized_elementwise_kernel<8, at::native::tan_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(c10::Half)#1}, "
        "std::array<char*, 2ul>, true>(int, at::native::tan_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
        "operator()() const::{lambda()#3}::operator()() const::{lambda(c10::Half)#1}, std::array<char*, 2ul>)")


def test_nvccs_internal_linkage_prefix_is_dropped(demangler: symbols.Demangler) -> None:
    name = ("__nv_static_44__9515f250_22_cuda_interface_sync_cu_b1ecfd62_"
            "_Z42nvshmemi_ulong_wait_until_on_stream_kernelPVmim")
    assert demangler(name) == "nvshmemi_ulong_wait_until_on_stream_kernel(unsigned long volatile*, int, unsigned long)"
    assert demangler.settled(name)
    assert demangler("__nv_static_12__abc_not_mangled") == "__nv_static_12__abc_not_mangled"


def test_an_llvm_cxxfilt_another_user_can_change_is_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A versioned llvm-cxxfilt-N in a directory any user can write, first on PATH: not the one found."""
    planted_dir = tmp_path / "bin"
    planted_dir.mkdir()
    planted_dir.chmod(0o777)
    planted = planted_dir / "llvm-cxxfilt-99"
    planted.write_text("#!/bin/sh\nexit 0\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    symbols.llvm_cxxfilt_path.cache_clear()
    try:
        found = symbols.llvm_cxxfilt_path()
        assert found is not None and found != str(planted)
    finally:
        symbols.llvm_cxxfilt_path.cache_clear()


def test_a_host_that_starts_the_demangler_slowly_still_gets_names(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/matrix.md's trixie-arm64 guest (full emulation, a loaded host) left a kernel name mangled: c++filt
    spent most of its 0.5 s starting. A run's limit is DEMANGLE_TIMEOUT_S past what a run on a one-letter name
    costs on this host: a c++filt that takes 0.6 s to start demangles; the same under the bare 0.5 s did not."""
    cxxfilt = shutil.which("c++filt")
    assert cxxfilt is not None
    slow = tmp_path / "c++filt"
    slow.write_text(f"#!/bin/sh\nsleep 0.6\nexec {cxxfilt} \"$@\"\n")
    slow.chmod(0o755)
    name = "_Z10fused_stepPfS_i"
    assert symbols._run_for(str(slow), name, symbols.DEMANGLE_TIMEOUT_S) is None     # the bare limit: killed
    symbols._start_s.cache_clear()
    try:
        assert 0.6 <= symbols._start_s(str(slow)) <= symbols.DEMANGLE_START_MAX_S
        assert symbols._run(str(slow), name) == "fused_step(float*, float*, int)"
    finally:
        symbols._start_s.cache_clear()
