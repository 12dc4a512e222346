"""Probe cost and gputop's own CPU, measured side by side in one run (A B A B, medians).

Run as root after ./test.sh has set up the test bed (bpftrace: apt-get install bpftrace):

    .venv/bin/python bench/probe_cost.py [--rounds 7] [--calls 200000]

1. ns per cudaLaunchKernel call through the REAL libcudart.so.12 (the call fails after entry
   without a GPU), with: nothing attached, one empty uprobe (attached as gputop attaches: a
   uprobe_multi link where the kernel has them), the bpftrace one-liner
   `uprobe:LIB:cudaLaunchKernel { @[pid] = count(); }`, and gputop's full probe set (measured
   between gputop's BPF-statistics windows, which add ~45 ns per probe hit 1 s in every 5 s), and
   gputop attached with a perf event per probe (as on kernels before 6.6).
2. gputop's own CPU (user+system of `gputop -b`) while a workload launches at 2k/s and at 100k/s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support import TESTBED, build_native  # noqa: E402

from gputop.sources.bpf import BpfSource, load_bcc, use_headers  # noqa: E402
from gputop.sources.catalogue import Probe  # noqa: E402
from gputop.sources.symbols import read_symbols  # noqa: E402
from gputop.sources.uprobes import UprobeAttacher  # noqa: E402

LIB = TESTBED / "cudart" / "libcudart.so.12"


def workload() -> Path:
    cudart = str(LIB.parent)
    return build_native("cuda_workload.c", "wl_dynamic", "-DLINKED", "-DHAVE_INTERNAL_LAUNCH", f"-L{cudart}",
                        "-l:libcudart.so.12", f"-Wl,-rpath,{cudart}", "-ldl", "-lpthread")


def ns_per_call(exe: Path, calls: int) -> float:
    out = subprocess.run([str(exe), f"bench:{calls}"], capture_output=True, text=True, check=True).stdout
    return float(out.split("ns_per_call")[1].split()[0])


class Nothing:
    name = "none"

    def __enter__(self) -> Nothing:
        return self

    def __exit__(self, *a: object) -> None:
        pass


class EmptyUprobe(Nothing):
    name = "empty uprobe"

    def __enter__(self) -> EmptyUprobe:
        bcc = load_bcc()
        use_headers()
        self.b = bcc.BPF(text=b"int empty(void *ctx) { return 0; }")
        # attached the way gputop attaches (a uprobe_multi link where the kernel has them)
        syms = read_symbols(str(LIB))
        assert syms is not None
        vaddr = syms.functions["cudaLaunchKernel"]
        off = syms.offset_of_vaddr(vaddr)
        assert off is not None
        self.up = UprobeAttacher(self.b, bcc.lib, "empty")
        assert self.up.attach(str(LIB), [(Probe("cudaLaunchKernel", "empty"), vaddr, off)]) == 1
        return self

    def __exit__(self, *a: object) -> None:
        self.up.detach_all()
        self.b.cleanup()


class Bpftrace(Nothing):
    name = "bpftrace one-liner"

    def __enter__(self) -> Bpftrace:
        prog = f"uprobe:{LIB}:cudaLaunchKernel {{ @[pid] = count(); }} BEGIN {{ printf(\"attached\\n\"); }}"
        self.p = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        assert self.p.stdout is not None
        for line in self.p.stdout:
            if "attached" in line:
                break
        return self

    def __exit__(self, *a: object) -> None:
        self.p.terminate()
        self.p.wait()


class Gputop(Nothing):
    name = "gputop"
    links = True

    def __enter__(self) -> Gputop:
        self.src = BpfSource(uprobe_links=self.links)
        self.src.start()
        # as in gputop, the collector thread polls (and runs its BPF statistics windows)
        self.stop = threading.Event()
        self.poller = threading.Thread(target=self._poll, daemon=True)
        # attach to the library as discovery would when a process maps it
        self.keep = subprocess.Popen([str(workload()), "--wait", "/nonexistent-gputop-bench", "sleep:1"],
                                     stdout=subprocess.PIPE)
        assert self.keep.stdout is not None
        pid = int(self.keep.stdout.readline().split()[1])
        self.src.scan([pid])
        assert self.src.objects, "gputop did not attach to libcudart"
        self.poller.start()
        # measure outside the statistics windows (1 s in every 5 s): wait for the first to close
        while self.src.cost.ns_per_s is None:
            time.sleep(0.05)
        return self

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.src.poll(0.2)

    def __exit__(self, *a: object) -> None:
        self.stop.set()
        self.poller.join()
        self.keep.kill()
        self.keep.wait()
        self.src.close()


class GputopPerf(Gputop):
    name = "gputop, perf events"
    links = False


def probe_cost(rounds: int, calls: int) -> dict[str, float]:
    exe = workload()
    configs = [Nothing(), EmptyUprobe(), Gputop(), GputopPerf()] + ([Bpftrace()] if shutil.which("bpftrace") else [])
    samples: dict[str, list[float]] = {c.name: [] for c in configs}
    for _ in range(rounds):
        for c in configs:
            with c:
                samples[c.name].append(ns_per_call(exe, calls))
    return {k: statistics.median(v) for k, v in samples.items()}


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
    gt.wait()
    return (c1 - c0) / (t1 - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--cpu-seconds", type=float, default=10.0)
    args = ap.parse_args()
    med = probe_cost(args.rounds, args.calls)
    base = med["none"]
    print(f"ns per cudaLaunchKernel call, medians of {args.rounds} alternating rounds of {args.calls} calls:")
    for name, v in med.items():
        print(f"  {name:<20} {v:8.1f} ns   (+{v - base:.1f} ns over none)")
    print(f"ratio gputop/empty uprobe:    {med['gputop'] / med['empty uprobe']:.3f}")
    print(f"ratio gputop links/perf:      {med['gputop'] / med['gputop, perf events']:.3f}")
    if "bpftrace one-liner" in med:
        print(f"ratio gputop/bpftrace:        {med['gputop'] / med['bpftrace one-liner']:.3f}")
    cpu = {}
    for _ in range(2):                         # A B A B
        for rate in (2000, 100000):
            cpu.setdefault(rate, []).append(gputop_cpu(rate, args.cpu_seconds))
    lo, hi = statistics.median(cpu[2000]), statistics.median(cpu[100000])
    print(f"gputop CPU at 2k launches/s:   {100 * lo:.2f}% of a core")
    print(f"gputop CPU at 100k launches/s: {100 * hi:.2f}% of a core")
    print(f"ratio 100k/2k:                {hi / lo if lo else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
