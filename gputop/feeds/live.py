"""The collector: raw counters of the sources -> deltas and rates -> immutable ``Snapshot``s.

``Sampler`` is the live ``Feed``: one thread (``gputop-collector``) owns the BPF object, the NVML
handles and the psutil cache. BPF start-up (compiling takes a second or two) happens on that
thread after a first "starting" snapshot was posted, so the UI is never blocked. Each refresh
(``collect``) reads the sources, decides which processes are new, gone or reused, and leaves the
counting of each process (deltas, rates, kernels) to ``gputop.feeds.live_counts``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace

from gputop.derive import LaunchBoundRule
from gputop.feeds.base import Feed, FeedKind, Filters, SnapshotCallback
from gputop.feeds.live_counts import ProcDeltas
from gputop.model import ProcSample, Snapshot, SourceStatus
from gputop.sources.bpf import BpfReading, BpfSource, BpfUnavailable
from gputop.sources.host import HostProc, HostSource
from gputop.sources.mapped import MappedProcesses
from gputop.sources.nvml import NvmlReading, NvmlSource

STOP_NOTICE_S = 1.0         # stopping longer than this is announced (see Sampler.stop)
STOP_TIMEOUT_S = 60.0       # then the exit hook finishes the job (BpfSource.close)
#: how long ``detach_in_child`` waits for the collector thread to end (``stop`` ends its wait for events)
DETACH_WAIT_S = 1.0
#: the longest the child of ``detach_in_child`` may take
DETACH_DEADLINE_S = 30
UVM_UNAVAILABLE = "GPU faults, migrations and thrashing need kprobes on nvidia_uvm (not available here)"


@dataclass
class SamplerConfig:
    interval_s: float = 1.0
    #: the first refresh after the BPF source started (None: ``interval_s``); the exporter's is short
    #: so that its health check turns ready soon after start-up however long its refresh is
    first_interval_s: float | None = None
    use_bpf: bool = True
    use_nvml: bool = True
    nvml_library: str | None = None
    filters: Filters = field(default_factory=Filters)
    launch_bound: LaunchBoundRule = field(default_factory=LaunchBoundRule)
    #: --sample-period: one launch in N sampled for its call site (None: adapted to the cost; 0: none)
    sample_period: int | None = None


@dataclass(frozen=True)
class RefreshTiming:
    """How long ``Sampler.collect`` took to build its last snapshot, in seconds: in all, and by phase
    in the order they ran: ``bpf`` (reading the BPF maps; absent without the BPF source), ``nvml``
    (NVML's reads; absent without NVML), ``host`` (/proc of the processes seen), ``build`` (deltas,
    rates and the snapshot itself)."""

    duration_s: float
    phases: tuple[tuple[str, float], ...]


class Sampler(Feed):
    """Builds snapshots from the sources; ``start`` runs it as the live feed's thread."""

    kind = FeedKind.LIVE

    def __init__(self, config: SamplerConfig, *, bpf: BpfSource | None = None,
                 nvml: NvmlSource | None = None, host: HostSource | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._bpf = bpf if bpf is not None else (BpfSource(sample_period=config.sample_period)
                                                   if config.use_bpf else None)
        self._nvml = nvml if nvml is not None else (NvmlSource(config.nvml_library) if config.use_nvml else None)
        self._host = host or HostSource()
        #: BPF unavailable: the processes mapping a CUDA library (as doctor lists them), their counts unknown
        self._mapped = MappedProcesses()
        self._clock = clock
        self._bpf_status = SourceStatus("starting" if self._bpf else "unavailable",
                                        None if self._bpf else "disabled with --no-bpf")
        self._bpf_started = False
        #: each process's last reading: the base of its next interval
        self._deltas = ProcDeltas()
        self._host_cache: dict[int, HostProc] = {}
        self._last_time: float | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._paused = False
        self._hostname = socket.gethostname()
        self.bpf_error: BpfUnavailable | None = None
        #: the timing of the last ``collect`` (None before the first); read on the collector thread
        self.last_refresh: RefreshTiming | None = None
        #: told when stopping takes long (the CLI prints it once the dashboard has closed)
        self.notice: Callable[[str], None] | None = None
        #: the collector thread ends without detaching: ``detach_in_child`` (the dashboard, so that
        #: quitting does not wait for the kernel) or ``close`` does it
        self.close_elsewhere = False

    # ------------------------------------------------------------ life cycle

    def open_bpf(self) -> None:
        """Start the BPF source (compile, attach); on failure the status says why."""
        if self._bpf is None or self._bpf_started:
            return
        self._bpf_started = True
        try:
            self._bpf.start()
            self._bpf_status = SourceStatus("ok")
            # the first interval starts now: what the probes counted while attaching is in the
            # totals only, so that every interval's counts cover exactly its interval_s
            for pid, raw in self._bpf.baseline().items():
                self._deltas.baseline(pid, raw)
        except BpfUnavailable as e:
            self._bpf_failed(e)
        except Exception as e:  # a bug or an odd host must not leave the UI on "starting"
            self._bpf_failed(BpfUnavailable(f"the BPF source failed: {type(e).__name__}: {e}",
                                            "run gputop doctor; report the error with its output"))
        self._last_time = self._clock()

    def _bpf_failed(self, e: BpfUnavailable) -> None:
        self.bpf_error = e
        self._bpf_status = SourceStatus("unavailable", e.reason)
        if self._bpf is not None:
            with contextlib.suppress(Exception):
                self._bpf.close()
        self._bpf = None

    def wait(self, timeout_s: float) -> None:
        """Sleep until ``timeout_s`` passed, handling exec/mmap events (attaching new objects). Between
        events it wakes only when the BPF source has work of its own (``BpfSource.idle_s``), or ``stop``."""
        deadline = self._clock() + timeout_s
        if self._bpf is not None:
            self._bpf.refresh_in(timeout_s)
        while not self._stop.is_set():
            left = deadline - self._clock()
            if left <= 0:
                return
            bpf = self._bpf
            if bpf is not None:
                try:
                    bpf.poll(min(left, bpf.idle_s()))
                except Exception as e:
                    self._bpf_failed(BpfUnavailable(f"the BPF source failed: {type(e).__name__}: {e}",
                                                    "restart gputop; report the error"))
            else:
                self._stop.wait(left)

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self._thread = threading.Thread(target=self._run, args=(on_snapshot,), name="gputop-collector",
                                        daemon=True)
        self._thread.start()

    def _run(self, on_snapshot: SnapshotCallback) -> None:
        try:
            on_snapshot(self.starting_snapshot())
            self.open_bpf()
            first = self.config.first_interval_s
            while not self._stop.is_set():
                self.wait(self.config.interval_s if first is None else first)
                first = None
                if self._stop.is_set():
                    break
                snap = self.collect()
                if not self._paused:
                    on_snapshot(snap)
        finally:                # a bug ending the thread still detaches the probes and closes NVML
            if not self.close_elsewhere:
                self.close()

    @property
    def running(self) -> bool:
        """Whether the collector thread was started and has not ended."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the collector thread and wait for it to detach everything. When that takes more
        than a second (perf-event uprobes detach one by one), ``notice`` says what is going on."""
        self._stop.set()
        bpf = self._bpf
        if bpf is not None:
            bpf.wake()              # its wait for events ends now
        t = self._thread
        if t is None or t is threading.current_thread():
            return
        t.join(timeout=STOP_NOTICE_S)
        if t.is_alive():
            if self.notice is not None:
                probes = self._bpf.probes if self._bpf is not None else 0
                self.notice(f"detaching {probes} probes…" if probes else "stopping the collector…")
            t.join(timeout=STOP_TIMEOUT_S)

    def detach_in_child(self, wait_s: float = DETACH_WAIT_S) -> bool:
        """Detach and unload the BPF source in a child process, so that this one can exit at once.

        Closing the probes' links and perf events costs the kernel an RCU grace period each, and
        bcc's cleanup closes the rest one by one: 0.3 to 1.2 s on the development VM, which a
        process exiting with them open pays before its parent (the shell) sees it exit. After a
        fork the child holds the same descriptors, so the parent's exit only drops references and
        the child pays the detach: it leaves the terminal's session, points its standard streams
        at /dev/null (it never prints after the shell's prompt), runs ``BpfSource.close`` (links,
        perf events, bcc's tracefs events, BPF statistics) once the parent is gone, and exits. NVML needs nothing: the
        kernel closes its files.

        Call after ``stop``, with ``close_elsewhere`` set before the collector thread ended.
        Returns True in the parent, which must then leave with ``os._exit`` without closing
        anything (the child is already detaching); False when nothing was forked (no BPF source,
        the collector thread still busy after ``wait_s``, fork refused): then call ``close``.
        """
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=wait_s)
            if t.is_alive():
                return False
        if self._bpf is None:
            return False
        for stream in (sys.stdout, sys.stderr):    # what the parent wrote is not written twice
            with contextlib.suppress(Exception):
                stream.flush()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            return False
        if pid == 0:                    # the child: never returns
            try:
                os.setsid()             # no terminal: no SIGHUP, no SIGINT from the shell's next job
                os.nice(10)             # the shell and the user's next command come first
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                # a lock that another thread of the parent held at the fork would never be released
                # here: SIGALRM's default action ends the child, and the kernel closes what is left
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(DETACH_DEADLINE_S)
                # a descriptor's last close pays its release: the parent's exit must drop its
                # references first, else it pays for the links the child closed before it exited.
                # The child is given to another parent once its parent has exited, files and all.
                while os.getppid() == parent:
                    time.sleep(0.002)
                self._bpf.close()
            finally:
                os._exit(0)
        return True

    def set_interval(self, interval_s: float) -> None:
        self.config.interval_s = max(0.1, float(interval_s))

    def set_paused(self, paused: bool) -> None:
        self._paused = paused

    def close(self) -> None:
        if self._bpf is not None:
            self._bpf.close()
        if self._nvml is not None:
            self._nvml.close()

    def refreshes(self, stop: threading.Event, settle: bool = True) -> Generator[Snapshot, None, None]:
        """Batch mode, in the caller's thread (bcc's ring-buffer callbacks run there): a refresh every
        interval; ``stop`` wakes the wait through ``stop()``. With ``settle``, a first sample is taken
        and not given: every refresh given covers one interval after another sample, so the values
        that need two (CPU%, the cost, NVML's SM%) are real from the first on. Closes the sources."""
        try:
            if settle:
                self.collect()
            while not stop.is_set():
                self.wait(self.config.interval_s)
                if stop.is_set():
                    break
                yield self.collect()
        finally:
            self.close()

    # ------------------------------------------------------------ snapshots

    def starting_snapshot(self) -> Snapshot:
        return Snapshot(time=time.time(), interval_s=0.0, host=self._hostname,
                        sources={"bpf": self._bpf_status, "nvml": SourceStatus("starting"),
                                 "uvm": SourceStatus("starting")})

    def collect(self) -> Snapshot:
        t0 = time.perf_counter()
        phases: list[tuple[str, float]] = []
        now = self._clock()
        elapsed = now - self._last_time if self._last_time is not None else self.config.interval_s
        self._last_time = now
        reading = BpfReading(self._bpf_status)
        if self._bpf is not None:
            try:
                reading = self._bpf.read()
            except Exception as e:
                self._bpf_failed(BpfUnavailable(f"reading the BPF maps failed: {type(e).__name__}: {e}",
                                                "restart gputop; report the error"))
                reading = BpfReading(self._bpf_status)
            phases.append(("bpf", time.perf_counter() - t0))
        t1 = time.perf_counter()
        nv = self._nvml.read() if self._nvml is not None else NvmlReading(
            SourceStatus("unavailable", "disabled with --no-nvml"), (), {})
        if self._nvml is not None:
            phases.append(("nvml", time.perf_counter() - t1))
        t1 = time.perf_counter()
        pids = set(reading.procs) | set(reading.idle) | set(nv.procs)
        if self.bpf_error is not None:     # tracing wanted but unavailable (--no-bpf: NVML's processes only)
            pids |= self._mapped.pids()
            phases.append(("mapped", time.perf_counter() - t1))
            t1 = time.perf_counter()
        hosts = self._host.read(sorted(pids), reading.execed)
        t2 = time.perf_counter()
        phases.append(("host", t2 - t1))
        # a process whose last record is still shown under a PID the kernel gave to a new process:
        # that row keeps the old process's host data; the new process's counts start from zero
        reused = {pid for pid, h in hosts.items() if self._reused(pid, h)}
        fresh: set[int] = set()
        for pid in reused:
            raw = reading.procs.get(pid)
            if raw is not None and raw.exited:
                del hosts[pid]
            else:
                self._new_identity(pid)
                fresh.add(pid)
        self._host_cache.update(hosts)
        gpu_util = {g.index: g.util_pct for g in nv.gpus if g.mig_instance is None}
        procs: list[ProcSample] = []
        gone: list[int] = []
        for pid in sorted(pids):
            raw = reading.procs.get(pid)
            idle = reading.idle.get(pid) if raw is None else None
            host = hosts.get(pid) or self._host_cache.get(pid)
            exited = raw.exited if raw else (idle.exited if idle else False)
            if (raw is not None or idle is not None) and not exited and pid not in hosts and not _alive(pid):
                exited = True
            state = "exited" if exited else ("stopped" if pid in hosts and hosts[pid].stopped else "running")
            # a process without a record may be one whose record could not be stored: then unknown
            idle_known = idle if idle is not None and reading.procs_dropped == 0 else None
            procs.append(self._deltas.sample(pid, raw, idle_known, host, nv.procs.get(pid), gpu_util, elapsed,
                                             state, reading.uvm_cpu_faults, self.config.launch_bound,
                                             reading.sample_period))
            if exited:
                gone.append(pid)
                self._new_identity(pid)
            elif raw is not None:
                self._deltas.keep(pid, raw)
        if gone or fresh:
            self._deltas.forget_kernels(set(gone) | fresh)
        if gone and self._bpf is not None:
            self._bpf.forget(*gone)
        sources = {"bpf": self._bpf_source_status(reading), "nvml": nv.status,
                   "uvm": self._uvm_status(reading)}
        snap = self.config.filters.apply(Snapshot(time=time.time(), interval_s=elapsed, host=self._hostname,
                                                  sources=sources, gpus=tuple(nv.gpus), processes=tuple(procs)))
        t3 = time.perf_counter()
        self.last_refresh = RefreshTiming(t3 - t0, (*phases, ("build", t3 - t2)))
        return snap

    def _reused(self, pid: int, host: HostProc) -> bool:
        """Whether ``pid`` now belongs to another process than the one gputop knew under it."""
        known = self._host_cache.get(pid)
        return (known is not None and known.start_time is not None and host.start_time is not None
                and known.start_time != host.start_time)

    def _new_identity(self, pid: int) -> None:
        """Forget what was known of the process at ``pid`` (it exited, or the PID was reused)."""
        self._deltas.forget(pid)
        self._host_cache.pop(pid, None)

    def _bpf_source_status(self, reading: BpfReading) -> SourceStatus:
        if reading.status.status != "ok":
            return reading.status
        return replace(reading.status, overhead_ns_per_s=reading.overhead_ns_per_s,
                       probe_hits_per_s=reading.probe_hits_per_s, cost_ns_per_s=reading.cost_ns_per_s,
                       trap_ns=reading.trap_ns, stats_age_s=reading.stats_age_s)

    def _uvm_status(self, reading: BpfReading) -> SourceStatus:
        if reading.status.status != "ok":
            return SourceStatus("unavailable", "needs the BPF source")
        if reading.uvm_cpu_faults:
            return SourceStatus("ok", "CPU faults on managed memory only; " + UVM_UNAVAILABLE, scope="cpu")
        return SourceStatus("unavailable", "tracepoint exceptions:page_fault_user is missing; " + UVM_UNAVAILABLE)

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

