"""The dashboard's top-K fleet reading (gputop.feeds.fleet_topk) against a real Prometheus holding a
synthetic fleet (the benchmark's generator, 3 nodes x 400 processes, a few of them exited, loaded with
promtool), K = 50. Exact against a whole read of the same fleet sorted client-side: the top K rows by
the sort column (descending and ascending, a rate, a gauge, an average), their table values, the
totals of the summary line (every process, exited ones counted and not summed), a filter that finds a
process far outside the top K (by PID, by command, by node) with the filter's own totals, and a sort
change that refetches at once (the feed's thread, through the reader process; and the dashboard's key).
Label sorts (PID, node, command, GPU, ...: ranked by the client from the processes' labels) the same way,
ties (many processes share a command, a GPU index, a node) in the table's order."""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from promserver import tsdb_prometheus
from support import ROOT

from gputop.feeds.fleet import FleetFeed
from gputop.feeds.fleet_topk import LABEL_SORTS, View
from gputop.feeds.prometheus import FleetConfig, FleetReader
from gputop.model import ProcSample, Snapshot, Summary, summarize
from gputop.view.columns import BY_KEY, COLUMNS, filter_processes, sort_processes

sys.path.insert(0, str(ROOT / "bench"))
from fleet_scale import SAMPLES, STEP_S, write_openmetrics

NODES, PROCS, K = 3, 400, 50
WINDOW = "60s"


def values(p: ProcSample) -> tuple[object, ...]:
    return tuple(c.value(p) for c in COLUMNS)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, set[int]]]:
    """Prometheus's URL, the time T, and the PIDs marked exited (some among the fastest launchers)."""
    tmp = tmp_path_factory.mktemp("topk")
    t_end = int(time.time()) // STEP_S * STEP_S
    om, data = tmp / "fleet.om", tmp / "data"
    write_openmetrics(om, NODES, PROCS, t_end)
    text = om.read_text()
    rates = {int(m.group(2)): float(m.group(3)) for m in re.finditer(
        r'gputop_kernel_launches_total\{.*instance="([^"]+)",job="gputop",pid="(\d+)"\} (\d+) ' + str(t_end), text)}
    by_rate = sorted(rates, key=lambda p: -rates[p])
    exited = {by_rate[3], by_rate[10], by_rate[700]}

    def mark(m: re.Match[str]) -> str:
        return m.group(1) + ("1" if int(m.group(2)) in exited else "0")

    text = re.sub(r'(gputop_process_exited\{[^}]*pid="(\d+)"\} )0', mark, text)
    om.write_text(with_pods_and_users(text, t_end))
    with tsdb_prometheus(om, data) as url:
        yield url, t_end, exited


def with_pods_and_users(text: str, t_end: int) -> str:
    """The fleet with labels for the label sorts: most processes in a container of a pod (kube-state-metrics'
    ``kube_pod_container_info``, a few namespaces, pods shared by several processes), the others on the
    host; a user on each process (``--user-label``), a command line on some."""
    ids: dict[tuple[str, str], str] = {}
    pods: dict[str, tuple[str, str]] = {}

    def label(m: re.Match[str]) -> str:
        comm, gpu, inst, pid = m.group(1), m.group(2) or "", m.group(3), m.group(4)
        n = int(pid)
        cid = ""
        if n % 4:
            cid = ids.setdefault((inst, pid), f"{len(ids) + 1:064x}")
            pods[cid] = (f"ns-{'abc'[n % 3]}", f"pod-{chr(97 + n % 26)}{chr(97 + n // 26 % 26)}")
        cmd = f'cmdline="/opt/bin/{comm} --rank r{"xyz"[n % 3]}",' if n % 3 == 1 else ""
        return (f'comm="{comm}",{cmd}container="{cid}",{gpu}instance="{inst}",job="gputop",'
                f'pid="{pid}",user="u{"abcde"[n % 5]}"')

    text = re.sub(r'comm="([^"]*)",container="",(gpu="\d+",)?instance="([^"]+)",job="gputop",pid="(\d+)"',
                  label, text)
    times = [t_end - STEP_S * i for i in range(SAMPLES)][::-1]
    kube = ["# TYPE kube_pod_container_info gauge\n"]
    for cid, (ns, pod) in pods.items():
        lab = f'{{container="main",container_id="containerd://{cid}",namespace="{ns}",pod="{pod}"}}'
        kube += [f"kube_pod_container_info{lab} 1 {t}\n" for t in times]
    assert text.endswith("# EOF\n")
    return text[: -len("# EOF\n")] + "".join(kube) + "# EOF\n"


