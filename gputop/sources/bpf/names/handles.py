"""Names of driver handles nobody saw looked up: a ``CUfunction`` (or ``CUkernel``) that a process got
from ``cuModuleGetFunction``/``cuLibraryGetKernel`` before gputop started.

Such a handle points to the driver's own structure in the process's memory, which holds a pointer to
the kernel's name: ``cuFuncGetName`` (driver 550 and 555) is ``*name = *(const char **)(hfunc + 8)``, and
``cuKernelGetName`` reads a ``CUkernel`` the same way; older branches export no such call. The layout is
the driver's to change, so it is not written down here but learned from handles whose names gputop
saw at their look-up (the BPF side's return probes), per libcuda file and user:

- every *path* from a known handle to a pointer to its name is found in the first ``WINDOW`` bytes of its
  structure: ``(offset,)`` (the pointer at handle + offset) or ``(offset, offset2)`` (through one more
  pointer); a path agrees with a known handle when the NUL-terminated string it leads to is that name;
- a layout (the paths that agree with every one of them) is learned only from at least ``MIN_SAMPLES``
  distinct known handles, of at least ``MIN_NAMES`` distinct names, of processes that map the same libcuda
  file and belong to the same user, when some path agrees with all of them. Nothing is learned while
  none does (tried again later, with the handles known then), and a layout that a handle seen later
  disagrees with is given up for good, the names read with it forgotten;
- an unknown handle is named by reading those paths (bounded reads through ``/proc/PID/mem``): the name
  is the string they lead to when every path that leads to a possible kernel name (``regcode.is_name``)
  leads to that same one. A path may agree with every known handle by chance (a window read past a
  small allocation reaches the heap's next one, allocated alike for each of them): on another handle it
  leads nowhere (a read that fails, bytes that are no name: it says nothing) or to another name, and
  then the handle is not named — never a name that only one of two readings gives.

A layout lives as long as gputop runs, keyed by the file's (device, inode, size, change time): never kept
across driver versions, nor taken to another file that reuses a deleted driver's inode number. A user's
layout names only that user's processes: a process may write what it likes into its own memory, and what
one user's process writes must not name another user's kernels.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Optional, Protocol, TypeVar

from gputop.sources.bpf.attach import discovery, regcode

#: bytes of a handle's structure (and of the structure a pointer in it leads to) searched for the name's pointer
WINDOW = 512
#: distinct known handles a layout is learned from, at least and at most
MIN_SAMPLES = 2
MAX_SAMPLES = 16
#: distinct names among those handles, at least (a path may agree with two look-ups of one name by chance)
MIN_NAMES = 2
#: seconds between two tries at learning a layout that could not be learned yet (as kernelnames.RETRY_S)
RETRY_S = 5.0
#: the longest name read (as a name registered in a process's memory)
NAME_MAX = discovery.REGISTERED_NAME_MAX
#: a value that may be a user-space pointer (a string's or a structure's)
_PTR_MIN, _PTR_MAX = 0x1000, 1 << 56
_LIBCUDA = re.compile(r"libcuda\.so(\.[0-9]+)*")

Path = tuple[int, ...]       # (offset,) or (offset, offset2): see the module's doc
#: a libcuda file and a user: (device, inode, size, change time in ns, uid)
Identity = tuple[int, int, int, int, int]
#: a mapped file's (size, change time in ns), or None where it cannot be had: (pid, mapping) -> stamp
Stamp = Callable[[int, discovery.Mapping], Optional[tuple[int, int]]]
#: a handle whose name gputop saw at its look-up: (pid, handle, name as captured, cut: the capture filled its buffer)
Known = tuple[int, int, bytes, bool]
_T = TypeVar("_T")


class Memory(Protocol):
    def read(self, addr: int, size: int) -> bytes | None:
        """Up to ``size`` bytes at ``addr`` (fewer where a page cannot be read); None when none can be."""
        ...


class ProcMemory:
    """A process's memory through ``/proc/PID/mem`` (opened once; reads bounded by their size)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @staticmethod
    @contextlib.contextmanager
    def of(pid: int) -> Iterator[ProcMemory | None]:
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            yield None
            return
        try:
            yield ProcMemory(fd)
        finally:
            os.close(fd)

    def read(self, addr: int, size: int) -> bytes | None:
        if not 0 <= addr < 1 << 63:
            return None
        try:
            return os.pread(self._fd, size, addr) or None
        except (OSError, OverflowError):
            return None


def _pointers(block: bytes) -> Iterator[tuple[int, int]]:
    """(offset, value) of each aligned 8-byte value of ``block`` that may be a pointer."""
    for off in range(0, len(block) - 7, 8):
        v = int.from_bytes(block[off:off + 8], "little")
        if _PTR_MIN <= v < _PTR_MAX:
            yield off, v


