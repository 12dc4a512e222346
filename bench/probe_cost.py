"""Probe cost and gputop's own CPU, measured side by side in one run (A B A B, medians).

Run as root after ./test.sh has set up the test bed (bpftrace: apt-get install -y bpftrace):

    .venv/bin/python bench/probe_cost.py [--rounds 15] [--calls 300000] [--json PATH]

1. ns per cudaLaunchKernel call through the REAL libcudart.so.12 (the call fails after entry
   without a GPU), with: nothing attached, one empty uprobe (attached as gputop attaches: a
   uprobe_multi link where the kernel has them), the bpftrace one-liner
   `uprobe:LIB:cudaLaunchKernel { @[pid] = count(); }`, gputop's full probe set, the same with call-site
   sampling off (--sample-period 0: what sampling adds), and gputop attached with a perf event per probe
   (as on kernels before 6.6). gputop is measured
   continuously, as the traced processes pay it: its collector polls and opens its BPF-statistics
   windows on their schedule, whichever rounds they fall in. Every round uses a fresh private copy
   of the library (its own inode), so other tracers on the host that probe the test bed's copy do
   not slow the loop; a "nothing attached" round far above the bare call says one did anyway.
2. The run time per hit of gputop's launch handler and of an empty program (kernel BPF statistics,
   switched on for those rounds only), alternating rounds, medians: what gputop's handler adds.
3. gputop's own CPU (user+system of `gputop -b`) while a workload launches at 2k/s and at 100k/s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import benchjson  # noqa: E402
from support import TESTBED, build_native  # noqa: E402

from gputop.sources.bpf import BpfSource, load_bcc, use_headers  # noqa: E402
from gputop.sources.bpf.attach.catalogue import Probe  # noqa: E402
from gputop.sources.bpf.attach.symbols import read_symbols  # noqa: E402
from gputop.sources.bpf.attach.uprobes import UprobeAttacher  # noqa: E402
from gputop.sources.bpf.common.linux import enable_stats, prog_run_stats  # noqa: E402
from gputop.sources.bpf.program.program import program_text  # noqa: E402

LIB = TESTBED / "cudart" / "libcudart.so.12"
#: a "nothing attached" call above this says another tracer probes the copy (the bare call: ~13 ns)
CONTAMINATED_NS = 200.0


def workload() -> Path:
    cudart = str(LIB.parent)
    return build_native("cuda_workload.c", "wl_dynamic", "-DLINKED", "-DHAVE_INTERNAL_LAUNCH", f"-L{cudart}",
                        "-l:libcudart.so.12", f"-Wl,-rpath,{cudart}", "-ldl", "-lpthread")


def ns_per_call(exe: Path, calls: int, env: dict[str, str] | None = None) -> float:
    out = subprocess.run([str(exe), f"bench:{calls}"], capture_output=True, text=True, check=True,
                         env=env).stdout
    return float(out.split("ns_per_call")[1].split()[0])


class Round:
    """A fresh private copy of the library for one round, and the environment that loads it."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="gputop-probe-cost-")
        self.lib = Path(self._dir.name) / LIB.name
        shutil.copy2(LIB, self.lib)
        self.env = {**os.environ, "LD_LIBRARY_PATH": self._dir.name}     # before the RUNPATH

    def close(self) -> None:
        self._dir.cleanup()


class Nothing:
    name = "none"

    def attach(self, rnd: Round) -> None:
        pass

    def detach(self) -> None:
        pass

    def handler_fd(self) -> int | None:
        """The BPF program a hit runs (for its run-time statistics), if this configuration has one."""
        return None


class EmptyUprobe(Nothing):
    name = "empty uprobe"

    def attach(self, rnd: Round) -> None:
        bcc = load_bcc()
        use_headers()
        self.b = bcc.BPF(text=b"int empty(void *ctx) { return 0; }")
        # attached the way gputop attaches (a uprobe_multi link where the kernel has them)
        syms = read_symbols(str(rnd.lib))
        assert syms is not None
        vaddr = syms.functions["cudaLaunchKernel"]
        off = syms.offset_of_vaddr(vaddr)
        assert off is not None
        self.up = UprobeAttacher(self.b, bcc.lib)
        assert self.up.attach(str(rnd.lib), [(Probe("cudaLaunchKernel", "empty"), vaddr, off)]) == 1

    def detach(self) -> None:
        self.up.detach_all()
        self.b.cleanup()

    def handler_fd(self) -> int | None:
        return int(self.b.funcs[b"empty"].fd)


