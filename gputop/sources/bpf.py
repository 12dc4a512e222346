"""The BPF source: loads ``bpf/gputop.bpf.c`` with bcc, attaches probes, reads maps into counters.

The only module that imports ``bcc``, and only the distro's (python3-bpfcc): the PyPI package
named ``bcc`` is unrelated, so the module is loaded from the distro's dist-packages directly
without putting the rest of the system's site-packages on the path.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from gputop.model import SourceStatus
from gputop.sources import catalogue, discovery, kheaders, symbols

NDIR = 5
NB = 32
LIMITS = {"MAX_PROCS": 4096, "MAX_KERNELS": 16384, "MAX_ALLOCS": 65536, "MAX_NAMES": 16384,
          "MAX_THREADS": 16384, "MAX_CODE": 262144}
DROP_KINDS = ("procs", "kernels", "names", "allocs", "ranges", "captures")
TRACEFS = Path("/sys/kernel/tracing")
_DIST_DIRS = ("/usr/lib/python3/dist-packages", f"/usr/lib/python3.{sys.version_info.minor}/site-packages",
              "/usr/local/lib/python3/dist-packages", "/usr/lib64/python3/site-packages")


class BpfUnavailable(Exception):
    """BPF cannot run here; the message says why (shown as the source's reason)."""

    def __init__(self, reason: str, hint: str, noperm: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.noperm = noperm


def program_path() -> Path:
    """bpf/gputop.bpf.c in a source checkout, or its copy inside the wheel."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here / "_data" / "bpf" / "gputop.bpf.c", here.parent / "bpf" / "gputop.bpf.c"):
        if cand.is_file():
            return cand
    raise BpfUnavailable("the BPF program bpf/gputop.bpf.c is missing from the installation",
                         "reinstall gputop")


def load_bcc() -> ModuleType:
    """The distro's bcc module (python3-bpfcc), whatever else is called ``bcc`` on sys.path."""
    mod = sys.modules.get("bcc")
    if mod is not None and hasattr(mod, "BPF"):
        return mod
    sys.modules.pop("bcc", None)
    for d in _DIST_DIRS:
        init = Path(d) / "bcc" / "__init__.py"
        if not init.is_file():
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


def has_privileges() -> bool:
    """CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON, in the effective set (root normally has all)."""
    try:
        text = Path("/proc/self/status").read_text()
        eff = int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("CapEff:")), 16)
    except (OSError, StopIteration, ValueError):
        return False
    cap_perfmon, cap_bpf, cap_sys_admin = 38, 39, 21
    return bool(eff & (1 << cap_sys_admin)) or (bool(eff & (1 << cap_bpf)) and bool(eff & (1 << cap_perfmon)))


def ensure_tracefs() -> str | None:
    """Mount tracefs if it is not mounted (bcc needs it for tracepoints); None or an error."""
    if (TRACEFS / "events").is_dir():
        return None
    try:
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True, capture_output=True,
                       timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"tracefs is not mounted at {TRACEFS} and mounting it failed: {e}"
    return None


def use_headers() -> kheaders.HeadersChoice:
    """Choose the kernel headers and point bcc at them (BCC_KERNEL_SOURCE for the fallback)."""
    choice = kheaders.choose()
    os.environ.update(choice.env)
    return choice


def tracepoint_exists(category: str, event: str) -> bool:
    return (TRACEFS / "events" / category / event).is_dir()


# ------------------------------------------------------------------ BPF statistics (self-cost)

_SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_BPF_OBJ_GET_INFO_BY_FD = 15
_BPF_ENABLE_STATS = 32
_libc = ctypes.CDLL(None, use_errno=True)


def enable_stats() -> int | None:
    """Turn on BPF run-time statistics while the returned fd stays open (None if refused)."""
    attr = ctypes.create_string_buffer(128)
    fd = int(_libc.syscall(_SYS_BPF, _BPF_ENABLE_STATS, attr, 4))
    return fd if fd >= 0 else None


