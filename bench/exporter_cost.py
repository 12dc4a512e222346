"""The exporter's cost beside node_exporter's: CPU at Prometheus's usual 15 s scrape, and scrape time.

Run as root after ./test.sh has set up the test bed, with Debian's prometheus-node-exporter installed:

    .venv/bin/python bench/exporter_cost.py [--procs 32] [--rate 2000] [--cpu-seconds 120] [--rounds 3]

1. Starts ``--procs`` traced processes (the test bed's real libcudart and libcuda, dlopen'd), each
   launching a kernel ``--rate`` times a second for the whole run.
2. Starts ``gputop exporter`` at its defaults (only ``--listen`` given: a 15 s refresh, no per-kernel
   series, NVML where there is one) and Debian's ``prometheus-node-exporter`` at its defaults (only
   ``--web.listen-address``), both on loopback; waits until the exporter exports every process launching.
3. CPU: both scraped every 15 s as Prometheus scrapes them (its Accept header, gzip), the user + system
   time of each (all its threads) over ``--rounds`` windows of ``--cpu-seconds``, side by side (the same
   windows; which one is scraped first alternates: A B, B A), as % of one core; medians. Beside it,
   what else the host did: its forks a second over the windows (every fork and exec on the host is an
   event the exporter's BPF source handles: it looks for CUDA libraries in each new program).
4. Scrape time of each over those scrapes (median), and the size of one exposition.
5. With ``--baseline-tree DIR`` (``git archive <commit> | tar -x -C DIR``): the exporter of that tree too,
   at the same defaults, beside the other two over the same windows: the ratio now / before.
6. With ``--breakdown``: where the exporter's CPU goes, its collector run in a process of its own (for each
   tree, A B then B A) as the exporter runs it, on the same workloads, its thread's CPU time (medians): a
   refresh, the rendering of its snapshot for a scrape (families, exposition, gzip), a full rescan of every
   process's maps (one every 10 s), and the collector's wait between refreshes per second (events of the
   host's new programs, the rescans, the statistics windows).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
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
from promserver import Exporter, free_port, wait_until  # noqa: E402
from support import TESTBED, build_native  # noqa: E402
from support import cpu_seconds as cpu_s  # noqa: E402

CUDART = TESTBED / "cudart" / "libcudart.so.12"
CUDA = TESTBED / "nvidia" / "libcuda.so.1"
SCRAPE_S = 15.0
#: what Prometheus 2.42 sends with a scrape
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def start_workloads(n: int, rate: int, go: Path) -> list[subprocess.Popen[bytes]]:
    exe = build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread")
    procs = []
    for _ in range(n):
        p = subprocess.Popen([str(exe), "--cudart", str(CUDART), "--cuda", str(CUDA), "--wait", str(go),
                              f"paced:{rate}:3600000"], stdout=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
        procs.append(p)
    return procs


def scrape(url: str) -> tuple[float, bytes]:
    """(seconds, the exposition uncompressed) of one scrape as Prometheus asks for it."""
    req = urllib.request.Request(url + "/metrics", headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=30) as r:
        body = bytes(r.read())
        zipped = r.headers.get("Content-Encoding") == "gzip"
    took = time.perf_counter() - t0
    return took, gzip.decompress(body) if zipped else body


def host_forks() -> int:
    """Processes (and threads) the host has forked since boot (/proc/stat ``processes``)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("processes "):
            return int(line.split()[1])
    return 0


