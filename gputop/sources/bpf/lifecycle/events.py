"""The ring buffer's events (exec, mmap, fork, exit, and files the BPF side could not classify) and
what they start once a poll has drained them: the last records of exited processes, an exec's old
image forgotten, rescans of the processes named, the unknown files reached, objects whose reads
finished probed, and every RESCAN_S a full rescan and a sweep (events can be lost).

Bounded against tenants that produce events faster than they can be handled (issue 40, docs/SECURITY.md
"Fair share"): the BPF side coalesces them and gives each tenant a share (bpf/life.bpf.h); here a poll
takes at most DRAIN_AT_ONCE events (the rest wait on the ring, which drops what it has no room for)
and a handle() rescans at most RESCANS_AT_ONCE processes, the longest waiting first. A rescan asked
is taken off the BPF side's rescan_pending before the process's maps are read, so that a mapping
made after the read asks again. Events lost on the BPF side bring the next full rescan forward.

Between events the collector sleeps until ``idle_s`` (no wake-up that finds nothing to do: issue 38
item 7): the next full rescan, at most MAX_IDLE_S (how often the BPF side's count of events lost is
read), POLL_S while a rescan, an unknown file or an object's read is still pending."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from typing import Any

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.attach.attaching import Attacher, ObjectKey
from gputop.sources.bpf.attach.scanning import Scanner
from gputop.sources.bpf.common.abi import (
    DROP_KINDS,
    EV_EXEC,
    EV_EXIT,
    EV_EXIT_IDLE,
    EV_FILE,
    EV_FORK,
    EV_MMAP,
    PATH_DEPTH,
    PATH_NAME,
)
from gputop.sources.bpf.lifecycle.forgetting import Forgetting
from gputop.sources.bpf.lifecycle.procid import ident, pid_of
from gputop.sources.bpf.lifecycle.proctable import ProcTable

RESCAN_S = 10.0       # full rescan and sweep of dead processes, besides the exec/mmap/fork events
EARLY_RESCAN_S = 1.0  # a file that a gone process mapped and no path reaches, events lost: full rescan this soon
DRAIN_AT_ONCE = 1024  # events taken by one poll
RESCANS_AT_ONCE = 64  # processes rescanned by one handle()
POLL_S = 0.2          # the longest wait while work is pending (rescans beyond RESCANS_AT_ONCE, objects' reads)
MAX_IDLE_S = EARLY_RESCAN_S  # the longest wait without events: the count of events lost is read this often


class _Event(ctypes.Structure):
    """bpf/gputop.h's event_t."""
    _fields_ = (("ts", ctypes.c_uint64), ("tgid", ctypes.c_uint32), ("type", ctypes.c_uint16),
                ("gen", ctypes.c_uint16))


class _FileEvent(ctypes.Structure):
    """bpf/gputop.h's file_event_t (type EV_FILE)."""
    _fields_ = (("h", _Event), ("dev", ctypes.c_uint64), ("ino", ctypes.c_uint64), ("ctime", ctypes.c_uint64),
                ("depth", ctypes.c_uint32),
                ("complete", ctypes.c_uint32), ("names", (ctypes.c_char * PATH_NAME) * PATH_DEPTH))