def string_at(mem: Memory, ptr: int) -> bytes | None:
    """The NUL-terminated string at ``ptr``, read page by page; None unless its NUL is within NAME_MAX bytes."""
    out = b""
    while len(out) < NAME_MAX:
        pos = ptr + len(out)
        chunk = mem.read(pos, min(NAME_MAX - len(out), mmap.PAGESIZE - pos % mmap.PAGESIZE))
        if not chunk:
            return None
        end = chunk.find(b"\0")
        if end >= 0:
            return out + chunk[:end]
        out += chunk
    return None


def _is_name(mem: Memory, ptr: int, name: bytes, cut: bool) -> bool:
    """Whether ``ptr`` points to ``name`` (NUL-terminated; a cut capture: to a string that begins so)."""
    got = mem.read(ptr, len(name) + (0 if cut else 1))
    return got == (name if cut else name + b"\0")


def paths_to(mem: Memory, handle: int, name: bytes, cut: bool = False) -> set[Path]:
    """Every path (direct, or through one pointer that leads out of the handle's own window: a pointer
    into it, such as an empty list's head, is no other structure) from ``handle`` to a pointer to ``name``."""
    block = mem.read(handle, WINDOW)
    if block is None:
        return set()
    found: set[Path] = set()
    for off, v in _pointers(block):
        if _is_name(mem, v, name, cut):
            found.add((off,))
        if handle <= v < handle + WINDOW:
            continue
        inner = mem.read(v, WINDOW)
        for off2, v2 in _pointers(inner or b""):
            if _is_name(mem, v2, name, cut):
                found.add((off, off2))
    return found


def pointer_at(mem: Memory, handle: int, path: Path) -> int | None:
    """The pointer ``path`` leads to from ``handle`` (None where a read fails or a value is no pointer)."""
    at = handle
    for off in path:
        raw = mem.read(at + off, 8)
        if raw is None or len(raw) != 8:
            return None
        at = int.from_bytes(raw, "little")
        if not _PTR_MIN <= at < _PTR_MAX:
            return None
    return at


@dataclass(frozen=True)
class Sample:
    mem: Memory
    handle: int
    name: bytes
    cut: bool = False

    def agrees(self, path: Path) -> bool:
        ptr = pointer_at(self.mem, self.handle, path)
        return ptr is not None and _is_name(self.mem, ptr, self.name, self.cut)


def learn(samples: Sequence[Sample]) -> tuple[Path, ...] | None:
    """Every path that agrees with every sample, or None: fewer than MIN_SAMPLES samples whose structure
    can be read (or of fewer than MIN_NAMES names), or no path agrees with all of them."""
    readable = [s for s in samples if s.mem.read(s.handle, 8) is not None]
    if len(readable) < MIN_SAMPLES or len({s.name for s in readable}) < MIN_NAMES:
        return None
    first = readable[0]
    return tuple(sorted(p for p in paths_to(first.mem, first.handle, first.name, first.cut)
                        if all(s.agrees(p) for s in readable[1:]))) or None


def read_name(mem: Memory, handle: int, layout: Sequence[Path]) -> bytes | None:
    """The name ``layout``'s paths lead to from ``handle``: None unless every path that leads to a string
    that may be a kernel's name (``regcode.is_name``, NUL-terminated within NAME_MAX bytes) leads to the same
    one. A path that leads nowhere (a read that fails, no pointer, no name) says nothing."""
    names = set()
    for path in layout:
        ptr = pointer_at(mem, handle, path)
        got = string_at(mem, ptr) if ptr is not None else None
        if got and regcode.is_name(got):
            names.add(got)
    return names.pop() if len(names) == 1 else None


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def file_stamp(pid: int, m: discovery.Mapping) -> tuple[int, int] | None:
    """(size, change time in ns) of the file ``pid`` maps at ``m``, checked to be that (device, inode):
    through the kernel's own link to it (map_files: a file deleted since is still there), else its path
    in the process's root; None where neither is that file."""
    for cand in (f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}", f"/proc/{pid}/root{m.path}"):
        try:
            st = os.stat(cand)
        except (OSError, ValueError):
            continue
        if (st.st_dev, st.st_ino) == (m.dev, m.inode) and stat.S_ISREG(st.st_mode):
            return st.st_size, st.st_ctime_ns
    return None


def identity(pid: int, maps: Iterable[discovery.Mapping], stamp: Stamp = file_stamp) -> Identity | None:
    """The libcuda file ``pid`` maps (exactly one) and its user; None for another process, or where the
    file's size and change time cannot be had (an inode number alone may be a deleted driver's reused)."""
    files = {(m.dev, m.inode): m for m in maps if _LIBCUDA.fullmatch(os.path.basename(m.path))}
    if len(files) != 1:
        return None
    (dev, inode), m = files.popitem()
    uid = _uid(pid)
    st = stamp(pid, m) if uid is not None else None
    return None if uid is None or st is None else (dev, inode, *st, uid)


#: a layout given up: a handle seen later disagreed with it
_GIVEN_UP: tuple[Path, ...] = ()


