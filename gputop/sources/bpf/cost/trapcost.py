"""This host's uprobe trap cost: the CPU time a traced process pays per probe hit before any BPF
program runs (the breakpoint, the kernel's uprobe dispatch, emulating the probed instruction).

BPF run-time statistics count only the programs' own run time; the trap costs several times more.
It depends on the CPU, the kernel and how the probe is attached, so gputop measures it on the host:

- a tiny function in a memfd (no compiler needed), mapped executable in this process, whose first
  instruction is what libcudart's ``cudaLaunchKernel`` starts with: on x86-64 ``push %rbp``, an
  instruction the kernel emulates (one that must be single-stepped out of line costs several times
  more); on arm64 ``stp x29, x30, [sp, #-N]!``, which the kernel single-steps out of line (it simulates
  only branches and PC-relative loads there): the machine code of both is below, chosen by
  ``platform.machine()``;
- three copies of it: one without a probe, one with an empty BPF program on its entry, one with
  empty programs on its entry and return; each attached as gputop attaches (a uprobe_multi link,
  or a perf event per probe);
- a machine-code loop calls each copy ``calls`` times; the calling thread's CPU time is read around
  it (``CLOCK_THREAD_CPUTIME_ID``: the trap is kernel time of that thread); the rounds alternate
  and the medians of the per-round differences are the trap (entry) and return-probe costs.

The result is cached per kernel release, CPU model and attach mode (``trap-cost.json`` in
gputop's cache directory), so later starts reuse it. Unknown is None, never 0. The cache is read
only when it is a file of root's (or this user's) that no one else can write, in a directory no
other user controls (``gputop.safefiles``; as root, an XDG_CACHE_HOME of another user's is passed
over), and a figure that is not finite or lies outside ``LIMITS`` is discarded and measured again.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import mmap
import os
import platform
import statistics
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from gputop import safefiles
from gputop.sources.bpf.common.linux import BPF_TRACE_UPROBE_MULTI, SYS_BPF, open_uprobe, uprobe_multi_link

CACHE_NAME = "trap-cost.json"
#: the cache file is a few hundred bytes per kernel and CPU; a larger one is not read
MAX_CACHE_BYTES = 1 << 20
#: the range a cached figure must lie in (ns per hit): a trap is a kernel entry, microseconds at most
LIMITS = {"trap_ns": (1.0, 1e6), "return_ns": (0.0, 1e6), "call_ns": (0.0, 1e6)}
ROUNDS = 9
CALLS = 20_000

#: loop(n, fn): calls fn() n times (x86-64 SysV): push rbx; push r12; mov rbx,rdi; mov r12,rsi;
#: .L: test rbx,rbx; je .done; call *r12; dec rbx; jmp .L; .done: pop r12; pop rbx; ret
_LOOP_X86_64 = bytes.fromhex("53 4154 4889fb 4989f4 4885db 7408 41ffd4 48ffcb ebf3 415c 5b c3".replace(" ", ""))
#: the probed function: push rbp; mov rbp,rsp; pop rbp; ret (libcudart's entry points begin so)
_FUNC_X86_64 = bytes.fromhex("554889e55dc3")
#: loop(n, fn) (AAPCS64): stp x29,x30,[sp,#-32]!; mov x29,sp; stp x19,x20,[sp,#16]; mov x19,x0; mov x20,x1;
#: .L: cbz x19,.done; blr x20; sub x19,x19,#1; b .L; .done: ldp x19,x20,[sp,#16]; ldp x29,x30,[sp],#32; ret
_LOOP_AARCH64 = bytes.fromhex("fd7bbea9 fd030091 f35301a9 f30300aa f40301aa 930000b4 80023fd6 730600d1 fdffff17"
                              " f35341a9 fd7bc2a8 c0035fd6".replace(" ", ""))
#: the probed function: stp x29,x30,[sp,#-16]!; mov x29,sp; ldp x29,x30,[sp],#16; ret (a frame record pushed
#: first, as libcudart's entry points begin on arm64)
_FUNC_AARCH64 = bytes.fromhex("fd7bbfa9 fd030091 fd7bc1a8 c0035fd6".replace(" ", ""))
#: this machine's (loop, function); None where gputop has no code for it
CODE = {"x86_64": (_LOOP_X86_64, _FUNC_X86_64), "aarch64": (_LOOP_AARCH64, _FUNC_AARCH64)}.get(platform.machine())
#: where the three copies of _FUNC lie in the page: none, entry probe, entry + return probe
_OFFSETS = {"none": 0x40, "entry": 0x80, "return": 0xC0}

_BPF_PROG_LOAD = 5
_PROG_TYPE_KPROBE = 2
_PERF_EVENT_IOC_ENABLE = 0x2400
_PERF_EVENT_IOC_SET_BPF = 0x40042408
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_LOOP_FN = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_void_p)


@dataclass(frozen=True)
class TrapCost:
    """Per hit, ns of CPU: ``trap_ns`` for an entry probe, ``return_ns`` more when the function also
    has a return probe (the return trampoline's trap)."""

    trap_ns: float
    return_ns: float
    attach: str                 # "links" | "perf", as measured
    rounds: int
    calls: int
    measured_at: float          # unix seconds
    call_ns: float | None = None    # the same call without a probe (the loop's own cost per call)
    cached: bool = False        # read from the cache rather than measured by this process


class CalibrationError(Exception):
    """Why the trap cost could not be measured (one sentence)."""


def cache_dir() -> Path:
    return safefiles.cache_home()[0] / "gputop"


def cache_key(attach: str) -> str:
    """Kernel release, machine and CPU model, attach mode: what the trap cost depends on."""
    cpu = "unknown cpu"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
            if line.startswith(("CPU implementer", "CPU part")):   # arm64's cpuinfo names no model
                cpu = (cpu if cpu != "unknown cpu" else "arm64") + " " + line.split(":", 1)[1].strip()
    return f"{platform.release()} {platform.machine()} {cpu} {attach}"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def valid(cost: TrapCost) -> bool:
    """Finite figures within ``LIMITS``, whole positive rounds and calls: what a measurement gives."""
    for name, (low, high) in LIMITS.items():
        value = getattr(cost, name)
        if not (value is None and name == "call_ns") and not (_number(value) and low <= value <= high):
            return False
    counts = (cost.rounds, cost.calls)
    return (all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts)
            and _number(cost.measured_at) and isinstance(cost.attach, str))


