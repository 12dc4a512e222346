"""``BpfSource``: the BPF source as the live feed uses it. It starts the program (program/), then
wires the parts that own each concern: the process table that holds every piece of per-process state
(lifecycle/proctable.py), scans and attaching (attach/scanning.py, attach/attaching.py), the ring
buffer's events (lifecycle/events.py), readings (read/reader.py, read/records.py, names/naming.py),
processes leaving (lifecycle/forgetting.py); one lock keeps close() (also from the exit hook, on
another thread) from freeing what the collector is using."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import select
import threading
import time
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.attach.attaching import Attacher
from gputop.sources.bpf.attach.objreads import START_WAIT_S, WAIT_S, ObjectReads
from gputop.sources.bpf.attach.scanning import Scanner
from gputop.sources.bpf.attach.uprobes import UprobeAttacher
from gputop.sources.bpf.common.linux import PANIC_HINT, load_refusal, raise_fd_limit
from gputop.sources.bpf.cost.selfcost import ProgStats, SelfCost
from gputop.sources.bpf.lifecycle.events import Events
from gputop.sources.bpf.lifecycle.forgetting import Forgetting
from gputop.sources.bpf.lifecycle.procid import PidGens
from gputop.sources.bpf.lifecycle.proctable import ProcTable
from gputop.sources.bpf.lifecycle.shares import Shares
from gputop.sources.bpf.names.naming import Naming
from gputop.sources.bpf.program import kheaders
from gputop.sources.bpf.program.privileges import coverage_gaps, privileges_error
from gputop.sources.bpf.program.program import BpfUnavailable, Program, load_bcc, program_text
from gputop.sources.bpf.program.startup import Prefetch, Steps, release_compiler_pages, release_heap
from gputop.sources.bpf.pystacks.sites import CallSites
from gputop.sources.bpf.read.graphs import GraphKernels
from gputop.sources.bpf.read.launchslots import LaunchSlots
from gputop.sources.bpf.read.reader import Reader
from gputop.sources.bpf.read.readings import BpfReading, RawProc
from gputop.sources.bpf.read.records import Records
from gputop.sources.bpf.read.retire import Retired

if TYPE_CHECKING:                       # typing.ParamSpec is Python 3.10+; the annotations are never evaluated
    from typing import Concatenate, ParamSpec
    _P = ParamSpec("_P")
_R = TypeVar("_R")


def _open(method: Callable[Concatenate[BpfSource, _P], _R]) -> Callable[Concatenate[BpfSource, _P], _R]:
    """Run ``method`` holding the source's lock, and only while it is open: close() (also from
    the exit hook, on another thread) never frees what the collector is using."""
    @wraps(method)
    def run(self: BpfSource, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            if self.bpf is None:
                raise BpfUnavailable("the BPF source is closed", "restart gputop")
            return method(self, *args, **kwargs)
    return run


class BpfSource:
    """Owns the BPF object. Used from the collector thread; close() may come from another."""

    def __init__(self, *, limits: dict[str, int] | None = None, uvm: bool = True,
                 clock: Callable[[], float] = time.monotonic, uprobe_links: bool | None = None,
                 sample_period: int | None = None) -> None:
        self._uprobe_links = uprobe_links       # uprobe_multi links where the kernel has them (None: unless
        #                                         GPUTOP_UPROBE_LINKS=off)
        self._lock = threading.RLock()
        self._clock = clock
        #: the ring buffer's wait: poll(2) on its map and on a pipe that ``wake`` writes (None: bcc's own wait)
        self._poller: select.poll | None = None
        self._wake_fds: tuple[int, int] | None = None
        self._wake_mu = threading.Lock()            # wake() never writes to a descriptor close() closed
        #: seconds each start-up step took (bench/startup.py), resident memory after each, and the
        #: compiler's pages handed back after the compile
        self.startup_s: dict[str, float] = {}
        self.startup_rss_bytes: dict[str, int] = {}
        self.startup_released_bytes = 0
        self.program = Program(limits, uvm)
        table = self.program.table
        self.cost = SelfCost(self._prog_stats, clock)
        self.slots = LaunchSlots(table)           # the launch fast path's slots (launchslots.py)
        self.shares = Shares(table)               # each tenant's share of the tables (shares.py)
        self.graph_kernels = GraphKernels(table, self.shares)
        #: every piece of per-process state, each PID's generation (procid.py) with it (proctable.py)
        self.procs = ProcTable(PidGens(table))
        self.attacher = Attacher(self.program, self.procs, clock)
        self.names = Naming(table, self.procs, self.attacher)
        #: call sites: launches sampled with their Python stacks or native callers (pystacks/sites.py)
        self.sites = CallSites(table, self.procs.maps_of, self.names.namer.symbol_at, sample_period)
        self.scanner = Scanner(self.procs, self.attacher, self.names, self.sites)
        self.records = Records(self.names, self.procs, self.graph_kernels, table, self.sites)
        #: records of idle processes retired from the kernel when records run short (retire.py)
        self.retired = Retired(table, self.shares, self.program.share("MAX_PROCS"), self.program.limit("MAX_PROCS"),
                               clock)
        self.forgetting = Forgetting(table, self.procs, self.attacher, self.names, self.records,
                                     self.slots, self.graph_kernels, self.shares, self.retired, self.sites)
        self.events = Events(self.procs, self.attacher, self.scanner, self.forgetting, clock, self.table)
        self.reader = Reader(self.program, self.procs, self.attacher, self.records, self.events, self.slots,
                             self.cost, self.shares, self.retired)

    # ------------------------------------------------------------ what the program and its parts hold

    @property
    def bpf(self) -> Any:
        """bcc's BPF object; None before start() and once closed."""
        return self.program.bpf

    @property
    def headers(self) -> kheaders.HeadersChoice | None:
        return self.program.headers

    @property
    def compiled(self) -> str | None:
        return self.program.compiled

    @property
    def file_offsets(self) -> dict[str, int] | None:
        """Kernel struct offsets (BTF) for naming the files processes map (read at start, or set before)."""
        return self.program.file_offsets

    @file_offsets.setter
    def file_offsets(self, offsets: dict[str, int] | None) -> None:
        self.program.file_offsets = offsets

    @property
    def uvm_cpu_faults(self) -> bool:
        """Whether CPU faults on managed memory are traced (set at start; before it, for cflags())."""
        return self.program.uvm_cpu_faults

    @uvm_cpu_faults.setter
    def uvm_cpu_faults(self, on: bool) -> None:
        self.program.uvm_cpu_faults = on

    @property
    def uprobes(self) -> UprobeAttacher | None:
        return self.attacher.uprobes

    @property
    def objects(self) -> dict[tuple[int, int], str]:
        """Probed objects -> path."""
        return self.attacher.objects

    @property
    def rejected(self) -> set[tuple[int, int]]:
        """Objects without CUDA entry points."""
        return set(self.attacher.rejected)

    @property
    def probes(self) -> int:
        return self.uprobes.probes if self.uprobes is not None else 0

    # the parts' state by the names tests/bpf reach for (the events pending, object reads, known maps)

    @property
    def _rescan(self) -> dict[int, None]:
        return self.procs.rescan

    @property
    def _exited(self) -> set[int]:
        return self.procs.exited

    @property
    def _unknown_files(self) -> dict[tuple[int, int], tuple[int, list[bytes] | None, int]]:
        return self.events.unknown_files

    @property
    def _reads(self) -> ObjectReads:
        return self.attacher.reads

    @property
    def _maps(self) -> dict[int, list[discovery.Mapping]]:
        return self.procs.maps

    def _attach_object(self, ref: discovery.ObjectRef) -> bool:
        return self.attacher.attach(ref)

    def _sweep(self) -> None:
        self.forgetting.sweep()

    # ------------------------------------------------------------ set-up

    def cflags(self) -> list[str]:
        return self.program.cflags()

    def program_text(self) -> str:
        return program_text()

    def table(self, name: str) -> Any:
        return self.program.table(name)

    def start(self) -> None:
        """Check, compile, load and attach; then probe every CUDA object already mapped.

        The ELF objects processes map are read on another thread while the program compiles
        (libbcc's compile releases the GIL). Raises BpfUnavailable with the reason and a hint.
        """
        steps = Steps(self.startup_s, self.startup_rss_bytes)
        raise_fd_limit()
        noperm = privileges_error(self._uprobe_links)
        if noperm is not None:
            raise BpfUnavailable(*noperm, noperm=True)
        refusal = load_refusal()
        if refusal is not None:
            raise BpfUnavailable(refusal, PANIC_HINT)
        gaps = coverage_gaps()
        self.reader.gaps = (f"missing {', '.join(gaps)}: processes whose CUDA library exists only in a container, "
                            "or was deleted or replaced since they loaded it, may go untraced" if gaps else None)
        reader = Prefetch()
        try:
            bcc = load_bcc()
            steps("load_bcc")
            self.program.load(bcc, self.program_text, steps)
            self.sites.tell()               # the sampling period, before the first launch is counted
        finally:
            self.attacher.prefetched = reader.result()
        steps("elf_wait")
        release_heap()
        self.startup_released_bytes = release_compiler_pages()
        steps("release")
        # bcc's own exit hook would detach the probes again, racing with close() on another thread
        atexit.unregister(self.bpf.cleanup)
        atexit.register(self.close)
        self.attacher.uprobes = UprobeAttacher(self.bpf, bcc.lib, links=self._uprobe_links)
        self.attacher.uprobes.preload()         # the handlers, off the collector's thread
        self.cost.tick()
        ring = self.table("events")
        ring.open_ring_buffer(self.events.on_event)
        self._open_wait(int(ring.map_fd))
        with self.attacher.reads.budget(START_WAIT_S):
            self.scan()
        self.attacher.prefetched = {}
        self.events.last_full_scan = self._clock()
        steps("attach")
        self.startup_s["elf_read"] = reader.elapsed_s

    def _open_wait(self, ring_fd: int) -> None:
        """The ring buffer's wait, which ``wake`` can cut short: the map's descriptor is readable when
        events are on the ring (what bcc's epoll waits for), the pipe's when ``wake`` wrote."""
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        poller = select.poll()
        poller.register(ring_fd, select.POLLIN)
        poller.register(r, select.POLLIN)
        with self._wake_mu:
            self._poller, self._wake_fds = poller, (r, w)

    def _close_wait(self) -> None:
        with self._wake_mu:
            fds, self._wake_fds, self._poller = self._wake_fds, None, None
        for fd in fds or ():
            os.close(fd)

    def wake(self) -> None:
        """End the current (or next) ``poll``'s wait now (from any thread: stopping the collector)."""
        with self._wake_mu:
            if self._wake_fds is not None:
                with contextlib.suppress(OSError):      # full: a wake-up is pending already
                    os.write(self._wake_fds[1], b"\0")

    def refresh_in(self, seconds: float) -> None:
        """The collector's next refresh comes in ``seconds`` (its statistics window is timed for it)."""
        self.cost.refresh_in(seconds)

    def idle_s(self) -> float:
        """How long the collector may wait in ``poll`` for events before it has work of its own (the next
        full rescan or statistics window, pending rescans or reads): it never wakes for nothing."""
        return min(self.events.idle_s(), self.cost.idle_s())

    def _wait_ring(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for events (or ``wake``), then take those on the ring (at most
        events.DRAIN_AT_ONCE: ``Events.on_event``)."""
        poller, fds = self._poller, self._wake_fds
        if poller is None or fds is None:
            self.bpf.ring_buffer_poll(max(0, int(timeout_s * 1000)))
            return
        if timeout_s > 0:
            for fd, _ev in poller.poll(int(timeout_s * 1000)):
                if fd == fds[0]:
                    with contextlib.suppress(OSError):
                        while os.read(fd, 64):
                            pass
        self.bpf.ring_buffer_consume()

    # ------------------------------------------------------------ the collector's calls

    @_open
    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for exec/mmap/fork/exit events and attach to new CUDA objects.

        Every RESCAN_S, also rescan every process (events can be lost) and sweep dead ones. At most
        events.DRAIN_AT_ONCE events are taken at a time, and RESCANS_AT_ONCE processes rescanned: a
        tenant that maps files in a loop cannot hold the collector here (issue 40). Returns True when
        something happened (a rescan attached probes or a process exited).
        """
        self.events.begin_drain()
        self._wait_ring(timeout_s)
        with self.attacher.reads.budget():
            # the trap cost (cached per kernel), measured on a background thread once a snapshot is out
            self.cost.tick(self.uprobes.mode if self.uprobes else None, measure=self.reader.snapshots > 0)
            return self.events.handle()

    @_open
    def scan(self, pids: list[int] | None = None, *, wait_s: float = WAIT_S) -> int:
        """Probe new CUDA objects mapped by ``pids`` (default: all processes); returns how many.
        An object whose read outlasts ``wait_s`` is probed by a later poll, once read."""
        with self.attacher.reads.budget(wait_s):
            return self.scanner.scan(pids)

    @_open
    def read(self) -> BpfReading:
        with self.attacher.reads.budget():
            reading = self.reader.read()
        # the sampling period from what a launch's probe costs: its trap, and its program time per hit once
        # the statistics window measured it (before: the trap alone, a lower bound: a longer period)
        cost = self.cost
        hits, ns = cost.hits_per_s, cost.ns_per_s
        if cost.trap is not None:
            self.sites.tune(cost.trap.trap_ns + (ns / hits if hits and ns is not None else 0.0))
        return dataclasses.replace(reading, sample_period=self.sites.period)

    def baseline(self) -> dict[int, RawProc]:
        """Every process record as it stands, without names and without touching what read()
        reports once: where the first interval starts (counts made while the probes were being
        attached belong to the totals, not to an interval of known length)."""
        return self.reader.baseline()

    @_open
    def forget(self, *pids: int) -> None:
        """Remove every record of processes that are gone (after their last interval was shown): the
        process whose row the last read showed under each PID, not a new process that has it now."""
        self.forgetting.forget(pids)

    def dropped(self) -> dict[str, int]:
        return self.reader.dropped()

    def hit_totals(self) -> tuple[int, int] | None:
        """Runs of gputop's uprobe programs since they were loaded: (at entry, at return), exact; None
        for a program without the counters (bench/probe_cost.py --before an older one)."""
        return self.reader.hit_totals()

    def _prog_stats(self) -> ProgStats | None:
        """Run time and runs of gputop's programs by kind (they grow only while statistics are on);
        None once closed (a statistics window may close on its timer thread)."""
        with self._lock:
            if self.bpf is None:
                return None
            return self.program.run_stats()

    def close(self) -> None:
        """Detach and unload everything. Safe to call twice, and from the exit hook while the
        collector thread is still busy: it waits for the collector's current call to finish."""
        with self._lock:
            bpf, self.program.bpf = self.program.bpf, None
            try:
                if bpf is not None:
                    atexit.unregister(self.close)
                    if self.uprobes is not None:
                        self.uprobes.detach_all()
            finally:
                if bpf is not None:
                    self.slots.close()
                    self.procs.close()
                    self.sites.close()
                    bpf.cleanup()
                self.cost.stop()
                self._close_wait()
                self.attacher.reads.close()
                self.names.close()
