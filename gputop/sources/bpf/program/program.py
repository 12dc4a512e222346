"""The BPF program: bcc, the kernel headers, the compiler flags, the compile (through the compile
cache) and load, the program's tables by name and its programs' run statistics.

The only module that imports ``bcc``, and only the distro's (python3-bpfcc): the PyPI package
named ``bcc`` is unrelated, so the module is loaded from the distro's dist-packages directly
without putting the rest of the system's site-packages on the path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from gputop.errors import EX_ERROR, EX_NOPERM, GputopError
from gputop.safefiles import untrusted_reason
from gputop.sources.bpf.attach import catalogue
from gputop.sources.bpf.common import abi, btf
from gputop.sources.bpf.common.linux import (
    NO_CMPXCHG,
    TRACEFS,
    atomic_cmpxchg,
    bcc_tracefs,
    compiler_cmpxchg,
    ensure_tracefs,
    prog_run_stats,
    tracepoint_exists,
)
from gputop.sources.bpf.cost.selfcost import ProgStats
from gputop.sources.bpf.lifecycle.procid import pid_gen_words
from gputop.sources.bpf.program import compilecache, ctext, kheaders
from gputop.sources.bpf.program.startup import Steps

#: where distributions put bcc's Python module (pure Python: any interpreter of the host loads it): Debian
#: and Ubuntu's python3-bpfcc, Fedora and RHEL's python3-bcc (under their python3.X), a build from source
#: (/usr/local); in this order, each python3.X this interpreter's first, then the newest
_DIST_GLOBS = ("usr/lib/python3/dist-packages", "usr/lib/python3.*/site-packages", "usr/lib64/python3.*/site-packages",
               "usr/local/lib/python3/dist-packages", "usr/local/lib/python3.*/dist-packages",
               "usr/local/lib/python3.*/site-packages")


def _minor(path: Path) -> int:
    """The X of a python3.X directory on ``path`` (-1: none)."""
    for part in path.parts:
        if part.startswith("python3.") and part[8:].isdigit():
            return int(part[8:])
    return -1


def bcc_dirs(root: str = "/") -> list[str]:
    """The distributions' module directories (``_DIST_GLOBS``) that exist under ``root``, in order. Only
    those whose every directory no other user than root can change (safefiles.untrusted_reason: bcc is
    code run as root; Debian's /usr/local/lib/python3.X is writable by group staff)."""
    out: list[str] = []
    for pattern in _DIST_GLOBS:
        found = sorted(Path(root).glob(pattern), key=lambda p: (_minor(p) != sys.version_info.minor, -_minor(p)))
        out += [str(p) for p in found if p.is_dir() and untrusted_reason(p) is None]
    return out


#: bcc before 0.19 defines __HAVE_BUILTIN_BSWAP*__ that Linux 5.x's compiler-clang.h defines again: 40
#: lines of warnings on stderr at every compile (over the dashboard), nothing wrong
QUIET = "-Wno-macro-redefined"

#: the programs attached at function return (uretprobes): each hit also pays the return trap
_RETURN_FNS = frozenset(p.ret for p in catalogue.ALL if p.ret)


class BpfUnavailable(GputopError):
    """BPF cannot run here; the message says why (shown as the source's reason)."""

    def __init__(self, reason: str, hint: str, noperm: bool = False) -> None:
        super().__init__(reason, hint, EX_NOPERM if noperm else EX_ERROR)
        self.reason = reason
        self.noperm = noperm


def program_path() -> Path:
    """bpf/gputop.bpf.c in a source checkout, or its copy inside the wheel (with bpf/'s headers)."""
    here = Path(__file__).resolve().parents[3]     # the package: gputop/
    for cand in (here / "_data" / "bpf" / "gputop.bpf.c", here.parent / "bpf" / "gputop.bpf.c"):
        if cand.is_file():
            return cand
    raise BpfUnavailable("the BPF program bpf/gputop.bpf.c is missing from the installation",
                         "reinstall gputop")


def program_text(path: Path | None = None) -> str:
    """The program as bcc compiles it: bpf/gputop.bpf.c (or ``path``, another version's, beside its own
    headers) with its headers written in (ctext.expand)."""
    try:
        return ctext.expand(path or program_path())
    except OSError as e:
        raise BpfUnavailable(f"the BPF program cannot be read: {e}", "reinstall gputop") from e


def load_bcc() -> ModuleType:
    """The distro's bcc module (python3-bpfcc), whatever else is called ``bcc`` on sys.path: the first
    in the dist-packages folders on sys.path (PYTHONPATH: an offline bundle's, docs/offline-install.md),
    then the distributions' (``bcc_dirs``: where Debian, Ubuntu, Fedora and RHEL put it, whichever Python
    runs gputop: a pipx or uv tool venv too). Only a package with bcc's ``libbcc.py`` counts (the PyPI
    ``bcc`` has none)."""
    mod = sys.modules.get("bcc")
    if mod is not None and hasattr(mod, "BPF"):
        return mod
    sys.modules.pop("bcc", None)
    for d in dict.fromkeys([*(p for p in sys.path if Path(p).name == "dist-packages"), *bcc_dirs()]):
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


class Program:
    """The loaded BPF object (bcc's ``BPF``) and how it was made."""

    def __init__(self, limits: dict[str, int] | None = None, uvm: bool = True) -> None:
        self._limits = dict(limits or {})         # map sizes other than abi.LIMITS' (tests)
        self._want_uvm = uvm
        #: kernel struct offsets (BTF) for naming the files processes map; None: not named (read at start)
        self.file_offsets: dict[str, int] | None = None
        self._offsets_read = False
        self.compiled: str | None = None        # how the program was made (compilecache)
        self.bpf: Any = None
        self.headers: kheaders.HeadersChoice | None = None
        self.uvm_cpu_faults = False

    def cflags(self) -> list[str]:
        if not self._offsets_read:      # read at start (not in the constructor, on the UI thread)
            self.file_offsets = compilecache.file_offsets(btf.file_offsets, btf.VMLINUX, names=btf.OFFSET_NAMES)
            self._offsets_read = True
        flags = [*abi.cflags(self._limits), QUIET, f"-DPID_GEN_WORDS={pid_gen_words()}"]
        if self.uvm_cpu_faults:
            flags.append("-DUVM_CPU_FAULTS")
        if atomic_cmpxchg() is False:
            flags.append(NO_CMPXCHG)
        if self.file_offsets:
            flags += ["-DFILE_KEYS", *(f"-D{k}={v}" for k, v in self.file_offsets.items())]
        return flags

    def compilable(self, bcc: ModuleType, flags: list[str]) -> list[str]:
        """``flags`` less what this bcc's compiler cannot emit (asked before a full compile only: an
        LLVM before 12 aborts the process on a cmpxchg)."""
        if NO_CMPXCHG not in flags and compiler_cmpxchg(bcc) is False:
            return [*flags, NO_CMPXCHG]
        return flags

    def load(self, bcc: ModuleType, text: Callable[[], str], steps: Steps) -> None:
        """Check tracefs and the kernel headers, then compile ``text()`` (or reuse the cached
        compile) and load it. Raises BpfUnavailable with the reason and a hint."""
        err = ensure_tracefs(bcc_tracefs(bcc))
        if err:
            raise BpfUnavailable(err, "mount -t tracefs nodev /sys/kernel/tracing (bcc before 0.20: "
                                 "mount -t debugfs nodev /sys/kernel/debug)")
        headers = self.headers = use_headers()
        if headers.kind == "missing":
            raise BpfUnavailable(f"bcc needs kernel headers: {headers.detail}",
                                 "install linux-headers for your kernel (./gputop.sh does it)")
        self.uvm_cpu_faults = self._want_uvm and tracepoint_exists("exceptions", "page_fault_user")
        self.cflags()                       # reads the BTF offsets
        steps("headers_btf")
        try:
            self.bpf, self.compiled = compilecache.compile_program(bcc, text().encode(), self.cflags(),
                                                                   headers.path, TRACEFS,
                                                                   before_full=lambda f: self.compilable(bcc, f))
        except Exception as e:
            raise BpfUnavailable(f"compiling the BPF program failed: {e}",
                                 f"check the kernel headers ({headers.detail}); run gputop doctor") from e
        steps("compile")

    def limit(self, name: str) -> int:
        """A map size or share as this program is built with (abi.LIMITS, or the test's)."""
        return self._limits.get(name, abi.LIMITS[name])

    def share(self, size: str, times: int = 1) -> int:
        """The entries one tenant may hold of a table of ``times`` x ``size`` entries (TENANT_SHARE_PCT of it,
        as bpf/share.bpf.h's share_cap)."""
        return self.limit(size) * times * self.limit("TENANT_SHARE_PCT") // 100

    def table(self, name: str) -> Any:
        return self.bpf[name.encode()]

    def run_stats(self) -> ProgStats:
        """Run time and runs of the loaded programs by kind (they grow only while statistics are on)."""
        ns, runs = [0, 0, 0], [0, 0, 0]
        for name, fn in self.bpf.funcs.items():
            st = prog_run_stats(fn.fd)
            if st:
                kind = 2 if name.startswith(b"tracepoint__") else 1 if name.decode() in _RETURN_FNS else 0
                ns[kind] += st[0]
                runs[kind] += st[1]
        return ProgStats(sum(ns), runs[0], runs[1], runs[2], other_ns=ns[2])
