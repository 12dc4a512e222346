"""`gputop demo`: start an unfused and a fused workload and open the compare screen on them.

With a GPU and CuPy or PyTorch: a real elementwise chain on the GPU (``gpu_worker.py``).
Otherwise: the same launch pattern through whatever libcudart is found (``workload.c``, built
with gcc): the launches fail without a GPU but are traced, and the screen says so.
"""

from __future__ import annotations

import ctypes
import glob
import os
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gputop import safefiles
from gputop.errors import GputopError

if TYPE_CHECKING:
    from gputop.feeds.live import Sampler

HERE = Path(__file__).resolve().parent


class DemoError(GputopError):
    pass


@dataclass(frozen=True)
class Plan:
    kind: str                      # "gpu" or "traced-only"
    banner: str
    commands: tuple[list[str], list[str]]   # unfused, fused


def interpreters() -> list[str]:
    """The Pythons that may run the GPU workload, in order: $GPUTOP_DEMO_PYTHON, gputop's own, the first
    python3 on PATH (a GPU host's PyTorch or CuPy is seldom in gputop's own environment: its venv, the
    offline bundle's prefix). Only those no other user can change (safefiles.untrusted_program): the
    demo runs them as whoever runs gputop, root included."""
    named = [os.path.abspath(c) for c in (os.environ.get("GPUTOP_DEMO_PYTHON"), sys.executable) if c]
    found = safefiles.which("python3")          # checked by which() already
    trusted = [c for c in named if safefiles.untrusted_program(c) is None] + ([found] if found else [])
    return list(dict.fromkeys(trusted))


def child_env() -> dict[str, str]:
    """The environment of what the demo runs: as root, a PATH of directories no other user can change
    (gcc looks up its assembler and linker there, PyTorch's Triton a compiler)."""
    env = dict(os.environ)
    if os.geteuid() == 0:
        env["PATH"] = safefiles.trusted_path()
    return env


def python_args(python: str) -> list[str]:
    """How to start ``python``: as root, isolated (-I: no PYTHONPATH, no user site, no current or script
    directory on sys.path, where another user's ``torch.py`` would be imported as root)."""
    return [python, "-I"] if os.geteuid() == 0 else [python]


def _gpu_backend() -> tuple[str, str] | None:
    """The first backend that sees a GPU, and the Python it runs in."""
    for python in interpreters():
        for backend, probe in (("cupy", "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0"),
                               ("torch", "import torch; assert torch.cuda.is_available()")):
            try:
                ok = subprocess.run([*python_args(python), "-c", probe], capture_output=True, timeout=60, cwd="/",
                                    env=child_env()).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
            if ok:
                return backend, python
    return None


def find_libcudart() -> Path | None:
    """A CUDA runtime library on this host: $GPUTOP_DEMO_CUDART, wheels, the toolkit, the linker cache."""
    env = os.environ.get("GPUTOP_DEMO_CUDART")
    cands = [env] if env else []
    purelib = sysconfig.get_paths()["purelib"]
    repo = HERE.parents[2]
    cands += glob.glob(f"{purelib}/nvidia/cuda_runtime/lib/libcudart.so.*")
    cands += glob.glob(f"{purelib}/nvidia/cu13/lib/libcudart.so.*")     # CUDA 13 wheels (PyTorch cu130)
    cands += [str(repo / ".cache" / "testbed" / "cudart" / "libcudart.so.12")]
    cands += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so.*"), reverse=True)
    cands += sorted(glob.glob("/usr/lib/*-linux-gnu/libcudart.so.*"), reverse=True)
    for c in cands:
        if c and Path(c).is_file():
            return Path(os.path.abspath(c))     # the workload runs in /: a relative path would not reach it
    return None