class NodeExporter:
    """Debian's prometheus-node-exporter at its defaults on a free loopback port."""

    def __init__(self, binary: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


#: the breakdown, in a process of its own with PYTHONPATH=<tree>: prints JSON
PARTS = r"""
import json, os, statistics, sys, time
from gputop.feeds.base import Filters
from gputop.feeds.live import Sampler, SamplerConfig
from gputop.exporter.metrics import ExportOptions, LivenessCollector, SnapshotCollector
from gputop.exporter.server import RenderCache
from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector
try:                                    # the exporter's own choice of call-site sampling, where it makes one
    from gputop.modes.exporter import sample_period
    period = sample_period(None, 0)
except ImportError:
    period = None
accept, refresh_s = sys.argv[1], 15.0
s = Sampler(SamplerConfig(interval_s=refresh_s, first_interval_s=1.0, filters=Filters(), sample_period=period))
s.open_bpf()
s.wait(3.0)
s.collect()
collector = SnapshotCollector(ExportOptions(interval_s=refresh_s))
registry = CollectorRegistry(auto_describe=False)
registry.register(collector)
registry.register(ProcessCollector(registry=None))
live = CollectorRegistry(auto_describe=False)
live.register(LivenessCollector(collector))
cache = RenderCache(registry, collector, live)
tt = time.thread_time

def cost(f, n, gap=0.0):
    out = []
    for _ in range(n):
        if gap:
            s.wait(gap)
        t = tt()
        f()
        out.append(tt() - t)
    return statistics.median(out)

snaps = []
refresh = cost(lambda: snaps.append(s.collect()), 7, gap=2.0)
render = cost(lambda: (collector.update(snaps[-1], s.last_refresh), cache.get(accept, True)), 7)
rescan = cost(lambda: s._bpf.scanner.scan(None), 7)
t0, w0 = tt(), time.monotonic()
for _ in range(2):                      # two waits between refreshes, as the exporter waits
    s.wait(refresh_s)
between = (tt() - t0) / (time.monotonic() - w0)
print(json.dumps({"refresh_s": refresh, "render_s": render, "full_rescan_s": rescan, "between_s_per_s": between,
                  "sample_period": period, "processes": len(snaps[-1].processes)}))
s.close()
"""


def breakdown(tree: Path) -> dict[str, float]:
    """The collector's parts (PARTS) with the gputop of ``tree``."""
    out = subprocess.run([sys.executable, "-c", PARTS, ACCEPT], cwd=tree, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(tree)})
    if out.returncode != 0:
        raise SystemExit(f"the breakdown failed ({tree}): {out.stderr[-2000:]}")
    parts: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    # at the defaults: a refresh and a rendering every 15 s, the wait between (which holds the rescans)
    parts["steady_pct"] = 100 * ((parts["refresh_s"] + parts["render_s"]) / SCRAPE_S + parts["between_s_per_s"])
    return parts


