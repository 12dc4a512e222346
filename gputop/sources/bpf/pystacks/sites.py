"""Call sites as the BPF side samples them (bpf/sites.bpf.h): which processes run a CPython the BPF side
can walk (``py_procs``: written here, once per process, from cpython.find_interpreter), the sampling
period (``site_period``: from what a walk costs beside what a probe costs), and each process's samples by
(stack, kernel) read back (``py_sites``) with their stacks (``py_stacks``) resolved to ``file:line
function`` (Python frames: lines.read_code, cached per process and code object) or to the symbol at a
native caller's return address (the ELF symbols kernel names use).

The traced process is hostile: its memory is read through one ``/proc/PID/mem`` descriptor opened once
(pinned to that process, never reopened by path), every read bounded (lines.py) and made on a worker
waited for at most MEM_READ_S (a read that a FUSE file backs may block for good); new code objects are
resolved at most CODES_PER_REFRESH a refresh, the rest the next one (shown unresolved meanwhile); a
process's resolved code objects are capped (CODES_PER_PROCESS)."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.attach.objreads import BoundedCalls
from gputop.sources.bpf.common.abi import NO_OFFSET, STACK_NATIVE, STACK_PYTHON, STACK_TRUNCATED
from gputop.sources.bpf.lifecycle.procid import Doomed, gen_of, ident, key_ident, pid_of
from gputop.sources.bpf.pystacks import cpython, lines

MEM_READ_S = 0.5            # one read of a process's memory (objreads.BoundedCalls)
FIND_S = 3.0                # finding a process's interpreter (its objects' ELF symbols, a few reads of memory)
CODES_PER_REFRESH = 256     # new code objects resolved per refresh, all processes together...
READS_PER_REFRESH_S = 0.25  # ...within this much time of reads
CODES_PER_PROCESS = 4096    # code objects kept resolved per process
FRAMES_PER_PROCESS = 16384  # frames (code object, instruction) kept resolved per process
#: line-table ranges kept decoded, all processes together (a code object past them keeps its names, and
#: a frame of it not resolved yet gets no line): a hostile line table decodes to 65,536 ranges (18 MB)
RANGES_MAX = 200_000
#: the part of a launch probe's cost sampling may add (issue 37: <= 5 %), and the period's bounds
COST_SHARE = 0.05
PERIOD_MIN, PERIOD_MAX, PERIOD_START = 16, 1 << 20, 1024


@dataclass(frozen=True)
class RawFrame:
    """One frame of a sampled stack: a Python frame's file, line and function (qualified name), or a
    native caller's object and symbol (line None). ``function`` None: not resolved (yet)."""

    file: str | None
    line: int | None
    function: str | None
    native: bool = False
    address: int = 0        # the code object's or the return address


@dataclass(frozen=True)
class RawSite:
    """A process's samples of one (stack, kernel): a counter since gputop first saw the process."""

    stack: int              # the stack's id (a hash of its frames, per process)
    func: int               # the kernel's host stub or handle (RawKernel.key)
    samples: int
    frames: tuple[RawFrame, ...]    # innermost first
    python: bool            # the launching thread ran Python (its frames; else a native caller)
    truncated: bool         # deeper than the frames kept
    unrecorded: bool = False    # the samples no table had room for (no stack, no kernel)


def _pidns(pid: int) -> tuple[int, int]:
    """The PID namespace of ``pid`` as the BPF helper takes it ((dev, inode); (0, 0): the host's, ours)."""
    try:
        theirs, ours = os.stat(f"/proc/{pid}/ns/pid"), os.stat("/proc/self/ns/pid")
    except OSError:
        return 0, 0
    if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
        return 0, 0
    return theirs.st_dev, theirs.st_ino