def build_workload() -> Path:
    cc = safefiles.which("gcc") or safefiles.which("cc")
    if cc is None:
        raise DemoError("the demo workload needs a C compiler", "apt-get install gcc")
    # as root, never a directory another user controls (sudo -E keeps their XDG_CACHE_HOME): a
    # program built there could be swapped before root runs it
    cache = safefiles.cache_home()[0] / "gputop" / "demo"
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    reason = safefiles.untrusted_reason(cache)
    if reason:
        raise DemoError(f"not building the demo workload in {cache}: {reason}", "unset XDG_CACHE_HOME")
    src, exe = HERE / "workload.c", cache / "gputop-demo-workload"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        res = subprocess.run([cc, "-O1", "-o", str(exe), str(src), "-ldl"], capture_output=True, text=True,
                             env=child_env())
        if res.returncode != 0:
            raise DemoError(f"building the demo workload failed: {res.stderr.strip()}", "check that gcc works")
    return exe


def plan(rate: float) -> Plan:
    found = _gpu_backend()
    if found is not None:
        backend, python = found
        cmd = [*python_args(python), str(HERE / "gpu_worker.py"), backend]   # by its path: stdlib and the backend
        return Plan("gpu", f"demo: y = relu(2x+1) on the GPU with {backend}, unfused (3 kernels) vs fused (1)",
                    ([*cmd, "unfused", str(rate)], [*cmd, "fused", str(rate)]))
    lib = find_libcudart()
    if lib is None:
        raise DemoError("no GPU and no libcudart found for the demo",
                        "pip install nvidia-cuda-runtime-cu12, or set GPUTOP_DEMO_CUDART=/path/libcudart.so")
    exe = build_workload()
    return Plan("traced-only", f"demo without a GPU: launches through {lib} fail after entry and are traced; "
                f"unfused = 3 kernels per step, fused = 1, {rate:g} steps/s each",
                ([str(exe), str(lib), "unfused", str(rate)], [str(exe), str(lib), "fused", str(rate)]))


def _die_with_parent() -> None:
    """In the workload's process: get SIGKILL when gputop goes, however it goes (closed terminal)."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def main(argv: list[str]) -> int:
    from gputop.errors import EX_USAGE
    from gputop.modes.args import fail
    from gputop.modes.commands import demo_parser

    ap = demo_parser()
    args = ap.parse_args(argv)
    if args.theme is not None:
        from gputop.ui.themes import theme_names

        if args.theme not in theme_names():
            return fail(f"unknown theme {args.theme!r}", f"choose one of: {', '.join(theme_names())}", EX_USAGE)
    p = plan(args.rate)             # DemoError: printed by the CLI with its hint
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent, cwd="/", env=child_env())
             for c in p.commands]
    pids = (procs[0].pid, procs[1].pid)
    try:
        from gputop.feeds.base import Filters
        from gputop.feeds.live import Sampler, SamplerConfig

        sampler = Sampler(SamplerConfig(interval_s=args.delay, filters=Filters(frozenset(pids))))
        if args.batch:
            return _batch(sampler, args.iterations, p)
        if not sys.stdout.isatty():
            return fail("the demo's compare screen needs a terminal", "use: gputop demo -b -n 5", EX_USAGE)
        from gputop.modes.common import no_privileges, tracing_off
        from gputop.ui.app import DashboardOptions, run_dashboard

        refusal = no_privileges()       # the words of gputop's own banner
        banner = p.banner if refusal is None else f"{p.banner}\n{tracing_off(*refusal)}"
        return run_dashboard(sampler, DashboardOptions(interval_s=args.delay, theme=args.theme,
                                                       compare_pids=pids, banner=banner, quit_on_signals=True))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _batch(sampler: Sampler, n: int, p: Plan) -> int:
    import threading

    from gputop.modes import batch
    from gputop.modes.common import notice, tracing_off

    print(p.banner, flush=True)
    sampler.open_bpf()
    if sampler.bpf_error is not None:       # the line gputop -b says: why, and how to turn it on
        notice(tracing_off(sampler.bpf_error.reason, sampler.bpf_error.hint))
    # every refresh from the start (no first sample set aside): the workloads start with gputop
    batch.loop(sampler.refreshes(threading.Event(), settle=False), iterations=n)
    return 0
