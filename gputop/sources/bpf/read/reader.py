"""One reading of the BPF source: every process record with its kernels (records.py), the last
records of exited processes, the processes listed without a record, the source's status, what was
dropped, and gputop's own cost (selfcost.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from gputop.model import SourceStatus
from gputop.sources.bpf.attach.attaching import Attacher
from gputop.sources.bpf.common.abi import DROP_KINDS, HIT_ENTRY, HIT_RETURN
from gputop.sources.bpf.cost.selfcost import SelfCost
from gputop.sources.bpf.lifecycle.events import Events
from gputop.sources.bpf.lifecycle.procid import pid_of
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.lifecycle.shares import Shares, tenant_label
from gputop.sources.bpf.program.program import Program
from gputop.sources.bpf.read.launchslots import LaunchSlots
from gputop.sources.bpf.read.readings import BpfReading, IdleProc, RawProc
from gputop.sources.bpf.read.records import Records
from gputop.sources.bpf.read.retire import Retired


class Reader:
    def __init__(self, program: Program, procs: ProcTable, attacher: Attacher, records: Records,
                 events: Events, slots: LaunchSlots, cost: SelfCost, shares: Shares, retired: Retired) -> None:
        self._program = program
        self._procs = procs          # what is kept of each process (proctable.py): its methods change it
        self._attacher = attacher
        self._records = records
        self._events = events
        self._slots = slots
        self._cost = cost
        self._shares = shares
        self._retired = retired      # records of idle processes kept in user space (retire.py)
        self.gaps: str | None = None         # why some processes may go untraced (capabilities)
        self.snapshots = 0                       # reads so far (the trap calibration waits for one)

    def hit_totals(self) -> tuple[int, int] | None:
        """Runs of gputop's uprobe programs since they were loaded: (at entry, at return), exact; None
        for a program without the counters (bench/probe_cost.py --before an older one)."""
        try:
            hits = self._program.table("hits")
        except KeyError:
            return None
        return (sum(int(c.runs) for c in hits.getvalue(hits.Key(HIT_ENTRY))),
                sum(int(c.runs) for c in hits.getvalue(hits.Key(HIT_RETURN))))

    def dropped(self) -> dict[str, int]:
        table = self._program.table("dropped")
        out = {name: int(table[table.Key(i)].value) for i, name in enumerate(DROP_KINDS)}
        out["code"] = self._attacher.code.dropped
        out["objects"] = self._attacher.dropped()
        return out

    def dropped_by_tenant(self) -> dict[str, dict[str, int]]:
        """What each tenant that lost any lost, by kind: ``events`` over its share of the ring
        (bpf/life.bpf.h), entries of each table class (abi.SHARE_KINDS) over its share of the table
        or to a full one (bpf/share.bpf.h), ``code``: mappings whose code ranges its share of the code
        trie (coderanges.py) had no room for, and ``objects``: objects its share of the probes'
        descriptors had no room for (attaching.py). Tenants are ``uid:N``, or ``cgroup:ID`` for uid 0."""
        out = self._shares.lost()
        # filled by user space: the code trie, and the probes' descriptors
        for kind, lost in (("code", self._attacher.code.lost), ("objects", self._attacher.lost)):
            for tenant, n in lost.items():
                mine = out.setdefault(tenant_label(tenant), {})
                mine[kind] = mine.get(kind, 0) + n
        for k, v in self._program.table("tenant_events").items():
            if v.dropped:
                mine = out.setdefault(tenant_label((int(k.uid), int(k.cgroup))), {})
                mine["events"] = mine.get("events", 0) + int(v.dropped)
        return out

    def _inflight_sync_ns(self) -> dict[int, int]:
        """Time spent so far in syncs that have not returned, by process (a hung sync shows)."""
        now = time.monotonic_ns()            # CLOCK_MONOTONIC, as bpf_ktime_get_ns
        out: dict[int, int] = {}
        for k, v in self._program.table("pend_sync").items():
            if v.depth > 0 and 0 < v.ts <= now:
                tgid = int(k.value) >> 32
                out[tgid] = out.get(tgid, 0) + now - int(v.ts)
        return out

    def read(self) -> BpfReading:
        table, kept = self._program.table, self._procs
        self._records.begin_refresh()
        procs: dict[int, RawProc] = {}
        # the records before their kernels: a record that says its process exited was read after
        # its every launch, so the kernel entries read next hold them all (the other way round, a
        # process exiting in between showed exited with part of its launches, then was forgotten)
        items = list(table("procs").items())
        records = self._one_record_per_pid(self._retired.items(items))
        kernels = self._slots.counts(table("kernels").items())
        inflight = self._inflight_sync_ns()
        reported: dict[int, int] = {}
        for me, v in records.items():
            pid = pid_of(me)
            reported[pid] = me
            procs[pid] = self._records.raw(me, v, kernels, inflight.get(pid, 0) if not v.exited_ns else 0)
        # the last records of processes that exited (their PID may already be a new process's,
        # whose record is reported once the old one was shown: forget())
        kept.report(reported)
        procs.update(kept.final)
        procs = self._records.with_graph_kernels(procs)
        self._retired.retire(items, kernels)        # records short: idle ones go (after this reading)
        drops = self.dropped()
        dropped = sum(drops.values())
        me = os.getpid()
        idle = {pid: IdleProc(pid, pid in kept.idle_exited, pid not in kept.partial)
                for pid in sorted(kept.cuda_pids) if pid not in procs and pid != me}
        kept.idle_exits_reported()
        up = self._attacher.uprobes
        failed = up.failed if up else []
        reason = (f"{len(failed)} probe(s) did not attach, first: {failed[0]}" if failed else self.gaps)
        headers = self._program.headers
        probes = up.probes if up is not None else 0
        status = SourceStatus("ok", reason, objects=len(self._attacher.objects), probes=probes, dropped=dropped,
                              dropped_by_tenant=self.dropped_by_tenant() or None,
                              headers=headers.detail if headers else None,
                              attach=up.mode if up else None, probes_failed=len(up.failed) if up else None)
        self.snapshots += 1
        hits = self.hit_totals()
        cost = self._cost
        if hits is not None:
            cost.observe(*hits)
        return BpfReading(status, procs, self._program.uvm_cpu_faults, cost.ns_per_s, cost.hits_per_s,
                          cost_ns_per_s=cost.cost_ns_per_s,
                          trap_ns=cost.trap.trap_ns if cost.trap else None,
                          stats_age_s=cost.stats_age_s(),
                          idle=idle, procs_dropped=drops["procs"], execed=self._events.take_execed())

    def _one_record_per_pid(self, items: Iterable[tuple[Any, Any]]) -> dict[int, Any]:
        """The record each PID's row shows now, by identity: a PID whose exited process's record is
        still to be shown (a final, or a record whose exit event is not handled yet) shows that one;
        the new process under it is shown once that one was (forget())."""
        best: dict[int, tuple[int, Any]] = {}
        for k, v in items:
            me = int(k.value)
            pid = pid_of(me)
            if pid in self._procs.final:
                continue
            have = best.get(pid)
            # the exited one first, the earliest exit of several
            if have is None or (v.exited_ns and (not have[1].exited_ns or v.exited_ns < have[1].exited_ns)):
                best[pid] = (me, v)
        return dict(best.values())

    def baseline(self) -> dict[int, RawProc]:
        """Every process record as it stands, without names and without touching what read()
        reports once: where the first interval starts (counts made while the probes were being
        attached belong to the totals, not to an interval of known length)."""
        table = self._program.table
        records = self._one_record_per_pid(self._retired.items(table("procs").items()))
        kernels = self._slots.counts(table("kernels").items())
        return {pid_of(me): self._records.raw(me, v, kernels, 0, named=False) for me, v in records.items()}