class CallSites:
    def __init__(self, table: Callable[[str], Any], maps_of: Callable[[int], list[discovery.Mapping]],
                 native_name: Callable[[int, int], tuple[str | None, str | None]],
                 period: int | None = None) -> None:
        self._table = table
        self._maps_of = maps_of             # a process's executable maps (the process table's)
        self._native_name = native_name     # (pid, address) -> (symbol, object)
        self._fixed = period                # --sample-period (None: adapted to the cost)
        self._reads = BoundedCalls("gputop-pystack", MEM_READ_S)
        self._finds = BoundedCalls("gputop-pyfind", FIND_S)
        #: per process identity: its interpreter (None: none, or none the BPF side can walk), its memory
        self.interpreters: dict[int, cpython.Interpreter | None] = {}
        self._objects: dict[int, frozenset[tuple[int, int]]] = {}   # the interpreter objects it mapped then
        self._mem: dict[int, int] = {}
        self._unreadable: set[int] = set()     # processes a read of timed out: not read again
        self._codes: dict[int, dict[int, lines.CodeInfo | None]] = {}
        self._frames: dict[int, dict[tuple[int, int], RawFrame]] = {}
        self._ranges: Counter[int] = Counter()  # line-table ranges kept, by process
        self._deadline = 0.0
        self._stacks: dict[tuple[int, int], tuple[tuple[int, int], ...] | None] = {}
        self._stack_flags: dict[tuple[int, int], int] = {}
        self._budget = 0
        self._told: int | None = None       # the period the BPF side was told
        self.period = period if period is not None else PERIOD_START
        self._set_period(self.period)
        self._walk_ns = self._walks = 0

    # ------------------------------------------------------------------ processes

    def add(self, pid: int, gen: int, maps: list[discovery.Mapping]) -> None:
        """Describe ``pid``'s CPython (if it runs one) to the BPF side, once per program: again when the
        objects that could be its interpreter changed (an exec whose event was lost)."""
        me = ident(pid, gen)
        objects = frozenset((m.dev, m.inode) for m in maps
                            if cpython.version_of_name(m.path) is not None or "python" in os.path.basename(m.path))
        if me in self.interpreters:
            if self._objects.get(me) == objects:
                return
            self.forget_image(me)
        self._objects[me] = objects
        fd = self._mem_fd(me)
        found = None
        # python3.X and libpython3.X.so before the rest (extension modules' names say python too)
        maps = sorted(maps, key=lambda m: cpython.version_of_name(m.path) is None)
        if fd is not None:
            found = self._finds.call(lambda: cpython.find_interpreter(pid, maps, fd))
        self.interpreters[me] = found
        if found is None:
            return
        lay = found.layout
        table = self._table("py_procs")
        v = table.Leaf()
        v.runtime = found.runtime
        v.code_tag_mask = lay.code_tag_mask
        v.pidns_dev, v.pidns_ino = _pidns(pid)
        for name in ("interp_head", "threads_head", "ts_next", "ts_native_tid", "ts_thread_id", "ts_frame",
                     "cframe_current",
                     "fr_previous", "fr_code", "fr_instr", "fr_owner", "owner_cstack"):
            value = getattr(lay, name)
            setattr(v, name, NO_OFFSET if value < 0 else value)
        v.instr_is_index = int(lay.instr_is_index)
        v.frame_window = lay.frame_window
        with contextlib.suppress(Exception):    # full (MAX_PROCS): its launches sample native callers
            table[table.Key(me)] = v

    def _mem_fd(self, me: int) -> int | None:
        """The process's memory, opened once (pinned to that process: a reused PID reads nothing)."""
        if me not in self._mem:
            try:
                self._mem[me] = os.open(f"/proc/{pid_of(me)}/mem", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
        return self._mem[me]

    def forget(self, doomed: Doomed) -> None:
        """Forget what the processes ``doomed`` names left (their entries: deleted by the caller's walk)."""
        for me in [me for me in set(self.interpreters) | set(self._mem) | set(self._codes) if doomed.hit(me)]:
            self._forget_one(me)
        for key in [k for k in self._stacks if doomed.hit(k[0])]:
            self._stacks.pop(key, None)
            self._stack_flags.pop(key, None)

    def forget_image(self, me: int) -> None:
        """Process ``me`` runs another program (an exec): its interpreter, memory and code objects go (its
        BPF entries: deleted by the caller, or here where no caller saw the exec)."""
        self._forget_one(me)
        for name in ("py_procs",):
            with contextlib.suppress(KeyError, TypeError):
                table = self._table(name)
                table.pop(table.Key(me), None)
        for key in [k for k in self._stacks if k[0] == me]:
            self._stacks.pop(key, None)
            self._stack_flags.pop(key, None)

    def _forget_one(self, me: int) -> None:
        self.interpreters.pop(me, None)
        self._objects.pop(me, None)
        self._codes.pop(me, None)
        self._frames.pop(me, None)
        self._ranges.pop(me, None)
        self._unreadable.discard(me)
        fd = self._mem.pop(me, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self._mem.values():
            os.close(fd)
        self._mem.clear()
        self._reads.close()
        self._finds.close()

    # ------------------------------------------------------------------ the sampling period

    def _set_period(self, n: int) -> None:
        """Sample one launch in ``n``: told to the BPF side now, or once its program is loaded."""
        self.period = n
        self._told = None
        self.tell()

    def tell(self) -> None:
        if self._told == self.period:
            return
        try:
            table = self._table("site_period")
        except (KeyError, TypeError):   # not loaded yet; a program without call sites (probe_cost.py --before)
            return
        table[table.Key(0)] = ctypes.c_uint64(self.period)
        self._told = self.period

    def fix_period(self, n: int | None) -> None:
        """Sample one launch in ``n`` (--sample-period; 0: none), or adapt the period again (None)."""
        self._fixed = n
        self._set_period(n if n is not None else PERIOD_START)

    def walk_ns(self) -> float | None:
        """What a sampled walk costs (ns), the dearer kind's mean since start: Python stacks' or native
        callers' (so that every process pays at most COST_SHARE, whichever kind its are); None before any."""
        try:
            table = self._table("site_cost")
        except (KeyError, TypeError):
            return None
        sums = [sum(int(x) for x in table.getvalue(table.Key(i))) for i in range(4)]
        means = [sums[i] / sums[i + 1] for i in (0, 2) if sums[i + 1]]
        return max(means) if means else None

    def tune(self, probe_ns: float | None) -> None:
        """Set the period so that walks add at most COST_SHARE to what each launch's probe costs
        (``probe_ns``: its trap, and its program time where known); fixed by --sample-period."""
        if self._fixed is not None:
            return
        walk = self.walk_ns()
        if walk is None or not probe_ns or probe_ns <= 0:
            return
        n = min(PERIOD_MAX, max(PERIOD_MIN, math.ceil(walk / (COST_SHARE * probe_ns))))
        if n != self.period:
            self._set_period(n)

    # ------------------------------------------------------------------ reading

    def read(self, only: set[int] | None = None) -> dict[int, tuple[RawSite, ...]]:
        """Every process's samples by (stack, kernel) (``only``: these processes'), its stacks resolved
        (what the budget allows)."""
        if only is None:
            self._budget = CODES_PER_REFRESH
            self._deadline = time.monotonic() + READS_PER_REFRESH_S
            self.tell()
        try:
            items = list(self._table("py_sites").items())
        except KeyError:
            return {}
        by_proc: dict[int, list[tuple[int, int, int]]] = {}
        for k, v in items:
            me = key_ident(k)
            if only is None or me in only:
                by_proc.setdefault(me, []).append((int(k.stack), int(k.func), int(v.value)))
        out: dict[int, tuple[RawSite, ...]] = {}
        unrecorded = self._unrecorded(only)
        for me in set(by_proc) | {me for me, n in unrecorded.items() if n}:
            sites = []
            for stack, func, n in sorted(by_proc.get(me, ()), key=lambda r: -r[2]):
                frames, flags = self._stack(me, stack)
                sites.append(RawSite(stack, func, n, frames, bool(flags & STACK_PYTHON) and not flags & STACK_NATIVE,
                                     bool(flags & STACK_TRUNCATED)))
            if unrecorded.get(me):      # samples no table had room for: still samples of the process
                sites.append(RawSite(0, 0, unrecorded[me], (), False, False, unrecorded=True))
            out[me] = tuple(sites)
        return out

    def _unrecorded(self, only: set[int] | None) -> dict[int, int]:
        """Samples of each Python process the BPF side could not keep (py_procs' counters)."""
        try:
            return {int(k.value): int(v.unrecorded) for k, v in self._table("py_procs").items()
                    if only is None or int(k.value) in only}
        except (KeyError, TypeError):
            return {}

    def _stack(self, me: int, stack: int) -> tuple[tuple[RawFrame, ...], int]:
        key = (me, stack)
        if key not in self._stacks:
            table = self._table("py_stacks")
            v = table.get(table.Key(pid_of(me), gen_of(me), stack))
            if v is None:
                return (), 0
            depth = min(int(v.depth), len(v.frames))
            self._stacks[key] = tuple((int(v.frames[i].code), int(v.frames[i].instr)) for i in range(depth))
            self._stack_flags[key] = int(v.flags)
        flags = self._stack_flags.get(key, 0)
        raw = self._stacks[key] or ()
        if flags & STACK_NATIVE:
            return tuple(self._native(me, addr) for addr, _ in raw), flags
        return tuple(self._frame(me, code, instr) for code, instr in raw), flags

    def _native(self, me: int, addr: int) -> RawFrame:
        sym, obj = self._native_name(pid_of(me), addr)
        return RawFrame(obj, None, sym, native=True, address=addr)

    def _frame(self, me: int, code: int, instr: int) -> RawFrame:
        frames = self._frames.setdefault(me, {})
        known = frames.get((code, instr))
        if known is not None:
            return known
        info = self._code(me, code)
        if info is None:
            return RawFrame(None, None, None, address=code)
        frame = RawFrame(info.filename, info.line_of(instr), info.name, address=code)
        if len(frames) < FRAMES_PER_PROCESS:
            frames[(code, instr)] = frame
        return frame

    def _code(self, me: int, code: int) -> lines.CodeInfo | None:
        """The code object at ``code`` in process ``me``, read once (a read that timed out: the process is
        not read again; one past this refresh's budget: read at a later one)."""
        codes = self._codes.setdefault(me, {})
        if code in codes:
            return codes[code]
        interp = self.interpreters.get(me)
        fd = self._mem.get(me)
        if (interp is None or fd is None or me in self._unreadable or self._budget <= 0
                or time.monotonic() > self._deadline or len(codes) >= CODES_PER_PROCESS):
            return None
        self._budget -= 1
        result = self._reads.call(lambda: (lines.read_code(fd, code, interp.layout),))
        if result is None:                      # timed out (a FUSE-backed page), or failed: not again
            self._unreadable.add(me)
            return None
        info = result[0]
        if info is not None and sum(self._ranges.values()) + len(info.ranges) > RANGES_MAX:
            info = dataclasses.replace(info, ranges=(), starts=())     # its names only: memory is bounded
        if info is not None:
            self._ranges[me] += len(info.ranges)
        codes[code] = info
        return info