#: the fleet's Prometheus: (URL, evaluation time, the exited processes' PIDs); and its two readers
Fleet = tuple[str, int, set[int]]
Readers = tuple[FleetReader, FleetReader]


@pytest.fixture
def readers(fleet: Fleet) -> Iterator[Readers]:
    """The fleet read for its top K rows, and read whole (table_only both), closed after the test."""
    url, at, _ = fleet
    config = FleetConfig(url=url, window=WINDOW, at=at, table_only=True)
    top, whole = FleetReader(replace(config, top=K)), FleetReader(config)
    yield top, whole
    top.close()
    whole.close()


def same_summary(got: Summary, want: Summary) -> None:
    assert (got.processes, got.running, got.stopped, got.exited, got.gpus, got.gpus_busy, got.warming_up) == (
        want.processes, want.running, want.stopped, want.exited, want.gpus, want.gpus_busy, want.warming_up)
    for name in ("launches_per_s", "graph_kernel_launches_per_s", "h2d_bytes_per_s", "d2h_bytes_per_s",
                 "d2d_bytes_per_s"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a == pytest.approx(b, rel=1e-9), name


def top_rows(snap: Snapshot, key: str, reverse: bool, query: str = "") -> list[ProcSample]:
    return sort_processes(filter_processes(snap.processes, query), key, reverse)


@pytest.mark.parametrize(("key", "reverse"), [("launches", False), ("launches", True), ("h2d", False),
                                              ("sm", False), ("grid", True), ("sync", False)])
def test_top_k_is_the_whole_read_sorted(fleet: Fleet, readers: Readers, key: str, reverse: bool) -> None:
    _, at, exited = fleet
    top, whole = readers
    descending = BY_KEY[key].descending != reverse
    snap, _ = top.read(at, (), 5.0, View(key, descending))
    full, _ = whole.read(at, (), 5.0)
    assert len(full.processes) == NODES * PROCS and len(snap.processes) == K
    want = top_rows(full, key, reverse)[:K]
    got = top_rows(snap, key, reverse)
    assert [p.key for p in got] == [p.key for p in want]
    assert [values(p) for p in got] == [values(p) for p in want]       # every column, as the whole read
    assert top.scope is not None and top.scope.partial and top.scope.processes == NODES * PROCS
    # the totals: the whole fleet's, as the client sums them (the exited ones counted, not summed)
    same_summary(snap.summary, full.summary)
    assert snap.summary.exited == len(exited) and snap.summary.launches_per_s is not None
    assert snap.summary.graph_kernel_launches_per_s is None         # no process exports it: unknown, not 0
    # 1 build info + top + exited + 2 totals + 23 for the rows (sources, GPUs, gauges, state, names, increases)
    assert top.queries == 28


@pytest.mark.parametrize("key", sorted(LABEL_SORTS))
@pytest.mark.parametrize("reverse", [False, True])
def test_a_label_sort_reads_the_top_k_only(fleet: Fleet, readers: Readers, key: str, reverse: bool) -> None:
    _, at, exited = fleet
    top, whole = readers
    descending = BY_KEY[key].descending != reverse
    snap, _ = top.read(at, (), 5.0, View(key, descending))
    full, _ = whole.read(at, (), 5.0)
    assert len(snap.processes) == K
    known = {BY_KEY[key].value(p) is not None for p in full.processes}
    # the fleet has these labels on some processes (pods: not on the host's), the others unknown
    assert known == {"namespace": {True, False}, "pod": {True, False}, "state": {True, False}}.get(
        key, {False} if key in ("cpu", "cpu_time", "rss", "mem") else {True})
    want = top_rows(full, key, reverse)[:K]
    got = top_rows(snap, key, reverse)
    assert [p.key for p in got] == [p.key for p in want]
    assert [values(p) for p in got] == [values(p) for p in want]       # every column, as the whole read
    assert top.scope is not None and top.scope.processes == NODES * PROCS and top.scope.view.sort == key
    same_summary(snap.summary, full.summary)
    # 1 build info + the labels + exited + 2 totals + 23 for the rows: no query more than a value's sort
    assert top.queries == 28
    if key == "state" and not reverse:          # S: the exited ones first (X), then the ties' order
        assert {p.pid for p in got[:len(exited)]} == exited


@pytest.mark.parametrize("key", ["pid", "command", "node", "pod"])
def test_a_filter_under_a_label_sort_finds_processes_outside_the_top_k(fleet: Fleet, readers: Readers,
                                                                       key: str) -> None:
    _, at, _ = fleet
    top, whole = readers
    full, _ = whole.read(at, (), 5.0)
    far = top_rows(full, key, False)[900]                 # far below the top K by this column
    for query in (str(far.pid), (far.comm or "").upper(), far.node or "", *([far.pod] if far.pod else [])):
        for reverse in (False, True):
            descending = BY_KEY[key].descending != reverse
            snap, _ = top.read(at, (), 5.0, View(key, descending, query))
            matching = filter_processes(full.processes, query)
            assert far in matching
            assert [p.key for p in top_rows(snap, key, reverse, query)] == [
                p.key for p in top_rows(full, key, reverse, query)[:K]]
            if query == str(far.pid):
                assert far.key in {p.key for p in snap.processes}
            assert top.scope is not None and top.scope.processes == len(matching)
            same_summary(snap.summary, summarize(full, matching))


def test_a_filter_finds_processes_outside_the_top_k(fleet: Fleet, readers: Readers) -> None:
    _, at, _ = fleet
    top, whole = readers
    full, _ = whole.read(at, (), 5.0)
    ranked = top_rows(full, "launches", False)
    far = ranked[900]                                  # far below the top K
    for query in (str(far.pid), (far.comm or "").upper(), "GPU-NODE-0002"):
        snap, _ = top.read(at, (), 5.0, View("launches", True, query))
        matching = filter_processes(full.processes, query)
        assert len(matching) > 0 and (far in matching) == (query != "GPU-NODE-0002")
        assert [p.key for p in top_rows(snap, "launches", False, query)] == [
            p.key for p in top_rows(full, "launches", False, query)[:K]]
        if query == str(far.pid):
            assert far.key in {p.key for p in snap.processes}
        assert top.scope is not None and top.scope.processes == len(matching)
        same_summary(snap.summary, summarize(full, matching))   # the filter's totals, every match summed


def test_a_sort_change_refetches_at_once(fleet: Fleet, readers: Readers) -> None:
    url, at, _ = fleet
    full, _ = readers[1].read(at, (), 5.0)
    # a refresh a minute: only the change can bring the next snapshot soon
    feed = FleetFeed(FleetConfig(url=url, window=WINDOW, at=at, table_only=True, child=True, top=K, interval_s=60.0))
    got: list[Snapshot] = []
    arrived = threading.Event()

    def on_snapshot(snap: Snapshot) -> None:
        got.append(snap)
        arrived.set()

    feed.set_view("launches", True, "")
    feed.start(on_snapshot)
    try:
        assert arrived.wait(60)
        first = got[-1]
        assert [p.key for p in top_rows(first, "launches", False)] == [
            p.key for p in top_rows(full, "launches", False)[:K]]
        assert feed.table_note(first) == f"table: top {K} of {NODES * PROCS:,} by LAUNCH/s"
        t0 = time.monotonic()
        feed.set_view("sm", True, "")
        while not (feed.scope is not None and feed.scope.view.sort == "sm" and got[-1] is not first):
            assert time.monotonic() - t0 < 30, "no refresh by the new sort within 30 s (the interval is 60 s)"
            time.sleep(0.05)
        second = got[-1]
        assert len(got) == 2            # no refresh more than the change asked for
        assert [p.key for p in top_rows(second, "sm", False)] == [p.key for p in top_rows(full, "sm", False)[:K]]
        assert {p.key for p in second.processes} != {p.key for p in first.processes}
    finally:
        feed.stop()


def test_the_dashboard_tells_the_feed_its_sort_and_filter(fleet: tuple[str, int, set[int]]) -> None:
    from gputop.feeds.base import Filters
    from gputop.ui.app import DashboardOptions, GputopApp
    from gputop.ui.widgets.header import SummaryBar
    from gputop.ui.widgets.proc_table import ProcTable

    url, at, _ = fleet
    feed = FleetFeed(FleetConfig(url=url, window=WINDOW, at=at, table_only=True, child=True, top=K, interval_s=60.0))
    app = GputopApp(feed, DashboardOptions(interval_s=60.0, filters=Filters()),
                    config_path=Path(tempfile.mkdtemp()) / "config.toml")

    async def until(pilot: object, check: object) -> None:
        for _ in range(300):
            if check():  # type: ignore[operator]
                return
            await pilot.pause(0.1)  # type: ignore[attr-defined]
        raise AssertionError("timed out")

    async def main() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.processes)
            bar = app.screen.query_one(SummaryBar).render().plain
            assert f"Tasks: {NODES * PROCS} listed" in bar and f"table: top {K} of 1,200 by LAUNCH/s" in bar
            assert len(app.screen.query_one(ProcTable).rows) == K
            before = app.snapshot
            await pilot.press("greater_than_sign")          # sort by the next column: read again now
            await until(pilot, lambda: feed.scope is not None and feed.scope.view.sort != "launches"
                        and app.snapshot is not before)
            assert feed.scope is not None and feed.scope.view.sort == app.settings.sort
            app.set_filter("gpu-node-0001")
            await until(pilot, lambda: feed.scope is not None and feed.scope.view.query == "gpu-node-0001")
            await pilot.pause(0.2)
            assert app.snapshot is not None
            assert {p.node for p in app.screen.query_one(ProcTable).rows} == {"gpu-node-0001"}
            assert f"Tasks: {PROCS} listed" in app.screen.query_one(SummaryBar).render().plain

    try:
        asyncio.run(main())
    finally:
        feed.stop()


