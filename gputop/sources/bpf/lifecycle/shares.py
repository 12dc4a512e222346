"""Each tenant's share of the BPF tables (bpf/share.bpf.h; docs/SECURITY.md, "Fair share"): the BPF side
charges every entry a process makes to the process's owner (its tenant: a uid, or a cgroup for uid 0) and
refuses a tenant's entries over its share. User space deletes the entries of processes that are gone;
what it deleted is given back here, to the tenant they were charged to (``tenant_credit``: its one
writer), so the tenant's room comes back. And what each tenant lost, to its share or a full table."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from gputop.sources import host
from gputop.sources.bpf.common.abi import SHARE_KINDS
from gputop.sources.bpf.lifecycle.procid import Doomed

#: a tenant as the BPF side keys it: (uid, cgroup id; 0 for a uid other than 0)
Tenant = tuple[int, int]


def tenant_label(tenant: Tenant) -> str:
    """``uid:N``, or ``cgroup:ID`` for uid 0 (containers run as root, a pod each)."""
    uid, cgroup = tenant
    return f"cgroup:{cgroup}" if uid == 0 else f"uid:{uid}"


#: what is read of /proc/PID/status and /proc/PID/cgroup (both a few hundred bytes; a cgroup path is at
#: most PATH_MAX)
_PROC_READ = 1 << 16


def _read_proc(pid: int, name: str) -> str | None:
    try:
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, _PROC_READ).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def tenant_of_pid(pid: int) -> Tenant | None:
    """The tenant the BPF side charges a process's entries to (``tenant_of_current``): its real uid, and
    for uid 0 its cgroup's id (the cgroup2 directory's inode number: the kernfs id that
    bpf_get_current_cgroup_id gives; 0 where no cgroup2 path can be walked); None when the process is gone."""
    status = _read_proc(pid, "status")
    uid = next((ln.split()[1] for ln in (status or "").splitlines() if ln.startswith("Uid:") and len(ln.split()) > 1),
               None)
    if uid is None or not uid.isdigit():
        return None
    if int(uid) != 0:
        return int(uid), 0
    components = host.cgroup_components(_read_proc(pid, "cgroup") or "")
    dirs = host.cgroup_dirs(components) if components is not None else None
    # no cgroup2 to walk (a cgroup v1 host, a cgroup gone meanwhile): root's share as one tenant
    return (0, dirs[-1].st_ino if dirs else 0)


class Shares:
    def __init__(self, table: Callable[[str], Any]) -> None:
        self._table = table
        self._released: dict[Tenant, list[int]] = {}       # what was given back, by tenant and class
        #: each tenant's losses as last read, and those of tenants the LRU table forgot since (counters
        #: never go down: a tenant forgotten and back again adds to what it had lost)
        self._lost_seen: dict[Tenant, list[int]] = {}
        self._lost_gone: dict[Tenant, list[int]] = {}

    def owners(self, doomed: Doomed) -> dict[int, Tenant]:
        """The owner of each process ``doomed`` names that has one (identity -> tenant): read before
        their entries are deleted, to give them back to it."""
        table = self._table("owners")
        out: dict[int, Tenant] = {}
        for me in doomed.idents:
            v = table.get(table.Key(me))
            if v is not None:
                out[me] = (int(v.uid), int(v.cgroup))
        if doomed.pids:
            for k, v in table.items():
                if doomed.hit(int(k.value)):
                    out[int(k.value)] = (int(v.uid), int(v.cgroup))
        return out

    def give_back(self, owners: Mapping[int, Tenant], deleted: Mapping[int, int], kind: str) -> None:
        """Entries of class ``kind`` (``SHARE_KINDS``) user space deleted, by process identity, given back
        to their owners (an identity without one made none: nothing was charged)."""
        by_tenant: Counter[Tenant] = Counter()
        for me, n in deleted.items():
            tenant = owners.get(me)
            if tenant is not None and n:
                by_tenant[tenant] += n
        if not by_tenant:
            return
        i = SHARE_KINDS.index(kind)
        table = self._table("tenant_credit")
        for tenant, n in by_tenant.items():
            released = self._released.setdefault(tenant, [0] * len(SHARE_KINDS))
            released[i] += n
            key = table.Key(uid=tenant[0], cgroup=tenant[1])
            leaf = table.Leaf()
            for j, v in enumerate(released):
                leaf.released[j] = v
            try:
                table[key] = leaf
            except Exception:           # full: the credits of tenants the LRU forgot go, once more
                self._forget_gone_tenants()
                with contextlib.suppress(Exception):    # still full: it seems to hold more (its loss)
                    table[key] = leaf

    def forget_owners(self, owners: Mapping[int, Tenant]) -> None:
        """Delete the owners entries of processes whose entries are all gone, and give them back."""
        table = self._table("owners")
        deleted: dict[int, int] = {}
        for me in owners:
            try:
                del table[table.Key(me)]
            except KeyError:
                continue
            deleted[me] = 1
        self.give_back(owners, deleted, "owners")

    def lost(self) -> dict[str, dict[str, int]]:
        """What each tenant that lost any lost, by class: calls whose entry a full table or the tenant's
        share had no room for (bpf/share.bpf.h, ``lose``). Tenants the BPF side's LRU table forgot keep
        what they had lost; their credit goes with them (a tenant back again starts from nothing held)."""
        now = {(int(k.uid), int(k.cgroup)): [int(x) for x in v.lost] for k, v in self._table("tenant_held").items()}
        for tenant in [t for t in self._lost_seen if t not in now]:
            gone = self._lost_gone.setdefault(tenant, [0] * len(SHARE_KINDS))
            for i, n in enumerate(self._lost_seen.pop(tenant)):
                gone[i] += n
        self._lost_seen.update(now)
        self._forget_gone_tenants(set(now))
        out: dict[str, dict[str, int]] = {}
        for tenant in {*now, *self._lost_gone}:
            zero = [0] * len(SHARE_KINDS)
            counts = [a + b for a, b in zip(now.get(tenant, zero), self._lost_gone.get(tenant, zero))]
            kinds = {kind: n for kind, n in zip(SHARE_KINDS, counts) if n}
            if kinds:
                mine = out.setdefault(tenant_label(tenant), {})
                for kind, n in kinds.items():
                    mine[kind] = mine.get(kind, 0) + n
        return out

    def _forget_gone_tenants(self, present: set[Tenant] | None = None) -> None:
        """The credit of tenants the BPF side's LRU table forgot goes too (back, one starts from nothing)."""
        if present is None:
            present = {(int(k.uid), int(k.cgroup)) for k in self._table("tenant_held")}
        credit = self._table("tenant_credit")
        for k in [k for k in credit if (int(k.uid), int(k.cgroup)) not in present]:
            credit.pop(k, None)
            self._released.pop((int(k.uid), int(k.cgroup)), None)

    def held(self) -> dict[str, dict[str, int]]:
        """What each tenant holds now, by class (charged by the BPF side less what was given back)."""
        out: dict[str, dict[str, int]] = {}
        for k, v in self._table("tenant_held").items():
            tenant = (int(k.uid), int(k.cgroup))
            released = self._released.get(tenant, [0] * len(SHARE_KINDS))
            counts = {kind: int(v.held[i]) - released[i] for i, kind in enumerate(SHARE_KINDS)}
            if any(counts.values()):
                out[tenant_label(tenant)] = {k_: n for k_, n in counts.items() if n}
        return out
