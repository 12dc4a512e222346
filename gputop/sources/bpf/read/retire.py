"""Idle processes never push out active ones (issue 40; docs/SECURITY.md, "Fair share"). A process record
(``procs``) stays in the kernel for the process's whole life, and a tenant's share of the records, or the
table, can fill with processes that launched once and sleep (the review: 4,200 of them left a victim
without a record). So when records run short — a tenant holds RETIRE_AT of its share, or the table
RETIRE_AT of its entries — user space retires the records that have not changed for RETIRE_IDLE_S:
it keeps each one's counts here (its base) and deletes it from the kernel, giving its room back. The
process stays listed with its counts; if it calls again, the BPF side makes it a new record from zero,
and every reading adds the base to it (each counter of ``proc_t`` is a sum, so base + new is what one
record would hold; ``exited_ns`` is the new one's)."""

from __future__ import annotations

import ctypes
import errno
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gputop.sources.bpf.lifecycle.procid import Doomed
from gputop.sources.bpf.lifecycle.shares import Shares, tenant_label
from gputop.sources.bpf.program.program import load_bcc
from gputop.sources.bpf.read.launchslots import SlotCounts

#: a record unchanged this long (its counters and its kernels' launches) is idle
RETIRE_IDLE_S = 30.0
#: records are retired once a tenant holds this part of its share of them, or the table this part of its size
RETIRE_AT = 0.75


def _add(base: Any, new: Any) -> Any:
    """A record that holds base's counts plus new's (struct proc_t as compiled: every member a sum, but
    ``exited_ns``, new's, ``comm``, base's, and the NCCL communicator's size and rank, levels: the larger
    communicator's, new's of equal ones)."""
    out = type(new).from_buffer_copy(new)
    for name, ctype in type(new)._fields_:
        if name == "comm":
            ctypes.memmove(ctypes.addressof(out) + getattr(type(new), name).offset,
                           ctypes.addressof(base) + getattr(type(new), name).offset, ctypes.sizeof(ctype))
        elif name in ("nccl_nranks", "nccl_rank"):     # levels: the larger communicator's (ties: the newer)
            if base.nccl_nranks > new.nccl_nranks:
                setattr(out, name, getattr(base, name))
        elif name != "exited_ns":
            have, more = getattr(out, name), getattr(base, name)
            if isinstance(have, int):
                setattr(out, name, have + more)
            else:
                for i in range(len(have)):
                    have[i] += more[i]
    return out


def _take(table: Any, me: int) -> Any | None:
    """Read and delete process ``me``'s record at once (BPF_MAP_LOOKUP_AND_DELETE_ELEM, Linux 5.14+: no
    call it makes meanwhile is lost); older kernels read, then delete. None when it has none."""
    key, leaf = table.Key(me), table.Leaf()
    lib = load_bcc().lib
    if hasattr(lib, "bpf_lookup_and_delete"):
        if lib.bpf_lookup_and_delete(table.map_fd, ctypes.byref(key), ctypes.byref(leaf)) == 0:
            return leaf
        if ctypes.get_errno() == errno.ENOENT:
            return None
    v = table.get(key)
    if v is None:
        return None
    try:
        del table[key]
    except KeyError:
        return None
    return v


class Retired:
    def __init__(self, table: Callable[[str], Any], shares: Shares, procs_share: int, procs_size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._table = table
        self._shares = shares
        self._share = procs_share            # records one tenant may hold (bpf/share.bpf.h)
        self._size = procs_size
        self._clock = clock
        self.bases: dict[int, Any] = {}      # retired records by process identity
        #: each record's last signature (its bytes and its kernels' launches) and since when it is that
        self._seen: dict[int, tuple[int, float]] = {}
        self.retired = 0                     # records retired since start

    def items(self, items: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
        """The ``procs`` table's (key, record) pairs with each retired record's base added to its new
        record, and the retired processes without a new one as their base."""
        table = self._table("procs")
        seen = set()
        for k, v in items:
            me = int(k.value)
            seen.add(me)
            base = self.bases.get(me)
            yield k, (_add(base, v) if base is not None else v)
        for me, base in self.bases.items():
            if me not in seen:
                yield table.Key(me), base

    def record(self, me: int) -> Any | None:
        """Process ``me``'s whole record (its base and its new record in the kernel), None without either."""
        table = self._table("procs")
        v = table.get(table.Key(me))
        base = self.bases.get(me)
        if base is None or v is None:
            return v if v is not None else base
        return _add(base, v)

    def mark_exited(self, me: int) -> bool:
        """A retired process exited without a new record (no exit of a record told it): its base says so
        from now on. False if it was not retired."""
        base = self.bases.get(me)
        if base is None:
            return False
        if not base.exited_ns:
            base.exited_ns = time.monotonic_ns()
        return True

    def forget(self, doomed: Doomed) -> None:
        for me in [me for me in self.bases if doomed.hit(me)]:
            del self.bases[me]
        for me in [me for me in self._seen if doomed.hit(me)]:
            del self._seen[me]

    def retire(self, items: Iterable[tuple[Any, Any]], kernels: SlotCounts) -> None:
        """After a reading of the ``procs`` table (its raw pairs): note which records changed; when records
        run short, retire the idle ones of the tenants short of them (all tenants when the table is)."""
        now = self._clock()
        raw = {int(k.value): v for k, v in items}
        for me in [me for me in self._seen if me not in raw]:
            del self._seen[me]
        for me, v in raw.items():
            launches = sum(int(kv.launches) for _addr, kv in kernels.kernels.get(me, ()))
            sig = hash((bytes(v), launches))
            have = self._seen.get(me)
            if have is None or have[0] != sig:
                self._seen[me] = (sig, now)
        held = {t: kinds.get("procs", 0) for t, kinds in self._shares.held().items()}
        short = {t for t, n in held.items() if n >= self._share * RETIRE_AT}
        if not short and len(raw) < self._size * RETIRE_AT:
            return
        idle = [me for me, (_sig, since) in self._seen.items()
                if now - since >= RETIRE_IDLE_S and not raw[me].exited_ns]
        if not idle:
            return
        everyone = len(raw) >= self._size * RETIRE_AT
        owners = self._shares.owners(Doomed(frozenset(idle)))
        table = self._table("procs")
        deleted: dict[int, int] = {}
        for me in idle:
            if not everyone and (me not in owners or tenant_label(owners[me]) not in short):
                continue
            v = _take(table, me)
            if v is None:
                continue
            base = self.bases.get(me)
            self.bases[me] = _add(base, v) if base is not None else type(v).from_buffer_copy(v)
            deleted[me] = 1
            del self._seen[me]
        self.retired += len(deleted)
        self._shares.give_back(owners, deleted, "procs")