class Bpftrace(Nothing):
    name = "bpftrace one-liner"

    def attach(self, rnd: Round) -> None:
        prog = f"uprobe:{rnd.lib}:cudaLaunchKernel {{ @[pid] = count(); }} BEGIN {{ printf(\"attached\\n\"); }}"
        self.p = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        assert self.p.stdout is not None
        for line in self.p.stdout:
            if "attached" in line:
                break

    def detach(self) -> None:
        self.p.terminate()
        self.p.wait()


class Gputop(Nothing):
    name = "gputop"
    links = True
    sample_period: int | None = None        # call sites: adapted to the cost (gputop's default)

    def source(self) -> BpfSource:
        return BpfSource(uprobe_links=self.links, sample_period=self.sample_period)

    def attach(self, rnd: Round) -> None:
        self.src = self.source()
        self.src.start()
        # as in gputop, the collector thread polls (and opens its BPF statistics windows on their
        # schedule: measured continuously, windows included)
        self.stop = threading.Event()
        self.poller = threading.Thread(target=self._poll, daemon=True)
        # attach to the library as discovery would when a process maps it
        self.keep = subprocess.Popen([str(workload()), "--wait", "/nonexistent-gputop-bench", "sleep:1"],
                                     stdout=subprocess.PIPE, env=rnd.env)
        assert self.keep.stdout is not None
        pid = int(self.keep.stdout.readline().split()[1])
        self.src.scan([pid])
        assert str(rnd.lib) in self.src.objects.values(), "gputop did not attach to the library's copy"
        # a warm-up loop and a reading: the call-site sampling period adapted to what a walk costs here
        ns_per_call(workload(), 20000, rnd.env)
        self.src.read()
        self.poller.start()

    def _poll(self) -> None:
        # and reads once a second, as its refreshes do (the call-site sampling period adapts there)
        last = time.monotonic()
        while not self.stop.is_set():
            self.src.poll(0.2)
            if time.monotonic() - last >= 1.0:
                self.src.read()
                last = time.monotonic()

    def detach(self) -> None:
        self.stop.set()
        self.poller.join()
        self.keep.kill()
        self.keep.wait()
        self.src.close()

    def handler_fd(self) -> int | None:
        return int(self.src.bpf.funcs[b"rt_launch"].fd)


class GputopPerf(Gputop):
    name = "gputop, perf events"
    links = False


class GputopUnsampled(Gputop):
    """gputop with call-site sampling off (--sample-period 0): what sampling adds, side by side."""
    name = "gputop, no sampling"
    sample_period = 0


class GputopBefore(Gputop):
    """gputop with another version of bpf/gputop.bpf.c (``--before PATH``, beside that version's headers): a
    change measured side by side."""

    def __init__(self, program: Path) -> None:
        self.text = program_text(program)
        self.name = "gputop, before"

    def source(self) -> BpfSource:
        text = self.text

        class Src(BpfSource):
            def program_text(self) -> str:
                return text

        src = Src(uprobe_links=self.links)
        src.slots.forget = lambda gone: None   # type: ignore[method-assign]  # an older program: no slots
        return src

    def _poll(self) -> None:
        # this version's user space may expect maps the older program lacks (reading them fails)
        while not self.stop.is_set():
            with contextlib.suppress(KeyError):
                self.src.poll(0.2)


