"""Kernel names as the BPF source resolves them (kernelnames.py does the resolving): what the BPF side
captured under the generation being named, whole names read from the process's memory while it
still holds them, driver handles nobody saw looked up (handles.py: from the driver's structure, with a
layout learned from the handles whose look-up the BPF side saw), and the names a program that is gone
(an exec, an unmapping, an exit) leaves."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.attach.attaching import Attacher
from gputop.sources.bpf.attach.objreads import BoundedCalls
from gputop.sources.bpf.common.abi import NAME_LEN
from gputop.sources.bpf.lifecycle.procid import gen_of, ident, key_ident, pid_of
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.names.handles import HandleNames, Known
from gputop.sources.bpf.names.kernelnames import KernelNamer, Resolved

MEM_READ_S = 0.5      # a read of a kernel's name from its process's memory (objreads.BoundedCalls)


class Naming:
    def __init__(self, table: Callable[[str], Any], procs: ProcTable, attacher: Attacher) -> None:
        self._table = table
        self._procs = procs
        reads = attacher.reads
        self.namer = KernelNamer(self._captured_name, self._alias, attacher.symcache, procs.maps_of,
                                 lambda pid, maps: procs.saw_maps({pid: maps}),
                                 read=lambda key, fd, path: reads.read(key, fd, path, cuda_only=False),
                                 read_string=self._string_in_file, memory_ok=self._memory_current)
        #: reads of processes' memory (kernel names at their registration, driver handles), bounded in time
        self._mem_reads = BoundedCalls("gputop-mem", MEM_READ_S)
        self.namer.handles = HandleNames(self._looked_up, self.namer.maps, self.namer.unname, self._mem_reads.call)
        #: the generation whose names a pid's kernels are being resolved with (_by_key)
        self._gen: dict[int, int] = {}
        self._memory_stale = False  # names being resolved for an old image (named_as_gone)

    def resolving(self, me: int) -> None:
        """The kernels of the PID of ``me`` are named with its generation's captured names from now."""
        self._gen[pid_of(me)] = gen_of(me)

    def drop_generation(self, pid: int) -> None:
        self._gen.pop(pid, None)

    def _by_key(self, name: str, pid: int, addr: int) -> Any:
        """The value at (pid, addr) of a (tgid, address)-keyed table, or None."""
        table = self._table(name)
        gen = self._gen.get(pid)
        try:
            return table[table.Key(pid, self._procs.now(pid) if gen is None else gen, addr)]
        except KeyError:
            return None

    def _captured_name(self, pid: int, addr: int) -> bytes | None:
        """The name the BPF side captured: at the call (driver look-ups) or at the kernel's first launch
        (registrations, up to NAME_LEN - 1 bytes). A registered name it could not copy (its page not
        present yet: the BPF side cannot fault one in) or that fills its buffer is read whole from the
        process's memory while the process still holds it, else from the object file the name is a
        constant of (after an exit or an exec)."""
        v = self._by_key("names", pid, addr)
        copy = bytes(v.name).split(b"\0", 1)[0] if v is not None else b""
        if copy and len(copy) < NAME_LEN - 1:
            return copy
        p = self._by_key("name_ptrs", pid, addr)        # registered: read from the process itself
        if p is None:
            return copy or None
        ptr, boot_ns = int(p.ptr), int(p.boot_ns)
        whole = None
        if not self._memory_stale:
            whole = self._mem_reads.call(lambda: discovery.read_registered_name(pid, ptr, boot_ns))
        if whole is None:
            whole = self._registered_in_file(pid, ptr)
        return whole or copy or None

    def _registered_in_file(self, pid: int, ptr: int) -> bytes | None:
        """The registered name at ``ptr`` read from the object that holds it, a constant of its read-only
        data (or code): found from the executable mapping nearest below ``ptr`` (an object's read-only
        data follows its code, or is in the code's segment), the address taken to the file through the
        object's load bias and segments."""
        below = [m for m in self.namer.maps(pid) if m.start <= ptr]
        if not below:
            return None
        m = max(below, key=lambda m: m.start)
        syms = self.namer.symbols_of(pid, m)
        base = syms.vaddr_of_offset(m.offset) if syms is not None else None
        if syms is None or base is None:
            return None
        return self.namer.constant_at(pid, m, syms, ptr - (m.start - base))

    def _string_in_file(self, pid: int, m: discovery.Mapping, offset: int) -> bytes | None:
        return self._mem_reads.call(lambda: discovery.read_string_in_file(pid, m, offset))

    def _memory_current(self, pid: int) -> bool:
        """Whether the kernels being named are of the process that holds ``pid`` now (its memory is theirs)."""
        return not self._memory_stale and self._gen.get(pid, self._procs.now(pid)) == self._procs.now(pid)

    def _looked_up(self, wanted: Callable[[int], bool]) -> Iterable[Known]:
        """Driver handles whose names the BPF side captured at their look-up, of the processes that hold
        their PIDs now and are ``wanted``: the names with no registration behind them (a registered name
        is a host stub's). One system call a name, and two more for a wanted process's."""
        names, ptrs = self._table("names"), self._table("name_ptrs")
        for k in names:
            pid = int(k.tgid)
            if key_ident(k) != ident(pid, self._procs.now(pid)) or not wanted(pid) or ptrs.get(k) is not None:
                continue
            v = names.get(k)
            name = bytes(v.name).split(b"\0", 1)[0] if v is not None else b""
            if name:
                yield pid, int(k.addr), name, len(name) == NAME_LEN - 1

    def _alias(self, pid: int, addr: int) -> int | None:
        v = self._by_key("aliases", pid, addr)
        return None if v is None else int(v.value)

    def launched(self, me: int) -> list[int]:
        """Addresses of the kernels process ``me`` launched (each pair has a kernels entry from its first launch)."""
        return sorted({int(k.addr) for k in self._table("kernels") if key_ident(k) == me})

    def keep_unmapped(self, pid: int, before: list[discovery.Mapping] | None, now: list[discovery.Mapping]) -> None:
        """Mappings of ``pid`` that are gone since its last scan (``before``: an exec, a library
        unloaded): the kernels it launched from them keep the names their old mappings give them."""
        if not before:
            return
        still = {(m.dev, m.inode, m.start) for m in now}
        gone = [m for m in before if (m.dev, m.inode, m.start) not in still]
        if not gone:
            return
        me = ident(pid, self._procs.scanned(pid))
        addrs = [a for a in self.launched(me) if any(m.start <= a < m.end for m in gone)]
        if addrs:
            self.namer.keep(pid, self.old_names(me, addrs, before))

    def old_names(self, me: int, addrs: list[int], maps: list[discovery.Mapping]) -> dict[int, Resolved]:
        """Names of kernels an exec or an unmapping took away, from ``maps`` (the old ones) and what
        the BPF side captured; never from the process's memory, which may be another program's now."""
        with self.named_as_gone(me, maps):
            return self.namer.names_in(pid_of(me), addrs, maps)

    @contextlib.contextmanager
    def named_as_gone(self, me: int, maps: list[discovery.Mapping]) -> Iterator[None]:
        """Kernel names of process ``me``, whose program is gone (an exec, an exit: its PID may be a new
        process's already): from ``maps`` (its last) and what the BPF side captured under its
        generation, never from what the PID maps or holds in memory now."""
        self._memory_stale = True
        self.resolving(me)
        try:
            with self.namer.maps_as(pid_of(me), maps):
                yield
        finally:
            self._memory_stale = False

    def close(self) -> None:
        self._mem_reads.close()
