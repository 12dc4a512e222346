"""Kernel names: a launch's host stub address or driver handle -> demangled name and object.

In order: a name the BPF side captured (``__cudaRegisterFunction``, ``cuModuleGetFunction``,
``cuLibraryGetKernel``), following handle aliases (``cuKernelGetFunction``, ``__cudaGetKernel``)
to what they stand for; then the ELF symbol at that address in the object mapped there (the
process's maps are remembered from the last scan, so a process that exited is still named); a driver
handle nobody saw looked up, from the driver's structure it points to (handles.py).
Resolved names are cached; misses are retried after a while, not on every refresh.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Optional

from gputop.sources.bpf.attach import discovery, regcode, symbols
from gputop.sources.bpf.attach.objreads import Pending
from gputop.sources.bpf.common.abi import NAME_LEN  # names as long as NAME_LEN - 1 may be cut: ELF is preferred then
from gputop.sources.bpf.names.handles import HandleNames

RETRY_S = 5.0
MAX_ALIAS_HOPS = 3
#: seconds of demangling per refresh (names left over are demangled at the next: symbols.Demangler)
DEMANGLE_BUDGET_S = 0.25

Resolved = tuple[Optional[str], Optional[str]]   # (name, object path)


#: reads an object's symbols: (key, descriptor, path) -> symbols; may raise Pending (objreads)
SymbolReader = Callable[[tuple[int, int], int, str], "symbols.ObjectSymbols | None"]


#: reads a NUL-terminated string of a mapped object's file: (pid, mapping, file offset) -> bytes
StringReader = Callable[[int, discovery.Mapping, int], Optional[bytes]]


def _read_now(_key: tuple[int, int], fd: int, path: str) -> symbols.ObjectSymbols | None:
    return symbols.read_symbols(fd, path)


class KernelNamer:
    def __init__(self, captured: Callable[[int, int], bytes | None], alias: Callable[[int, int], int | None],
                 symcache: dict[tuple[int, int], symbols.ObjectSymbols | None],
                 known_maps: Callable[[int], list[discovery.Mapping]],
                 saw_maps: Callable[[int, list[discovery.Mapping]], None], clock: Callable[[], float] = time.monotonic,
                 read: SymbolReader = _read_now, read_string: StringReader = discovery.read_string_in_file,
                 memory_ok: Callable[[int], bool] = lambda pid: True) -> None:
        self._read = read
        self._read_string = read_string
        self._reading = False           # the last resolution waits for an object's read
        self._captured = captured
        self._alias = alias
        self._symcache = symcache
        self._known_maps = known_maps   # a process's maps as user space last knew them (the process table's)
        self._saw_maps = saw_maps       # tells the process table of maps read here
        self._clock = clock
        self._done: dict[tuple[int, int], Resolved] = {}
        self._missed: dict[tuple[int, int], tuple[float, Resolved]] = {}
        self._fresh_maps: dict[int, list[discovery.Mapping]] = {}
        #: driver handles nobody saw looked up (set by the caller: handles.py); read from a process's memory
        #: only where ``memory_ok(pid)`` (not for a program that is gone, nor a PID another process holds now)
        self.handles: HandleNames | None = None
        self._memory_ok = memory_ok

    def begin_refresh(self) -> None:
        """Maps are read at most once per process per refresh; demangling has a budget per refresh."""
        self._fresh_maps.clear()
        symbols.DEMANGLER.deadline = time.monotonic() + DEMANGLE_BUDGET_S

    def name(self, pid: int, addr: int) -> Resolved:
        key = (pid, addr)
        if key in self._done:
            return self._done[key]
        missed = self._missed.get(key)
        if missed is not None and self._clock() - missed[0] < RETRY_S:
            return missed[1]
        self._reading = False
        res = self._resolve(pid, addr)
        if res[0] is None and self._reading:
            return res                  # its object is still being read: tried again next refresh
        if res[0] is not None and res[0].startswith("_Z"):
            again = symbols.DEMANGLER(res[0])
            if again is None or not symbols.DEMANGLER.settled(res[0]):
                return res              # not demangled yet (the refresh's budget spent, a run failed): not kept
            res = (again, res[1])
        if res[0]:
            self._done[key] = res
            self._missed.pop(key, None)
        else:
            self._missed[key] = (self._clock(), res)
        return res

    def _resolve(self, pid: int, addr: int) -> Resolved:
        cut: str | None = None
        for _ in range(MAX_ALIAS_HOPS + 1):
            raw = self._captured(pid, addr)
            text = raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape") if raw is not None else ""
            if text:                    # an empty one is no name (a copy that failed): never taken
                # only a name that fills the BPF buffer may be cut (one read from the process's
                # memory at its registration can be longer, and is whole)
                whole = len(text) != NAME_LEN - 1
                obj = self._object_at(pid, addr)
                if obj is None and self.handles is not None and self._memory_ok(pid):
                    self.handles.seen(pid, addr, text.encode("utf-8", "surrogateescape"), not whole)
                if whole:
                    return self._demangled(text), obj
                cut = text
            target = self._alias(pid, addr)
            if target is None or target == addr:
                break
            addr = target
        name, obj = self._from_elf(pid, addr)
        if name is None and obj is None and cut is None and self.handles is not None and self._memory_ok(pid):
            name = self.handles.name(pid, addr)     # a driver handle looked up before gputop started
        if name is None and cut is not None:
            name = cut + "…"
        return name, obj

    def maps(self, pid: int) -> list[discovery.Mapping]:
        """``pid``'s executable mappings as its kernels are named with: read once a refresh (those user
        space last knew once it is gone), or an old image's (maps_as)."""
        maps = self._fresh_maps.get(pid)
        if maps is None:
            maps = discovery.read_maps(pid) or self._known_maps(pid)
            self._fresh_maps[pid] = maps
            if maps:
                self._saw_maps(pid, maps)
        return maps

    def _object_at(self, pid: int, addr: int) -> str | None:
        """The object mapped at ``addr`` (a host stub's; None for a driver handle, which is no code address)."""
        return next((m.path for m in self.maps(pid) if m.start <= addr < m.end), None)

    def _from_elf(self, pid: int, addr: int) -> Resolved:
        for m in self.maps(pid):
            if m.start <= addr < m.end:
                syms = self.symbols_of(pid, m)
                if syms is None:
                    return None, m.path
                vaddr = syms.vaddr_of_offset(addr - m.start + m.offset)
                if vaddr is None:
                    return None, m.path
                device = self._registered_in_code(pid, m, syms, vaddr)
                sym = device or syms.name_at(vaddr)
                return (self._demangled(sym) if sym else None), m.path
        return None, None

    def symbol_at(self, pid: int, addr: int) -> Resolved:
        """The function symbol (demangled) whose code holds ``addr`` in ``pid`` and its object: a native
        caller's return address (pystacks/sites.py)."""
        for m in self.maps(pid):
            if m.start <= addr < m.end:
                syms = self.symbols_of(pid, m)
                vaddr = syms.vaddr_of_offset(addr - m.start + m.offset) if syms is not None else None
                sym = syms.name_at(vaddr) if syms is not None and vaddr is not None else None
                return (self._demangled(sym) if sym else None), m.path
        return None, None

    def _registered_in_code(self, pid: int, m: discovery.Mapping, syms: symbols.ObjectSymbols,
                            vaddr: int) -> str | None:
        """The device name the object's registration code gives the host stub at ``vaddr`` (regcode.py):
        a kernel of a process gputop did not see register (started before it); an extended lambda's
        stub is named apart from its device function, and a stripped object has no stub symbols."""
        at = syms.registered.get(vaddr)
        raw = self.constant_at(pid, m, syms, at) if at is not None else None
        return raw.decode("ascii") if raw and regcode.is_name(raw) else None

    def constant_at(self, pid: int, m: discovery.Mapping, syms: symbols.ObjectSymbols, vaddr: int) -> bytes | None:
        """The NUL-terminated string constant at ``vaddr`` of the object ``m`` maps, read from its file
        (bounded: ``read_string``); None where that address is not the file's bytes."""
        offset = syms.offset_of_constant(vaddr)
        return self._read_string(pid, m, offset) if offset is not None else None

    @staticmethod
    def _demangled(name: str) -> str:
        return symbols.DEMANGLER(name) or name

    def symbols_of(self, pid: int, m: discovery.Mapping) -> symbols.ObjectSymbols | None:
        """The symbols of the object ``m`` maps (cached by file identity); None while its read is pending
        (then this resolution is retried next refresh) or when it cannot be read."""
        key = (m.dev, m.inode)
        if self._symcache.get(key) is None:
            path = discovery.open_path(pid, m)
            fd = discovery.open_object(path, m.dev, m.inode) if path else None
            try:
                syms = self._read(key, fd, path) if fd is not None and path else None
            except Pending:
                self._reading = True
                return None
            finally:
                if fd is not None:
                    os.close(fd)
            if syms is None:
                return None     # not cached: another process may map it readably later
            self._symcache[key] = syms
        return self._symcache[key]

    def names_in(self, pid: int, addrs: Iterable[int], maps: list[discovery.Mapping]) -> dict[int, Resolved]:
        """The names of ``addrs`` with ``maps`` as the process's (its old program's, after an exec)."""
        with self.maps_as(pid, maps), self.own_budget():
            return {addr: res for addr in addrs if (res := self.name(pid, addr))[0] is not None}

    @contextlib.contextmanager
    def maps_as(self, pid: int, maps: list[discovery.Mapping]) -> Iterator[None]:
        """Names of ``pid``'s kernels from ``maps`` (a program gone: exec'd, or exited with its PID
        maybe a new process's), never from the maps the PID has now."""
        self._fresh_maps[pid] = maps
        try:
            yield
        finally:
            self._fresh_maps.pop(pid, None)

    @contextlib.contextmanager
    def own_budget(self) -> Iterator[None]:
        """Demangling time of its own for names read outside a refresh (a process's last record at its
        exit, an old program's kernels at an exec): those are kept as they are resolved."""
        deadline = symbols.DEMANGLER.deadline
        symbols.DEMANGLER.deadline = time.monotonic() + DEMANGLE_BUDGET_S
        try:
            yield
        finally:
            symbols.DEMANGLER.deadline = deadline

    def keep(self, pid: int, named: dict[int, Resolved]) -> None:
        """Names resolved elsewhere (an exec'd process's kernels, named with its old program)."""
        self._done.update(((pid, addr), res) for addr, res in named.items())

    def unname(self, keys: set[tuple[int, int]]) -> None:
        """Forgets the names of these (pid, address) pairs (read with a driver layout given up: handles.py)."""
        for key in keys:
            self._done.pop(key, None)
            self._missed.pop(key, None)

    def forget(self, pid: int) -> None:
        self._done = {k: v for k, v in self._done.items() if k[0] != pid}
        self._missed = {k: v for k, v in self._missed.items() if k[0] != pid}
        if self.handles is not None:
            self.handles.forget(pid)
