"""linux.atomic_cmpxchg's reading of the kernel's answer to its test program: only the verifier's refusal
(EINVAL, Linux < 5.12) means no compare-and-exchange; no right to load (EPERM, EACCES) and no bpf(2) at all
(ENOSYS: a seccomp filter, or qemu-user running an arm64 userland on this x86-64 kernel, where doctor said
"Linux < 5.12" of a 6.18 kernel) cannot tell. The kernel here answers the real call (True, as root); the
other answers are made by a stand-in for libc's syscall(2)."""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from gputop.sources.bpf.common import linux


class _Refusing:
    def __init__(self, err: int) -> None:
        self.err = err

    def syscall(self, *args: object) -> int:
        ctypes.set_errno(self.err)
        return -1


@pytest.mark.parametrize(("err", "want"), [(errno.EINVAL, False), (errno.EPERM, None), (errno.EACCES, None),
                                           (errno.ENOSYS, None)])
def test_only_the_verifiers_refusal_means_no_cmpxchg(monkeypatch: pytest.MonkeyPatch, err: int,
                                                     want: bool | None) -> None:
    monkeypatch.setattr(linux, "_cmpxchg", [])
    monkeypatch.setattr(linux, "_libc", _Refusing(err))
    assert linux.atomic_cmpxchg() is want


@pytest.mark.skipif(os.geteuid() != 0, reason="loading a BPF program needs root")
def test_this_kernel_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linux, "_cmpxchg", [])
    assert linux.atomic_cmpxchg() is True
