"""Kernel-facing helpers of the BPF source that need no bcc: tracefs, BPF statistics, uprobe_multi links,
BPF cmpxchg, warnings at load, descriptor limits (privileges: ``privileges.py``)."""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import platform
import resource
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

from gputop.sources.bpf.common.btf import VMLINUX

TRACEFS = Path("/sys/kernel/tracing")
DEBUGFS = Path("/sys/kernel/debug")


UPROBE_PMU = Path("/sys/bus/event_source/devices/uprobe")
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}.get(platform.machine(), 298)


def open_uprobe(path: str, offset: int, *, retprobe: bool = False) -> int:
    """perf_event_open(2) of the kernel's uprobe PMU at ``path`` + ``offset``, in every process (CPU 0),
    opened disabled: the descriptor, or -errno. Raises OSError, ValueError or IndexError where the
    kernel has no uprobe PMU (its type or retprobe format unreadable)."""
    ptype = int((UPROBE_PMU / "type").read_text())
    bit = int((UPROBE_PMU / "format" / "retprobe").read_text().strip().split(":")[1]) if retprobe else 0
    name = ctypes.create_string_buffer(os.fsencode(path))
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("IIQ", attr, 0, ptype, 128, (1 << bit) if retprobe else 0)
    struct.pack_into("QQ", attr, 56, ctypes.addressof(name), offset)     # config1: the path, config2: the offset
    struct.pack_into("Q", attr, 40, 1 << 0)                                 # disabled (enabled by its user)
    fd = int(_libc.syscall(_SYS_PERF_EVENT_OPEN, attr, -1, 0, -1, 8))       # pid -1, cpu 0, FD_CLOEXEC
    return fd if fd >= 0 else -ctypes.get_errno()


def _is_dir(path: Path) -> bool:
    """Path.is_dir, False where a directory on the way cannot be searched (tracefs without privileges)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def tracefs_mounted() -> bool | None:
    """Whether tracefs is mounted at TRACEFS; None when that cannot be told (TRACEFS is unreadable)."""
    try:
        (TRACEFS / "events").stat()
    except PermissionError:
        return None
    except OSError:
        return False
    return True


def _mount(fstype: str, where: Path) -> str | None:
    """mount(2) itself: no mount(8) looked up on a PATH that root may have inherited from a user."""
    if _libc.mount(b"nodev", os.fsencode(where), fstype.encode(), ctypes.c_ulong(0), None) != 0:
        err = ctypes.get_errno()
        return f"{fstype} is not mounted at {where} and mounting it failed: {os.strerror(err)}"
    return None


def bcc_tracefs(bcc: Any) -> Path:
    """Where this bcc reads tracepoints' formats: bcc before 0.2x (Debian 11's, Ubuntu 22.04's 0.18)
    reads them under debugfs only (its module's ``TRACEFS``, and its compiler's), newer ones fall back
    to TRACEFS."""
    return Path(getattr(bcc, "TRACEFS", TRACEFS))


def ensure_tracefs(bcc_path: Path | None = None) -> str | None:
    """Mount tracefs if it is not mounted (bcc needs it for tracepoints); and where this bcc reads the
    tracepoints elsewhere (``bcc_path``, see bcc_tracefs) and nothing is mounted there, debugfs (whose
    ``tracing`` is tracefs, mounted by the kernel on first use) or tracefs there. None or an error."""
    mounted = tracefs_mounted()
    if mounted is None:
        return f"{TRACEFS} is not readable: tracing needs root or CAP_DAC_READ_SEARCH"
    if not mounted and (err := _mount("tracefs", TRACEFS)):
        return err
    if bcc_path is None or bcc_path == TRACEFS or _is_dir(bcc_path / "events"):
        return None
    if bcc_path.parent == DEBUGFS and not _is_dir(DEBUGFS / "tracing") and (err := _mount("debugfs", DEBUGFS)):
        return f"{err} (this bcc reads tracepoints under {bcc_path})"
    if not _is_dir(bcc_path / "events") and (err := _mount("tracefs", bcc_path)):
        return f"{err} (this bcc reads tracepoints there)"
    return None


def tracepoint_exists(category: str, event: str) -> bool:
    return _is_dir(TRACEFS / "events" / category / event)



SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_BPF_OBJ_GET_INFO_BY_FD = 15
_BPF_ENABLE_STATS = 32
_libc = ctypes.CDLL(None, use_errno=True)


def enable_stats() -> int | None:
    """Turn on BPF run-time statistics while the returned fd stays open (None if refused)."""
    attr = ctypes.create_string_buffer(128)
    fd = int(_libc.syscall(SYS_BPF, _BPF_ENABLE_STATS, attr, 4))
    return fd if fd >= 0 else None


#: bpf_attr.info of BPF_OBJ_GET_INFO_BY_FD (bpf_fd, info_len, info), and bpf_prog_info's run_time_ns, run_cnt
_INFO_ATTR = struct.Struct("=IIQ")
_RUN_STATS = struct.Struct("=QQ")
_INFO_LEN = 256


def prog_run_stats(fd: int) -> tuple[int, int] | None:
    """(run_time_ns, run_cnt) of a loaded BPF program (read for every program twice a statistics window)."""
    info = ctypes.create_string_buffer(_INFO_LEN)
    attr = ctypes.create_string_buffer(_INFO_ATTR.pack(fd & 0xFFFFFFFF, _INFO_LEN, ctypes.addressof(info)),
                                       _INFO_ATTR.size)
    if _libc.syscall(SYS_BPF, _BPF_OBJ_GET_INFO_BY_FD, attr, _INFO_ATTR.size) != 0:
        return None
    run_time_ns, run_cnt = _RUN_STATS.unpack_from(info, 192)
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
    fd = int(_libc.syscall(SYS_BPF, _BPF_LINK_CREATE, attr, 64))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


#: descriptors kept free for everything else (psutil's reads, the exporter's sockets, files)
FD_RESERVE = 256


def raise_fd_limit() -> int:
    """Raise this process's soft limit on open descriptors to its hard limit (each probed object
    holds a link or a perf event per probe); returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    return soft


