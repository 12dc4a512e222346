"""The process table: every piece of per-process state user space keeps about the processes it
traces, by PID, in one owner. What the scans saw (maps, CUDA, partial, last scan), which process
(generation) that state belongs to (a process on the BPF side is (tgid, generation): procid.py), the
events pending (exits, execs, rescans), and processes leaving (last records until shown, the rows
the last read reported, exits without a record). The other parts read its fields and change them
only through its methods (docs/collector.md, "Bounded maps and process exit")."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.lifecycle.procid import Doomed, PidGens, gen_of, ident, pid_of
from gputop.sources.bpf.read.readings import RawProc

ObjectKey = tuple[int, int]     # (device, inode), as attaching.ObjectKey


class ProcTable:
    def __init__(self, gens: PidGens) -> None:
        # ---------------------------------------------------------------- what the scans saw
        self.maps: dict[int, list[discovery.Mapping]] = {}   # last known executable maps by pid
        self.cuda_pids: set[int] = set()         # processes whose known maps hold a probed object
        self.partial: set[int] = set()           # processes already running CUDA when gputop attached
        self.scanned_ns: dict[int, int] = {}     # CLOCK_MONOTONIC ns of each process's last scan
        # ---------------------------------------------------------------- generations
        self.gens = gens                          # each PID's generation on the BPF side (procid.py)
        #: the newest generation each PID's events or records showed (procid): a newer one than an
        #: exited identity's means the PID is a new process's already (kept while one batch of events
        #: is handled: only an exit handled with those events compares with them)
        self.newest: dict[int, int] = {}
        #: the generation whose maps and listing user space holds under each pid (the scans')
        self.held: dict[int, int] = {}
        #: PIDs user space still knows whose events came from a newer generation: a new process there
        #: (a late scan of a process already gone reads its PID's next generation, and announces none)
        self.announced: dict[int, int] = {}
        self._scan: Callable[[int], int] | None = None     # generations as the scan under way began
        # ---------------------------------------------------------------- events pending (events.py)
        #: processes to scan again, in the order asked (a dict: taken oldest first, RESCANS_AT_ONCE at a time)
        self.rescan: dict[int, None] = {}
        self.reimaged: set[int] = set()           # identities (procid) whose exec replaced their image
        self.execed: set[int] = set()             # processes that exec'd since the last take_execed()
        self.exited: set[int] = set()             # identities (procid) whose exit event came
        # ---------------------------------------------------------------- leaving (forgetting.py)
        self.final: dict[int, RawProc] = {}      # last records of exited processes, until shown
        #: the identity of the record each PID's row came from in the last read (forget() deletes that
        #: one), and of processes that exited without a record
        self.reported: dict[int, int] = {}
        self._idle_gen: dict[int, int] = {}
        #: processes with no record whose exit was seen: pid -> whether a read reported it yet
        self.idle_exited: dict[int, bool] = {}

    # -------------------------------------------------------------------- what the scans saw

    def users(self, key: ObjectKey) -> dict[int, list[discovery.Mapping]]:
        """The processes whose known maps hold the object ``key``, with their maps."""
        return {p: pm for p, pm in self.maps.items() if any((m.dev, m.inode) == key for m in pm)}

    def mapped(self) -> set[ObjectKey]:
        """Every object some known process maps."""
        return {(m.dev, m.inode) for pmaps in self.maps.values() for m in pmaps}

    def maps_of(self, pid: int) -> list[discovery.Mapping]:
        """The last known executable maps of ``pid`` ([] if none)."""
        return self.maps.get(pid, [])

    def saw_maps(self, maps: Mapping[int, list[discovery.Mapping]]) -> None:
        """These are the processes' executable maps now (a scan's, or a read of one process's)."""
        self.maps.update(maps)

    def mark_partial(self, pids: Iterable[int]) -> None:
        """``pids`` map an object just probed: they may have allocated before, their live bytes are unknown."""
        self.partial.update(pids)

    def update_cuda(self, pids: Iterable[int], objects: Mapping[ObjectKey, object]) -> None:
        """Whether each of ``pids`` maps a probed object (one of ``objects``), from its last known maps."""
        for pid in pids:
            if any((m.dev, m.inode) in objects for m in self.maps.get(pid, ())):
                self.cuda_pids.add(pid)
            else:
                self.cuda_pids.discard(pid)

    def scan_done(self, pid: int, before_ns: int) -> None:
        """The scan under way, begun at ``before_ns``, read the maps of ``pid``: user space holds them."""
        self.scanned_ns[pid] = before_ns
        self.held[pid] = self.scanned(pid)

    # -------------------------------------------------------------------- generations

    def now(self, pid: int) -> int:
        """The generation the BPF side gives ``pid`` now (0 for a program without generations)."""
        return self.gens.gen(pid)

    def seen(self, tgid: int, gen: int) -> None:
        """An event other than an exit came from (tgid, gen)."""
        self.newest[tgid] = gen
        if tgid in self.held and gen != self.held[tgid]:
            self.announced[tgid] = gen     # a new process under a PID user space still knows

    def reused(self, me: int) -> bool:
        """Whether the PID of the exited identity ``me`` is a new process's already (its events said so)."""
        return self.newest.get(pid_of(me), gen_of(me)) != gen_of(me)

    @contextmanager
    def scanning(self) -> Iterator[None]:
        """A scan under way: the generations as it began name what it reads."""
        self._scan = self.gens.snapshot()
        try:
            yield
        finally:
            self._scan = None

    def scanned(self, pid: int) -> int:
        """The generation of the process whose maps the scan under way read under ``pid``: its events'
        (they name it), else the PID's as the scan began (a process that exits while its maps are read
        moves its PID's on: its state must keep its own)."""
        gen = self.newest.get(pid)
        if gen is not None:
            return gen
        return self._scan(pid) if self._scan is not None else self.held.get(pid, self.now(pid))

    # -------------------------------------------------------------------- events pending

    def note_exit(self, me: int) -> None:
        self.exited.add(me)

    def note_rescan(self, pid: int) -> None:
        self.rescan.setdefault(pid)

    def note_exec(self, tgid: int, me: int, ts_ns: int) -> None:
        """Process ``me`` exec'd at ``ts_ns``: after its last scan, that replaced its image (one
        before it was seen did not)."""
        self.execed.add(tgid)
        if ts_ns > self.scanned_ns.get(tgid, 0):
            self.reimaged.add(me)

    def take_rescan(self, at_most: int | None = None) -> list[int]:
        """The processes to rescan, the longest waiting first: ``at_most`` of them (default all); the
        rest stay noted."""
        pids = list(itertools.islice(self.rescan, at_most))
        for pid in pids:
            del self.rescan[pid]
        return pids

    def take_reimaged(self) -> set[int]:
        reimaged, self.reimaged = self.reimaged, set()
        return reimaged

    def take_exited(self, only: Callable[[int], bool] | None = None) -> set[int]:
        """The exits noted and not taken yet (those ``only`` says, or all)."""
        taken = {me for me in self.exited if only is None or only(me)}
        self.exited -= taken
        return taken

    def take_execed(self) -> frozenset[int]:
        """The processes that exec'd since the last call."""
        execed, self.execed = frozenset(self.execed), set()
        return execed

    def events_handled(self) -> None:
        """A batch of events was handled: only an exit handled with those events compares with them."""
        self.newest.clear()

    # -------------------------------------------------------------------- leaving

    def keep_final(self, pid: int, raw: RawProc) -> None:
        """The last record of the process that exited under ``pid``, kept until shown."""
        self.final[pid] = raw

    def pop_final(self, pid: int) -> RawProc | None:
        """The last record kept under ``pid`` (shown now), gone from the table."""
        return self.final.pop(pid, None)

    def report(self, reported: dict[int, int]) -> None:
        """The identity of the record each PID's row came from in this read."""
        self.reported = reported

    def pop_reported(self, pid: int) -> int | None:
        return self.reported.pop(pid, None)

    def idle_exit(self, tgid: int, gen: int | None = None) -> None:
        """A process without a record exited (its exit event, of generation ``gen``; or a sweep found it
        gone): a read reports it exited before it goes."""
        self.idle_exited.setdefault(tgid, False)
        if gen is not None:
            self._idle_gen[tgid] = gen

    def idle_exit_pending(self, pid: int) -> bool:
        """Whether ``pid`` exited without a record and no read has reported it yet."""
        return not self.idle_exited.get(pid, True)

    def idle_exits_reported(self) -> None:
        """A read reported every exit without a record noted so far."""
        for pid in self.idle_exited:
            self.idle_exited[pid] = True

    def idle_ident(self, pid: int) -> int | None:
        """The identity of the process without a record that exited under ``pid``, if its exit event came."""
        gen = self._idle_gen.get(pid)
        return None if gen is None else ident(pid, gen)

    def release(self, pid: int, doomed: Doomed) -> bool:
        """Let go of what user space holds under ``pid`` for the processes ``doomed`` names; False (and
        nothing let go) when what it holds is a newer process's, announced by its events: it stays."""
        gen = self.held.get(pid)
        if gen is not None and not doomed.hit(ident(pid, gen)) and self.announced.get(pid) == gen:
            return False
        self.announced.pop(pid, None)
        self.held.pop(pid, None)
        self.maps.pop(pid, None)
        self.cuda_pids.discard(pid)
        self.scanned_ns.pop(pid, None)
        self.partial.discard(pid)
        self.idle_exited.pop(pid, None)
        self._idle_gen.pop(pid, None)
        return True

    def close(self) -> None:
        self.gens.close()
