"""The exporter's cost: /metrics scrape time and the exporter's CPU at Prometheus's usual 15 s scrape.

Run as root after ./test.sh has set up the test bed:

    .venv/bin/python bench/exporter_cost.py [--procs 64] [--kernels 20] [--scrapes 40] [--cpu-seconds 60]

1. Starts ``--procs`` traced processes (the test bed's real libcudart and libcuda), each launching
   ``--kernels`` distinct kernels (driver CUfunction handles, 100 launches each), then
   sleeping; waits until the exporters export every process.
2. Scrape time, median and 90th percentile of ``--scrapes``: of a new snapshot (the exporter renders
   it; a 1 s refresh, scrapes 1.1 s apart) and of the same snapshot again (served from the render
   cache); and the series and bytes one scrape returns.
3. CPU: the exporter's user+system time (default 15 s refresh, --kernel-metrics 20) over
   ``--cpu-seconds`` while it is scraped every 15 s, as % of one core; beside it, an exporter with
   --no-bpf (NVML and host data only) over the same time, side by side (A B A B), so the ratio says
   what tracing adds.
4. With ``--breakdown``: where the traced exporter's CPU goes, unscraped over ``--cpu-seconds`` each:
   the default 15 s refresh, and no refresh at all (``-d 600``: the event loop and the periodic rescan
   of every process's maps); their difference over 15 s is the cost of one refresh.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import benchjson  # noqa: E402
from promserver import Exporter, wait_until  # noqa: E402
from support import TESTBED, build_native  # noqa: E402
from support import cpu_seconds as cpu_s  # noqa: E402

CUDART = TESTBED / "cudart" / "libcudart.so.12"
CUDA = TESTBED / "nvidia" / "libcuda.so.1"


def start_workloads(n: int, kernels: int, go: Path) -> list[subprocess.Popen[bytes]]:
    exe = build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread")
    ops = [f"cu_launch:100:4,1,1:128,1,1:{0xaa00 + k:x}" for k in range(kernels)]
    procs = []
    for _ in range(n):
        p = subprocess.Popen([str(exe), "--cudart", str(CUDART), "--cuda", str(CUDA), "--wait", str(go), *ops,
                              "sleep:3600000"], stdout=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
        procs.append(p)
    return procs



def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        return bytes(r.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--scrapes", type=int, default=40, help="scrapes of a new snapshot (each 1.1 s apart)")
    ap.add_argument("--cpu-seconds", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=2, help="A B rounds of the CPU measurement")
    ap.add_argument("--breakdown", action="store_true", help="also measure the CPU without scrapes and refreshes")
    benchjson.add_argument(ap)
    args = ap.parse_args()
    figures: dict[str, object] = {"procs": args.procs, "kernels": args.kernels, "scrapes": args.scrapes,
                                  "cpu_seconds": args.cpu_seconds, "rounds": args.rounds}

    tmp = Path(tempfile.mkdtemp(prefix="gputop-exporter-bench-"))
    go = tmp / "go"
    # a 1 s refresh for the scrape timings (every spaced scrape renders a new snapshot), the default
    # 15 s refresh for the CPU at Prometheus's default 15 s scrape interval
    fast = Exporter("--no-nvml", "--bpf", "--kernel-metrics", "20", "-d", "1")
    traced = Exporter("--no-nvml", "--bpf", "--kernel-metrics", "20")
    plain = Exporter("--no-nvml", "--no-bpf")
    idle = Exporter("--no-nvml", "--bpf", "--kernel-metrics", "20", "-d", "600") if args.breakdown else None
    exporters = [e for e in (fast, traced, plain, idle) if e is not None]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for exp in exporters:
            exp.healthy(90)
        procs = start_workloads(args.procs, args.kernels, go)
        time.sleep(2.0)                     # exec events attach the exporters to every process
        go.touch()
        pids = {str(p.pid) for p in procs}

        def all_exported(exp: Exporter) -> bool:
            text = scrape(exp.url).decode()
            return all(f'gputop_kernel_launches_total{{comm="wl_dlopen",container="",pid="{pid}"}} '
                       f'{100.0 * args.kernels}' in text for pid in pids)
        for exp in (fast, traced):
            wait_until("every process exported with its launches", lambda e=exp: all_exported(e), 120, 1.0)

        cold, warm = [], []
        body = b""
        for _ in range(args.scrapes):
            time.sleep(1.1)                 # a refresh in between: the scrape renders a new snapshot
            t0 = time.perf_counter()
            body = scrape(fast.url)
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            scrape(fast.url)                # the same snapshot again: served from the render cache
            warm.append(time.perf_counter() - t0)
        fast.stop()
        lines = body.decode().splitlines()
        series = sum(1 for ln in lines if ln and not ln.startswith("#"))
        kseries = sum(1 for ln in lines if ln.startswith("gputop_kernel_function_launches"))
        print(f"exporter_cost: {args.procs} traced processes x {args.kernels} kernels, --kernel-metrics 20")
        print(f"  /metrics: {series} series ({kseries} per-kernel), {len(body) / 1024:.0f} KiB")
        figures.update(series=series, kernel_series=kseries, body_bytes=len(body))
        for name, times in (("a new snapshot (rendered)", cold), ("the same snapshot again (cached)", warm)):
            q = statistics.quantiles(times, n=10)
            key = "cold" if times is cold else "warm"
            figures.update({f"scrape_{key}_median_s": statistics.median(times), f"scrape_{key}_p90_s": q[8]})
            print(f"  scrape time of {name}, {len(times)} scrapes: median {statistics.median(times) * 1e3:.1f} ms, "
                  f"p90 {q[8] * 1e3:.1f} ms")

        shares: dict[str, list[float]] = {"traced": [], "no-bpf": []}
        for _ in range(args.rounds):
            for name, exp in (("traced", traced), ("no-bpf", plain)):
                c0, t0 = cpu_s(exp.proc.pid), time.monotonic()
                next_scrape = t0
                while time.monotonic() - t0 < args.cpu_seconds:
                    if time.monotonic() >= next_scrape:
                        scrape(exp.url)
                        next_scrape += 15.0
                    time.sleep(0.2)
                shares[name].append(100 * (cpu_s(exp.proc.pid) - c0) / (time.monotonic() - t0))
        tr, pl = statistics.median(shares["traced"]), statistics.median(shares["no-bpf"])
        ratio = tr / pl if pl else float("nan")
        print(f"  CPU, default 15 s refresh, scraped every 15 s ({args.rounds} x {args.cpu_seconds:g} s each, "
              f"A B A B): traced {tr:.2f} % of a core, --no-bpf {pl:.2f} % (ratio {ratio:.2f})")
        print(f"  goal <= 1 % of a core: {'met' if tr <= 1.0 else 'NOT met'}")
        figures.update(cpu_traced_pct=tr, cpu_no_bpf_pct=pl, traced_over_no_bpf=ratio)
        if idle is not None:
            unscraped = {}
            for name, exp in (("15 s refresh", traced), ("no refresh (-d 600)", idle)):
                c0, t0 = cpu_s(exp.proc.pid), time.monotonic()
                time.sleep(args.cpu_seconds)
                unscraped[name] = 100 * (cpu_s(exp.proc.pid) - c0) / (time.monotonic() - t0)
            per_refresh_ms = (unscraped["15 s refresh"] - unscraped["no refresh (-d 600)"]) / 100 * 15 * 1e3
            print("  unscraped, traced: " + ", ".join(f"{k} {v:.2f} %" for k, v in unscraped.items())
                  + f" of a core; one refresh about {per_refresh_ms:.0f} ms")
            figures.update(cpu_unscraped_pct=unscraped["15 s refresh"],
                           cpu_unscraped_no_refresh_pct=unscraped["no refresh (-d 600)"],
                           refresh_s=per_refresh_ms / 1e3)
        benchjson.write(args.json, figures)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for exp in exporters:
            exp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
