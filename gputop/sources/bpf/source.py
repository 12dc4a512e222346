"""The BPF source: loads ``bpf/gputop.bpf.c`` with bcc, attaches probes, reads maps into counters.

The only module that imports ``bcc``, and only the distro's (python3-bpfcc): the PyPI package
named ``bcc`` is unrelated, so the module is loaded from the distro's dist-packages directly
without putting the rest of the system's site-packages on the path.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import errno
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache, wraps
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from gputop.errors import EX_ERROR, EX_NOPERM, GputopError
from gputop.model import SourceStatus
from gputop.sources.bpf import abi, btf, catalogue, compilecache, discovery, kheaders, symbols
from gputop.sources.bpf.abi import (
    CODE_CUDA,
    CODE_LAYER,
    EV_EXEC,
    EV_EXIT,
    EV_EXIT_IDLE,
    EV_FILE,
    EV_FORK,
    EV_MMAP,
    HIT_ENTRY,
    HIT_RETURN,
    NAME_LEN,
    NB,
    NDIR,
    PATH_DEPTH,
    PATH_NAME,
)
from gputop.sources.bpf.graphs import TABLES as GRAPH_TABLES
from gputop.sources.bpf.graphs import GraphKernels
from gputop.sources.bpf.kernelnames import KernelNamer, Resolved
from gputop.sources.bpf.launchslots import LaunchSlots, SlotCounts
from gputop.sources.bpf.linux import (
    ENABLE_HINT,
    NO_CMPXCHG,
    TRACEFS,
    aligned_blocks,
    atomic_cmpxchg,
    coverage_gaps,
    ensure_tracefs,
    fd_room,
    has_privileges,
    privileges_error,
    prog_run_stats,
    raise_fd_limit,
    tracepoint_exists,
)
from gputop.sources.bpf.objreads import START_WAIT_S, WAIT_S, BoundedCalls, ObjectReads, Pending
from gputop.sources.bpf.procid import Doomed, PidGens, gen_of, ident, key_ident, pid_gen_words, pid_of
from gputop.sources.bpf.selfcost import ProgStats, SelfCost
from gputop.sources.bpf.startup import Prefetch, Steps, release_compiler_pages, release_heap
from gputop.sources.bpf.uprobes import UprobeAttacher

__all__ = ["TRACEFS", "BpfReading", "BpfSource", "BpfUnavailable", "IdleProc", "RawKernel", "RawProc", "aligned_blocks",
           "ensure_tracefs", "has_privileges", "load_bcc", "tracepoint_exists", "use_headers"]

LIMITS = {"MAX_PROCS": 4096, "MAX_KERNELS": 16384, "MAX_ALLOCS": 65536, "MAX_NAMES": 16384,
          "MAX_THREADS": 16384, "MAX_CODE": 262144}
DROP_KINDS = ("procs", "kernels", "names", "allocs", "ranges", "captures", "events", "batch", "array", "graphs")
RESCAN_S = 10.0       # full rescan and sweep of dead processes, besides the exec/mmap/fork events
MEM_READ_S = 0.5      # a read of a kernel's name from its process's memory (objreads.BoundedCalls)
EARLY_RESCAN_S = 1.0  # a file that a gone process mapped and no path reaches: full rescan this soon
NAMED_KERNELS = 20    # kernels named per process and refresh (the ones shown)
_DIST_DIRS = ("/usr/lib/python3/dist-packages", f"/usr/lib/python3.{sys.version_info.minor}/site-packages",
              "/usr/local/lib/python3/dist-packages", "/usr/lib64/python3/site-packages")


#: bcc before 0.19 defines __HAVE_BUILTIN_BSWAP*__ that Linux 5.x's compiler-clang.h defines again: 40
#: lines of warnings on stderr at every compile (over the dashboard), nothing wrong
QUIET = "-Wno-macro-redefined"


class BpfUnavailable(GputopError):
    """BPF cannot run here; the message says why (shown as the source's reason)."""

    def __init__(self, reason: str, hint: str, noperm: bool = False) -> None:
        super().__init__(reason, hint, EX_NOPERM if noperm else EX_ERROR)
        self.reason = reason
        self.noperm = noperm


def program_path() -> Path:
    """bpf/gputop.bpf.c in a source checkout, or its copy inside the wheel."""
    here = Path(__file__).resolve().parents[2]     # the package: gputop/
    for cand in (here / "_data" / "bpf" / "gputop.bpf.c", here.parent / "bpf" / "gputop.bpf.c"):
        if cand.is_file():
            return cand
    raise BpfUnavailable("the BPF program bpf/gputop.bpf.c is missing from the installation",
                         "reinstall gputop")


#: entries a BPF_MAP_LOOKUP_BATCH call asks for
_BATCH = 1024


@cache
def _batch_buffers(key_size: int, value_size: int) -> tuple[ctypes.Array[ctypes.c_char], ctypes.Array[ctypes.c_char]]:
    """Key and value buffers for batch walks, made once per size (forgetting walks a dozen tables
    several times a refresh; a new zeroed buffer each time cost more than the walk)."""
    return (ctypes.c_char * (key_size * _BATCH))(), (ctypes.c_char * (value_size * _BATCH))()


def batch_ops(lib: Any) -> bool:
    """Whether this libbcc exports the batch map operations (``bpf_lookup_batch``, ``bpf_delete_batch``:
    bcc 0.20+; the 0.18 of Debian 11 and Ubuntu 22.04 has neither). Without them the tables are walked
    key by key: the same entries deleted, slower for a process that left many."""
    return all(hasattr(lib, name) for name in ("bpf_lookup_batch", "bpf_delete_batch"))


def load_bcc() -> ModuleType:
    """The distro's bcc module (python3-bpfcc), whatever else is called ``bcc`` on sys.path: the first
    in the dist-packages folders on sys.path (PYTHONPATH: an offline bundle's, docs/offline-install.md),
    then the distro's. Only a package with bcc's ``libbcc.py`` counts (the PyPI ``bcc`` has none)."""
    mod = sys.modules.get("bcc")
    if mod is not None and hasattr(mod, "BPF"):
        return mod
    sys.modules.pop("bcc", None)
    for d in dict.fromkeys([*(p for p in sys.path if Path(p).name == "dist-packages"), *_DIST_DIRS]):
        init = Path(d) / "bcc" / "__init__.py"
        if not init.is_file() or not (init.parent / "libbcc.py").is_file():
            continue
        spec = importlib.util.spec_from_file_location("bcc", init, submodule_search_locations=[str(init.parent)])
        if spec is None or spec.loader is None:
            continue
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bcc"] = mod
        try:
            spec.loader.exec_module(mod)
        except Exception as e:  # libbcc.so missing or broken: say so
            sys.modules.pop("bcc", None)
            raise BpfUnavailable(f"bcc's Python module failed to load: {e}",
                                 "apt-get install --reinstall bpfcc-tools python3-bpfcc") from e
        return mod
    raise BpfUnavailable("bcc's Python module (python3-bpfcc) is not installed",
                         "apt-get install bpfcc-tools python3-bpfcc (the PyPI package 'bcc' is unrelated)")


def use_headers() -> kheaders.HeadersChoice:
    """Choose the kernel headers and point bcc at them (BCC_KERNEL_SOURCE for the fallback)."""
    choice = kheaders.choose()
    os.environ.update(choice.env)
    return choice


# ------------------------------------------------------------------ readings


@dataclass(frozen=True)
class RawKernel:
    key: int                 # host stub address (runtime) or CUfunction handle (driver)
    launches: int
    grid_sum: int
    block_sum: int
    name: str | None         # demangled, or None when unresolved
    object: str | None       # the object holding the stub, when known
    graph_launches: int = 0  # launches inside graph launches (gputop/sources/bpf/graphs.py)


@dataclass(frozen=True)
class RawProc:
    """Monotonic counters of one process since gputop first saw it."""

    pid: int
    counters: dict[str, int]
    memcpy_calls: tuple[int, ...]
    memcpy_bytes: tuple[int, ...]
    prefetch_calls: tuple[int, ...]
    prefetch_bytes: tuple[int, ...]
    grid_hist: tuple[int, ...]
    block_hist: tuple[int, ...]
    copy_hist: tuple[tuple[int, ...], ...]
    exited: bool
    kernels: tuple[RawKernel, ...]
    comm: str = ""
    #: gputop saw the process from its first CUDA call (so its live allocations are all known)
    complete: bool = True
    #: its kernels' ``graph_launches`` are exact (False: a graph table lost entries)
    graph_kernels_known: bool = True


@dataclass(frozen=True)
class IdleProc:
    """A process that maps a probed object but has no record: no probe of it fired since gputop saw
    it (its probes were attached when it was scanned), unless its record could not be stored."""

    pid: int
    #: it exited (still shown once, like a process with a record)
    exited: bool = False
    #: gputop saw the process before it mapped CUDA (so it has no live allocations)
    complete: bool = True


@dataclass(frozen=True)
class BpfReading:
    status: SourceStatus
    procs: dict[int, RawProc] = field(default_factory=dict)
    uvm_cpu_faults: bool = False        # whether CPU faults on managed memory are traced
    #: gputop's own cost over the last refresh interval: exact hits, run time per hit sampled in the
    #: latest statistics window (see selfcost.SelfCost)
    overhead_ns_per_s: float | None = None
    probe_hits_per_s: float | None = None
    #: hits x this host's trap cost + overhead_ns_per_s (None while the trap cost is unknown)
    cost_ns_per_s: float | None = None
    trap_ns: float | None = None        #: the calibrated trap cost per entry hit (None: not yet known)
    stats_age_s: float | None = None    #: seconds since the statistics window of the run times closed
    #: processes that map a probed object and have no record in ``procs`` (never gputop itself)
    idle: dict[int, IdleProc] = field(default_factory=dict)
    #: process records that could not be stored since start (a process without one may have called)
    procs_dropped: int = 0
    #: processes that exec'd since the last reading (their command line, user... are read again)
    execed: frozenset[int] = frozenset()


#: the programs attached at function return (uretprobes): each hit also pays the return trap
_RETURN_FNS = frozenset(p.ret for p in catalogue.ALL if p.ret)

_SCALARS = ("launches", "graph_launches", "captured_launches", "alloc_calls", "alloc_bytes", "free_calls",
            "live_bytes", "managed_alloc_calls", "managed_alloc_bytes", "uvm_cpu_faults", "sync_calls",
            "sync_ns", "grid_sum", "block_sum", "graph_kernel_launches", "graph_unknown_launches")


class _Event(ctypes.Structure):
    """bpf/gputop.bpf.c's event_t."""
    _fields_ = (("ts", ctypes.c_uint64), ("tgid", ctypes.c_uint32), ("type", ctypes.c_uint16),
                ("gen", ctypes.c_uint16))


class _FileEvent(ctypes.Structure):
    """bpf/gputop.bpf.c's file_event_t (type EV_FILE)."""
    _fields_ = (("h", _Event), ("dev", ctypes.c_uint64), ("ino", ctypes.c_uint64), ("depth", ctypes.c_uint32),
                ("complete", ctypes.c_uint32), ("names", (ctypes.c_char * PATH_NAME) * PATH_DEPTH))


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
                 clock: Callable[[], float] = time.monotonic, uprobe_links: bool = True) -> None:
        self._limits = {**LIMITS, **(limits or {})}
        self._want_uvm = uvm
        self._uprobe_links = uprobe_links       # uprobe_multi links where the kernel has them
        #: kernel struct offsets (BTF) for naming the files processes map; None: not named (read at start)
        self.file_offsets: dict[str, int] | None = None
        self._offsets_read = False
        #: seconds each start-up step took (bench/startup.py), and how the program was made (compilecache)
        self.startup_s: dict[str, float] = {}
        self.compiled: str | None = None
        self.startup_released_bytes = 0       # the compiler's pages handed back after the compile
        self.startup_rss_bytes: dict[str, int] = {}     # resident memory after each start-up step
        self._prefetched: dict[tuple[int, int], symbols.ObjectSymbols | None] = {}
        self._reads = ObjectReads()           # object reads off the collector's path (objreads.py)
        self._pending: dict[tuple[int, int], discovery.ObjectRef] = {}    # objects still being read
        #: files the BPF side named because they were not classified: key -> (pid, names or None)
        self._unknown_files: dict[tuple[int, int], tuple[int, list[bytes] | None]] = {}
        self.uprobes: UprobeAttacher | None = None
        self._lock = threading.RLock()
        self._clock = clock
        self.bpf: Any = None
        self.headers: kheaders.HeadersChoice | None = None
        self.objects: dict[tuple[int, int], str] = {}        # probed objects -> path
        self.rejected: set[tuple[int, int]] = set()           # objects without CUDA entry points
        self.uvm_cpu_faults = False
        self._gaps: str | None = None         # why some processes may go untraced (capabilities)
        self.cost = SelfCost(self._prog_stats, clock)
        self._snapshots = 0                       # reads so far (the trap calibration waits for one)
        self._symcache: dict[tuple[int, int], symbols.ObjectSymbols | None] = {}
        self._maps: dict[int, list[discovery.Mapping]] = {}   # last known executable maps by pid
        self._cuda_pids: set[int] = set()         # processes whose known maps hold a probed object
        #: processes with no record whose exit was seen: pid -> whether a read reported it yet
        self._idle_exited: dict[int, bool] = {}
        self._code_done: set[tuple[int, int, tuple[int, int]]] = set()
        self._code_dropped = 0
        self._layers = False        # the BPF side told a driver-level layer is probed (rule 7)
        self._memory_stale = False  # names being resolved for an old image (_old_names)
        self._objects_dropped = 0               # objects that went unprobed for want of descriptors
        self._fd_starved: set[tuple[int, int]] = set()      # those mapped now
        #: the keys of the ``code`` trie by process: only user space writes that trie, so a
        #: process's entries are deleted by key, without a walk through everyone's
        self._code_keys: dict[int, list[bytes]] = {}
        self._partial: set[int] = set()       # processes already running CUDA when gputop attached
        self._rescan: set[int] = set()
        self._reimage: set[int] = set()           # identities (procid) whose exec replaced their image
        self._execed: set[int] = set()            # processes that exec'd since the last read()
        self._scanned_ns: dict[int, int] = {}     # CLOCK_MONOTONIC ns of each process's last scan
        self._exited: set[int] = set()            # identities (procid) whose exit event came
        self._final: dict[int, RawProc] = {}      # last records of exited processes, until shown
        #: the newest generation each PID's events or records showed (procid): a newer one than an
        #: exited identity's means the PID is a new process's already
        self._newest_gen: dict[int, int] = {}
        #: the identity of the record each PID's row came from in the last read (forget() deletes that
        #: one), and of processes that exited without a record
        self._reported: dict[int, int] = {}
        self._idle_gen: dict[int, int] = {}
        #: the generation whose names a pid's kernels are being resolved with (_by_key), and the one
        #: whose maps and listing user space holds under each pid (_scan)
        self._naming_gen: dict[int, int] = {}
        self._state_gen: dict[int, int] = {}
        #: PIDs user space still knows whose events came from a newer generation: a new process there
        #: (a late scan of a process already gone reads its PID's next generation, and announces none)
        self._announced: dict[int, int] = {}
        self._last_full_scan = 0.0
        self.slots = LaunchSlots(self.table)      # the launch fast path's slots (launchslots.py)
        self.gens = PidGens(self.table)           # each PID's generation (procid.py)
        self._scan_gens: Callable[[int], int] | None = None     # generations as the scan under way began
        self.namer = KernelNamer(self._captured_name, self._alias, self._symcache, self._maps,
                                 read=lambda key, fd, path: self._reads.read(key, fd, path, cuda_only=False))
        #: reads of processes' memory (kernel names at their registration), bounded in time
        self._mem_reads = BoundedCalls("gputop-mem", MEM_READ_S)
        self.graph_kernels = GraphKernels(self.table)

    # ------------------------------------------------------------ set-up

    def cflags(self) -> list[str]:
        if not self._offsets_read:      # read at start (not in the constructor, on the UI thread)
            self.file_offsets = compilecache.file_offsets(btf.file_offsets, btf.VMLINUX)
            self._offsets_read = True
        flags = [*(f"-D{k}={v}" for k, v in self._limits.items()), *abi.cflags(), QUIET,
                 f"-DPID_GEN_WORDS={pid_gen_words()}"]
        if self.uvm_cpu_faults:
            flags.append("-DUVM_CPU_FAULTS")
        if atomic_cmpxchg() is False:
            flags.append(NO_CMPXCHG)
        if self.file_offsets:
            flags += ["-DFILE_KEYS", *(f"-D{k}={v}" for k, v in self.file_offsets.items())]
        return flags

    def program_text(self) -> str:
        return program_path().read_text()

    def start(self) -> None:
        """Check, compile, load and attach; then probe every CUDA object already mapped.

        The ELF objects processes map are read on another thread while the program compiles
        (libbcc's compile releases the GIL). Raises BpfUnavailable with the reason and a hint.
        """
        steps = Steps(self.startup_s, self.startup_rss_bytes)
        raise_fd_limit()
        refusal = privileges_error()
        if refusal is not None:
            raise BpfUnavailable(refusal, ENABLE_HINT, noperm=True)
        gaps = coverage_gaps()
        self._gaps = (f"missing {', '.join(gaps)}: processes whose CUDA library exists only in a container, or was "
                      "deleted or replaced since they loaded it, may go untraced" if gaps else None)
        reader = Prefetch()
        try:
            bcc = load_bcc()
            steps("load_bcc")
            err = ensure_tracefs()
            if err:
                raise BpfUnavailable(err, "mount -t tracefs nodev /sys/kernel/tracing")
            self.headers = use_headers()
            if self.headers.kind == "missing":
                raise BpfUnavailable(f"bcc needs kernel headers: {self.headers.detail}",
                                     "install linux-headers for your kernel (./gputop.sh does it)")
            self.uvm_cpu_faults = self._want_uvm and tracepoint_exists("exceptions", "page_fault_user")
            self.cflags()                       # reads the BTF offsets
            steps("headers_btf")
            try:
                self.bpf, self.compiled = compilecache.compile_program(bcc, self.program_text().encode(), self.cflags(),
                                                                   self.headers.path, TRACEFS)
            except Exception as e:
                raise BpfUnavailable(f"compiling the BPF program failed: {e}",
                                     f"check the kernel headers ({self.headers.detail}); run gputop doctor") from e
            steps("compile")
        finally:
            self._prefetched = reader.result()
        steps("elf_wait")
        release_heap()
        self.startup_released_bytes = release_compiler_pages()
        steps("release")
        # bcc's own exit hook would detach the probes again, racing with close() on another thread
        atexit.unregister(self.bpf.cleanup)
        atexit.register(self.close)
        self.uprobes = UprobeAttacher(self.bpf, bcc.lib, links=self._uprobe_links)
        self.cost.tick()
        self.table("events").open_ring_buffer(self._on_event)
        with self._reads.budget(START_WAIT_S):
            self.scan()
        self._prefetched = {}
        self._last_full_scan = self._clock()
        steps("attach")
        self.startup_s["elf_read"] = reader.elapsed_s

    def table(self, name: str) -> Any:
        return self.bpf[name.encode()]

    # ------------------------------------------------------------ discovery

    def _on_event(self, _cpu: int, data: Any, size: int) -> None:
        ev = ctypes.cast(data, ctypes.POINTER(_Event)).contents
        tgid, kind, gen = int(ev.tgid), int(ev.type), int(ev.gen)
        me = ident(tgid, gen)
        if kind == EV_FILE and size >= ctypes.sizeof(_FileEvent):
            fe = ctypes.cast(data, ctypes.POINTER(_FileEvent)).contents
            names = [bytes(fe.names[i]).split(b"\0", 1)[0] for i in range(min(fe.depth, PATH_DEPTH))]
            key = (discovery.user_dev(int(fe.dev)), int(fe.ino))
            self._unknown_files.setdefault(key, (tgid, names if fe.complete else None))
            kind = EV_MMAP
        if kind not in (EV_EXIT, EV_EXIT_IDLE):
            self._newest_gen[tgid] = gen
            if tgid in self._state_gen and gen != self._state_gen[tgid]:
                self._announced[tgid] = gen     # a new process under a PID user space still knows
        if kind == EV_EXIT:
            self._exited.add(me)
        elif kind == EV_EXIT_IDLE:       # exited without a record
            if tgid in self._cuda_pids:  # listed: its BPF entries go, the listing once read (then forget)
                self._delete_tables(Doomed(frozenset({me})))
                self._idle_exited.setdefault(tgid, False)
                self._idle_gen[tgid] = gen
            else:
                self._forget(Doomed(frozenset({me})))
        elif kind == EV_FORK:
            if discovery.tgid_of(tgid) == tgid:     # a new process, not a thread
                self._rescan.add(tgid)
        else:
            # an exec after the last scan of that process replaced its image (one before it was seen)
            if kind == EV_EXEC:
                self._execed.add(tgid)
            if kind == EV_EXEC and int(ev.ts) > self._scanned_ns.get(tgid, 0):
                self._reimage.add(me)
            self._rescan.add(tgid)

    @_open
    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for exec/mmap/fork/exit events and attach to new CUDA objects.

        Every RESCAN_S, also rescan every process (events can be lost) and sweep dead ones.
        Returns True when something happened (a rescan attached probes or a process exited).
        """
        self.bpf.ring_buffer_poll(max(0, int(timeout_s * 1000)))
        with self._reads.budget():
            return self._after_events()

    def _after_events(self) -> bool:
        # the trap cost (cached per kernel), measured on a background thread once a snapshot is out
        self.cost.tick(self.uprobes.mode if self.uprobes else None, measure=self._snapshots > 0)
        changed = bool(self._exited)
        # exits of processes whose PID is a new process's already: their last records first, before a
        # rescan reads the new process's maps under that PID
        reused = {i for i in self._exited if self._newest_gen.get(pid_of(i), gen_of(i)) != gen_of(i)}
        if reused:
            self._take_final(reused)
            self._exited -= reused
        for me in self._reimage:        # exec: the old image's code ranges and names are gone
            if me not in reused and pid_of(me) not in self._final:
                self._forget_image(me)
        self._reimage.clear()
        if self._rescan:
            pids = sorted(self._rescan)
            self._rescan.clear()
            changed = self.scan(pids) > 0 or changed
        if self._exited:                # after the rescans: the newest maps name their kernels
            self._take_final(self._exited)
            self._exited.clear()
        if self._unknown_files:
            changed = self._reach_unknown() > 0 or changed
        if self._reads.running():
            self._reads.check_stuck()
            changed = self._attach_pending() > 0 or changed
        if self._clock() - self._last_full_scan >= RESCAN_S:
            self._last_full_scan = self._clock()
            changed = self.scan() > 0 or changed
            self._sweep()
        self._newest_gen.clear()        # only an exit handled with these events compares with them
        return changed

    @_open
    def scan(self, pids: list[int] | None = None, *, wait_s: float = WAIT_S) -> int:
        """Probe new CUDA objects mapped by ``pids`` (default: all processes); returns how many.
        An object whose read outlasts ``wait_s`` is probed by a later poll, once read."""
        with self._reads.budget(wait_s):
            return self._scan(pids)

    def _scan(self, pids: list[int] | None) -> int:
        self._scan_gens = self.gens.snapshot()
        try:
            return self._scan_maps(pids)
        finally:
            self._scan_gens = None

    def _scan_maps(self, pids: list[int] | None) -> int:
        known = set(self.objects) | self.rejected
        new = 0
        maps: dict[int, list[discovery.Mapping]] = {}
        before_ns = time.monotonic_ns()
        # every process's maps first: an object's code ranges go in for each process that maps it
        # before its probes are attached (a runtime's call into the driver never counts twice)
        for ref in list(discovery.scan(pids, skip=known, maps_out=maps)):
            users = {p: pm for p, pm in maps.items() if any((m.dev, m.inode) == ref.key for m in pm)}
            if self._attach_object(ref, users):
                new += 1
                # processes that map it already may have allocated before: their live bytes are unknown
                self._partial.update(users)
        for pid, pmaps in maps.items():
            self._keep_names_unmapped(pid, pmaps)
        self._maps.update(maps)
        self._update_cuda_pids(self._maps if new else maps)
        for pid, pmaps in maps.items():
            self._scanned_ns[pid] = before_ns
            self._state_gen[pid] = self._gen_scanned(pid)
            self._add_code_ranges(pid, pmaps)
        return new

    def _update_cuda_pids(self, pids: Iterable[int]) -> None:
        """Whether each of ``pids`` maps a probed object, from its last known maps."""
        for pid in pids:
            if any((m.dev, m.inode) in self.objects for m in self._maps.get(pid, ())):
                self._cuda_pids.add(pid)
            else:
                self._cuda_pids.discard(pid)

    def _attach_object(self, ref: discovery.ObjectRef, users: dict[int, list[discovery.Mapping]] | None = None) -> bool:
        """Probe one object; False if it has no CUDA entry points (or its process just exited:
        then it is not marked, and the next process that maps it brings it back; or its read
        outlasts this scan's wait: then it is attached once read, see objreads).

        The object is opened once, checked on the descriptor (discovery.open_object), and read
        and probed through that descriptor, so a process that exits meanwhile cannot leave it
        half probed, and a file swapped for a FIFO or a symlink is never opened."""
        fd = ref.open()
        if fd is None:
            # its process is gone, and its map_files with it: the same file by its path from here
            here = discovery.same_file(ref)
            if here is None or here == ref.open_path:
                return self._reject(ref)
            return self._attach_object(dataclasses.replace(ref, open_path=here), users)
        try:
            try:
                syms = (self._prefetched.pop(ref.key) if ref.key in self._prefetched
                        else self._reads.read(ref.key, fd, ref.open_path))
            except Pending:
                self._pending[ref.key] = ref
                return False
            self._pending.pop(ref.key, None)
            wanted = catalogue.probes_for(syms.functions, syms.jump_target) if syms else []
            if syms is None or not wanted:
                return self._reject(ref)
            assert self.uprobes is not None
            if not fd_room(2 * len(wanted)):     # at most an entry and a return probe each
                self._fd_starved.add(ref.key)       # no descriptors left for its probes: see fd_room
                return False
            if ref.key in self._fd_starved:          # it was counted dropped: it stays counted
                self._fd_starved.discard(ref.key)
                self._objects_dropped += 1
            syms.path = ref.open_path
            self._symcache[ref.key] = syms
            self.objects[ref.key] = ref.path
            for pid, pmaps in (users or {}).items():      # code ranges first, then the probes
                self._add_code_ranges(pid, pmaps)
            self.uprobes.attach(f"/proc/self/fd/{fd}", [(probe, addr, off) for probe, addr in wanted
                                                         if (off := syms.offset_of_vaddr(addr)) is not None],
                                name=ref.path, owner=ref.key)
        finally:
            os.close(fd)
        self._classified(ref.key, probed=True)
        return True

    def _attach_pending(self) -> int:
        """Probe the objects whose reads finished after their scan stopped waiting."""
        new = 0
        for key in self._reads.done():
            ref = self._pending.pop(key, None)
            if ref is not None and key not in self.objects and key not in self.rejected:
                users = {p: pm for p, pm in self._maps.items() if any((m.dev, m.inode) == key for m in pm)}
                if self._attach_object(ref, users):
                    new += 1
                    self._partial.update(users)
            self._reads.discard(key)        # used above, or its object is gone (or known already)
        if new:
            self._update_cuda_pids(self._maps)
        return new

    def _reject(self, ref: discovery.ObjectRef) -> bool:
        if os.path.exists(ref.open_path):       # readable: really not a CUDA object
            self.rejected.add(ref.key)
            self._classified(ref.key, probed=False)
        return False

    def _classified(self, key: tuple[int, int], *, probed: bool) -> None:
        """Tell the BPF side: its mappings start a rescan (probed) or no event at all."""
        if not self.file_offsets:
            return
        table = self.table("known_files")
        k = table.Key(discovery.kernel_dev(key[0]), key[1])
        with contextlib.suppress(Exception):    # full: its mappings keep sending events, as before
            table[k] = ctypes.c_uint8(1 if probed else 2)

    def _reach_unknown(self) -> int:
        """Probe the files the BPF side named that the rescans did not classify: their processes
        were gone before their maps could be read. Each is reached through the same path in
        gputop's own mount namespace (same device and inode); otherwise another process that maps
        it may: the full rescan comes early. Returns how many objects were probed."""
        pending, self._unknown_files = self._unknown_files, {}
        new = 0
        for key, (pid, names) in pending.items():
            if key in self.objects or key in self.rejected:
                continue
            ref = discovery.reach(key[0], key[1], names, pid) if names else None
            if ref is None:
                self._last_full_scan = min(self._last_full_scan, self._clock() - RESCAN_S + EARLY_RESCAN_S)
                continue
            if ref.key in self.objects or ref.key in self.rejected:
                self._classified(key, probed=ref.key in self.objects)    # the same file on a stacked fs
            elif self._attach_object(ref):
                new += 1
                if ref.key != key:
                    self._classified(key, probed=True)
        return new

    def _layers_on(self) -> None:
        """A driver-level layer's code is in a process: the BPF side checks for its tail calls (rule 7)."""
        if not self._layers:
            with contextlib.suppress(KeyError):     # a program without the map (bench/probe_cost.py --before)
                self.table("layers")[ctypes.c_int(0)] = ctypes.c_uint32(1)
            self._layers = True

    def _add_code_ranges(self, pid: int, maps: list[discovery.Mapping]) -> None:
        """Tell the BPF side where the runtime's and driver's code lies in ``pid`` (see code_kind)."""
        code = self.table("code")
        gen = self._gen_scanned(pid)
        me = ident(pid, gen)
        # the key's owner: tgid and generation, big-endian (tgid alone in a program without generations)
        owner = pid.to_bytes(4, "big") + (gen.to_bytes(4, "big") if len(code.Key().data) == 16 else b"")
        added = False
        for m in maps:
            key = (m.dev, m.inode)
            syms = self._symcache.get(key)
            if key not in self.objects or syms is None or (pid, m.start, key) in self._code_done:
                continue
            self._code_done.add((pid, m.start, key))
            kind = ctypes.c_uint32(CODE_LAYER if syms.driver_layer else CODE_CUDA)
            if kind.value == CODE_LAYER:
                self._layers_on()
            for start, end in syms.cuda_code_runs():
                lo, hi = syms.offset_of_vaddr(start), syms.offset_of_vaddr(end - 1)
                if lo is None or hi is None:
                    continue
                lo, hi = max(lo, m.offset), min(hi + 1, m.offset + (m.end - m.start))
                if lo >= hi:
                    continue
                for addr, bits in aligned_blocks(m.start + lo - m.offset, m.start + hi - m.offset):
                    k = code.Key()
                    k.prefixlen = 8 * len(owner) + 64 - bits
                    for i, byte in enumerate(owner + addr.to_bytes(8, "big")):
                        k.data[i] = byte
                    try:
                        code[k] = kind
                        added = True
                        self._code_keys.setdefault(me, []).append(bytes(k))
                    except Exception:
                        self._code_dropped += 1
                        return
        if added:
            tracked = self.table("tracked")
            try:
                tracked[tracked.Key(me)] = ctypes.c_uint8(1)
            except Exception:           # full: the kernel will not report this process's exit (the sweep does)
                self._code_dropped += 1

    def _sweep(self) -> None:
        """Forget processes that are gone but left no record to report their exit."""
        procs = self.table("procs")
        alive = set(discovery.all_pids())
        recorded = {pid_of(int(k.value)) for k in procs}
        dead = {pid for pid in {p for p, _s, _k in self._code_done} | set(self._maps)
                if pid not in alive and pid not in recorded}
        # a listed process without a record is reported exited by one read before it goes
        for pid in dead & self._cuda_pids:
            self._idle_exited.setdefault(pid, False)
        self._forget(Doomed(pids=frozenset(pid for pid in dead
                                           if self._idle_exited.get(pid, True) and pid not in self._final)))
        self._release_unmapped()

    def _release_unmapped(self) -> None:
        """Detach and forget the objects no known process maps any more (after a full scan): an
        object comes back with the next process that maps it (its mapping starts a rescan), and
        a user who made many crafted ones leaves neither probes nor descriptors behind."""
        mapped = {(m.dev, m.inode) for pmaps in self._maps.values() for m in pmaps}
        for key in [k for k in self.objects if k not in mapped and k not in self._pending]:
            assert self.uprobes is not None
            self.uprobes.detach(key)
            del self.objects[key]
        for key in [k for k in self._symcache if k not in mapped and k not in self.objects]:
            del self._symcache[key]         # programs named from: read again if mapped again
        self.rejected &= mapped
        self._objects_dropped += len(self._fd_starved - mapped)
        self._fd_starved &= mapped
    # ------------------------------------------------------------ reading

    def _prog_stats(self) -> ProgStats | None:
        """Run time and runs of gputop's programs by kind (they grow only while statistics are on);
        None once closed (a statistics window may close on its timer thread)."""
        with self._lock:
            if self.bpf is None:
                return None
            ns, runs = [0, 0, 0], [0, 0, 0]
            for name, fn in self.bpf.funcs.items():
                st = prog_run_stats(fn.fd)
                if st:
                    kind = 2 if name.startswith(b"tracepoint__") else 1 if name.decode() in _RETURN_FNS else 0
                    ns[kind] += st[0]
                    runs[kind] += st[1]
            return ProgStats(sum(ns), runs[0], runs[1], runs[2], other_ns=ns[2])

    def hit_totals(self) -> tuple[int, int] | None:
        """Runs of gputop's uprobe programs since they were loaded: (at entry, at return), exact; None
        for a program without the counters (bench/probe_cost.py --before an older one)."""
        try:
            hits = self.table("hits")
        except KeyError:
            return None
        return int(hits.sum(hits.Key(HIT_ENTRY)).value), int(hits.sum(hits.Key(HIT_RETURN)).value)

    def dropped(self) -> dict[str, int]:
        table = self.table("dropped")
        out = {name: int(table[table.Key(i)].value) for i, name in enumerate(DROP_KINDS)}
        out["code"] = self._code_dropped
        out["objects"] = self._objects_dropped + len(self._fd_starved)
        return out

    def _gen_now(self, pid: int) -> int:
        """The generation the BPF side gives ``pid`` now (0 for a program without generations)."""
        return self.gens.gen(pid)

    def _gen_scanned(self, pid: int) -> int:
        """The generation of the process whose maps the scan under way read under ``pid``: its events'
        (they name it), else the PID's as the scan began (a process that exits while its maps are read
        moves its PID's on: its state must keep its own)."""
        gen = self._newest_gen.get(pid)
        if gen is not None:
            return gen
        return self._scan_gens(pid) if self._scan_gens is not None else self._state_gen.get(pid, self._gen_now(pid))

    def _inflight_sync_ns(self) -> dict[int, int]:
        """Time spent so far in syncs that have not returned, by process (a hung sync shows)."""
        now = time.monotonic_ns()            # CLOCK_MONOTONIC, as bpf_ktime_get_ns
        out: dict[int, int] = {}
        for k, v in self.table("pend_sync").items():
            if v.depth > 0 and 0 < v.ts <= now:
                tgid = int(k.value) >> 32
                out[tgid] = out.get(tgid, 0) + now - int(v.ts)
        return out

    @_open
    def read(self) -> BpfReading:
        with self._reads.budget():
            return self._read()

    def _read(self) -> BpfReading:
        self.namer.begin_refresh()
        procs: dict[int, RawProc] = {}
        # the records before their kernels: a record that says its process exited was read after
        # its every launch, so the kernel entries read next hold them all (the other way round, a
        # process exiting in between showed exited with part of its launches, then was forgotten)
        records = self._one_record_per_pid(self.table("procs").items())
        kernels = self.slots.counts(self.table("kernels").items())
        inflight = self._inflight_sync_ns()
        self._reported = {}
        for me, v in records.items():
            pid = pid_of(me)
            self._reported[pid] = me
            procs[pid] = self._raw(me, v, kernels, inflight.get(pid, 0) if not v.exited_ns else 0)
        # the last records of processes that exited (their PID may already be a new process's,
        # whose record is reported once the old one was shown: forget())
        procs.update(self._final)
        procs = self._with_graph_kernels(procs)
        drops = self.dropped()
        dropped = sum(drops.values())
        me = os.getpid()
        idle = {pid: IdleProc(pid, pid in self._idle_exited, pid not in self._partial)
                for pid in sorted(self._cuda_pids) if pid not in procs and pid != me}
        for pid in self._idle_exited:
            self._idle_exited[pid] = True
        up = self.uprobes
        failed = up.failed if up else []
        reason = (f"{len(failed)} probe(s) did not attach, first: {failed[0]}" if failed else self._gaps)
        status = SourceStatus("ok", reason, objects=len(self.objects), probes=self.probes, dropped=dropped,
                              headers=self.headers.detail if self.headers else None,
                              attach=up.mode if up else None, probes_failed=len(up.failed) if up else None)
        self._snapshots += 1
        hits = self.hit_totals()
        if hits is not None:
            self.cost.observe(*hits)
        return BpfReading(status, procs, self.uvm_cpu_faults, self.cost.ns_per_s, self.cost.hits_per_s,
                          cost_ns_per_s=self.cost.cost_ns_per_s,
                          trap_ns=self.cost.trap.trap_ns if self.cost.trap else None,
                          stats_age_s=self.cost.stats_age_s(),
                          idle=idle, procs_dropped=drops["procs"], execed=self._take_execed())

    def _one_record_per_pid(self, items: Iterable[tuple[Any, Any]]) -> dict[int, Any]:
        """The record each PID's row shows now, by identity: a PID whose exited process's record is
        still to be shown (a final, or a record whose exit event is not handled yet) shows that one;
        the new process under it is shown once that one was (forget())."""
        best: dict[int, tuple[int, Any]] = {}
        for k, v in items:
            me = int(k.value)
            pid = pid_of(me)
            if pid in self._final:
                continue
            have = best.get(pid)
            # the exited one first, the earliest exit of several
            if have is None or (v.exited_ns and (not have[1].exited_ns or v.exited_ns < have[1].exited_ns)):
                best[pid] = (me, v)
        return dict(best.values())

    def _take_execed(self) -> frozenset[int]:
        execed, self._execed = frozenset(self._execed), set()
        return execed

    def baseline(self) -> dict[int, RawProc]:
        """Every process record as it stands, without names and without touching what read()
        reports once: where the first interval starts (counts made while the probes were being
        attached belong to the totals, not to an interval of known length)."""
        records = self._one_record_per_pid(self.table("procs").items())
        kernels = self.slots.counts(self.table("kernels").items())
        return {pid_of(me): self._raw(me, v, kernels, 0, named=False) for me, v in records.items()}

    def _raw(self, me: int, v: Any, kernels: SlotCounts, inflight_ns: int, named: bool = True) -> RawProc:
        """The counters of one process record ``v`` (identity ``me``) and its kernels' entries and launch
        slots."""
        pid = pid_of(me)
        self._naming_gen[pid] = gen_of(me)
        counters = {name: int(getattr(v, name)) for name in _SCALARS}
        counters["sync_ns"] += inflight_ns
        ks = sorted(kernels.kernels.get(me, ()), key=lambda kv: -int(kv[1].launches))
        for _addr, kv in ks:            # the record holds only the kernel table's overflow
            counters["launches"] += int(kv.launches)
            counters["grid_sum"] += int(kv.grid_sum)
            counters["block_sum"] += int(kv.block_sum)
        return RawProc(
            pid=pid,
            counters=counters,
            memcpy_calls=tuple(int(x) for x in v.memcpy_calls),
            memcpy_bytes=tuple(int(x) for x in v.memcpy_bytes),
            prefetch_calls=tuple(int(x) for x in v.prefetch_calls),
            prefetch_bytes=tuple(int(x) for x in v.prefetch_bytes),
            grid_hist=kernels.grid_hist(me, v.grid_hist),
            block_hist=kernels.block_hist(me, v.block_hist),
            copy_hist=tuple(tuple(int(x) for x in v.copy_hist[d * NB:(d + 1) * NB]) for d in range(NDIR)),
            exited=bool(v.exited_ns),
            kernels=tuple(self._kernel(pid, addr, kv, named and i < NAMED_KERNELS) for i, (addr, kv) in enumerate(ks)),
            comm=bytes(v.comm).split(b"\0", 1)[0].decode("utf-8", "replace"),
            complete=pid not in self._partial,
        )

    def _take_final(self, idents: set[int]) -> None:
        """At their exit: keep the last records of the processes ``idents`` (with their kernels'
        names) and delete everything the kernel holds about them. (A new process under one of these
        PIDs has its own generation: its counts never reached these.) A PID whose earlier final is
        still to be shown keeps this one in the kernel meanwhile: read() shows it next."""
        table = self.table("procs")
        records: dict[int, Any] = {}
        for me in sorted(idents):
            if pid_of(me) in self._final or any(pid_of(r) == pid_of(me) for r in records):
                continue
            try:
                records[me] = table[table.Key(me)]
            except KeyError:                    # shown and forgotten already
                continue
        if not records:
            return
        kernels = self.slots.counts(self.table("kernels").items(), set(records))
        for me, v in records.items():           # their names are kept as read now, from their last maps
            with self._named_as_gone(me, self._maps.get(pid_of(me), [])), self.namer.own_budget():
                self._final[pid_of(me)] = self._raw(me, v, kernels, 0)
        self._forget(Doomed(frozenset(records)))

    def _kernel(self, pid: int, addr: int, v: Any, named: bool) -> RawKernel:
        name, obj = self.namer.name(pid, addr) if named else (None, None)
        return RawKernel(addr, int(v.launches), int(v.grid_sum), int(v.block_sum), name, obj)

    def _by_key(self, name: str, pid: int, addr: int) -> Any:
        """The value at (pid, addr) of a (tgid, address)-keyed table, or None."""
        table = self.table(name)
        gen = self._naming_gen.get(pid)
        try:
            return table[table.Key(pid, self._gen_now(pid) if gen is None else gen, addr)]
        except KeyError:
            return None

    def _captured_name(self, pid: int, addr: int) -> bytes | None:
        """The name the BPF side captured: at the call (driver look-ups) or at the kernel's first launch
        (registrations, up to NAME_LEN - 1 bytes); a registered name that fills it is read whole from
        the process's memory while the process still holds it."""
        v = self._by_key("names", pid, addr)
        copy = bytes(v.name) if v is not None else None
        if copy is not None and len(copy.split(b"\0", 1)[0]) < NAME_LEN - 1:
            return copy
        p = self._by_key("name_ptrs", pid, addr)        # registered: read from the process itself
        if p is None or self._memory_stale:
            return copy
        ptr, boot_ns = int(p.ptr), int(p.boot_ns)
        whole = self._mem_reads.call(lambda: discovery.read_registered_name(pid, ptr, boot_ns))
        return copy if whole is None else whole

    def _alias(self, pid: int, addr: int) -> int | None:
        v = self._by_key("aliases", pid, addr)
        return None if v is None else int(v.value)

    def _with_graph_kernels(self, procs: dict[int, RawProc]) -> dict[int, RawProc]:
        """Each process's kernels with the launches they made inside graph launches."""
        graph = self.graph_kernels.read()
        out: dict[int, RawProc] = {}
        for pid, raw in procs.items():
            kept, funcs = self.graph_kernels.kept(pid) if raw.exited and pid not in graph else (False, None)
            if pid in graph:
                funcs = graph[pid]
            elif not kept:
                out[pid] = raw
                continue
            ks = {k.key: k for k in raw.kernels}
            for f, n in (funcs or {}).items():
                k = ks.get(f)
                ks[f] = dataclasses.replace(k, graph_launches=n) if k else RawKernel(f, 0, 0, 0, None, None, n)
            top = sorted(ks.values(), key=lambda k: (-(k.launches + k.graph_launches), k.key))
            named = [self._named(pid, k, kept) if i < NAMED_KERNELS and k.name is None else k
                     for i, k in enumerate(top)]
            out[pid] = dataclasses.replace(raw, kernels=tuple(named), graph_kernels_known=funcs is not None)
        self.graph_kernels.retain({pid for pid, raw in procs.items() if raw.exited})
        return out

    def _named(self, pid: int, k: RawKernel, kept: bool) -> RawKernel:
        """``k`` with its name (an exited process's kept with its graph kernels: its maps are gone)."""
        name_obj = (self.graph_kernels.kept_name(pid, k.key) if kept else None) or self.namer.name(pid, k.key)
        return dataclasses.replace(k, name=name_obj[0], object=name_obj[1])

    # ------------------------------------------------------------ forgetting

    def _delete_by_pid(self, doomed: Doomed, tables: tuple[str, ...]) -> None:
        """Delete the entries of the processes ``doomed`` names from (process, address)-keyed tables:
        one walk per table, in batches of keys where the kernel has batch operations (a process that
        imported torch leaves ~100,000 registrations: key by key, their walk took seconds)."""
        for name in tables:
            table = self.table(name)
            if not self._delete_by_pid_batched(table, doomed):
                for k in [k for k in table if doomed.hit(key_ident(k))]:
                    table.pop(k, None)

    @staticmethod
    def _delete_by_pid_batched(table: Any, doomed: Doomed) -> bool:
        """The same walk through BPF_MAP_LOOKUP_BATCH and BPF_MAP_DELETE_BATCH; False when the
        kernel, map or libbcc (``batch_ops``) cannot (then nothing was deleted). A key's first 8 bytes
        are its identity."""
        lib = load_bcc().lib
        if not batch_ops(lib):
            return False
        size, at = ctypes.sizeof(table.Key), table.Key.tgid.offset
        chunk = _BATCH
        keys, values = _batch_buffers(size, ctypes.sizeof(table.Leaf))
        token, first, doomed_keys = ctypes.c_uint32(0), True, []
        while True:
            count = ctypes.c_uint32(chunk)
            rc = lib.bpf_lookup_batch(table.map_fd, None if first else ctypes.byref(token), ctypes.byref(token),
                                      keys, values, ctypes.byref(count))
            err = ctypes.get_errno()
            if rc != 0 and err != errno.ENOENT:
                if first:
                    return False
                break                                   # cut short: what was found still goes
            raw = ctypes.string_at(keys, count.value * size)
            doomed_keys += [raw[i:i + size] for i in range(0, len(raw), size)
                            if doomed.hit(int.from_bytes(raw[i + at:i + at + 8], sys.byteorder))]
            first = False
            if rc != 0:                                 # ENOENT: the walk is over
                break
        for i in range(0, len(doomed_keys), chunk):
            part = b"".join(doomed_keys[i:i + chunk])
            n = ctypes.c_uint32(len(part) // size)
            lib.bpf_delete_batch(table.map_fd, ctypes.create_string_buffer(part, len(part)), ctypes.byref(n))
        return True

    def _delete_ranges(self, doomed: Doomed, tables: tuple[str, ...]) -> None:
        """The same for the LPM tries, whose keys start with the tgid and generation (big-endian);
        the ``code`` trie's by the keys user space put there (``_code_keys``), the BPF side adds none."""
        for name in tables:
            table = self.table(name)
            if name == "code":
                for me in [me for me in self._code_keys if doomed.hit(me)]:
                    for raw in self._code_keys.pop(me):
                        with contextlib.suppress(KeyError):
                            del table[table.Key.from_buffer_copy(raw)]
                continue
            wide = len(table.Key().data) == 16      # tgid, gen, address (a program without generations: no gen)
            for k in [k for k in table if doomed.hit_pid_gen(int.from_bytes(bytes(k.data[:4]), "big"),
                                                             int.from_bytes(bytes(k.data[4:8]), "big") if wide else 0)]:
                table.pop(k, None)

    def _launched(self, me: int) -> list[int]:
        """Addresses of the kernels process ``me`` launched (each pair has a kernels entry from its first launch)."""
        return sorted({int(k.addr) for k in self.table("kernels") if key_ident(k) == me})

    def _keep_names_unmapped(self, pid: int, now: list[discovery.Mapping]) -> None:
        """Mappings of ``pid`` that are gone since its last scan (an exec, a library unloaded): the
        kernels it launched from them keep the names their old mappings give them."""
        before = self._maps.get(pid)
        if not before:
            return
        still = {(m.dev, m.inode, m.start) for m in now}
        gone = [m for m in before if (m.dev, m.inode, m.start) not in still]
        if not gone:
            return
        me = ident(pid, self._gen_scanned(pid))
        addrs = [a for a in self._launched(me) if any(m.start <= a < m.end for m in gone)]
        if addrs:
            self.namer.keep(pid, self._old_names(me, addrs, before))

    def _old_names(self, me: int, addrs: list[int], maps: list[discovery.Mapping]) -> dict[int, Resolved]:
        """Names of kernels an exec or an unmapping took away, from ``maps`` (the old ones) and what
        the BPF side captured; never from the process's memory, which may be another program's now."""
        with self._named_as_gone(me, maps):
            return self.namer.names_in(pid_of(me), addrs, maps)

    @contextlib.contextmanager
    def _named_as_gone(self, me: int, maps: list[discovery.Mapping]) -> Iterator[None]:
        """Kernel names of process ``me``, whose program is gone (an exec, an exit: its PID may be a new
        process's already): from ``maps`` (its last) and what the BPF side captured under its
        generation, never from what the PID maps or holds in memory now."""
        self._memory_stale = True
        self._naming_gen[pid_of(me)] = gen_of(me)
        try:
            with self.namer.maps_as(pid_of(me), maps):
                yield
        finally:
            self._memory_stale = False

    def _forget_image(self, me: int) -> None:
        """After an exec of process ``me``: the code ranges and kernel names of the old program no
        longer apply to new launches. The kernels it launched keep their names, resolved now with the
        old image: the names the BPF side captured (at registration look-ups, at each kernel's first
        launch) and the old program's symbols (its maps as last scanned); not from the process's
        memory, which is the new program's now."""
        pid, only = pid_of(me), Doomed(frozenset({me}))
        self._delete_by_pid(only, ("name_ptrs",))
        # names kept already (a scan saw the new image first: _keep_names_unmapped) come first
        named = self._old_names(me, self._launched(me), self._maps.get(pid, []))
        self._delete_ranges(only, ("code",))
        self._delete_by_pid(only, ("names", "aliases"))
        self._code_done = {c for c in self._code_done if c[0] != pid}
        self.namer.forget(pid)
        self.namer.keep(pid, named)

    def _delete_tables(self, doomed: Doomed) -> None:
        """Delete what the BPF side holds about processes that are gone."""
        gone = set(doomed.all_pids)
        self.graph_kernels.keep(gone, self.namer.name)
        for name in ("procs", "tracked"):
            table = self.table(name)
            for me in doomed.idents:
                table.pop(table.Key(me), None)
            if doomed.pids:
                for k in [k for k in table if pid_of(int(k.value)) in doomed.pids]:
                    table.pop(k, None)
        self.slots.forget(doomed)           # their launch slots, and captures they left under way
        self._delete_by_pid(doomed, ("kernels", "names", "name_ptrs", "aliases", "allocs", "joined",
                                     "capture_events", *GRAPH_TABLES))
        self._delete_ranges(doomed, ("ranges", "code"))
        self._code_done = {c for c in self._code_done if c[0] not in gone}
        for pid in gone:
            self.namer.forget(pid)

    @_open
    def forget(self, *pids: int) -> None:
        """Remove every record of processes that are gone (after their last interval was shown): the
        process whose row the last read showed under each PID, not a new process that has it now."""
        idents, anyone = set(), set()
        for pid in pids:
            if self._final.pop(pid, None) is not None:      # taken at exit: the kernel's entries went then
                continue
            me = self._reported.pop(pid, None)
            if me is None:
                me = self._idle_gen_ident(pid)
            if me is None:
                anyone.add(pid)
            else:
                idents.add(me)
        self._forget(Doomed(frozenset(idents), frozenset(anyone)))

    def _idle_gen_ident(self, pid: int) -> int | None:
        gen = self._idle_gen.get(pid)
        return None if gen is None else ident(pid, gen)

    def _forget(self, doomed: Doomed) -> None:
        if not doomed:
            return
        self._delete_tables(doomed)
        for pid in doomed.all_pids:
            self._naming_gen.pop(pid, None)
            gen = self._state_gen.get(pid)
            if gen is not None and not doomed.hit(ident(pid, gen)) and self._announced.get(pid) == gen:
                continue        # what user space knows of this PID is a newer process's: it stays
            self._announced.pop(pid, None)
            self._state_gen.pop(pid, None)
            self._maps.pop(pid, None)
            self._cuda_pids.discard(pid)
            self._idle_exited.pop(pid, None)
            self._idle_gen.pop(pid, None)
            self._scanned_ns.pop(pid, None)
            self._partial.discard(pid)

    @property
    def probes(self) -> int:
        return self.uprobes.probes if self.uprobes is not None else 0

    def close(self) -> None:
        """Detach and unload everything. Safe to call twice, and from the exit hook while the
        collector thread is still busy: it waits for the collector's current call to finish."""
        with self._lock:
            bpf, self.bpf = self.bpf, None
            try:
                if bpf is not None:
                    atexit.unregister(self.close)
                    if self.uprobes is not None:
                        self.uprobes.detach_all()
            finally:
                if bpf is not None:
                    self.slots.close()
                    self.gens.close()
                    bpf.cleanup()
                self.cost.stop()
                self._reads.close()
                self._mem_reads.close()