class Events:
    def __init__(self, procs: ProcTable, attacher: Attacher, scanner: Scanner, forgetting: Forgetting,
                 clock: Callable[[], float], table: Callable[[str], Any]) -> None:
        self._procs = procs          # the processes' events pending are noted there (proctable.py)
        self._attacher = attacher
        self._scanner = scanner
        self._forgetting = forgetting
        self._clock = clock
        #: files the BPF side named because they were not classified (under their change time): key ->
        #: (pid, names or None, change time in ns)
        self.unknown_files: dict[ObjectKey, tuple[int, list[bytes] | None, int]] = {}
        self.last_full_scan = 0.0
        self._table = table         # the program's maps by name (loaded after this is made)
        self._drained = 0           # events taken by this poll
        self._lost = 0              # events the BPF side could not emit, as last read

    def begin_drain(self) -> None:
        """A poll starts: it takes DRAIN_AT_ONCE events at most."""
        self._drained = 0

    def on_event(self, _cpu: int, data: Any, size: int) -> int:
        """bcc's ring-buffer callback: note what one event asks for (handled by ``handle``); -1 (libbpf:
        stop this poll, the rest stays on the ring) once DRAIN_AT_ONCE were taken."""
        self._note(data, size)
        self._drained += 1
        return -1 if self._drained >= DRAIN_AT_ONCE else 0

    def _note(self, data: Any, size: int) -> None:
        ev = ctypes.cast(data, ctypes.POINTER(_Event)).contents
        tgid, kind, gen = int(ev.tgid), int(ev.type), int(ev.gen)
        me = ident(tgid, gen)
        if kind == EV_FILE and size >= ctypes.sizeof(_FileEvent):
            fe = ctypes.cast(data, ctypes.POINTER(_FileEvent)).contents
            names = [bytes(fe.names[i]).split(b"\0", 1)[0] for i in range(min(fe.depth, PATH_DEPTH))]
            key = (discovery.user_dev(int(fe.dev)), int(fe.ino))
            self.unknown_files.setdefault(key, (tgid, names if fe.complete else None, int(fe.ctime)))
            kind = EV_MMAP
        procs = self._procs
        if kind not in (EV_EXIT, EV_EXIT_IDLE):
            procs.seen(tgid, gen)
        if kind == EV_EXIT:
            procs.note_exit(me)
        elif kind == EV_EXIT_IDLE:       # exited without a record
            self._forgetting.exited_idle(tgid, gen)
        elif kind == EV_FORK:
            if discovery.tgid_of(tgid) == tgid:     # a new process, not a thread
                procs.note_rescan(tgid)
        else:
            if kind == EV_EXEC:
                procs.note_exec(tgid, me, int(ev.ts))
            procs.note_rescan(tgid)

    def handle(self) -> bool:
        """What the events drained since the last call ask for; True when something happened (a rescan
        attached probes or a process exited)."""
        procs, forgetting = self._procs, self._forgetting
        changed = bool(procs.exited)
        # exits of processes whose PID is a new process's already: their last records first, before a
        # rescan reads the new process's maps under that PID
        reused = procs.take_exited(procs.reused)
        if reused:
            forgetting.take_final(reused)
        for me in procs.take_reimaged():        # exec: the old image's code ranges and names are gone
            if me not in reused and pid_of(me) not in procs.final:
                forgetting.forget_image(me)
        if procs.rescan:
            pids = procs.take_rescan(RESCANS_AT_ONCE)
            self._unpend(pids)
            changed = self._scanner.scan(pids) > 0 or changed
        exited = procs.take_exited()
        if exited:                # after the rescans: the newest maps name their kernels
            forgetting.take_final(exited)
        if self.unknown_files:
            changed = self._reach_unknown() > 0 or changed
        if self._attacher.reads.running():
            self._attacher.reads.check_stuck()
            changed = self._scanner.attach_read() > 0 or changed
        if self._events_lost():
            self._rescan_early()
        if self._clock() - self.last_full_scan >= RESCAN_S:
            self.last_full_scan = self._clock()
            changed = self._scanner.scan(None) > 0 or changed
            forgetting.sweep()
        procs.events_handled()        # only an exit handled with these events compares with them
        return changed

    def idle_s(self) -> float:
        """How long the collector may wait for the next event before ``handle`` has work of its own: POLL_S
        while rescans, unknown files or objects' reads are pending; else until the next full rescan, at
        most MAX_IDLE_S."""
        if self._procs.rescan or self.unknown_files or self._attacher.reads.running():
            return POLL_S
        return max(0.0, min(MAX_IDLE_S, self.last_full_scan + RESCAN_S - self._clock()))

    def _reach_unknown(self) -> int:
        """Probe the files the BPF side named that the rescans did not classify: their processes
        were gone before their maps could be read. Each is reached through the same path in
        gputop's own mount namespace (same device and inode); otherwise another process that maps
        it may: the full rescan comes early. Returns how many objects were probed."""
        pending, self.unknown_files = self.unknown_files, {}
        attacher = self._attacher
        new = 0
        for key, (pid, names, ctime) in pending.items():
            if attacher.known_as(key, ctime):
                continue
            ref = discovery.reach(key[0], key[1], names, pid) if names else None
            if ref is None:
                self._rescan_early()
                continue
            if attacher.known_as(ref.key, ctime):       # the same file on a stacked fs
                attacher.classified(key, probed=ref.key in attacher.objects, ctime_ns=ctime)
            elif attacher.attach(ref):
                new += 1
                if ref.key != key:
                    attacher.classified(key, probed=True, ctime_ns=ctime)
        return new

    def _rescan_early(self) -> None:
        """The next full rescan within EARLY_RESCAN_S."""
        self.last_full_scan = min(self.last_full_scan, self._clock() - RESCAN_S + EARLY_RESCAN_S)

    def _unpend(self, pids: list[int]) -> None:
        """Take the rescans of ``pids`` off the BPF side's rescan_pending: their next mapping asks again."""
        pending = self._table("rescan_pending")
        for pid in pids:
            with contextlib.suppress(KeyError):
                del pending[pending.Key(pid)]

    def _events_lost(self) -> bool:
        """Whether the BPF side lost events (a full ring, a tenant over its share) since the last call."""
        table = self._table("dropped")
        lost = int(table[table.Key(DROP_KINDS.index("events"))].value)
        more, self._lost = lost > self._lost, lost
        return more

    def take_execed(self) -> frozenset[int]:
        """The processes that exec'd since the last call."""
        return self._procs.take_execed()