def probe_cost(rounds: int, calls: int, before: Path | None = None
               ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """ns per call by configuration, then BPF run ns per hit of each configuration's handler
    (statistics on for those rounds only), alternating rounds."""
    exe = workload()
    configs: list[Nothing] = [Nothing(), EmptyUprobe(), Gputop(), GputopUnsampled(), GputopPerf()]
    configs += [Bpftrace()] if shutil.which("bpftrace") else []
    configs += [GputopBefore(before)] if before else []
    handlers = [c for c in configs if isinstance(c, EmptyUprobe | GputopBefore | GputopUnsampled) or type(c) is Gputop]
    calls_ns: dict[str, list[float]] = {c.name: [] for c in configs}
    run_ns: dict[str, list[float]] = {}
    for _ in range(rounds):
        for c in configs:
            rnd = Round()
            try:
                c.attach(rnd)
                try:
                    calls_ns[c.name].append(ns_per_call(exe, calls, rnd.env))
                finally:
                    c.detach()
            finally:
                rnd.close()
    for _ in range(rounds):
        for c in handlers:                      # the empty program, gputop's launch handler(s)
            rnd = Round()
            try:
                c.attach(rnd)
                try:
                    per_hit = handler_run_ns(c, exe, calls, rnd.env)
                finally:
                    c.detach()
            finally:
                rnd.close()
            if per_hit is not None:
                run_ns.setdefault(c.name, []).append(per_hit)
    return calls_ns, run_ns


def handler_run_ns(c: Nothing, exe: Path, calls: int, env: dict[str, str]) -> float | None:
    """BPF run time per hit of ``c``'s handler over one loop, with statistics on meanwhile."""
    fd = c.handler_fd()
    stats = enable_stats()
    if fd is None or stats is None:
        return None
    try:
        before = prog_run_stats(fd)
        ns_per_call(exe, calls, env)
        after = prog_run_stats(fd)
    finally:
        os.close(stats)
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


PYSITES = ROOT / "tests" / "native" / "pysites.py"


def _py_loop(py: subprocess.Popen[str], n: int) -> float:
    """ns per launch of one timed loop of ``n`` in the Python process ``py`` (pysites.py, idle)."""
    assert py.stdin is not None and py.stdout is not None
    py.stdin.write(f"bench {n}\n")
    py.stdin.flush()
    ns = float(py.stdout.readline().split()[1])
    py.stdout.readline()                    # done
    return ns


def python_cost(rounds: int, calls: int) -> dict[str, list[float]]:
    """ns per launch of a Python loop calling the runtime through ctypes (tests/native/pysites.py, one
    long-lived process of the venv's interpreter, its frames walked at each sample), with gputop sampling
    call sites (its period adapted, after a warm-up loop, to what a walk of this interpreter's frames costs)
    and with sampling off, alternating rounds."""
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for c in (Gputop(), GputopUnsampled()):
            rnd = Round()
            try:
                c.attach(rnd)
                py = subprocess.Popen([sys.executable, str(PYSITES), str(rnd.lib), "idle", "0"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=rnd.env)
                assert py.stdin is not None and py.stdout is not None
                try:
                    c.src.scan([int(py.stdout.readline().split()[1])])

                    _py_loop(py, calls // 10)                   # warm-up: walks measured
                    c.src.read()                                # the period adapted
                    out.setdefault(c.name, []).append(_py_loop(py, calls))
                    out.setdefault(f"{c.name} period", []).append(float(c.src.sites.period))
                finally:
                    py.kill()
                    py.wait()
                    c.detach()
            finally:
                rnd.close()
    return out


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gputop_cpu(rate: int, seconds: float) -> float:
    """CPU seconds per second of `gputop -b -f json -d 1` while a workload launches at ``rate``/s."""
    exe = workload()
    gt = subprocess.Popen([str(ROOT / ".venv" / "bin" / "gputop"), "-b", "-f", "json", "-d", "1", "--no-nvml"],
                          stdout=subprocess.PIPE, text=True)
    assert gt.stdout is not None
    gt.stdout.readline()                       # started and attached
    # keep reading: a snapshot of a busy host fills the pipe in seconds, and a blocked gputop costs nothing
    threading.Thread(target=gt.stdout.read, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        wl = subprocess.Popen([str(exe), "--wait", str(go), f"paced:{rate}:{int(seconds * 1000) + 2000}"],
                              stdout=subprocess.PIPE)
        time.sleep(1.5)                        # attached by the exec event
        go.touch()
        time.sleep(1.0)
        c0, t0 = cpu_of(gt.pid), time.monotonic()
        time.sleep(seconds)
        c1, t1 = cpu_of(gt.pid), time.monotonic()
        wl.wait()
    gt.terminate()
    try:
        gt.wait(timeout=10)
    except subprocess.TimeoutExpired:          # a SIGTERM that landed in a ring-buffer callback is lost
        gt.kill()
        gt.wait()
    return (c1 - c0) / (t1 - t0)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=300000)
    ap.add_argument("--cpu-seconds", type=float, default=10.0, help="0: skip gputop's own CPU")
    ap.add_argument("--python", action="store_true",
                    help="also: ns per launch from a Python loop, gputop sampling call sites vs not")
    ap.add_argument("--before", type=Path, metavar="PROGRAM",
                    help="also measure gputop with this version of bpf/gputop.bpf.c, in its own bpf/ (the "
                         "headers it includes are read beside it), e.g. after git worktree add /tmp/before "
                         "HEAD~1: /tmp/before/bpf/gputop.bpf.c")
    benchjson.add_argument(ap)
    args = ap.parse_args()
    samples, run_samples = probe_cost(args.rounds, args.calls, args.before)
    med = {k: statistics.median(v) for k, v in samples.items()}
    run = {k: statistics.median(v) for k, v in run_samples.items()}
    base = med["none"]
    print(f"ns per cudaLaunchKernel call, medians of {args.rounds} alternating rounds of {args.calls} calls"
          " (gputop measured continuously, its statistics windows included):")
    for name, v in med.items():
        print(f"  {name:<20} {v:8.1f} ns   (+{v - base:.1f} ns over none)")
    contaminated = base > CONTAMINATED_NS
    if contaminated:
        print(f"WARNING: {base:.0f} ns with nothing attached: another tracer probes the library; the ratios are "
              "biased towards 1", file=sys.stderr)
    ratios = {
        "gputop/empty uprobe": ratio(med["gputop"], med["empty uprobe"]),
        "gputop links/perf": ratio(med["gputop"], med["gputop, perf events"]),
        "gputop sampling/no sampling": ratio(med["gputop"], med["gputop, no sampling"]),
        "gputop/bpftrace": ratio(med["gputop"], med.get("bpftrace one-liner")),
    }
    for name, r in ratios.items():
        if r is not None:
            print(f"ratio {name + ':':<22} {r:.3f}")
    added = {k: v - run["empty uprobe"] for k, v in run.items()} if "empty uprobe" in run else {}
    print(f"BPF run ns per hit (kernel statistics, medians of {args.rounds} alternating rounds):")
    for name, v in run.items():
        print(f"  {name:<20} {v:8.1f} ns" + (f"   (+{added[name]:.1f} ns over an empty program)"
                                            if name in added and name != "empty uprobe" else ""))
    figures: dict[str, Any] = {
        "rounds": args.rounds, "calls": args.calls,
        "ns_per_call": med, "ns_per_call_samples": samples,
        "ns_over_none": {k: v - base for k, v in med.items()},
        "ratios": ratios,
        "handler_run_ns": run, "handler_run_ns_samples": run_samples,
        "handler_run_ns_over_empty": added,
        "handler": "rt_launch (cudaLaunchKernel)",
        "contaminated": contaminated,
        "before": str(args.before) if args.before else None,
    }
    if args.python:
        py = python_cost(args.rounds, args.calls)
        on, off = statistics.median(py["gputop"]), statistics.median(py["gputop, no sampling"])
        print(f"ns per launch from Python (ctypes), medians of {args.rounds} alternating rounds of {args.calls}:")
        print(f"  gputop, sampling     {on:8.1f} ns   (period {statistics.median(py['gputop period']):.0f})")
        print(f"  gputop, no sampling  {off:8.1f} ns")
        print(f"ratio python sampling/no sampling: {on / off:.3f}")
        figures["python_ns_per_call"] = {k: statistics.median(v) for k, v in py.items()}
        figures["python_ns_per_call_samples"] = py
        figures["ratios"]["python sampling/no sampling"] = on / off
    if args.cpu_seconds > 0:
        cpu: dict[int, list[float]] = {}
        for _ in range(2):                         # A B A B
            for rate in (2000, 100000):
                cpu.setdefault(rate, []).append(gputop_cpu(rate, args.cpu_seconds))
        lo, hi = statistics.median(cpu[2000]), statistics.median(cpu[100000])
        print(f"gputop CPU at 2k launches/s:   {100 * lo:.2f}% of a core")
        print(f"gputop CPU at 100k launches/s: {100 * hi:.2f}% of a core")
        print(f"ratio 100k/2k:                {hi / lo if lo else float('nan'):.2f}")
        figures["gputop_cpu_pct"] = {"2000": 100 * lo, "100000": 100 * hi}
        figures["gputop_cpu_ratio_100k_2k"] = hi / lo if lo else None
    benchjson.write(args.json, figures)
    return 1 if contaminated else 0


if __name__ == "__main__":
    raise SystemExit(main())
