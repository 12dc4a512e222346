"""Which processes get series of their own (``--max-processes``), and what the others add up to.

A churn of 100 short CUDA processes a second, each kept ``--exited-grace`` (300 s) after it exited and
nothing capped by default, made 675,405 series, a 58.6 MB ``/metrics`` and a 649 MB exporter, over the
DaemonSet's 512 Mi (issue 40). So at most ``cap`` processes have series of their own (default
MAX_PROCESSES: about 150 series each, 37,000 in all):

- a process is admitted when it first appears, the busiest of the newcomers first, while there is
  room; an exited process keeps its series while they fit: a newcomer that needs room takes the slot
  of the process that exited first (its series end, as they would after ``--exited-grace``);
- admission is sticky both ways: an admitted process keeps its series until it leaves, and one that
  found no room never gets its own (a counter that moved from a sum to a series of its own would go
  down in the sum). The processes without series are summed per container in a row of their own
  (label ``pid=""``) whose counters never go down: an exited one's totals stay in its container's sum
  (``aggregate.Containers``), kept ``--exited-grace`` after the container's last process went.

The collector thread calls ``update`` with each snapshot; ``admitted()`` and ``others`` are what a scrape
exports, replaced whole at each update (a scrape reads them under the collector's lock).
"""

from __future__ import annotations

from collections.abc import Sequence

from gputop.exporter.aggregate import ContainerRow, Containers, same_process
from gputop.model import ProcSample

#: ``--max-processes``' default: processes with series of their own
MAX_PROCESSES = 256


class Admission:
    def __init__(self, cap: int, grace_s: float) -> None:
        self.cap = cap
        self.grace_s = grace_s
        #: pid -> (latest sample, when it was first seen exited or None): the processes with series
        self._in: dict[int, tuple[ProcSample, float | None]] = {}
        #: the admitted processes that exited, by PID, the first to exit first (the next to make room)
        self._exited: dict[int, float] = {}
        #: pid -> latest sample: running processes without series of their own (summed in ``others``)
        self._out: dict[int, ProcSample] = {}
        self._sums = Containers(grace_s)
        self._admitted: list[tuple[ProcSample, float | None]] = []
        self._untraced: list[ProcSample] = []
        self.others: list[ContainerRow] = []

    def admitted(self, now: float) -> list[ProcSample]:
        """The processes with series at ``now``, the busiest first: an exited one until the grace period
        ends, even between updates; then the running ones without a record (gauges only: NVML's), but
        for those of a PID admitted and running."""
        traced = [p for p, exited_at in self._admitted if exited_at is None or now - exited_at <= self.grace_s]
        running = {p.pid for p in traced if p.state != "exited"}
        return traced + [p for p in self._untraced if p.pid not in running]

    @property
    def omitted(self) -> int:
        """Processes running now without series of their own."""
        return len(self._out)

    def update(self, procs: Sequence[ProcSample], now: float) -> None:
        listed = {p.pid: p for p in procs if p.total is not None}
        # running processes without a record (NVML's: GPU memory, utilisation): gauges only, the GPUs' few
        self._untraced = [p for p in procs if p.total is None and p.state != "exited"][:self.cap]
        self._follow_admitted(listed, now)
        ended = self._follow_omitted(listed, now)
        newcomers = sorted((p for pid, p in listed.items()
                            if pid not in self._in and pid not in self._out and pid not in ended),
                           key=lambda p: (-(p.total.launches or 0) if p.total else 0, p.pid))
        for p in newcomers:
            if len(self._in) >= self.cap and not self._make_room():
                self._leave_out(p, now)
            else:
                self._admit(p.pid, p, now if p.state == "exited" else None)
        self._admitted = sorted(self._in.values(), key=lambda pt: (-(pt[0].total.launches or 0) if pt[0].total
                                                                   else 1, pt[0].pid))
        self.others = self._sums.rows(self._out.values(), now)

    def _follow_admitted(self, listed: dict[int, ProcSample], now: float) -> None:
        """The admitted processes' latest samples; those gone past the grace period, or vanished, or
        whose PID a new process has, leave."""
        for pid, (old, exited_at) in list(self._in.items()):
            new = listed.get(pid)
            if new is not None and same_process(old, new):
                self._admit(pid, new, exited_at if exited_at is not None or new.state != "exited" else now)
            elif new is None and exited_at is not None and now - exited_at <= self.grace_s:
                continue                            # exited and no longer listed: kept for the grace period
            else:
                self._let_go(pid)                   # a new process has the PID (it is a newcomer), or vanished

    def _admit(self, pid: int, p: ProcSample, exited_at: float | None) -> None:
        self._in[pid] = (p, exited_at)
        if exited_at is not None:
            self._exited.setdefault(pid, exited_at)

    def _let_go(self, pid: int) -> None:
        del self._in[pid]
        self._exited.pop(pid, None)

    def _follow_omitted(self, listed: dict[int, ProcSample], now: float) -> set[int]:
        """The omitted processes' latest samples; one that exited (or vanished, or whose PID a new process
        has) leaves its last totals to its container's sum. Returns the PIDs of those listed exited (not
        newcomers: their totals are in the sum)."""
        ended: set[int] = set()
        for pid, old in list(self._out.items()):
            new = listed.get(pid)
            same = new is not None and same_process(old, new)
            if same and new is not None and new.state != "exited":
                self._out[pid] = new
                continue
            del self._out[pid]
            self._sums.retire(new if same and new is not None else old, now)
            if same:
                ended.add(pid)
        return ended

    def _leave_out(self, p: ProcSample, now: float) -> None:
        if p.state == "exited":
            self._sums.retire(p, now)
        else:
            self._out[p.pid] = p

    def _make_room(self) -> bool:
        """Let the admitted process that exited first go; False when every admitted one is running."""
        first = next(iter(self._exited), None)
        if first is None:
            return False
        self._let_go(first)
        return True
