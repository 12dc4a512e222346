"""The fleet view against a real Prometheus scraping two real `gputop exporter`s (two instances, named
node-a and node-b) that trace one real workload: exact totals under both instances, the launch rate
within the documented error (docs/fleet.md), the refresh's fixed query count, and Prometheus slow,
unreachable or holding no gputop metrics (stale data kept, batch mode exits 1 with a hint)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

from promserver import FLEET_PROMQL, GPUTOP, Exporter, Prometheus, need_promql, wait_until
from support import NVML_H100, ROOT, Workloads, build_native, table_rows

from gputop.feeds.fleet import FleetFeed
from gputop.feeds.fleet_worker import WorkerReader
from gputop.feeds.prometheus import FleetConfig
from gputop.model import CallBytes, ProcSample, Snapshot

EXPORTER_REFRESH_S = 0.25
SCRAPE_S = 1.0
WINDOW_S = 12
#: the exporter's collector may run late on a loaded host (2 shared cores here): its delay adds to its refresh
SCHEDULING_S = 0.5
PACED_RATE = 1000
#: refreshes whose median rate is compared with the workload's
RATE_READS = 5


def fleet(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUTOP, "--prometheus", url, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def mine(snap: Snapshot, pid: int) -> dict[str | None, ProcSample]:
    return {p.node: p for p in snap.processes if p.pid == pid}


def test_two_exporters_exact_totals_rate_and_failures(workloads: Workloads, tmp_path: Path) -> None:
    need_promql(FLEET_PROMQL, tmp_path)     # Debian 11's 2.24 lacks last_over_time
    script = tmp_path / "nvml.txt"
    script.write_text(NVML_H100)
    env = {"GPUTOP_NVML_LIBRARY": str(build_native("fake_nvml.c", "fake_nvml/libnvidia-ml.so.1", "-shared", "-fPIC")),
           "FAKE_NVML_SCRIPT": str(script)}
    exporters = [Exporter("-d", f"{EXPORTER_REFRESH_S:g}", "--bpf", "--node", node, env=env)
                 for node in ("node-a", "node-b")]
    prom = wl = None
    try:
        for e in exporters:
            assert e.healthy()["sources"]["bpf"]["status"] == "ok"
        prom = Prometheus(tmp_path, [f"127.0.0.1:{e.port}" for e in exporters], scrape_s=SCRAPE_S)
        go = tmp_path / "go"
        wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0",
                               "memcpy:4:1:1000", "memcpy:2:2:500", "sync:3", "sleep:9000",
                               f"paced:{PACED_RATE}:40000", "sleep:60000"], stdout=subprocess.PIPE)
        assert wl.stdout is not None
        pid = int(wl.stdout.readline().split()[1])
        for e in exporters:                         # the exec event attaches both exporters to it
            e.wait_listed(pid)
        go.touch()
        started = time.monotonic()
        for e in exporters:
            prom.wait_value(f'gputop_kernel_launches_total{{pid="{pid}",instance="127.0.0.1:{e.port}"}}', 6000)

        # exact totals under both instances, each with its node; the GPUs of both nodes
        feed = FleetFeed(FleetConfig(url=prom.url, window=f"{WINDOW_S}s", interval_s=1.0))
        before = feed.queries
        snap = feed.collect()
        per_refresh = feed.queries - before
        procs = mine(snap, pid)
        assert set(procs) == {"node-a", "node-b"}
        assert {p.instance for p in procs.values()} == {f"127.0.0.1:{e.port}" for e in exporters}
        for p in procs.values():
            t = p.total
            assert (t.launches, t.grid_blocks_sum, t.block_threads_sum, t.sync_calls) == (6000, 6000 * 80,
                                                                                          6000 * 128, 3)
            assert (t.memcpy["h2d"], t.memcpy["d2h"]) == (CallBytes(4, 4000), CallBytes(2, 1000))
            assert p.comm == "wl_dynamic" and p.user is None
        assert sorted((g.node, g.index, g.power_w, g.util_pct) for g in snap.gpus) == [
            ("node-a", 0, 412.345, 87.0), ("node-b", 0, 412.345, 87.0)]
        assert snap.sources["prometheus"].status == "ok" and snap.sources["bpf"].status == "ok"
        # a fixed number of queries: one per metric family, whatever the processes and nodes
        assert per_refresh == 10 + 2 * 32

        # the dashboard's reading, in a child process: the table's families for every process (23 queries
        # and the build info), everything for the watched ones, equal to batch mode's reading at one instant
        at = time.time()
        time.sleep(SCRAPE_S)        # a scrape begun before `at` is stored by now
        batch_feed = FleetFeed(FleetConfig(url=prom.url, window=f"{WINDOW_S}s", interval_s=1.0, at=at))
        dash = FleetFeed(FleetConfig(url=prom.url, window=f"{WINDOW_S}s", interval_s=1.0, at=at, table_only=True,
                                     child=True))
        try:
            table = mine(dash.collect(), pid)
            assert dash.queries == 1 + 10 + 13
            assert isinstance(dash.reader, WorkerReader) and dash.reader.pid not in (None, os.getpid())
            for p in table.values():
                assert p.comm == "wl_dynamic" and p.total is not None and p.total.launches == 6000
                assert (p.total.sync_calls, p.total.memcpy) == (None, None)     # not read: not shown in details
            keys = [p.key for p in table.values()]
            dash.watch(keys)
            batch_feed.watch(keys)
            watched = mine(dash.collect(), pid)
            assert dash.queries == 2 * (1 + 10 + 13) + 2 + 8       # + histograms & totals, other increases, charts
            assert watched == mine(batch_feed.collect(), pid)
            assert watched["node-a"].total is not None and watched["node-a"].total.sync_calls == 3
            assert all(dash.series(k) == batch_feed.series(k) for k in keys)
        finally:
            dash.stop()
            batch_feed.stop()

        # batch mode: one JSON line per refresh; the table has NODE after PID
        out = fleet(prom.url, "-b", "-n", "2", "-d", "0.5", "-f", "json", "-p", str(pid))
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert len(lines) == 2
        for line in lines:
            doc = json.loads(line)
            assert sorted((p["node"], p["total"]["launches"], p["total"]["memcpy"]["h2d"]["bytes"])
                          for p in doc["processes"]) == [("node-a", 6000, 4000), ("node-b", 6000, 4000)]
        out = fleet(prom.url, "-b", "-n", "1", "-p", str(pid), "--node", "node-b")
        assert out.returncode == 0, out.stderr
        rows = table_rows(out.stdout)
        assert [(r["PID"], r["NODE"]) for r in rows] == [(str(pid), "node-b")]
        assert "GPU node-b/0 NVIDIA H100" in out.stdout and "node-a" not in out.stdout

        # the launch rate while the workload launches at 1000/s: within the exporter's refresh (and delay)
        # over the window less two scrapes (docs/fleet.md)
        wait_s = 9.0 + WINDOW_S + 2.0 - (time.monotonic() - started)
        time.sleep(max(0.0, wait_s))
        feed.watch([p.key for p in procs.values()])
        bound = (EXPORTER_REFRESH_S + SCHEDULING_S) / (WINDOW_S - 2 * SCRAPE_S)
        rates: dict[str | None, list[float]] = {}
        charted: dict[str | None, list[float]] = {}
        for _ in range(RATE_READS):     # the median of a few refreshes: one late exporter refresh is not the rule
            snap = feed.collect()
            for node, p in mine(snap, pid).items():
                assert p.rates is not None and p.rates.launches_per_s is not None
                rates.setdefault(node, []).append(p.rates.launches_per_s)
                series = feed.series(p.key)
                assert series is not None
                charted.setdefault(node, []).append(series["launches"][-1][1])
                assert p.grid_blocks_hist is not None and p.grid_blocks_hist["2^6"] == 6000
            time.sleep(1.0)
        assert set(rates) == {"node-a", "node-b"}
        for node in rates:
            assert abs(statistics.median(rates[node]) / PACED_RATE - 1) <= bound, (node, rates[node])
            assert abs(statistics.median(charted[node]) / PACED_RATE - 1) <= bound, (node, charted[node])
        # details/compare's extra reads: one query for histograms and kernels, one query_range per chart series (8)
        assert feed.queries - before == (1 + RATE_READS) * per_refresh + RATE_READS * (1 + 8)

        # fleet health (docs/fleet.md): the workload killed is exited on both nodes as their exporters
        # say (its rates only fade), with its start time and last-seen
        wl.kill()
        wl.wait()
        wait_until("the fleet to say the workload exited", lambda: [
            p.state for p in mine(feed.collect(), pid).values()] == ["exited", "exited"], 30)
        for p in mine(feed.collect(), pid).values():
            assert p.start_time is not None and p.last_seen is not None and p.stale is False
            assert p.warming_up is False and p.rates is not None and p.rates.launches_per_s
        # node-b's exporter stopped: Prometheus's scrape fails (up 0), the fleet says so, its rows stay stale
        exporters[1].proc.send_signal(signal.SIGTERM)
        exporters[1].proc.wait(timeout=60)
        wait_until("node-b to be down", lambda: feed.collect().sources["prometheus"].reason
                   == "1 of 2 nodes down: node-b", 30)
        snap = feed.collect()
        health = mine(snap, pid)
        assert (health["node-a"].stale, health["node-b"].stale, health["node-b"].state) == (False, True, "exited")
        assert snap.sources["prometheus"].status == "degraded"        # not "ok": what it shows is not all current
        # neither the exited row nor the down node's is current: the totals do not count them (were 68.5k/s)
        assert snap.summary.launches_per_s == 0.0
        out = fleet(prom.url, "-b", "-n", "1", "-f", "json", "-p", str(pid))
        assert out.returncode == 1
        # a reader that never saw node-b up reads its rows at its last scrape: the same rows, stale
        assert sorted((p["node"], p["stale"], p["state"]) for p in json.loads(out.stdout)["processes"]) == [
            ("node-a", False, "exited"), ("node-b", True, "exited")]
        assert out.stderr.splitlines() == [
            "gputop: error: 1 of 2 nodes down: node-b",
            "hint: check those nodes' exporters (systemctl status gputop-exporter, or the DaemonSet's pods) and the "
            "targets page of Prometheus (its /targets): up is 0 where a scrape fails"]

        # slow: Prometheus stopped (connections queue, nothing answers): the last data stays, marked stale
        prom.proc.send_signal(signal.SIGSTOP)
        slow = FleetFeed(FleetConfig(url=prom.url, window=f"{WINDOW_S}s", interval_s=1.0, timeout_s=2.0))
        slow._last = snap
        stale = slow.refresh()
        assert stale.processes == snap.processes
        assert stale.sources["prometheus"].status == "unavailable"
        assert stale.sources["prometheus"].reason == f"Prometheus at {prom.url} did not answer within 2 s"
        assert slow.error is not None and slow.error.startswith("STALE (data of ")
        out = fleet(prom.url, "-b", "-n", "1", "-d", "1")
        assert out.returncode == 1
        assert out.stderr.splitlines() == [f"gputop: error: Prometheus at {prom.url} did not answer within 10 s",
                                           "hint: check Prometheus's load (its /metrics, the query log) or narrow "
                                           "--match / --node"]
        prom.proc.send_signal(signal.SIGCONT)
        # answering again (node-b still down: degraded, not unavailable)
        assert feed.refresh().sources["prometheus"].status == "degraded" and feed.error is None

        # no gputop metrics under --match: exit 1, what to check
        out = fleet(prom.url, "-b", "-n", "1", "--match", 'job="elsewhere"')
        assert out.returncode == 1
        assert out.stderr.splitlines() == [
            f'gputop: error: Prometheus at {prom.url} holds no gputop metrics matching {{job="elsewhere"}} '
            "(gputop_build_info is empty)",
            "hint: check that Prometheus scrapes 'gputop exporter' on each node (its /targets page), and --match"]

        # unreachable: Prometheus gone
        prom.stop()
        gone = feed.refresh()
        assert gone.processes == feed._last.processes if feed._last else False
        assert gone.sources["prometheus"].reason == f"Prometheus at {prom.url} is unreachable: Connection refused"
        out = fleet(prom.url, "-b", "-n", "1")
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert out.stderr.splitlines() == [
            f"gputop: error: Prometheus at {prom.url} is unreachable: Connection refused",
            "hint: check the URL and that Prometheus runs (curl URL/-/ready)"]
    finally:
        if wl is not None and wl.poll() is None:
            wl.kill()
            wl.wait()
        if prom is not None and prom.proc.poll() is None:
            prom.proc.send_signal(signal.SIGCONT)
            prom.stop()
        for e in exporters:
            rc, err = e.stop()
            assert rc == 0, err


def test_prometheus_without_gputop_metrics(tmp_path: Path) -> None:
    need_promql(FLEET_PROMQL, tmp_path)     # Debian 11's 2.24 lacks last_over_time
    prom = Prometheus(tmp_path, [])
    try:
        wait_until("Prometheus to answer", lambda: prom.query("up") == [])
        out = fleet(prom.url, "-b", "-n", "1", "-f", "json")
        assert out.returncode == 1 and out.stdout == ""
        assert out.stderr.splitlines() == [
            f"gputop: error: Prometheus at {prom.url} holds no gputop metrics (gputop_build_info is empty)",
            "hint: check that Prometheus scrapes 'gputop exporter' on each node (its /targets page), and --match"]
    finally:
        prom.stop()