def version_of(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    first = (out.stdout or out.stderr).splitlines()
    return first[0].strip() if first else "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=32)
    ap.add_argument("--rate", type=int, default=2000, help="kernel launches a second of each process")
    ap.add_argument("--cpu-seconds", type=float, default=120.0, help="seconds of each window")
    ap.add_argument("--rounds", type=int, default=3, help="windows measured")
    ap.add_argument("--breakdown", action="store_true", help="also where the collector's CPU goes (item 6)")
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="a checkout of the tree before (git archive COMMIT | tar -x -C DIR), run beside it")
    benchjson.add_argument(ap)
    args = ap.parse_args()
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        print("gputop: error: bench/exporter_cost.py measures beside node_exporter\n"
              "hint: apt-get install prometheus-node-exporter", file=sys.stderr)
        return 1
    figures: dict[str, object] = {"procs": args.procs, "rate_per_s": args.rate, "cpu_seconds": args.cpu_seconds,
                                  "rounds": args.rounds, "scrape_interval_s": SCRAPE_S,
                                  "node_exporter": version_of(binary)}
    go = Path(tempfile.mkdtemp(prefix="gputop-exporter-bench-")) / "go"
    ours = Exporter()                       # --listen only: every other option at its default
    node = NodeExporter(binary)
    before = (Exporter(env={"PYTHONPATH": str(args.baseline_tree)}, cwd=args.baseline_tree)
              if args.baseline_tree is not None else None)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ours.healthy(120)
        if before is not None:
            before.healthy(120)
        wait_until("node_exporter to answer", lambda: scrape(node.url)[1].startswith(b"#"), 60, 0.5)
        procs = start_workloads(args.procs, args.rate, go)
        time.sleep(2.0)                     # exec events attach the exporter to every process
        go.touch()
        pids = [str(p.pid) for p in procs]

        def all_launching(exp: Exporter) -> bool:
            lines = scrape(exp.url)[1].decode().splitlines()
            launching = {ln.split('pid="', 1)[1].split('"', 1)[0] for ln in lines
                         if ln.startswith("gputop_kernel_launches_total{") and not ln.endswith(" 0.0")}
            return all(p in launching for p in pids)
        # a refresh every 15 s (the first after 1 s): the first with every process launching
        for exp in (ours, before):
            if exp is not None:
                wait_until("every process exported launching", lambda e=exp: all_launching(e), 120, 1.0)

        shares: dict[str, list[float]] = {"gputop": [], "node": [], "before": []}
        scrapes: dict[str, list[float]] = {"gputop": [], "node": [], "before": []}
        bodies: dict[str, bytes] = {}
        forks: list[float] = []
        loads: list[float] = []
        pairs = (("gputop", ours.url, ours.proc.pid), ("node", node.url, node.proc.pid),
                 *((("before", before.url, before.proc.pid),) if before is not None else ()))
        for r in range(args.rounds):
            order = pairs if r % 2 == 0 else pairs[::-1]
            c0 = {name: cpu_s(pid) for name, _, pid in pairs}
            f0, t0 = host_forks(), time.monotonic()
            next_scrape = t0
            while time.monotonic() - t0 < args.cpu_seconds:
                if time.monotonic() >= next_scrape:
                    for name, url, _ in order:
                        took, body = scrape(url)
                        scrapes[name].append(took)
                        bodies[name] = body
                    next_scrape += SCRAPE_S
                time.sleep(0.2)
            dt = time.monotonic() - t0
            for name, _, pid in pairs:
                shares[name].append(100 * (cpu_s(pid) - c0[name]) / dt)
            forks.append((host_forks() - f0) / dt)
            loads.append(os.getloadavg()[0])
            print(f"  window {r + 1}/{args.rounds}: gputop exporter {shares['gputop'][-1]:.2f} %, node_exporter "
                  f"{shares['node'][-1]:.2f} % of a core"
                  + (f", the tree before {shares['before'][-1]:.2f} %" if before is not None else "")
                  + f"; host forks {forks[-1]:.1f}/s, load {loads[-1]:.1f}",
                  flush=True)
        ours_pct, node_pct = statistics.median(shares["gputop"]), statistics.median(shares["node"])
        if before is not None:
            before_pct = statistics.median(shares["before"])
            figures.update(cpu_before_pct=before_pct, before_cpu_pct_windows=shares["before"],
                           now_over_before=ours_pct / before_pct if before_pct else None,
                           before_scrape_median_s=statistics.median(scrapes["before"]))
            print(f"  the tree before, beside them: {before_pct:.2f} % of a core (now / before "
                  f"{ours_pct / before_pct if before_pct else float('nan'):.2f})")
        for name in ("gputop", "node"):
            lines = bodies[name].decode().splitlines()
            figures[f"{name}_series"] = sum(1 for ln in lines if ln and not ln.startswith("#"))
            figures[f"{name}_body_bytes"] = len(bodies[name])
            figures[f"{name}_scrape_median_s"] = statistics.median(scrapes[name])
            figures[f"{name}_cpu_pct_windows"] = shares[name]
        figures.update(cpu_gputop_pct=ours_pct, cpu_node_pct=node_pct, host_forks_per_s=statistics.median(forks),
                       host_forks_per_s_windows=forks, loadavg_windows=loads, goal_pct=0.5)
        print(f"exporter_cost: {args.procs} traced processes x {args.rate} launches/s, both at their defaults, "
              f"scraped every {SCRAPE_S:g} s ({args.rounds} windows of {args.cpu_seconds:g} s, side by side)")
        print(f"  CPU: gputop exporter {ours_pct:.2f} % of a core, node_exporter {node_pct:.2f} % (medians); "
              f"host forks {statistics.median(forks):.1f}/s")
        print(f"  scrape: gputop {figures['gputop_series']} series, {len(bodies['gputop']) / 1024:.0f} KiB, median "
              f"{statistics.median(scrapes['gputop']) * 1e3:.1f} ms; node_exporter {figures['node_series']} series, "
              f"{len(bodies['node']) / 1024:.0f} KiB, median {statistics.median(scrapes['node']) * 1e3:.1f} ms")
        print(f"  goal <= 0.5 % of a core: {'met' if ours_pct <= 0.5 else 'NOT met'}")
        if args.breakdown:
            ours.stop()                     # the breakdown runs a collector of its own beside the workloads
            if before is not None:
                before.stop()
            trees = [("now", ROOT), *((("before", args.baseline_tree.resolve()),) if before is not None else ())]
            runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
            for r in range(2):
                for name, tree in trees if r == 0 else trees[::-1]:
                    runs[name].append(breakdown(tree))
            parts = {name: {k: statistics.median(float(run[k]) for run in got) for k in got[0] if k != "sample_period"}
                     for name, got in runs.items()}
            figures["breakdown"] = parts
            for name, p in parts.items():
                print(f"  breakdown, {name}: refresh {p['refresh_s'] * 1e3:.1f} ms, rendering "
                      f"{p['render_s'] * 1e3:.1f} ms, full rescan {p['full_rescan_s'] * 1e3:.1f} ms, between refreshes "
                      f"{p['between_s_per_s'] * 1e3:.2f} ms/s: {p['steady_pct']:.2f} % of a core")
        benchjson.write(args.json, figures)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        ours.stop()
        node.stop()
        if before is not None:
            before.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
