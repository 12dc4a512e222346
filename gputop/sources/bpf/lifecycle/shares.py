"""Each tenant's share of the BPF tables (bpf/share.bpf.h; docs/SECURITY.md, "Fair share"): the BPF side
charges every entry a process makes to the process's owner (its tenant: a uid, or a cgroup for uid 0) and
refuses a tenant's entries over its share. User space deletes the entries of processes that are gone;
what it deleted is given back here, to the tenant they were charged to (``tenant_credit``: its one
writer), so the tenant's room comes back. And what each tenant lost, to its share or a full table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from gputop.sources.bpf.common.abi import SHARE_KINDS
from gputop.sources.bpf.lifecycle.procid import Doomed

#: a tenant as the BPF side keys it: (uid, cgroup id; 0 for a uid other than 0)
Tenant = tuple[int, int]


def tenant_label(tenant: Tenant) -> str:
    """``uid:N``, or ``cgroup:ID`` for uid 0 (containers run as root, a pod each)."""
    uid, cgroup = tenant
    return f"cgroup:{cgroup}" if uid == 0 else f"uid:{uid}"


class Shares:
    def __init__(self, table: Callable[[str], Any]) -> None:
        self._table = table
        self._released: dict[Tenant, list[int]] = {}       # what was given back, by tenant and class

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
        share had no room for (bpf/share.bpf.h, ``lose``)."""
        out: dict[str, dict[str, int]] = {}
        for k, v in self._table("tenant_held").items():
            label = tenant_label((int(k.uid), int(k.cgroup)))
            for i, kind in enumerate(SHARE_KINDS):
                if v.lost[i]:
                    mine = out.setdefault(label, {})
                    mine[kind] = mine.get(kind, 0) + int(v.lost[i])
        return out

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
