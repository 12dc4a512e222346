"""PID generations as user space follows them: which process, of those a PID has named, the state
user space holds under each PID belongs to (a process on the BPF side is (tgid, generation):
procid.py; docs/collector.md, "Bounded maps and process exit")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gputop.sources.bpf.lifecycle.procid import Doomed, PidGens, gen_of, ident, pid_of


class Generations:
    def __init__(self, gens: PidGens) -> None:
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

    def hold(self, pid: int) -> None:
        """User space now holds the maps of ``pid`` the scan under way read."""
        self.held[pid] = self.scanned(pid)

    def release(self, pid: int, doomed: Doomed) -> bool:
        """Let go of what user space holds under ``pid`` for the processes ``doomed`` names; False (and
        nothing let go) when what it holds is a newer process's, announced by its events: it stays."""
        gen = self.held.get(pid)
        if gen is not None and not doomed.hit(ident(pid, gen)) and self.announced.get(pid) == gen:
            return False
        self.announced.pop(pid, None)
        self.held.pop(pid, None)
        return True

    def close(self) -> None:
        self.gens.close()