@dataclass
class _State:
    layout: tuple[Path, ...] | None = None     # None: not learned (yet); _GIVEN_UP: given up
    tried: float | None = None
    named: set[tuple[int, int]] = field(default_factory=set)   # (pid, handle) named with it


Bounded = Callable[[Callable[[], _T]], Optional[_T]]


def _direct(fn: Callable[[], _T]) -> _T | None:
    return fn()


class HandleNames:
    """Learns layouts (see the module's doc) and names unknown handles with them.

    ``known(wanted)`` gives the handles whose names the BPF side captured at their look-up, of the
    processes that still run and are ``wanted(pid)``; ``maps(pid)`` a process's executable mappings;
    ``unname(keys)`` forgets names read with a layout given up; ``bounded`` runs a read of processes'
    memory bounded in time (objreads.BoundedCalls); ``memory(pid)`` opens a process's memory
    (ProcMemory.of); ``stamp`` a libcuda file's size and change time (file_stamp)."""

    def __init__(self, known: Callable[[Callable[[int], bool]], Iterable[Known]],
                 maps: Callable[[int], list[discovery.Mapping]],
                 unname: Callable[[set[tuple[int, int]]], None], bounded: Bounded[object] = _direct,
                 clock: Callable[[], float] = time.monotonic,
                 memory: Callable[[int], AbstractContextManager[Memory | None]] = ProcMemory.of,
                 stamp: Stamp = file_stamp) -> None:
        self._memory = memory
        self._stamp = stamp
        self._known = known
        self._maps = maps
        self._unname = unname
        self._bounded = bounded
        self._clock = clock
        self._states: dict[Identity, _State] = {}

    def name(self, pid: int, handle: int) -> str | None:
        """The name of ``pid``'s ``handle`` as its libcuda's layout reads it, or None."""
        ident = identity(pid, self._maps(pid), self._stamp)
        if ident is None:
            return None
        st = self._states.setdefault(ident, _State())
        if st.layout is None and (st.tried is None or self._clock() - st.tried >= RETRY_S):
            st.tried = self._clock()
            st.layout = self._learn(ident)
        if not st.layout:
            return None
        layout = st.layout

        def read() -> bytes | None:
            with self._memory(pid) as mem:
                return read_name(mem, handle, layout) if mem is not None else None
        raw = self._run(lambda: read())
        if raw is None:
            return None
        st.named.add((pid, handle))
        return raw.decode("ascii")

    def seen(self, pid: int, handle: int, name: bytes, cut: bool) -> None:
        """A handle whose name the BPF side captured (one its process launched): a layout learned for its
        libcuda must read that name from it, else it is given up and what was named with it forgotten."""
        ident = identity(pid, self._maps(pid), self._stamp)
        st = self._states.get(ident) if ident is not None else None
        if st is None or not st.layout:
            return
        layout = st.layout

        def check() -> bool | None:
            with self._memory(pid) as mem:
                if mem is None or mem.read(handle, 8) is None:
                    return None             # gone: no evidence either way
                got = read_name(mem, handle, layout)
                return got is not None and (got.startswith(name) if cut else got == name)
        if self._run(check) is False:
            st.layout = _GIVEN_UP
            named, st.named = st.named, set()
            self._unname(named)

    def forget(self, pid: int) -> None:
        for st in self._states.values():
            st.named = {k for k in st.named if k[0] != pid}

    def _run(self, fn: Callable[[], _T]) -> _T | None:
        return self._bounded(fn)        # type: ignore[return-value]

    def _learn(self, ident: Identity) -> tuple[Path, ...] | None:
        """A layout from the known handles of processes that map ``ident``'s libcuda as ``ident``'s user
        (a handle inside a mapping of code is a host stub, no driver handle). The handles are listed
        here, their processes' memory read bounded in time."""
        code: dict[int, list[tuple[int, int]] | None] = {}

        def wanted(pid: int) -> bool:
            if pid not in code:
                maps = self._maps(pid)
                code[pid] = [(m.start, m.end) for m in maps] if identity(pid, maps, self._stamp) == ident else None
            return code[pid] is not None
        picked: list[Known] = []
        for pid, handle, name, cut in self._known(wanted):
            ranges = code.get(pid) if wanted(pid) else None
            if ranges is None or not regcode.is_name(name) or any(lo <= handle < hi for lo, hi in ranges):
                continue
            picked.append((pid, handle, name, cut))
            if len(picked) == MAX_SAMPLES:
                break
        if len(picked) < MIN_SAMPLES or len({k[2] for k in picked}) < MIN_NAMES:
            return None

        def read() -> tuple[Path, ...] | None:
            with contextlib.ExitStack() as stack:
                mems = {pid: stack.enter_context(self._memory(pid)) for pid in {k[0] for k in picked}}
                return learn([Sample(mem, handle, name, cut) for pid, handle, name, cut in picked
                              if (mem := mems[pid]) is not None])
        return self._run(read)