def prog_run_stats(fd: int) -> tuple[int, int] | None:
    """(run_time_ns, run_cnt) of a loaded BPF program."""
    info = ctypes.create_string_buffer(256)
    attr = ctypes.create_string_buffer(16)
    ctypes.memmove(attr, ctypes.byref(ctypes.c_uint32(fd)), 4)
    ctypes.memmove(ctypes.addressof(attr) + 4, ctypes.byref(ctypes.c_uint32(256)), 4)
    ctypes.memmove(ctypes.addressof(attr) + 8, ctypes.byref(ctypes.c_uint64(ctypes.addressof(info))), 8)
    if _libc.syscall(_SYS_BPF, _BPF_OBJ_GET_INFO_BY_FD, attr, 16) != 0:
        return None
    run_time_ns = ctypes.c_uint64.from_buffer_copy(info.raw[192:200]).value
    run_cnt = ctypes.c_uint64.from_buffer_copy(info.raw[200:208]).value
    return run_time_ns, run_cnt


# ------------------------------------------------------------------ readings


@dataclass(frozen=True)
class RawKernel:
    key: int                 # host stub address (runtime) or CUfunction handle (driver)
    launches: int
    grid_sum: int
    block_sum: int
    name: str | None         # demangled, or None when unresolved
    object: str | None       # the object holding the stub, when known


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


@dataclass(frozen=True)
class BpfReading:
    status: SourceStatus
    procs: dict[int, RawProc] = field(default_factory=dict)
    run_time_ns: int | None = None      # cumulative BPF run time of gputop's programs
    run_cnt: int | None = None          # cumulative probe hits
    uvm_cpu_faults: bool = False        # whether CPU faults on managed memory are traced


_SCALARS = ("launches", "graph_launches", "captured_launches", "alloc_calls", "alloc_bytes", "free_calls",
            "live_bytes", "managed_alloc_calls", "managed_alloc_bytes", "uvm_cpu_faults", "sync_calls",
            "sync_ns", "grid_sum", "block_sum")


