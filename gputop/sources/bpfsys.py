"""Kernel-facing helpers of the BPF source that need no bcc: privileges, tracefs, BPF statistics."""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import subprocess
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")


def has_privileges() -> bool:
    """CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON, in the effective set (root normally has all)."""
    try:
        text = Path("/proc/self/status").read_text()
        eff = int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("CapEff:")), 16)
    except (OSError, StopIteration, ValueError):
        return False
    cap_perfmon, cap_bpf, cap_sys_admin = 38, 39, 21
    return bool(eff & (1 << cap_sys_admin)) or (bool(eff & (1 << cap_bpf)) and bool(eff & (1 << cap_perfmon)))


def ensure_tracefs() -> str | None:
    """Mount tracefs if it is not mounted (bcc needs it for tracepoints); None or an error."""
    if (TRACEFS / "events").is_dir():
        return None
    try:
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True, capture_output=True,
                       timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"tracefs is not mounted at {TRACEFS} and mounting it failed: {e}"
    return None


def tracepoint_exists(category: str, event: str) -> bool:
    return (TRACEFS / "events" / category / event).is_dir()



_SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_BPF_OBJ_GET_INFO_BY_FD = 15
_BPF_ENABLE_STATS = 32
_libc = ctypes.CDLL(None, use_errno=True)


def enable_stats() -> int | None:
    """Turn on BPF run-time statistics while the returned fd stays open (None if refused)."""
    attr = ctypes.create_string_buffer(128)
    fd = int(_libc.syscall(_SYS_BPF, _BPF_ENABLE_STATS, attr, 4))
    return fd if fd >= 0 else None


def prog_run_stats(fd: int) -> tuple[int, int] | None:
    """(run_time_ns, run_cnt) of a loaded BPF program."""
    info = ctypes.create_string_buffer(256)
    attr = ctypes.create_string_buffer(16)
    ctypes.memmove(attr, ctypes.byref(ctypes.c_uint32(fd)), 4)
    ctypes.memmove(ctypes.addressof(attr) + 4, ctypes.byref(ctypes.c_uint32(256)), 4)
    ctypes.memmove(ctypes.addressof(attr) + 8, ctypes.byref(ctypes.c_uint64(ctypes.addressof(info))), 8)
    if _libc.syscall(_SYS_BPF, _BPF_OBJ_GET_INFO_BY_FD, attr, 16) != 0:
        return None
    run_time_ns = ctypes.c_uint64.from_buffer_copy(info.raw[192:200]).value
    run_cnt = ctypes.c_uint64.from_buffer_copy(info.raw[200:208]).value
    return run_time_ns, run_cnt



def aligned_blocks(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) as aligned power-of-two blocks (addr, log2 size), as the BPF side does."""
    out: list[tuple[int, int]] = []
    a = start
    for k in range(63):
        if a & (1 << k) and a + (1 << k) <= end:
            out.append((a, k))
            a += 1 << k
    for k in range(62, -1, -1):
        if a + (1 << k) <= end:
            out.append((a, k))
            a += 1 << k
    return out


_BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48        # enum bpf_attach_type (Linux 6.6+)
_BPF_F_UPROBE_MULTI_RETURN = 1


def uprobe_multi_link(prog_fd: int, path: str, offsets: list[int], *, retprobe: bool) -> int:
    """One BPF link attaching ``prog_fd`` at file ``offsets`` of ``path`` in every process.

    Detaching a link costs one RCU grace period however many uprobes it holds, where a perf-event
    uprobe costs one each (about 0.1 s here), serialised by the kernel. Raises OSError.
    """
    name = ctypes.create_string_buffer(path.encode())
    offs = (ctypes.c_uint64 * len(offsets))(*offsets)
    attr = ctypes.create_string_buffer(64)      # union bpf_attr, link_create.uprobe_multi
    struct.pack_into("IIII", attr, 0, prog_fd, 0, BPF_TRACE_UPROBE_MULTI, 0)
    struct.pack_into("QQQQIII", attr, 16, ctypes.addressof(name), ctypes.addressof(offs), 0, 0, len(offsets),
                     _BPF_F_UPROBE_MULTI_RETURN if retprobe else 0, 0)
    fd = int(_libc.syscall(_SYS_BPF, _BPF_LINK_CREATE, attr, 64))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd
