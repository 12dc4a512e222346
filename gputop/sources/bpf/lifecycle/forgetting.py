"""Processes leaving: the last records of exited processes (kept until shown), what a process's exec
takes away, the sweep of dead processes that left no record, and the deletion of everything the
BPF side and user space hold about a process, by identity (tgid, generation: procid.py) so that a
new process under the same PID keeps its own (docs/collector.md, "Bounded maps and process exit")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.attach.attaching import Attacher
from gputop.sources.bpf.common.abi import NSYNC, SHARE_OF
from gputop.sources.bpf.lifecycle.procid import Doomed, gen_of, ident, pid_of
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.lifecycle.purge import delete_by_pid, delete_ranges
from gputop.sources.bpf.lifecycle.shares import Shares, Tenant
from gputop.sources.bpf.names.naming import Naming
from gputop.sources.bpf.pystacks.sites import CallSites
from gputop.sources.bpf.read.graphs import TABLES as GRAPH_TABLES
from gputop.sources.bpf.read.graphs import GraphKernels
from gputop.sources.bpf.read.launchslots import LaunchSlots
from gputop.sources.bpf.read.records import Records
from gputop.sources.bpf.read.retire import Retired


class Forgetting:
    def __init__(self, table: Callable[[str], Any], procs: ProcTable, attacher: Attacher,
                 names: Naming, records: Records, slots: LaunchSlots, graph_kernels: GraphKernels,
                 shares: Shares, retired: Retired, sites: CallSites) -> None:
        self._table = table
        self._procs = procs          # what is kept of each process (proctable.py): its methods change it
        self._attacher = attacher
        self._names = names
        self._records = records
        self._slots = slots
        self._graph_kernels = graph_kernels
        self._shares = shares        # what is deleted is given back to the tenant it was charged to
        self._retired = retired      # records of idle processes kept here (retire.py)
        self._sites = sites          # call sites: interpreters described, memory open (pystacks/sites.py)

    def take_final(self, idents: Iterable[int]) -> None:
        """At their exit: keep the last records of the processes ``idents`` (with their kernels'
        names) and delete everything the kernel holds about them. (A new process under one of these
        PIDs has its own generation: its counts never reached these.) A PID whose earlier final is
        still to be shown keeps this one in the kernel meanwhile: read() shows it next."""
        final = self._procs.final
        records: dict[int, Any] = {}
        for me in sorted(idents):
            if pid_of(me) in final or any(pid_of(r) == pid_of(me) for r in records):
                continue
            v = self._retired.record(me)        # the kernel's record, with what was retired of it
            if v is None:                       # shown and forgotten already
                continue
            records[me] = v
        if not records:
            return
        kernels = self._slots.counts(self._table("kernels").items(), set(records))
        self._records.read_sites(set(records))      # their last samples, before their entries go
        for me, v in records.items():           # their names are kept as read now, from their last maps
            with self._names.named_as_gone(me, self._procs.maps_of(pid_of(me))), self._names.namer.own_budget():
                self._procs.keep_final(pid_of(me), self._records.raw(me, v, kernels, 0))
        self._forget(Doomed(frozenset(records)))

    def exited_idle(self, tgid: int, gen: int) -> None:
        """A process without a record exited (its exit event): a listed one's BPF entries go now and
        its listing once a read reported it exited (then forget()); another's everything now."""
        me = ident(tgid, gen)
        if self._retired.mark_exited(me):       # its record was retired: shown exited with its counts
            self.take_final({me})
            return
        if tgid in self._procs.cuda_pids:
            self._delete_tables(Doomed(frozenset({me})))
            self._procs.idle_exit(tgid, gen)
        else:
            self._forget(Doomed(frozenset({me})))

    def forget_image(self, me: int) -> None:
        """After an exec of process ``me``: the code ranges, kernel names and call sites of the old program
        no longer apply to new launches. The kernels it launched keep their names, resolved now with the
        old image: the names the BPF side captured (at registration look-ups, at each kernel's first
        launch) and the old program's symbols (its maps as last scanned); not from the process's
        memory, which is the new program's now."""
        pid, only = pid_of(me), Doomed(frozenset({me}))
        owners = self._shares.owners(only)
        # The BPF side makes a process's owner before its first entry in any table keyed by process
        # (bpf/share.bpf.h, share_take), and only user space deletes it, once every entry is gone: a
        # process without one (every exec of a program that never called a probed function, most execs
        # on a host) has no kernels, names or call sites to walk the tables for. The walks are most of an
        # exec's cost (name_ptrs alone has a million buckets), and every exec on the host comes here.
        entries = me in owners
        if entries:
            self._delete_by_pid(only, owners, ("name_ptrs",))
        # names kept already (a scan saw the new image first: Naming.keep_unmapped) come first
        named = self._names.old_names(me, self._names.launched(me) if entries else [], self._procs.maps_of(pid))
        self._attacher.code.delete(only)
        if entries:
            self._delete_by_pid(only, owners, ("names", "aliases"))
        self._attacher.code.forget({pid})
        self._names.namer.forget(pid)
        self._names.namer.keep(pid, named)
        # its call sites start anew: the old program's interpreter, memory and code objects are gone
        if entries:
            self._delete_by_pid(only, owners, ("py_stacks", "py_sites"))
        self._table("py_procs").pop(self._table("py_procs").Key(me), None)
        self._sites.forget(only)

    def sweep(self) -> None:
        """Forget processes that are gone but left no record to report their exit."""
        procs = self._table("procs")
        alive = set(discovery.all_pids())
        gone_retired = {me for me in self._retired.bases if pid_of(me) not in alive}
        for me in gone_retired:                 # retired, and their exit not told
            self._retired.mark_exited(me)
        self.take_final(gone_retired)
        recorded = {pid_of(int(k.value)) for k in procs}
        dead = {pid for pid in self._attacher.code.pids() | set(self._procs.maps)
                if pid not in alive and pid not in recorded}
        # a listed process without a record is reported exited by one read before it goes
        for pid in dead & self._procs.cuda_pids:
            self._procs.idle_exit(pid)
        self._forget(Doomed(pids=frozenset(pid for pid in dead
                                           if not self._procs.idle_exit_pending(pid) and pid not in self._procs.final)))
        self._attacher.release_unmapped(self._procs.mapped())

    def forget(self, pids: Iterable[int]) -> None:
        """Remove every record of processes that are gone (after their last interval was shown): the
        process whose row the last read showed under each PID, not a new process that has it now."""
        idents, anyone = set(), set()
        for pid in pids:
            if self._procs.pop_final(pid) is not None:     # taken at exit: the kernel's entries went then
                continue
            me = self._procs.pop_reported(pid)
            if me is None:
                me = self._procs.idle_ident(pid)
            if me is None:
                anyone.add(pid)
            else:
                idents.add(me)
        self._forget(Doomed(frozenset(idents), frozenset(anyone)))

    def _forget(self, doomed: Doomed) -> None:
        if not doomed:
            return
        self._delete_tables(doomed)
        self._retired.forget(doomed)
        for pid in doomed.all_pids:
            self._names.drop_generation(pid)
            # (False: what user space knows of this PID is a newer process's, and it stays)
            self._procs.release(pid, doomed)

    def _delete_tables(self, doomed: Doomed) -> None:
        """Delete what the BPF side holds about processes that are gone, and give it back to the tenants
        it was charged to (their owners, read first and deleted last)."""
        gone = set(doomed.all_pids)
        self._graph_kernels.keep(gone, self._names.namer.name)
        owners = self._shares.owners(doomed)
        for name in ("procs", "tracked", "py_procs"):
            table = self._table(name)
            deleted: dict[int, int] = {}
            for me in doomed.idents:
                if table.pop(table.Key(me), None) is not None:
                    deleted[me] = 1
            if doomed.pids:
                for k in [k for k in table if pid_of(int(k.value)) in doomed.pids]:
                    if table.pop(k, None) is not None:
                        deleted[int(k.value)] = 1
            if name in SHARE_OF:
                self._shares.give_back(owners, deleted, SHARE_OF[name])
        # their launch slots, and captures they left under way
        self._shares.give_back(owners, self._slots.forget(doomed), SHARE_OF["capturing"])
        self._delete_by_pid(doomed, owners, ("kernels", "names", "name_ptrs", "aliases", "allocs", "joined",
                                             "capture_events", "py_stacks", "py_sites", *GRAPH_TABLES))
        self._sites.forget(doomed)
        self._shares.give_back(owners, self._delete_sync_hists(doomed), SHARE_OF["sync_hist"])
        self._shares.give_back(owners, delete_ranges(self._table("ranges"), doomed), SHARE_OF["ranges"])
        self._shares.forget_owners(owners)
        self._attacher.code.delete(doomed)
        self._attacher.code.forget(gone)
        for pid in gone:
            self._names.namer.forget(pid)

    def _delete_sync_hists(self, doomed: Doomed) -> Counter[int]:
        """A process's sync latency histograms: their keys are known (one per API), so deleted by key; a
        walk (2 KB a value) only for PIDs whose generation is not known."""
        table = self._table("sync_hist")
        deleted: Counter[int] = Counter()
        for me in doomed.idents:
            for api in range(NSYNC):
                if table.pop(table.Key(pid_of(me), gen_of(me), api), None) is not None:
                    deleted[me] += 1
        if doomed.pids:
            deleted.update(delete_by_pid(table, Doomed(frozenset(), doomed.pids)))
        return deleted

    def _delete_by_pid(self, doomed: Doomed, owners: dict[int, Tenant], tables: tuple[str, ...]) -> None:
        for name in tables:
            deleted = delete_by_pid(self._table(name), doomed)
            kind = SHARE_OF.get(name)
            if kind is not None:
                self._shares.give_back(owners, deleted, kind)