class BpfSource:
    """Owns the BPF object. Not thread-safe: used from the collector thread only."""

    def __init__(self, *, limits: dict[str, int] | None = None, uvm: bool = True) -> None:
        self._limits = {**LIMITS, **(limits or {})}
        self._want_uvm = uvm
        self.bpf: Any = None
        self.headers: kheaders.HeadersChoice | None = None
        self.objects: dict[tuple[int, int], str] = {}        # probed objects -> path
        self.rejected: set[tuple[int, int]] = set()           # objects without CUDA entry points
        self.probes = 0
        self.uvm_cpu_faults = False
        self._stats_fd: int | None = None
        self._names: dict[tuple[int, int], tuple[str | None, str | None]] = {}
        self._symcache: dict[tuple[int, int], symbols.ObjectSymbols | None] = {}
        self._maps: dict[int, list[discovery.Mapping]] = {}   # last known executable maps by pid
        self._rescan: set[int] = set()
        self._code_done: set[tuple[int, int, tuple[int, int]]] = set()
        self._code_dropped = 0
        self._exited: set[int] = set()

    # ------------------------------------------------------------ set-up

    def cflags(self) -> list[str]:
        flags = [f"-D{k}={v}" for k, v in self._limits.items()]
        if self.uvm_cpu_faults:
            flags.append("-DUVM_CPU_FAULTS")
        return flags

    def program_text(self) -> str:
        return program_path().read_text()

    def start(self) -> None:
        """Check, compile, load and attach; then probe every CUDA object already mapped.

        Raises BpfUnavailable with the reason and a hint.
        """
        if not has_privileges():
            raise BpfUnavailable("tracing needs root or CAP_BPF and CAP_PERFMON",
                                 "run gputop as root (sudo), or give it CAP_BPF and CAP_PERFMON", noperm=True)
        bcc = load_bcc()
        err = ensure_tracefs()
        if err:
            raise BpfUnavailable(err, "mount -t tracefs nodev /sys/kernel/tracing")
        self.headers = use_headers()
        if self.headers.kind == "missing":
            raise BpfUnavailable(f"bcc needs kernel headers: {self.headers.detail}",
                                 "install linux-headers for your kernel (./gputop.sh does it)")
        self.uvm_cpu_faults = self._want_uvm and tracepoint_exists("exceptions", "page_fault_user")
        try:
            self.bpf = bcc.BPF(text=self.program_text().encode(), cflags=self.cflags())
        except Exception as e:
            raise BpfUnavailable(f"compiling the BPF program failed: {e}",
                                 f"check the kernel headers ({self.headers.detail}); run gputop doctor") from e
        self._stats_fd = enable_stats()
        self.table("events").open_ring_buffer(self._on_event)
        self.scan()

    def table(self, name: str) -> Any:
        return self.bpf[name.encode()]

    def _on_event(self, _cpu: int, data: Any, _size: int) -> None:
        ev = self.table("events").event(data)
        if ev.type == 3:
            self._exited.add(int(ev.tgid))
        else:
            self._rescan.add(int(ev.tgid))

    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for exec/mmap/exit events and attach to new CUDA objects.

        Returns True when something happened (a rescan attached probes or a process exited).
        """
        self.bpf.ring_buffer_poll(max(0, int(timeout_s * 1000)))
        changed = bool(self._exited)
        self._exited.clear()
        if self._rescan:
            pids = sorted(self._rescan)
            self._rescan.clear()
            changed = self.scan(pids) > 0 or changed
        return changed

    def scan(self, pids: list[int] | None = None) -> int:
        """Probe new CUDA objects mapped by ``pids`` (default: all processes); returns how many."""
        known = set(self.objects) | self.rejected
        new = 0
        maps: dict[int, list[discovery.Mapping]] = {}
        for ref in discovery.scan(pids, skip=known, maps_out=maps):
            if self._attach_object(ref):
                new += 1
        self._maps.update(maps)
        for pid, pmaps in maps.items():
            self._add_code_ranges(pid, pmaps)
        return new

    def _add_code_ranges(self, pid: int, maps: list[discovery.Mapping]) -> None:
        """Tell the BPF side where the runtime's and driver's code lies in ``pid`` (see from_cuda)."""
        code = self.table("code")
        for m in maps:
            key = (m.dev, m.inode)
            if key not in self.objects or (pid, m.start, key) in self._code_done:
                continue
            syms = self._symcache.get(key)
            if syms is None:
                continue
            self._code_done.add((pid, m.start, key))
            for start, end in syms.cuda_code_runs():
                lo, hi = syms.offset_of_vaddr(start), syms.offset_of_vaddr(end - 1)
                if lo is None or hi is None:
                    continue
                lo, hi = max(lo, m.offset), min(hi + 1, m.offset + (m.end - m.start))
                if lo >= hi:
                    continue
                for addr, bits in aligned_blocks(m.start + lo - m.offset, m.start + hi - m.offset):
                    k = code.Key()
                    k.prefixlen = 32 + 64 - bits
                    for i, byte in enumerate(pid.to_bytes(4, "big") + addr.to_bytes(8, "big")):
                        k.data[i] = byte
                    try:
                        code[k] = ctypes.c_uint32(1)
                    except Exception:
                        self._code_dropped += 1
                        return

    def _attach_object(self, ref: discovery.ObjectRef) -> bool:
        if not symbols.mentions_cuda(ref.open_path):
            self.rejected.add(ref.key)
            return False
        syms = symbols.read_symbols(ref.open_path)
        self._symcache[ref.key] = syms
        wanted = catalogue.probes_for(syms.functions, syms.jump_target) if syms else []
        if not wanted:
            self.rejected.add(ref.key)
            return False
        path = ref.open_path.encode()
        for probe, addr in wanted:
            try:
                self.bpf.attach_uprobe(name=path, addr=addr, fn_name=probe.entry.encode(), pid=-1)
                self.probes += 1
                if probe.ret:
                    self.bpf.attach_uretprobe(name=path, addr=addr, fn_name=probe.ret.encode(), pid=-1)
                    self.probes += 1
            except Exception:  # a probe that cannot attach (odd symbol) must not stop the others
                continue
        self.objects[ref.key] = ref.path
        return True

    # ------------------------------------------------------------ reading

    def _stats(self) -> tuple[int | None, int | None]:
        if self._stats_fd is None:
            return None, None
        total_ns = total_cnt = 0
        for fn in self.bpf.funcs.values():
            st = prog_run_stats(fn.fd)
            if st:
                total_ns += st[0]
                total_cnt += st[1]
        return total_ns, total_cnt

    def dropped(self) -> dict[str, int]:
        table = self.table("dropped")
        out = {name: int(table[table.Key(i)].value) for i, name in enumerate(DROP_KINDS)}
        out["code"] = self._code_dropped
        return out

    def read(self) -> BpfReading:
        procs: dict[int, RawProc] = {}
        kernels: dict[int, list[tuple[int, Any]]] = {}
        for k, v in self.table("kernels").items():
            kernels.setdefault(int(k.tgid), []).append((int(k.addr), v))
        for k, v in self.table("procs").items():
            pid = int(k.value)
            counters = {name: int(getattr(v, name)) for name in _SCALARS}
            ks = tuple(self._kernel(pid, addr, kv) for addr, kv in kernels.get(pid, ()))
            procs[pid] = RawProc(
                pid=pid,
                counters=counters,
                memcpy_calls=tuple(int(x) for x in v.memcpy_calls),
                memcpy_bytes=tuple(int(x) for x in v.memcpy_bytes),
                prefetch_calls=tuple(int(x) for x in v.prefetch_calls),
                prefetch_bytes=tuple(int(x) for x in v.prefetch_bytes),
                grid_hist=tuple(int(x) for x in v.grid_hist),
                block_hist=tuple(int(x) for x in v.block_hist),
                copy_hist=tuple(tuple(int(x) for x in v.copy_hist[d * NB:(d + 1) * NB]) for d in range(NDIR)),
                exited=bool(v.exited_ns),
                kernels=ks,
                comm=bytes(v.comm).split(b"\0", 1)[0].decode("utf-8", "replace"),
            )
        run_ns, run_cnt = self._stats()
        dropped = sum(self.dropped().values())
        status = SourceStatus("ok", None, objects=len(self.objects), probes=self.probes, dropped=dropped,
                              headers=self.headers.detail if self.headers else None)
        return BpfReading(status, procs, run_ns, run_cnt, self.uvm_cpu_faults)

    def _kernel(self, pid: int, addr: int, v: Any) -> RawKernel:
        name, obj = self._names.get((pid, addr), (None, None))
        if name is None:
            name, obj = self._resolve(pid, addr)
            if name is not None:
                self._names[(pid, addr)] = (name, obj)
        return RawKernel(addr, int(v.launches), int(v.grid_sum), int(v.block_sum), name, obj)

    def _resolve(self, pid: int, addr: int) -> tuple[str | None, str | None]:
        """Kernel name of a host stub or driver handle: registration/driver names, then ELF symbols."""
        names = self.table("names")
        key = names.Key(pid, 0, addr)
        try:
            raw = names[key].name
            return symbols.demangle_cached(raw.decode("utf-8", "replace")), None
        except KeyError:
            pass
        maps = discovery.read_maps(pid)
        if maps:
            self._maps[pid] = maps
        for m in maps or self._maps.get(pid, []):
            if m.start <= addr < m.end:
                syms = self._symbols_of(pid, m)
                if syms is None:
                    return None, m.path
                vaddr = syms.vaddr_of_offset(addr - m.start + m.offset)
                sym = syms.name_at(vaddr) if vaddr is not None else None
                return (symbols.demangle_cached(sym) if sym else None), m.path
        return None, None

    def _symbols_of(self, pid: int, m: discovery.Mapping) -> symbols.ObjectSymbols | None:
        key = (m.dev, m.inode)
        if self._symcache.get(key) is None:
            path = discovery.open_path(pid, m) or discovery.same_file(m)
            self._symcache[key] = symbols.read_symbols(path) if path else None
        return self._symcache[key]

    def forget(self, pid: int) -> None:
        """Remove every record of an exited process (after its last interval was shown)."""
        self.table("procs").pop(self.table("procs").Key(pid), None)
        for name in ("kernels", "names", "allocs", "capturing"):
            table = self.table(name)
            for k in [k for k in table if int(k.tgid) == pid]:
                table.pop(k, None)
        prefix = pid.to_bytes(4, "big")
        for name in ("ranges", "code"):
            table = self.table(name)
            for k in [k for k in table if bytes(k.data[:4]) == prefix]:
                table.pop(k, None)
        self._code_done = {c for c in self._code_done if c[0] != pid}
        self._names = {k: v for k, v in self._names.items() if k[0] != pid}
        self._maps.pop(pid, None)

    def close(self) -> None:
        if self.bpf is not None:
            self.bpf.cleanup()
            self.bpf = None
        if self._stats_fd is not None:
            os.close(self._stats_fd)
            self._stats_fd = None


def aligned_blocks(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) as aligned power-of-two blocks (addr, log2 size), as the BPF side does."""
    out: list[tuple[int, int]] = []
    a = start
    for k in range(63):
        if a & (1 << k) and a + (1 << k) <= end:
            out.append((a, k))
            a += 1 << k
    for k in range(62, -1, -1):
        if a + (1 << k) <= end:
            out.append((a, k))
            a += 1 << k
    return out
