"""Fleet health (issue 24, item 1): a real Prometheus holding a synthetic fleet (loaded with promtool) of
two scrape targets, node-a up and node-b down for the last 10 minutes. Exact: the snapshot's
``sources.prometheus`` and the header say "1 of 2 nodes down: node-b", node-b's last known rows stay,
marked stale as of their last sample, `-b` exits 1 with one error line and a hint after its output; a
process the exporter says exited is exited (while its rate only fades); a process younger than the
window is warming up; start time and last-seen come from the exporter's samples."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from promserver import FLEET_PROMQL, promql_parses, tsdb_prometheus
from support import ROOT

from gputop.feeds.prometheus import FleetConfig, FleetError, FleetReader, PromClient
from gputop.model import ProcSample, Snapshot
from gputop.ui.widgets.header import HeaderState, header_content, summary_lines
from gputop.view import format as fmt
from gputop.view.columns import BY_KEY
from gputop.view.summary import summary_text

STEP_S = 15
WINDOW_S = 120
A, B = "10.0.0.1:9464", "10.0.0.2:9464"
HINT = ("hint: check those nodes' exporters (systemctl status gputop-exporter, or the DaemonSet's pods) and the "
        "targets page of Prometheus (its /targets): up is 0 where a scrape fails")


def write_fleet(path: Path, t_end: int) -> tuple[int, int]:
    """The fleet's series; returns (t0, t1): the first sample, and node-b's last one."""
    t0, t1 = t_end - 30 * 60, t_end - 10 * 60
    every = range(t0, t_end + 1, STEP_S)
    young_from, killed_at = t_end - 60, t_end - 60
    # (instance, pid, comm, launches/s, first, last, exited from, start time)
    procs = [(A, 100, "trainer", 1000.0, t0, t_end, None, t0 - 100),
             (A, 200, "young", 500.0, young_from, t_end, None, young_from - 1),
             (A, 300, "killed", 441.9, t0, t_end, killed_at, t0 - 50),
             (B, 400, "other", 10.0, t0, t1, None, t0 - 10)]
    lines: list[str] = []

    def lab(inst: str, **more: str) -> str:
        labels = sorted({"instance": inst, "job": "gputop", **more}.items())
        return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"

    lines.append("# TYPE gputop_build_info gauge")
    for inst, node, last in ((A, "node-a", t_end), (B, "node-b", t1)):
        lines += [f"gputop_build_info{lab(inst, node=node, version='0.1.0')} 1 {t}" for t in every if t <= last]
    lines.append("# TYPE up gauge")
    lines += [f"up{lab(A)} 1 {t}" for t in every]
    lines += [f"up{lab(B)} {1 if t <= t1 else 0} {t}" for t in every]
    lines.append("# TYPE gputop_kernel_launches counter")
    for inst, pid, comm, rate, first, last, exited, _ in procs:
        p = lab(inst, pid=str(pid), comm=comm, container="")
        lines += [f"gputop_kernel_launches_total{p} {rate * (min(t, exited or t) - first):.1f} {t}"
                  for t in every if first <= t <= last]
    lines.append("# TYPE gputop_process_exited gauge")
    for inst, pid, comm, _, first, last, exited, _ in procs:
        p = lab(inst, pid=str(pid), comm=comm, container="")
        lines += [f"gputop_process_exited{p} {int(exited is not None and t >= exited)} {t}"
                  for t in every if first <= t <= last]
    lines.append("# TYPE gputop_process_start_time_seconds gauge")
    for inst, pid, comm, _, first, last, _, start in procs:
        p = lab(inst, pid=str(pid), comm=comm, container="")
        lines += [f"gputop_process_start_time_seconds{p} {start} {t}" for t in every if first <= t <= last]
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")
    return t0, t1


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, int, int]]:
    """(Prometheus's URL, t0, t1, t_end)."""
    tmp = tmp_path_factory.mktemp("fleet_health")
    t_end = int(time.time()) // STEP_S * STEP_S
    om, data = tmp / "fleet.om", tmp / "data"
    t0, t1 = write_fleet(om, t_end)
    with tsdb_prometheus(om, data) as url:
        yield url, t0, t1, t_end


def rows(snap: Snapshot) -> dict[tuple[str | None, int], ProcSample]:
    return {(p.node, p.pid): p for p in snap.processes}


def test_a_down_node_is_said_and_its_last_rows_stay_stale(fleet: tuple[str, int, int, int]) -> None:
    url, _, t1, t_end = fleet
    reader = FleetReader(FleetConfig(url=url, window=f"{WINDOW_S}s"))
    try:
        before = reader.read(t1, (), 5.0)[0]         # both nodes scraped
        assert before.sources["prometheus"].status == "ok" and before.sources["prometheus"].reason is None
        assert set(rows(before)) == {("node-a", 100), ("node-a", 300), ("node-b", 400)}
        assert rows(before)[("node-b", 400)].stale is False
        queries = reader.queries
        snap = reader.read(t_end, (), 5.0)[0]
        assert reader.queries - queries == queries == 1 + 9 + 2 * 32    # no query more: folded in
    finally:
        reader.close()
    prom = snap.sources["prometheus"]
    assert (prom.status, prom.reason) == ("degraded", "1 of 2 nodes down: node-b")       # not "ok" (issue 35)
    got = rows(snap)
    assert set(got) == {("node-a", 100), ("node-a", 200), ("node-a", 300), ("node-b", 400)}
    b = got[("node-b", 400)]
    assert (b.stale, b.last_seen, b.state, b.instance) == (True, float(t1), "running", B)   # as of its last sample
    assert b == replace(rows(before)[("node-b", 400)], stale=True)       # its last known row
    assert all(p.stale is False and p.last_seen == float(t_end) for k, p in got.items() if k[0] == "node-a")
    since = time.strftime('%H:%M:%S', time.localtime(t1))
    assert BY_KEY["node"].render(b) == "node-b"
    assert BY_KEY["command"].render(b) == f"[stale since {since}] other"       # whole, in the widest column
    assert BY_KEY["node"].render(got[("node-a", 100)]) == "node-a"
    text = header_content(HeaderState(snapshot=snap)).plain
    assert "PROM degraded: 1 of 2 nodes down: node-b" in text, text
    # the totals are what runs now: node-a's running processes, not node-b's last rows nor the one killed
    current = [p for p in snap.processes if not p.stale and p.state != "exited"]
    assert {(p.node, p.pid) for p in current} == {("node-a", 100), ("node-a", 200)}
    assert snap.summary.launches_per_s == pytest.approx(sum(p.rates.launches_per_s or 0.0 for p in current))
    assert snap.summary.launches_per_s < sum(p.rates.launches_per_s or 0.0 for p in snap.processes)
    # a reader that never saw node-b up reads its rows at its last scrape (one query for when that
    # was, one refresh at that time), once
    fresh = FleetReader(FleetConfig(url=url, window=f"{WINDOW_S}s"))
    try:
        cold = fresh.read(t_end, (), 5.0)[0]
        assert fresh.queries == 74 + 1 + 74
        assert fresh.read(t_end, (), 5.0)[0] == cold and fresh.queries == 3 * 74 + 1
    finally:
        fresh.close()
    assert cold.sources["prometheus"].reason == "1 of 2 nodes down: node-b"
    assert cold.processes == snap.processes


def test_exited_young_and_start_time_come_from_the_exporter(fleet: tuple[str, int, int, int]) -> None:
    url, t0, _, t_end = fleet
    reader = FleetReader(FleetConfig(url=url, window=f"{WINDOW_S}s"))
    try:
        snap = reader.read(t_end, (), 5.0)[0]
    finally:
        reader.close()
    got = rows(snap)
    old, young, killed = got[("node-a", 100)], got[("node-a", 200)], got[("node-a", 300)]
    assert (old.state, old.warming_up, old.start_time) == ("running", False, float(t0 - 100))
    assert old.rates is not None and old.rates.launches_per_s == pytest.approx(1000.0)
    assert (young.state, young.warming_up, young.start_time) == ("running", True, float(t_end - 61))
    assert BY_KEY["launches"].render(young).startswith("~") and not BY_KEY["launches"].render(old).startswith("~")
    # the totals sum it (issue 35 item 2: marked where they are shown too), and count it
    assert snap.summary.warming_up == 1
    launches = f"Launches: ~{fmt.si(snap.summary.launches_per_s)}/s"
    assert launches in summary_text(snap.summary)                   # batch's summary line
    assert launches in summary_lines(snap.summary, 200)[0].plain     # the dashboard's
    # killed a minute ago: exited, as the exporter says, while its rate over the window only halved
    assert (killed.state, killed.warming_up, killed.last_seen) == ("exited", False, float(t_end))
    assert killed.rates is not None and killed.rates.launches_per_s == pytest.approx(441.9 / 2)


def test_batch_exits_1_after_its_output_when_a_node_is_down(fleet: tuple[str, int, int, int]) -> None:
    url, _, t1, _ = fleet
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "--prometheus", url, "--window", f"{WINDOW_S}s",
                          "-b", "-n", "1", "-f", "json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == ["gputop: error: 1 of 2 nodes down: node-b", HINT]
    doc = json.loads(res.stdout)
    assert doc["sources"]["prometheus"] == {"status": "degraded", "reason": "1 of 2 nodes down: node-b"}
    procs = {p["pid"]: p for p in doc["processes"]}
    assert set(procs) == {100, 200, 300, 400}
    assert (procs[400]["stale"], procs[400]["last_seen"], procs[400]["node"]) == (True, t1, "node-b")
    assert (procs[200]["warming_up"], procs[300]["state"], procs[100]["stale"]) == (True, "exited", False)
    assert doc["summary"]["warming_up"] == 1        # 200, summed into the totals (issue 35 item 2)
    # the totals: node-a's running processes only (issue 35: the stale and the exited ones were summed)
    assert doc["summary"]["launches_per_s"] == pytest.approx(
        procs[100]["rates"]["launches_per_s"] + procs[200]["rates"]["launches_per_s"])
    # the table says it where a reader looks first: the status line, and the stale row's command
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "--prometheus", url, "--window", f"{WINDOW_S}s",
                          "-b", "-n", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"})
    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert "PROM degraded: 1 of 2 nodes down: node-b" in lines[0], lines[0]
    # the totals read low while 200 warms up: marked, an unknown one N/A as ever (issue 35 item 2)
    assert re.search(r"  Launches: ~[0-9.]+k/s  Graph kernels: N/A  ", lines[1]), lines[1]
    since = time.strftime("%H:%M:%S", time.localtime(t1))
    assert any(ln.split()[0] == "400" and f"[stale since {since}] other" in ln for ln in lines[2:] if ln.split()), lines


def _lab(inst: str, **more: str) -> str:
    labels = sorted({"instance": inst, "job": "gputop", **more}.items())
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


@contextmanager
def _fleet(tmp_path: Path, lines: list[str], t_end: int) -> Iterator[tuple[str, Snapshot]]:
    """A real Prometheus holding ``lines`` (OpenMetrics, closed here) and the fleet view's snapshot at
    ``t_end`` read through it: (its URL, the snapshot), while it runs."""
    om = tmp_path / "fleet.om"
    om.write_text("\n".join([*lines, "# EOF"]) + "\n")
    with tsdb_prometheus(om, tmp_path / "data") as url:
        reader = FleetReader(FleetConfig(url=url, window=f"{WINDOW_S}s"))
        snap = reader.read(t_end, frozenset(), 5.0)[0]
        reader.close()
        yield url, snap


def _two_nodes(every: range, second: str) -> list[str]:
    """OpenMetrics lines of two targets, A (node-a) and B (``second``), up over ``every``."""
    lines = ["# TYPE gputop_build_info gauge"]
    for inst, node in ((A, "node-a"), (B, second)):
        lines += [f"gputop_build_info{_lab(inst, node=node, version='0.1.0')} 1 {t}" for t in every]
    lines.append("# TYPE up gauge")
    lines += [f"up{_lab(inst)} 1 {t}" for inst in (A, B) for t in every]
    return lines


def test_a_node_exporting_per_container_is_said_not_dropped_silently(tmp_path: Path) -> None:
    """node-c's exporter runs with --aggregate container: its series have no pid. The fleet view says
    so (no process rows from it), keeps node-a's rows, and `-b` exits 0: nothing failed."""
    t_end = int(time.time()) // STEP_S * STEP_S
    every = range(t_end - 10 * 60, t_end + 1, STEP_S)
    c = "ab" * 32
    lab = _lab                          # (short: it labels every series below)
    lines = _two_nodes(every, "node-c")
    lines.append("# TYPE gputop_kernel_launches counter")
    a = lab(A, pid="100", comm="trainer", container="")
    lines += [f"gputop_kernel_launches_total{a} {100 * (t - every[0])} {t}" for t in every]
    lines += [f"gputop_kernel_launches_total{lab(B, container=c)} {50 * (t - every[0])} {t}" for t in every]
    lines.append("# TYPE gputop_container_processes gauge")
    lines += [f"gputop_container_processes{lab(B, container=c)} 3 {t}" for t in every]
    with _fleet(tmp_path, lines, t_end) as (url, snap):
        assert snap.sources["prometheus"].reason == "node-c exports per container (no process rows)"
        assert [(p.node, p.pid) for p in snap.processes] == [("node-a", 100)]
        res = subprocess.run([sys.executable, "-m", "gputop.cli", "--prometheus", url, "--window", f"{WINDOW_S}s",
                              "-b", "-n", "1", "-f", "json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["sources"]["prometheus"]["reason"] == "node-c exports per container (no process rows)"


def test_a_node_with_processes_over_max_processes_is_said(tmp_path: Path) -> None:
    """node-b's exporter gives its busiest processes series of their own and sums the 1,200 others per
    container (pid=""): the fleet view shows its rows, and says that the sums are not among them."""
    t_end = int(time.time()) // STEP_S * STEP_S
    every = range(t_end - 10 * 60, t_end + 1, STEP_S)
    lab = _lab                          # (short: it labels every series below)
    lines = _two_nodes(every, "node-b")
    lines.append("# TYPE gputop_kernel_launches counter")
    for inst, pid in ((A, "100"), (B, "200"), (B, "")):
        lines += [f"gputop_kernel_launches_total{lab(inst, pid=pid, comm='loop', container='')} "
                  f"{100 * (t - every[0])} {t}" for t in every]
    lines.append("# TYPE gputop_exporter_processes_omitted gauge")
    lines += [f"gputop_exporter_processes_omitted{lab(inst)} {n} {t}" for inst, n in ((A, 0), (B, 1200)) for t in every]
    with _fleet(tmp_path, lines, t_end) as (_url, snap):
        assert snap.sources["prometheus"].reason == (
            "node-b: 1200 processes over --max-processes (summed per container, no rows)")
        assert [(p.node, p.pid) for p in snap.processes] == [("node-a", 100), ("node-b", 200)]


def test_a_prometheus_without_a_function_the_fleet_needs_is_named(tmp_path: Path) -> None:
    """Debian 11's Prometheus 2.24 has no last_over_time (2.26): its refusal said "check --match", which
    sent users to their matchers. A function the server lacks is named with what the fleet needs: a
    function no Prometheus has, on any; and where this host's own Prometheus lacks one the fleet view
    uses (Debian 11), `gputop --prometheus -b` itself exits 1 saying so."""
    om = tmp_path / "fleet.om"
    t = int(time.time()) // STEP_S * STEP_S
    om.write_text("# TYPE gputop_build_info gauge\n"
                  f'gputop_build_info{{instance="a:9464",job="gputop",node="node-a",version="0.1.0"}} 1 {t}\n# EOF\n')
    with tsdb_prometheus(om, tmp_path / "data", promql=()) as url:
        with pytest.raises(FleetError) as e:
            PromClient(url, 5.0).query("no_such_function(up)", time.time())
        assert e.value.kind == "refused" and 'unknown function with name "no_such_function"' in str(e.value)
        assert e.value.hint == ("this Prometheus lacks the PromQL function no_such_function: the fleet view "
                                "needs Prometheus 2.26 or newer (docs/fleet.md, \"Which Prometheus\")")
        with pytest.raises(FleetError) as e:
            PromClient(url, 5.0).query("up{", time.time())
        assert e.value.hint == "check --match (label matchers such as job=\"gputop\") and --window"
        res = subprocess.run([sys.executable, "-m", "gputop.cli", "--prometheus", url, "-b", "-n", "1"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    if promql_parses(FLEET_PROMQL[0], tmp_path):
        assert res.returncode == 0, res.stderr
    else:
        assert res.returncode == 1 and res.stderr.splitlines()[-1] == (
            "hint: this Prometheus lacks the PromQL function last_over_time: the fleet view needs Prometheus "
            "2.26 or newer (docs/fleet.md, \"Which Prometheus\")"), res.stderr
