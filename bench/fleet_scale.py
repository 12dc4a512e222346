"""The fleet view at scale: a real Prometheus holding a synthetic fleet of 1,000 nodes x 64 processes.

    .venv/bin/python bench/fleet_scale.py [--nodes 1000] [--procs 64] [--refreshes 3] [--small 10]
                                          [--keep DIR] [--json PATH] [--before-ui]
                                          [--baseline-tree DIR [--sort KEY] [--side-by-side-only]]

1. Writes the fleet as OpenMetrics (what `gputop exporter` serves for each process: its 18 counters,
   histogram _sum/_count included, and 4 gauges, without histogram buckets, which the fleet view
   reads only for the processes shown in details; per node gputop_build_info, gputop_source_up and
   8 GPUs of 12 gauges), every 30 s over the 2 minutes before T, as Prometheus would have scraped
   it; loads it with `promtool tsdb create-blocks-from openmetrics`; starts Debian's `prometheus`
   on those blocks (loopback, no scraping).
2. Refreshes the fleet feed (`gputop.feeds.fleet.FleetFeed`, window 1m, evaluated at T) side by side in
   one run: the whole fleet read as batch mode reads it (every family, parsed in this process: the
   mechanism the dashboard used before), the whole fleet read as the dashboard reads it now (the
   table's top rows by launches/s and the fleet's totals summed by Prometheus, `gputop.feeds.fleet_topk`,
   parsed in the child process of `gputop.feeds.fleet_worker`), and --small nodes (--node) read as the
   dashboard does: seconds per refresh (median), queries per refresh, CPU seconds of this process per
   refresh.
   Prometheus runs at niceness --prometheus-nice (10: on this 2-core VM it stands in for the
   fleet's Prometheus on another host; 0 measures it competing with the dashboard as an equal).
3. Runs the real dashboard (Textual, headless, 160x45, configured as `gputop --prometheus` does) on
   the whole fleet and on --small nodes, each in a child process: seconds and CPU per refresh, peak
   memory of the dashboard and of its reader process, and the time a key takes to be handled
   (page down, sort by another column; press to screen updated, through Textual's test pilot):
   while a refresh is being read (the feed refreshes back to back), and paused. --before-ui does
   the same with the feed as it was before (every family, parsed in the dashboard's process).

4. With ``--baseline-tree DIR`` (``git archive <commit> | tar -x -C DIR``): the whole fleet read as the
   dashboard reads it by that tree and by this one, side by side (``--rounds`` rounds, A B then B A, each
   ``--refreshes`` refreshes of a feed in a process of its own): seconds per refresh (median), CPU seconds
   per refresh of Prometheus, of the reader process and of the dashboard's process. ``--sort KEY``: the
   table's sort column there (``-s``'s names, in its own direction; default launches), e.g. ``pid`` for a
   label sort; ``--side-by-side-only`` runs this part alone (not 2 and 3).

Figures go to docs/PERFORMANCE.md ("Fleet view at scale") and docs/fleet.md; --json writes every
figure. Needs `prometheus` and `promtool`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gputop.model import Snapshot

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

import benchjson  # noqa: E402

STEP_S = 30
SAMPLES = 5                    # T-120 s .. T
GPUS = 8
COMMS = ("python", "tritonserver", "vllm", "torchrun", "llama-server", "pt_main_thread")

GPU_GAUGES = (("gputop_gpu_utilization_ratio", 0.0, 1.0), ("gputop_gpu_memory_utilization_ratio", 0.0, 1.0),
              ("gputop_gpu_memory_used_bytes", 1e9, 8e10), ("gputop_gpu_memory_total_bytes", 8.5e10, 8.5e10),
              ("gputop_gpu_temperature_celsius", 35.0, 80.0), ("gputop_gpu_power_watts", 80.0, 700.0),
              ("gputop_gpu_power_limit_watts", 700.0, 700.0), ("gputop_gpu_sm_clock_hertz", 1.98e9, 1.98e9),
              ("gputop_gpu_pcie_tx_bytes_per_second", 0.0, 2e9), ("gputop_gpu_pcie_rx_bytes_per_second", 0.0, 2e9))
GPU_COUNTERS = ("gputop_gpu_xid_errors", "gputop_gpu_ecc_volatile_errors")
#: (family, per-second rate factor relative to launches, extra label)
PROC_COUNTERS = (("gputop_kernel_launches", 1.0, ""), ("gputop_graph_launches", 0.001, ""),
                 ("gputop_captured_launches", 0.0, ""), ("gputop_alloc_calls", 0.0005, ""),
                 ("gputop_alloc_bytes", 5e4, ""), ("gputop_free_calls", 0.0004, ""),
                 ("gputop_sync_calls", 0.01, ""), ("gputop_sync_wait_seconds", 0.00005, ""),
                 *((f"gputop_memcpy_{what}", f, f',direction="{d}"') for d, scale in (("h2d", 1), ("d2h", 1),
                   ("d2d", 4)) for what, f in (("calls", 0.01 * scale), ("bytes", 2e4 * scale))))
HIST = (("gputop_kernel_grid_blocks", 96.0), ("gputop_kernel_block_threads", 256.0))


def gpu_labels(g: int, inst: str) -> str:
    return f'{{gpu="{g}",instance="{inst}",job="gputop",mig="",name="NVIDIA H100 80GB HBM3",uuid="GPU-{g}"}}'


def write_openmetrics(path: Path, nodes: int, procs: int, t_end: int) -> int:
    """The synthetic fleet; returns the number of series."""
    rng = random.Random(9)
    times = [t_end - STEP_S * (SAMPLES - 1 - i) for i in range(SAMPLES)]
    insts = [(f"gpu-node-{n:04d}", f"10.{n // 250}.{n % 250}.1:9464") for n in range(nodes)]
    # per process: labels and launch rate (PIDs distinct on a node)
    plist = [(inst, pid, rng.choice(COMMS), rng.lognormvariate(7, 1.5))
             for _, inst in insts for pid in rng.sample(range(1000, 4_000_000), procs)]
    series = 0
    with path.open("w") as f:
        def family(name: str, kind: str) -> None:
            f.write(f"# TYPE {name} {kind}\n")

        family("gputop_build_info", "gauge")
        for node, inst in insts:
            lab = f'{{instance="{inst}",job="gputop",node="{node}",version="0.1.0"}}'
            f.writelines(f"gputop_build_info{lab} 1 {t}\n" for t in times)
            series += 1
        family("gputop_source_up", "gauge")
        for _, inst in insts:
            for src in ("bpf", "nvml", "uvm"):
                lab = f'{{instance="{inst}",job="gputop",source="{src}"}}'
                f.writelines(f"gputop_source_up{lab} 1 {t}\n" for t in times)
                series += 1
        for name, lo, hi in GPU_GAUGES:
            family(name, "gauge")
            for _, inst in insts:
                for g in range(GPUS):
                    lab = gpu_labels(g, inst)
                    v = rng.uniform(lo, hi)
                    f.writelines(f"{name}{lab} {v:.6g} {t}\n" for t in times)
                    series += 1
        for name in GPU_COUNTERS:
            family(name, "counter")
            for _, inst in insts:
                for g in range(GPUS):
                    lab = gpu_labels(g, inst)
                    f.writelines(f"{name}_total{lab} 0 {t}\n" for t in times)
                    series += 1
        for name, factor, extra in PROC_COUNTERS:
            family(name, "counter")
            for inst, pid, comm, rate in plist:
                lab = f'{{comm="{comm}",container="",instance="{inst}",job="gputop",pid="{pid}"{extra}}}'
                base = rate * factor * 3600
                f.writelines(f"{name}_total{lab} {base + rate * factor * (t - times[0]):.0f} {t}\n" for t in times)
                series += 1
        for name, mean in HIST:
            family(name, "histogram")
            for inst, pid, comm, rate in plist:
                lab = f'{{comm="{comm}",container="",instance="{inst}",job="gputop",pid="{pid}"}}'
                for t in times:
                    n = rate * (3600 + t - times[0])
                    f.write(f'{name}_bucket{{comm="{comm}",container="",instance="{inst}",job="gputop",pid="{pid}",'
                            f'le="+Inf"}} {n:.0f} {t}\n')
                    f.write(f"{name}_count{lab} {n:.0f} {t}\n{name}_sum{lab} {n * mean:.0f} {t}\n")
                series += 3
        for name, lo, hi in (("gputop_live_alloc_bytes", 1e8, 6e10),):
            family(name, "gauge")
            for inst, pid, comm, _ in plist:
                lab = f'{{comm="{comm}",container="",instance="{inst}",job="gputop",pid="{pid}"}}'
                v = rng.uniform(lo, hi)
                f.writelines(f"{name}{lab} {v:.0f} {t}\n" for t in times)
                series += 1
        for name, lo, hi in (("gputop_process_gpu_memory_bytes", 1e9, 7e10),
                             ("gputop_process_sm_utilization_ratio", 0.0, 1.0),
                             ("gputop_process_launch_bound", 0.0, 1.0)):
            family(name, "gauge")
            for i, (inst, pid, comm, _) in enumerate(plist):
                lab = f'{{comm="{comm}",container="",gpu="{i % GPUS}",instance="{inst}",job="gputop",pid="{pid}"}}'
                v = rng.uniform(lo, hi)
                if name.endswith("launch_bound"):
                    v = float(v > 0.9)
                f.writelines(f"{name}{lab} {v:.6g} {t}\n" for t in times)
                series += 1
        # each process's state and start (the fleet view reads them: exited, warming up, last seen)
        family("gputop_process_start_time_seconds", "gauge")
        for inst, pid, comm, _ in plist:
            lab = f'{{comm="{comm}",container="",instance="{inst}",job="gputop",pid="{pid}"}}'
            start = times[0] - rng.uniform(60, 86400)
            f.writelines(f"gputop_process_start_time_seconds{lab} {start:.2f} {t}\n" for t in times)
            series += 1
        family("gputop_process_exited", "gauge")
        for inst, pid, comm, _ in plist:
            lab = f'{{comm="{comm}",container="",instance="{inst}",job="gputop",pid="{pid}"}}'
            f.writelines(f"gputop_process_exited{lab} 0 {t}\n" for t in times)
            series += 1
        family("up", "gauge")       # the scrape targets' health, as Prometheus records it
        for _, inst in insts:
            f.writelines(f'up{{instance="{inst}",job="gputop"}} 1 {t}\n' for t in times)
            series += 1
        f.write("# EOF\n")
    return series


def refresh_times(url: str, at: float, refreshes: int, nodes: frozenset[str], *, dashboard: bool
                  ) -> dict[str, float]:
    """Seconds per refresh (median), queries per refresh, processes, CPU seconds of this process
    per refresh: batch mode's reading (``dashboard`` False) or the dashboard's."""
    from gputop.feeds.fleet import FleetFeed
    from gputop.feeds.fleet_topk import TOP_K
    from gputop.feeds.prometheus import FleetConfig
    from gputop.view.columns import DEFAULT_SORT

    feed = FleetFeed(FleetConfig(url=url, window="1m", at=at, nodes=nodes, timeout_s=300.0,
                                 table_only=dashboard, child=dashboard, top=TOP_K if dashboard else 0))
    feed.set_view(DEFAULT_SORT, True, "")      # as the dashboard tells it (batch mode does not)
    times, n = [], 0
    before = feed.queries
    cpu0 = time.process_time()
    for _ in range(refreshes):
        t0 = time.monotonic()
        snap = feed.collect()
        times.append(time.monotonic() - t0)
        n = len(snap.processes)
    cpu = (time.process_time() - cpu0) / refreshes
    feed.stop()
    return {"s_per_refresh": statistics.median(times), "queries_per_refresh": (feed.queries - before) // refreshes,
            "processes": n, "cpu_s_per_refresh": cpu}


# ---------------------------------------------------------------- the dashboard (child process)

def _hwm_mib(pid: int | str) -> float:
    """Peak resident memory (VmHWM) of a process (getrusage's maxrss would count the parent's at fork)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) / 1024


