"""The CUDA objects processes map, each read once (off the collector's path: objreads.py), then probed
with the catalogue's probes (their code ranges first: coderanges.py) or rejected, and detached a while
after no known process maps it (KEEP_UNMAPPED_S, at most KEEP_UNMAPPED_MAX of them: the next process
that maps one is counted from its first call, however short its life). Objects are keyed by (device,
inode); the BPF side tells them from newer files under the same inode number by their change time
(known_files)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from gputop.sources.bpf.attach import catalogue, discovery, symbols
from gputop.sources.bpf.attach.coderanges import CodeRanges
from gputop.sources.bpf.attach.objreads import ObjectReads, Pending
from gputop.sources.bpf.attach.uprobes import UprobeAttacher
from gputop.sources.bpf.common.abi import FILE_NOT_CUDA, FILE_PROBED
from gputop.sources.bpf.common.linux import fd_budget, fd_room, fds_open
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.lifecycle.shares import Tenant
from gputop.sources.bpf.program.program import Program

ObjectKey = tuple[int, int]

#: a probed object no known process maps stays probed this long (a job that runs again, a short-lived
#: process after its parent exited: counted from its first call, before any scan could see it) ...
KEEP_UNMAPPED_S = 300.0
#: ... and at most this many such objects, the latest unmapped kept (a tenant who maps crafted copies
#: holds no more probes and descriptors than these once its processes are gone)
KEEP_UNMAPPED_MAX = 8


class Attacher:
    def __init__(self, program: Program, procs: ProcTable,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._program = program
        self._clock = clock
        #: probed objects no known process mapped at the last sweep -> since when (clock)
        self.unmapped_since: dict[ObjectKey, float] = {}
        self.objects: dict[ObjectKey, str] = {}           # probed objects -> path
        #: objects without CUDA entry points -> their change time (ns; None: not known, never taken as matching)
        self.rejected: dict[ObjectKey, int | None] = {}
        #: symbols of probed objects (and of objects read to name kernels): kept while mapped
        self.symcache: dict[ObjectKey, symbols.ObjectSymbols | None] = {}
        #: objects read while the program compiled (startup.Prefetch), used by the first scan
        self.prefetched: dict[ObjectKey, symbols.ObjectSymbols | None] = {}
        self.reads = ObjectReads()           # object reads off the collector's path (objreads.py)
        self._pending: dict[ObjectKey, discovery.ObjectRef] = {}    # objects still being read
        self.uprobes: UprobeAttacher | None = None          # set once the program is loaded
        self._dropped = 0               # objects that went unprobed for want of descriptors
        self._fd_starved: set[ObjectKey] = set()          # those mapped now
        #: each tenant's share of the probes' descriptors (docs/SECURITY.md, "Fair share"): the objects
        #: charged to one (its processes alone map them, or it owns the file) with their descriptors,
        #: what each holds, and the objects each could not have probed over its share (once each)
        self._charged: dict[ObjectKey, tuple[Tenant, int]] = {}
        self._fds_held: Counter[Tenant] = Counter()
        self._share_starved: dict[ObjectKey, Tenant] = {}
        self.lost: Counter[Tenant] = Counter()
        self._fds_base: int | None = None       # descriptors open before the first object was probed
        self.code = CodeRanges(program.table, procs, self._probed, program.share("MAX_CODE"))

    def _probed(self, key: ObjectKey) -> symbols.ObjectSymbols | None:
        return self.symcache.get(key) if key in self.objects else None

    def known(self, key: ObjectKey) -> bool:
        """Whether the object ``key`` is probed or rejected already."""
        return key in self.objects or key in self.rejected

    def known_as(self, key: ObjectKey, ctime_ns: int) -> bool:
        """Whether the file the BPF side named, ``key`` with change time ``ctime_ns``, is known: probed
        (its probes hold its inode, so its number is no other file's: its metadata changed, and it is
        classified again under the new change time), or rejected with that very change time (told
        again: its entry was pushed out of the table). A rejected key under another change time is
        another file given the deleted one's inode number (or the same file changed): forgotten, to
        be looked at again."""
        if key in self.objects:
            self.classified(key, probed=True, ctime_ns=ctime_ns)
            return True
        if key in self.rejected:
            if self.rejected[key] == ctime_ns:
                self.classified(key, probed=False, ctime_ns=ctime_ns)
                return True
            del self.rejected[key]
        return False

    def attach(self, ref: discovery.ObjectRef, users: dict[int, list[discovery.Mapping]] | None = None) -> bool:
        """Probe one object; False if it has no CUDA entry points (or its process just exited:
        then it is not marked, and the next process that maps it brings it back; or its read
        outlasts this scan's wait: then it is attached once read, see objreads).

        The object is opened once, checked on the descriptor (discovery.open_object), and read
        and probed through that descriptor, so a process that exits meanwhile cannot leave it
        half probed, and a file swapped for a FIFO or a symlink is never opened."""
        fd = ref.open()
        if fd is None:
            # its process is gone, and its map_files with it: the same file by its path from here
            here = discovery.same_file(ref)
            if here is None or here == ref.open_path:
                return self._reject(ref, None)
            return self.attach(dataclasses.replace(ref, open_path=here), users)
        try:
            ctime_ns = change_time(os.fstat(fd))
            try:
                syms = (self.prefetched.pop(ref.key) if ref.key in self.prefetched
                        else self.reads.read(ref.key, fd, ref.open_path))
            except Pending:
                self._pending[ref.key] = ref
                return False
            self._pending.pop(ref.key, None)
            wanted = catalogue.probes_for(syms.functions, syms.jump_target) if syms else []
            if syms is None or not wanted:
                if syms is not None and syms.registered:
                    # an object of kernels (libtorch_cuda.so): kept while mapped, so that the first
                    # reading that shows its kernels names them (its read takes most of a second)
                    self.symcache[ref.key] = syms
                return self._reject(ref, ctime_ns)
            assert self.uprobes is not None
            if not fd_room(2 * len(wanted)):     # at most an entry and a return probe each
                self._fd_starved.add(ref.key)       # no descriptors left for its probes: see fd_room
                return False
            tenant = self._tenant(fd, users)
            if tenant is not None and not self._fd_share_room(ref.key, tenant, 2 * len(wanted)):
                return False
            probes = [(probe, addr, off) for probe, addr in wanted if (off := syms.offset_of_vaddr(addr)) is not None]
            if not stable_for_probes(fd, [off for _p, _a, off in probes], ctime_ns):
                return False                # being changed: not probed now (the next scan tries again)
            if ref.key in self._fd_starved:          # it was counted dropped: it stays counted
                self._fd_starved.discard(ref.key)
                self._dropped += 1
            syms.path = ref.open_path
            self.symcache[ref.key] = syms
            self.objects[ref.key] = ref.path
            for pid, pmaps in (users or {}).items():      # code ranges first, then the probes
                self.code.add(pid, pmaps)
            fds = fds_open()
            self.uprobes.attach(f"/proc/self/fd/{fd}", probes, name=ref.path, owner=ref.key)
            after = fds_open()
            if tenant is not None and fds is not None and after is not None:
                self._charged[ref.key] = (tenant, after - fds)
                self._fds_held[tenant] += after - fds
        finally:
            os.close(fd)
        self.classified(ref.key, probed=True, ctime_ns=ctime_ns)
        return True

    def _tenant(self, fd: int, users: dict[int, list[discovery.Mapping]] | None) -> Tenant | None:
        """The tenant an object's probes are charged to: the one whose processes alone map it; with
        none known (its process gone), the file's owner other than root. None: mapped by several
        tenants, or a root-owned file no known process maps (nobody's to lose: FD_RESERVE alone)."""
        tenants = {t for pid in users or {} if (t := self.code.tenant_of(pid)) is not None}
        if tenants:
            return tenants.pop() if len(tenants) == 1 else None
        uid = os.fstat(fd).st_uid
        return (uid, 0) if uid != 0 else None

    def _fd_share_room(self, key: ObjectKey, tenant: Tenant, wanted: int) -> bool:
        """Whether ``tenant`` may hold ``wanted`` more descriptors for probes: TENANT_SHARE_PCT of those
        fd_budget leaves beyond what was open before the first probe; an object it may not is its
        loss, counted once."""
        budget = fd_budget()
        if self._fds_base is None:
            self._fds_base = fds_open() or 0
        pct = self._program.limit("TENANT_SHARE_PCT")
        if budget is None or self._fds_held[tenant] + wanted <= (budget - self._fds_base) * pct // 100:
            self._share_starved.pop(key, None)
            return True
        if key not in self._share_starved:
            self._share_starved[key] = tenant
            self.lost[tenant] += 1
            self._dropped += 1              # and among the objects dropped
        return False

    def finished(self) -> Iterator[discovery.ObjectRef]:
        """The objects whose reads finished after their scan stopped waiting, still to be probed (each
        read is let go once the caller is done with its object: used, or its object gone or known)."""
        for key in self.reads.done():
            ref = self._pending.pop(key, None)
            if ref is not None and key not in self.objects and key not in self.rejected:
                yield ref
            self.reads.discard(key)

    def _reject(self, ref: discovery.ObjectRef, ctime_ns: int | None) -> bool:
        if os.path.exists(ref.open_path):       # readable: really not a CUDA object
            self.rejected[ref.key] = ctime_ns
            self.classified(ref.key, probed=False, ctime_ns=ctime_ns)
        return False

    def classified(self, key: ObjectKey, *, probed: bool, ctime_ns: int | None) -> None:
        """Tell the BPF side, for the file ``key`` whose change time is ``ctime_ns``: its mappings start
        a rescan (probed) or no event at all. Without a change time nothing is told (its mappings
        keep naming it: a newer file under its inode number is never taken for it)."""
        known = self._known_file(key)
        if known is not None:
            table, k = known
            with contextlib.suppress(Exception):
                if ctime_ns is None:
                    table.pop(k, None)
                else:
                    table[k] = table.Leaf(ctime_ns, FILE_PROBED if probed else FILE_NOT_CUDA)
            self._named_again(key)

    def release_unmapped(self, mapped: set[ObjectKey]) -> None:
        """After a full scan: detach and forget the objects no known process has mapped for
        KEEP_UNMAPPED_S, and the oldest unmapped beyond KEEP_UNMAPPED_MAX. A released object comes
        back with the next process that maps it (its mapping is named to user space again), and a
        user who made many crafted ones leaves no more than KEEP_UNMAPPED_MAX behind, for a while."""
        now = self._clock()
        since = self.unmapped_since
        for key in [k for k in since if k in mapped or k not in self.objects]:
            del since[key]
        for key in self.objects:
            if key not in mapped and key not in self._pending:
                since.setdefault(key, now)
        by_age = sorted(since, key=lambda k: since[k])      # the expired ones first
        expired = sum(1 for k in by_age if now - since[k] >= KEEP_UNMAPPED_S)
        for key in by_age[:max(expired, len(by_age) - KEEP_UNMAPPED_MAX)]:
            assert self.uprobes is not None
            self.uprobes.detach(key)
            del self.objects[key]
            del since[key]
            self._unclassify(key)
            charged = self._charged.pop(key, None)
            if charged is not None:         # its descriptors go back to the tenant they were charged to
                self._fds_held[charged[0]] -= charged[1]
        for key in [k for k in self.symcache if k not in mapped and k not in self.objects]:
            del self.symcache[key]         # programs named from: read again if mapped again
        self.rejected = {k: t for k, t in self.rejected.items() if k in mapped}
        self._dropped += len(self._fd_starved - mapped)
        self._fd_starved &= mapped
        self._share_starved = {k: t for k, t in self._share_starved.items() if k in mapped}

    def _unclassify(self, key: ObjectKey) -> None:
        """The BPF side names the object's next mapping again (as one never seen): a process that maps
        it and exits before a scan reads its maps still gets it probed (events.Events._reach_unknown)."""
        known = self._known_file(key)
        if known is not None:
            table, k = known
            with contextlib.suppress(Exception):
                table.pop(k, None)
            self._named_again(key)

    def _named_again(self, key: ObjectKey) -> None:
        """The file is classified (or no longer): the BPF side's note that it named the file goes, so its
        next mapping is named again where known_files does not say what it is (bpf/life.bpf.h)."""
        table = self._program.table("file_pending")
        with contextlib.suppress(Exception):
            table.pop(table.Key(discovery.kernel_dev(key[0]), key[1]), None)

    def _known_file(self, key: ObjectKey) -> tuple[Any, Any] | None:
        """The BPF side's ``known_files`` and the object's key there; None where files are not named
        (no BTF offsets)."""
        if not self._program.file_offsets:
            return None
        table = self._program.table("known_files")
        return table, table.Key(discovery.kernel_dev(key[0]), key[1])

    def dropped(self) -> int:
        """Objects that went unprobed for want of descriptors since start (those mapped now included)."""
        return self._dropped + len(self._fd_starved)


#: the page size the page cache reads in (probes are placed in pages of it)
PAGE = os.sysconf("SC_PAGE_SIZE")


def stable_for_probes(fd: int, offsets: list[int], ctime_ns: int) -> bool:
    """Read each page that will hold a probe through ``fd`` (the page cache's own read path, under the
    file's invalidate lock), then whether the file is still the one read (change time ``ctime_ns``,
    every offset inside it). uprobe_register reads a page it does not find cached without that lock,
    which ext4 on Linux 6.16+ takes for a WARNING (ext4_check_map_extents_env: a panic under
    kernel.panic_on_warn) where the page's extent is not cached either: a file being truncated and
    written again (issue 40). A file that changed is not probed now: libraries do not change while
    mapped, and the next scan tries again."""
    try:
        for page in sorted({off - off % PAGE for off in offsets}):
            os.pread(fd, 1, page)
        st = os.fstat(fd)
    except OSError:
        return False
    return change_time(st) == ctime_ns and all(off < st.st_size for off in offsets)


def change_time(st: os.stat_result) -> int:
    """A file's change time in ns as the BPF side reads it from the inode (an unsigned 64-bit sum)."""
    return st.st_ctime_ns & ((1 << 64) - 1)