def _read_cache(path: Path) -> dict[str, object]:
    """The cache file's entries ({} when missing, refused or damaged)."""
    try:
        data = json.loads(safefiles.read_file(path, max_bytes=MAX_CACHE_BYTES))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_cached(attach: str, directory: Path | None = None) -> TrapCost | None:
    raw = _read_cache((directory or cache_dir()) / CACHE_NAME).get(cache_key(attach))
    if not isinstance(raw, dict):
        return None
    try:
        cost = TrapCost(**{**raw, "cached": True})
    except TypeError:
        return None
    return cost if cost.attach == attach and valid(cost) else None


def store(cost: TrapCost, directory: Path | None = None) -> None:
    """Merge ``cost`` into the cache file (atomically; other keys kept). Errors are ignored: the
    next start measures again. A figure outside ``LIMITS`` is not stored."""
    if not valid(cost):
        return
    d = directory or cache_dir()
    data = _read_cache(d / CACHE_NAME)
    entry = asdict(cost)
    entry.pop("cached")
    data[cache_key(cost.attach)] = entry
    with contextlib.suppress(OSError, ValueError):
        text = json.dumps(data, indent=1, sort_keys=True, allow_nan=False)
        safefiles.write_atomic(d / CACHE_NAME, text.encode(), create_dirs=True)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    fd = int(_libc.syscall(SYS_BPF, cmd, attr, len(attr)))
    if fd < 0:
        err = ctypes.get_errno()
        raise CalibrationError(f"bpf({cmd}) failed: {os.strerror(err)}")
    return fd


def empty_prog(links: bool) -> int:
    """An empty BPF program (r0 = 0; exit) of the uprobes' type, loaded without bcc."""
    insns = struct.pack("<BBhi", 0xB7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0)
    ibuf = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("IIQQ", attr, 0, _PROG_TYPE_KPROBE, 2, ctypes.addressof(ibuf), ctypes.addressof(lic))
    struct.pack_into("13s", attr, 48, b"gputop_calib")
    if links:
        struct.pack_into("I", attr, 68, BPF_TRACE_UPROBE_MULTI)
    return _bpf(_BPF_PROG_LOAD, attr)


def _perf_uprobe(prog: int, path: str, offset: int, retprobe: bool) -> int:
    """A perf-event uprobe running ``prog`` at ``path``+``offset`` in every process."""
    try:
        fd = open_uprobe(path, offset, retprobe=retprobe)
    except (OSError, ValueError, IndexError) as e:
        raise CalibrationError(f"no uprobe PMU: {e}") from e
    if fd < 0:
        raise CalibrationError(f"perf_event_open(uprobe) failed: {os.strerror(-fd)}")
    import fcntl

    fcntl.ioctl(fd, _PERF_EVENT_IOC_SET_BPF, prog)
    fcntl.ioctl(fd, _PERF_EVENT_IOC_ENABLE, 0)
    return fd