def fd_budget() -> int | None:
    """The descriptors gputop may hold for probes: its soft limit less FD_RESERVE (None: no limit)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else max(0, soft - FD_RESERVE)


def fds_open() -> int | None:
    """The descriptors this process has open now (None: /proc/self/fd unreadable)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def fd_room(wanted: int) -> bool:
    """Whether ``wanted`` more descriptors leave FD_RESERVE free under the soft limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return True
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return True
    return used + wanted + FD_RESERVE <= soft


_cmpxchg: list[bool | None] = []
#: the compile flag where atomic_cmpxchg() is False (Linux < 5.12, whose LLVM may be older than 12 and
#: cannot emit it either): the builtin then always fails, never storing. The program's one use is
#: claiming a launch slot (bpf/launch.bpf.h: kslot_of; kslot_bucket runs only on a claimed slot), so no
#: slot is claimed and every launch is counted in its `kernels` entry, the path of a pair without a
#: slot: the same counts, a hash lookup per launch.
NO_CMPXCHG = "-D__sync_val_compare_and_swap(p,o,n)=((void)(p),(void)(n),(o)+1)"


_CAS_TEST = "int gputop_cas(void *ctx) { u64 x = 0; return __sync_val_compare_and_swap(&x, 0, 1); }"


def compiler_cmpxchg(bcc: Any, timeout_s: float = 120.0) -> bool | None:
    """Whether bcc's compiler emits BPF's atomic compare-and-exchange. LLVM before 12 cannot, and
    aborts the whole process (``LLVM ERROR: Cannot select: AtomicCmpSwap``) — Debian 11's bcc on a
    5.12+ kernel (a backports kernel) — so a child process compiles a one-line program that uses it,
    with this process's environment (the headers). None when the child cannot tell (another error,
    or no answer in ``timeout_s``)."""
    where = str(Path(bcc.__file__).resolve().parent.parent)
    code = f"import sys; sys.path.insert(0, sys.argv[1]); import bcc; bcc.BPF(text={_CAS_TEST.encode()!r})"
    try:
        done = subprocess.run([sys.executable, "-c", code, where], capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode == 0:
        return True
    return False if b"AtomicCmpSwap" in done.stderr else None


def atomic_cmpxchg() -> bool | None:
    """Whether this kernel's verifier takes BPF's atomic compare-and-exchange (Linux 5.12+; 5.10 refuses
    it with EINVAL): a six-instruction program using it on the stack, loaded without bcc. None when
    this process may not load BPF programs, or there is no bpf(2) to ask (ENOSYS: a seccomp filter, or
    qemu-user running another architecture's userland): then it cannot tell. Asked once per process."""
    if not _cmpxchg:
        insns = b"".join(struct.pack("<BBhi", *i) for i in (
            (0x7A, 0x0A, -8, 3),        # *(u64 *)(r10 - 8) = 3
            (0xB7, 0x00, 0, 3),         # r0 = 3
            (0xB7, 0x01, 0, 4),         # r1 = 4
            (0xDB, 0x1A, -8, 0xF1),     # r0 = cmpxchg((u64 *)(r10 - 8), r0, r1)  (BPF_ATOMIC, BPF_CMPXCHG)
            (0xB7, 0x00, 0, 0),         # r0 = 0
            (0x95, 0x00, 0, 0)))        # exit
        ibuf = ctypes.create_string_buffer(insns, len(insns))
        lic = ctypes.create_string_buffer(b"GPL")
        attr = ctypes.create_string_buffer(128)
        struct.pack_into("IIQQ", attr, 0, 2, len(insns) // 8, ctypes.addressof(ibuf), ctypes.addressof(lic))
        fd = int(_libc.syscall(SYS_BPF, 5, attr, 128))     # BPF_PROG_LOAD, a kprobe program
        err = ctypes.get_errno()
        if fd >= 0:
            os.close(fd)
        _cmpxchg.append(True if fd >= 0 else None if err in (errno.EPERM, errno.EACCES, errno.ENOSYS) else False)
    return _cmpxchg[0]


#: the allocator BPF maps got in Linux 6.1 (``struct bpf_mem_alloc``); the same series dropped the
#: verifier's warning about tracing programs whose hash maps allocate at run time
_MEM_ALLOC = b"bpf_mem_alloc"
KALLSYMS = Path("/proc/kallsyms")
PANIC_ON_WARN = Path("/proc/sys/kernel/panic_on_warn")
_KERNEL_FILE_MAX = 256 << 20     # bytes read of the kernel's own BTF or symbol list, at most


@functools.cache
def warns_at_load(btf: Path | None = None, kallsyms: Path | None = None) -> bool | None:
    """Whether loading gputop's program makes this kernel log a WARNING (once per boot, and the kernel is
    tainted "W"): before Linux 6.1 the verifier warns ("trace type BPF program uses run-time allocation")
    about a tracing program using a hash map that allocates at run time (``BPF_F_NO_PREALLOC``: gputop's
    name, graph and graph-node tables, which preallocated would take 114 MiB of kernel memory).
    Asked of the kernel's own BTF, else its symbols: a kernel that has ``bpf_mem_alloc`` does not warn.
    None when neither can be read. Asked once per process (doctor asks it, and load_refusal again)."""
    for path, needle in ((btf or VMLINUX, b"\0" + _MEM_ALLOC + b"\0"),
                         (kallsyms or KALLSYMS, b" " + _MEM_ALLOC + b"\n")):
        try:
            with path.open("rb") as f:
                data = f.read(_KERNEL_FILE_MAX)
        except OSError:
            continue
        if data:
            return needle not in data
    return None


def panic_on_warn(path: Path | None = None) -> bool:
    """Whether a kernel WARNING panics this host (``kernel.panic_on_warn``, set on some hardened fleets)."""
    try:
        return (path or PANIC_ON_WARN).read_text().strip() not in ("", "0")
    except OSError:
        return False


def load_refusal() -> str | None:
    """Why gputop's program must not be loaded here: the warning it causes before Linux 6.1 would panic
    the host. None where loading is safe (docs/collector.md, "Kernels before 6.1")."""
    if warns_at_load() and panic_on_warn():
        return ("this kernel logs a WARNING when a tracing program's hash maps allocate at run time (no "
                "bpf_mem_alloc: Linux before 6.1), as gputop's do, and kernel.panic_on_warn=1 makes any "
                "WARNING a panic")
    return None


PANIC_HINT = ("set kernel.panic_on_warn=0 while gputop runs (sysctl), or run a Linux 6.1+ kernel; "
              "docs/collector.md, \"Kernels before 6.1\"")


class MappedArray:
    """A BPF_F_MMAPABLE array map mapped into this process: reads (and writes) are memory copies, no
    system call each (launch slots, PID generations)."""

    def __init__(self) -> None:
        self._mem: mmap.mmap | None = None
        self.view: memoryview | None = None

    def open(self, table: Any, value_bytes: int, prot: int = mmap.PROT_READ) -> memoryview:
        """Map ``table`` (entries of ``value_bytes``, a multiple of 8) whole, page-rounded."""
        size = -(-int(table.max_entries) * value_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        self._mem = mmap.mmap(table.map_fd, size, mmap.MAP_SHARED, prot)
        self.view = memoryview(self._mem)
        return self.view

    def close(self) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None
        if self._mem is not None:
            self._mem.close()
            self._mem = None