def ui_child(url: str, at: float, nodes: str, refreshes: int, before: bool) -> None:
    """Run the real dashboard headless over the fleet feed; print JSON figures."""
    import asyncio

    from gputop.feeds.base import Filters
    from gputop.feeds.fleet import FleetFeed
    from gputop.feeds.fleet_topk import TOP_K
    from gputop.feeds.prometheus import FleetConfig
    from gputop.ui.app import DashboardOptions, GputopApp
    from gputop.ui.widgets.proc_table import ProcTable

    cfg = FleetConfig(url=url, window="1m", at=at, interval_s=1.0, timeout_s=300.0,
                      nodes=frozenset(nodes.split(",")) if nodes else frozenset(),
                      table_only=not before, child=not before,      # as gputop.modes.fleet runs the dashboard
                      top=0 if before else TOP_K)
    feed = FleetFeed(cfg)
    delivered: list[float] = []         # when the feed's thread handed the app a snapshot
    start = feed.start

    def start_timed(on_snapshot: Callable[[Snapshot], None]) -> None:
        def timed(snap: Snapshot) -> None:
            delivered.append(time.monotonic())
            on_snapshot(snap)
        start(timed)

    feed.start = start_timed  # type: ignore[method-assign]
    app = GputopApp(feed, DashboardOptions(interval_s=1.0, filters=Filters()),
                    config_path=Path(tempfile.mkdtemp()) / "config.toml")
    out: dict[str, object] = {}
    presses: list[dict[str, object]] = []

    async def run() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            while app.snapshot is None or not app.snapshot.processes:
                await pilot.pause(0.2)
            seen = 0
            cpu0 = time.process_time()
            t0 = time.monotonic()
            last = app.snapshot
            while seen < refreshes:
                await pilot.pause(0.05)
                if app.snapshot is not last:
                    last = app.snapshot
                    seen += 1
            out["cpu_s_per_refresh"] = (time.process_time() - cpu0) / refreshes
            out["wall_s_per_refresh"] = (time.monotonic() - t0) / refreshes
            out["rows"] = len(app.screen.query_one(ProcTable).rows)
            # keys while the feed's thread reads a refresh (the feed refreshes back to back: interval 1 s),
            # then paused
            for phase in ("busy", "paused"):
                if phase == "paused":
                    app.paused = True
                    feed.set_paused(True)
                    while feed.refreshing:
                        await pilot.pause(0.1)
                keys: dict[str, list[float]] = {"pagedown": [], "sort": []}
                during = 0
                for i in range(20):
                    if phase == "busy":
                        while not feed.refreshing:      # press while a refresh is in flight
                            await pilot.pause(0.02)
                        during += 1
                    for name, key in (("pagedown", "pagedown"),
                                      ("sort", "greater_than_sign" if i % 2 == 0 else "less_than_sign")):
                        t = time.monotonic()
                        reading = feed.refreshing
                        await pilot.press(key)
                        await pilot.pause()
                        keys[name].append(time.monotonic() - t)
                        presses.append({"phase": phase, "key": name, "ms": round(1000 * keys[name][-1], 1),
                                        "refresh_in_flight": reading,
                                        "snapshots_during": sum(t <= d for d in delivered)})
                suffix = "" if phase == "paused" else "_busy"
                for k, v in keys.items():
                    out[f"{k}{suffix}_ms"] = 1000 * statistics.median(v)
                    out[f"{k}{suffix}_max_ms"] = 1000 * max(v)
            worker = getattr(feed.reader, "pid", None)
            out["worker_max_rss_mib"] = _hwm_mib(worker) if worker else 0.0
            app.exit()

    asyncio.run(run())
    feed.stop()
    out["max_rss_mib"] = _hwm_mib("self")
    out["presses"] = presses
    print(json.dumps(out))


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def feed_child(url: str, at: float, refreshes: int, sort: str = "launches") -> None:
    """The whole fleet read as the dashboard reads it, by the gputop on sys.path: prints JSON figures."""
    import dataclasses

    from gputop.feeds.fleet import FleetFeed
    from gputop.feeds.prometheus import FleetConfig

    config = FleetConfig(url=url, window="1m", at=at, timeout_s=600.0, table_only=True, child=True)
    if "top" in {f.name for f in dataclasses.fields(FleetConfig)}:     # a tree that reads the top rows only
        from gputop.feeds.fleet_topk import TOP_K
        config = dataclasses.replace(config, top=TOP_K)
    feed = FleetFeed(config)
    if hasattr(feed, "set_view"):
        from gputop.view.columns import BY_KEY
        feed.set_view(sort, BY_KEY[sort].descending, "")        # the dashboard's default sort: launches
    feed.collect()                      # the reader process started, and one refresh to warm both
    worker = getattr(feed.reader, "pid", None)
    times, cpu, reader, procs = [], [], [], 0
    before = feed.queries
    for _ in range(refreshes):
        c0, w0, t0 = time.process_time(), _cpu_s(worker) if worker else 0.0, time.monotonic()
        procs = len(feed.collect().processes)
        times.append(time.monotonic() - t0)
        cpu.append(time.process_time() - c0)
        reader.append(_cpu_s(worker) - w0 if worker else 0.0)
    out = {"times": times, "cpu": cpu, "reader_cpu": reader, "processes": procs,
           "queries_per_refresh": (feed.queries - before) // refreshes}
    feed.stop()
    print(json.dumps(out))


def side_by_side(url: str, at: float, prom_pid: int, baseline: Path, rounds: int, refreshes: int,
                 sort: str = "launches") -> dict[str, Any]:
    """This tree's reading of the whole fleet (as the dashboard reads it, sorted by ``sort``) and
    ``baseline``'s, side by side."""
    got: dict[str, dict[str, list[float]]] = {k: {"s": [], "cpu": [], "reader_cpu": [], "prom_cpu": []}
                                              for k in ("now", "before")}
    queries: dict[str, int] = {}
    for r in range(rounds):
        order = [("now", ROOT), ("before", baseline)]
        for name, tree in order if r % 2 == 0 else order[::-1]:
            c0 = _cpu_s(prom_pid)
            res = subprocess.run([sys.executable, __file__, "--feed-child", url, "--feed-tree", str(tree), "--at",
                                  str(at), "--refreshes", str(refreshes), "--sort", sort], capture_output=True,
                                 text=True,
                                 timeout=3600, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
            if res.returncode != 0:
                raise SystemExit(f"feed run ({name}) failed: {res.stderr[-2000:]}")
            f = json.loads(res.stdout.strip().splitlines()[-1])
            # Prometheus's CPU over the run, per refresh read (the warm-up refresh included: refreshes + 1)
            got[name]["prom_cpu"].append((_cpu_s(prom_pid) - c0) / (refreshes + 1))
            got[name]["s"] += f["times"]
            got[name]["cpu"] += f["cpu"]
            got[name]["reader_cpu"] += f["reader_cpu"]
            queries[name] = f["queries_per_refresh"]
            print(f"  side by side, {name}: {statistics.median(f['times']):.2f} s per refresh, Prometheus "
                  f"{got[name]['prom_cpu'][-1]:.2f} CPU s, reader {statistics.median(f['reader_cpu']):.2f} CPU s "
                  f"a refresh (load {os.getloadavg()[0]:.1f})", flush=True)
    return {name: {"s_per_refresh": statistics.median(v["s"]), "cpu_s_per_refresh": statistics.median(v["cpu"]),
                   "reader_cpu_s_per_refresh": statistics.median(v["reader_cpu"]),
                   "prometheus_cpu_s_per_refresh": statistics.median(v["prom_cpu"]),
                   "queries_per_refresh": queries[name], "refreshes": len(v["s"])}
            for name, v in got.items()}


def ui_figures(url: str, at: float, nodes: str, refreshes: int, before: bool = False) -> dict[str, Any]:
    res = subprocess.run([sys.executable, __file__, "--ui-child", url, "--at", str(at), "--ui-nodes", nodes,
                          "--refreshes", str(refreshes), *(["--before-ui"] if before else [])],
                         capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        raise SystemExit(f"dashboard run failed: {res.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--refreshes", type=int, default=3)
    ap.add_argument("--small", type=int, default=10, help="nodes of the side-by-side small fleet (--node)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the TSDB here (and reuse it when present)")
    benchjson.add_argument(ap)
    ap.add_argument("--prometheus-nice", type=int, default=10,
                    help="niceness of Prometheus (default 10: it stands in for a Prometheus on another host, "
                         "which a user's dashboard does not share its cores with; 0: it competes as an equal)")
    ap.add_argument("--before-ui", action="store_true",
                    help="also run the dashboard with the feed as it was before (slow: minutes at 64,000 rows)")
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="a checkout of the tree before (git archive COMMIT | tar -x -C DIR): its reading of the "
                         "whole fleet beside this one's")
    ap.add_argument("--rounds", type=int, default=2, help="side-by-side rounds with --baseline-tree (A B, B A)")
    ap.add_argument("--sort", default="launches", metavar="KEY",
                    help="the table's sort column of the side-by-side reading (-s's names, in its own "
                         "direction): pid, node, command, ... time a label sort")
    ap.add_argument("--side-by-side-only", action="store_true",
                    help="with --baseline-tree: only the side-by-side reading (not the feed's other figures "
                         "nor the dashboard's)")
    ap.add_argument("--feed-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--feed-tree", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ui-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--at", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ui-nodes", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.feed_child:
        sys.path.insert(0, args.feed_tree)     # the gputop of that tree (its reader process follows it)
        feed_child(args.feed_child, args.at, args.refreshes, args.sort)
        return 0
    if args.ui_child:
        ui_child(args.ui_child, args.at, args.ui_nodes, args.refreshes, args.before_ui)
        return 0
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        print("needs Debian's prometheus package (prometheus and promtool)", file=sys.stderr)
        return 1
    from promserver import free_port, http_get, wait_until

    work = Path(tempfile.mkdtemp(prefix="gputop-fleet-"))
    data = args.keep or work / "data"
    meta = data / "bench.json"
    if meta.exists():
        t_end, series = json.loads(meta.read_text())
        print(f"reusing {data}: {series} series, T={t_end}")
    else:
        data.mkdir(parents=True, exist_ok=True)
        t_end = int(time.time()) // STEP_S * STEP_S
        om = work / "fleet.om"
        t0 = time.monotonic()
        series = write_openmetrics(om, args.nodes, args.procs, t_end)
        print(f"wrote {om.stat().st_size / 2**30:.2f} GiB, {series} series x {SAMPLES} samples "
              f"in {time.monotonic() - t0:.0f} s", flush=True)
        t0 = time.monotonic()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)], check=True,
                       stdout=subprocess.DEVNULL)
        print(f"promtool create-blocks-from openmetrics: {time.monotonic() - t0:.0f} s", flush=True)
        om.unlink()
        meta.write_text(json.dumps([t_end, series]))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cfg = work / "prometheus.yml"
    cfg.write_text("global: {scrape_interval: 30s}\n")
    log = (work / "prometheus.log").open("w")
    prom = subprocess.Popen(["nice", "-n", str(args.prometheus_nice),       # nice execs prometheus: same PID
                             "prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y",
                             "--query.max-samples=200000000", "--log.level=warn"], stdout=log, stderr=log)
    try:
        wait_until("Prometheus to be ready", lambda: http_get(url + "/-/ready")[0] == 200, 600, 1.0)
        small = frozenset(f"gpu-node-{n:04d}" for n in range(args.small))
        figures: dict[str, object] = {"nodes": args.nodes, "procs_per_node": args.procs, "series": series,
                                      "refreshes": args.refreshes, "small_nodes": args.small,
                                      "prometheus_nice": args.prometheus_nice,
                                      "loadavg_1m_at_start": os.getloadavg()[0], "sort": args.sort}
        if args.side_by_side_only:
            if args.baseline_tree is None:
                raise SystemExit("--side-by-side-only needs --baseline-tree")
            figures["side_by_side"] = side_by_side(url, t_end, prom.pid, args.baseline_tree.resolve(), args.rounds,
                                                   args.refreshes, args.sort)
            figures.update(rounds=args.rounds, loadavg_at_end=os.getloadavg())
            for name, f in figures["side_by_side"].items():
                print(f"side by side, sort by {args.sort}, {name}: {f['s_per_refresh']:.2f} s per refresh "
                      f"(median of {f['refreshes']}), {f['queries_per_refresh']} queries, Prometheus "
                      f"{f['prometheus_cpu_s_per_refresh']:.2f} CPU s a refresh", flush=True)
            print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
            benchjson.write(args.json, figures)
            return 0
        feed: dict[str, dict[str, float]] = {
            "whole_batch": refresh_times(url, t_end, args.refreshes, frozenset(), dashboard=False),
            "whole_dashboard": refresh_times(url, t_end, args.refreshes, frozenset(), dashboard=True),
            "small_dashboard": refresh_times(url, t_end, args.refreshes, small, dashboard=True),
        }
        figures["feed"] = feed
        if args.baseline_tree is not None:
            figures["side_by_side"] = side_by_side(url, t_end, prom.pid, args.baseline_tree.resolve(), args.rounds,
                                                   args.refreshes, args.sort)
            figures["rounds"] = args.rounds
            # its commit: performance.py extracts it into a directory named ...-COMMIT
            figures["baseline"] = args.baseline_tree.resolve().name.rsplit("-", 1)[-1]
        for name, f in feed.items():
            print(f"refresh, {name} ({f['processes']:.0f} processes): {f['s_per_refresh']:.2f} s median, "
                  f"{f['queries_per_refresh']:.0f} queries, {f['cpu_s_per_refresh']:.2f} CPU s of this process",
                  flush=True)
        big, old, sm = feed["whole_dashboard"], feed["whole_batch"], feed["small_dashboard"]
        ratios = {"refresh_batch_over_dashboard": old["s_per_refresh"] / big["s_per_refresh"],
                  "cpu_batch_over_dashboard": old["cpu_s_per_refresh"] / big["cpu_s_per_refresh"],
                  "refresh_whole_over_small": big["s_per_refresh"] / sm["s_per_refresh"]}
        print(f"whole fleet, batch's reading / the dashboard's: {ratios['refresh_batch_over_dashboard']:.1f}x the "
              f"time, {ratios['cpu_batch_over_dashboard']:.0f}x the CPU of the reading process; whole / small: "
              f"{ratios['refresh_whole_over_small']:.0f}x the time for "
              f"{big['processes'] / max(1, sm['processes']):.0f}x the processes", flush=True)
        ui = {"whole": ui_figures(url, t_end, "", args.refreshes),
              "small": ui_figures(url, t_end, ",".join(sorted(small)), args.refreshes)}
        if args.before_ui:
            ui["whole_before"] = ui_figures(url, t_end, "", args.refreshes, before=True)
        figures["dashboard"] = ui
        for name, f in ui.items():
            print(f"dashboard, {name} ({f['rows']:.0f} rows): {f['cpu_s_per_refresh']:.2f} CPU s and "
                  f"{f['wall_s_per_refresh']:.2f} s per refresh, peak RSS {f['max_rss_mib']:.0f} MiB "
                  f"(reader process {f['worker_max_rss_mib']:.0f} MiB); keys while a refresh is read: page down "
                  f"{f['pagedown_busy_ms']:.0f} ms (max {f['pagedown_busy_max_ms']:.0f}), sort "
                  f"{f['sort_busy_ms']:.0f} ms (max {f['sort_busy_max_ms']:.0f}); paused: page down "
                  f"{f['pagedown_ms']:.0f} ms, sort {f['sort_ms']:.0f} ms (medians of 20)", flush=True)
        w, s_ = ui["whole"], ui["small"]
        ratios.update({"pagedown_busy_whole_over_small": w["pagedown_busy_ms"] / s_["pagedown_busy_ms"],
                       "sort_busy_whole_over_small": w["sort_busy_ms"] / s_["sort_busy_ms"],
                       "pagedown_whole_over_small": w["pagedown_ms"] / s_["pagedown_ms"],
                       "sort_whole_over_small": w["sort_ms"] / s_["sort_ms"]})
        figures["ratios"] = ratios
        print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
        benchjson.write(args.json, figures)
    finally:
        prom.terminate()
        prom.wait(timeout=60)
        log.close()
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