@contextlib.contextmanager
def _code() -> Iterator[tuple[str, int]]:
    """The loop and the function copies in a memfd mapped executable: (path, address)."""
    if CODE is None:
        raise CalibrationError(f"the calibration has machine code for x86-64 and arm64 only (this is "
                               f"{platform.machine()})")
    loop, func = CODE
    page = bytearray(mmap.PAGESIZE)
    page[0:len(loop)] = loop
    for off in _OFFSETS.values():
        page[off:off + len(func)] = func
    fd = os.memfd_create("gputop-trap-calibration", os.MFD_CLOEXEC)
    try:
        os.write(fd, bytes(page))
        # private and not writable: the kernel puts uprobes only in such executable mappings
        addr = _libc.mmap(None, len(page), mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise CalibrationError(f"mapping a memfd executable failed: {os.strerror(ctypes.get_errno())}"
                                   " (vm.memfd_noexec?)")
        try:
            yield f"/proc/self/fd/{fd}", int(addr)
        finally:
            _libc.munmap(addr, len(page))
    finally:
        os.close(fd)


def _attach(path: str, links: bool) -> list[int]:
    """Empty programs on the "entry" copy's entry and the "return" copy's entry and return."""
    fds: list[int] = []
    progs = [empty_prog(links) for _ in range(2)]
    try:
        wanted = ((_OFFSETS["entry"], False), (_OFFSETS["return"], False), (_OFFSETS["return"], True))
        for off, ret in wanted:
            if links:
                try:
                    fds.append(uprobe_multi_link(progs[ret], path, [off], retprobe=ret))
                except OSError as e:
                    raise CalibrationError(f"attaching a uprobe_multi link failed: {e.strerror}") from e
            else:
                fds.append(_perf_uprobe(progs[ret], path, off, ret))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        for p in progs:         # the links and perf events hold their programs
            os.close(p)
    return fds


def measure(attach: str = "links", rounds: int = ROUNDS, calls: int = CALLS,
            pause: Callable[[], None] | None = None) -> TrapCost:
    """Measure the trap cost now (about ``rounds`` x ``calls`` x 2 us of this thread's CPU).

    ``pause``, if given, is called between rounds (to yield to others). Raises CalibrationError.
    """
    with _code() as (path, base):
        loop = _LOOP_FN(base)
        fds = _attach(path, attach == "links")
        try:
            def run(which: str) -> int:
                t0 = time.thread_time_ns()
                loop(calls, base + _OFFSETS[which])
                return time.thread_time_ns() - t0

            for which in _OFFSETS:      # warm-up: fault the page in, install the breakpoints
                run(which)
            entry: list[float] = []
            ret: list[float] = []
            plain: list[float] = []
            for _ in range(rounds):
                t = {which: run(which) for which in _OFFSETS}
                plain.append(t["none"] / calls)
                entry.append((t["entry"] - t["none"]) / calls)
                ret.append((t["return"] - t["entry"]) / calls)
                if pause:
                    pause()
        finally:
            for fd in fds:
                os.close(fd)
    return TrapCost(trap_ns=round(statistics.median(entry), 1), return_ns=round(statistics.median(ret), 1),
                    attach=attach, rounds=rounds, calls=calls, measured_at=time.time(),
                    call_ns=round(statistics.median(plain), 2))


class Calibration:
    """The trap cost for gputop's attach mode: from the cache, else measured once on a background
    thread (started by ``start()``, after the probes are live, never delaying a snapshot)."""

    def __init__(self, attach: str, directory: Path | None = None,
                 measure_fn: Callable[[str], TrapCost] | None = None) -> None:
        self.attach = attach
        self._dir = directory
        self._measure = measure_fn or (lambda mode: measure(mode, pause=lambda: time.sleep(0.005)))
        self.cost: TrapCost | None = None
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        self.done = threading.Event()

    def start(self, measure: bool = True) -> None:
        """Take the cached figure; without one, measure on a background thread (only when
        ``measure``: the caller says when the CPU can be spared, e.g. after the first snapshot)."""
        if self._thread is not None or self.done.is_set():
            return
        cached = load_cached(self.attach, self._dir)
        if cached is not None:
            self.cost = cached
            self.done.set()
            return
        if not measure:
            return
        self._thread = threading.Thread(target=self._run, name="gputop-trap-calibration", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            cost = self._measure(self.attach)
        except (CalibrationError, OSError) as e:
            self.error = str(e)
        else:
            self.cost = cost
            store(cost, self._dir)
        finally:
            self.done.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and not self.done.is_set()