def test_over_16_gpus_a_refresh_reads_the_node_lines_families(fleet: Fleet, readers: Readers) -> None:
    from gputop.feeds import fleet_topk
    from gputop.ui.widgets.gpu_panel import FLEET_GPU_LINES

    assert fleet_topk.GPU_LINES == FLEET_GPU_LINES
    _, at, _ = fleet
    top, whole = readers
    full, _ = whole.read(at, (), 5.0)
    first, _ = top.read(at, (), 5.0, View("launches"))
    assert first.gpus == full.gpus and len(full.gpus) == NODES * 8 > FLEET_GPU_LINES
    second, _ = top.read(at, (), 5.0, View("launches"))     # a line per node: those families only
    shown = ("node", "index", "uuid", "name", "util_pct", "mem_used_bytes", "mem_total_bytes", "temp_c",
             "power_w", "xid_errors")
    assert [tuple(getattr(g, f) for f in shown) for g in second.gpus] == [
        tuple(getattr(g, f) for f in shown) for g in full.gpus]
    assert {g.power_limit_w for g in second.gpus} == {None} != {g.power_limit_w for g in full.gpus}
    assert second.summary.gpus_busy == full.summary.gpus_busy
    filtered, _ = top.read(at, (), 5.0, View("launches", True, "gpu-node-0001"))   # each GPU of the node
    assert [g for g in filtered.gpus if g.node == "gpu-node-0001"] == [
        g for g in full.gpus if g.node == "gpu-node-0001"]


def test_dash_p_narrows_the_top_rows_to_those_pids(fleet: Fleet, readers: Readers) -> None:
    _, at, _ = fleet
    top, whole = readers
    full, _ = whole.read(at, (), 5.0)
    far = top_rows(full, "launches", False)[900]            # far below the top K
    narrowed = FleetReader(replace(top.config, pids=frozenset({far.pid})))
    try:
        snap, _ = narrowed.read(at, (), 5.0, View("launches"))
    finally:
        narrowed.close()
    assert [p.key for p in snap.processes] == [p.key for p in full.processes if p.pid == far.pid]
    same_summary(snap.summary, summarize(full, [p for p in full.processes if p.pid == far.pid]))


def test_a_label_sorts_rows_are_proc_samples_with_their_defaults() -> None:
    from dataclasses import MISSING, fields

    from gputop.feeds.fleet_topk import _row

    assert [f.name for f in fields(ProcSample) if f.default is MISSING and f.default_factory is MISSING] == [
        "pid", "comm"]                 # every other field has a plain default: rank_labels' rows leave them out
    assert _row({"pid": 7, "comm": None, "node": "n"}) == ProcSample(pid=7, comm=None, node="n")
