"""``gputop exporter --call-site-metrics N`` (issue 37): the samples of each process's top N call sites and
its sampled launches, as counters, only with the flag; labels through the sanitiser, capped; exited
processes as the other counters; the usage errors; promtool's lint of the exposition, and the PromQL
estimate and error of docs/metrics.md ("Call sites") evaluated by promtool on known series."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from promserver import promtool
from test_exporter_metrics import P1, Clock, lbl, proc, scrape, snap

from gputop.exporter.families import SITE_LIMIT
from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.model import CallSite, CallSites, Frame

ROOT = Path(__file__).resolve().parents[2]
SITES = "gputop_call_site_samples_total"
LAUNCHES = "gputop_launch_samples_total"


@pytest.fixture
def clock() -> Clock:
    return Clock()


def site(file: str | None, line: int | None, function: str | None, total: int, samples: int = 0,
         kind: str = "python") -> CallSite:
    return CallSite(kind=kind, frames=(Frame(file, line, function), Frame("/srv/app/main.py", 3, "<module>")),
                    samples=samples, total_samples=total)


def sites(*s: CallSite, total: int | None = None) -> CallSites:
    return CallSites(samples=sum(x.samples for x in s), total_samples=sum(x.total_samples for x in s)
                     if total is None else total, sites=s, period=1024)


#: three sites, listed as the snapshot ranks them (by samples over the interval), not by samples in all
THREE = sites(site("/srv/app/model/attn.py", 41, "Attention.forward", 300, samples=90),
              site("/srv/app/model/block.py", 88, "Block.forward", 600, samples=60),
              site(None, None, "cudaLaunchKernel", 100, samples=5, kind="native"))
BLOCK = "model/block.py:88 Block.forward"


def series(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           pid: str | None = None) -> dict[tuple[str, str], float]:
    """(site, kind) -> value of ``name``'s series (of ``pid``)."""
    return {(dict(k)["site"], dict(k)["kind"]): v for (n, k), v in m.items()
            if n == name and (pid is None or dict(k)["pid"] == pid)}


def test_call_site_families_only_with_the_flag(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(), clock)
    c.update(snap(proc(41, call_sites=THREE)))
    names = {k[0] for k in scrape(c)}
    assert "gputop_kernel_launches_total" in names and not {SITES, LAUNCHES} & names
    c = SnapshotCollector(ExportOptions(call_site_metrics=20), clock)
    c.update(snap(proc(41, call_sites=THREE), proc(42)))          # 42: no launch sampled (None)
    m = scrape(c)
    assert m[(LAUNCHES, lbl(**P1))] == 1000
    assert series(m, SITES) == {
        (BLOCK, "python"): 600, ("model/attn.py:41 Attention.forward", "python"): 300,
        ("cudaLaunchKernel", "native"): 100}
    assert not [k for k in m if k[0] in (SITES, LAUNCHES) and dict(k[1])["pid"] == "42"]


def test_at_most_n_sites_per_process_ranked_by_samples_in_all(clock: Clock) -> None:
    many = sites(*(site(f"/srv/app/pkg/mod{i}.py", i, f"f{i}", total=1000 - i, samples=i) for i in range(20)),
                 total=50_000)
    c = SnapshotCollector(ExportOptions(call_site_metrics=2), clock)
    c.update(snap(proc(41, call_sites=THREE), proc(42, call_sites=many)))
    m = scrape(c)
    assert series(m, SITES, "41") == {(BLOCK, "python"): 600, ("model/attn.py:41 Attention.forward", "python"): 300}
    assert series(m, SITES, "42") == {("pkg/mod0.py:0 f0", "python"): 1000, ("pkg/mod1.py:1 f1", "python"): 999}
    assert m[(LAUNCHES, lbl(pid="42", comm="wl_dynamic", container=""))] == 50_000   # every sample, not the top's
    # (N + 1) series per process at most, as docs/metrics.md's Cardinality says
    for n in (1, 7, 20):
        c = SnapshotCollector(ExportOptions(call_site_metrics=n), clock)
        c.update(snap(proc(42, call_sites=many)))
        assert sum(1 for k in scrape(c) if k[0] in (SITES, LAUNCHES)) == n + 1


def test_site_labels_are_sanitised_capped_and_never_repeated(clock: Clock) -> None:
    evil_dir = "/tmp/\x1b[2Jx\u202e/" + "d" * 5000
    evil = sites(site(evil_dir + "/m.py", 7, "f\x07" + "g" * 5000 + "_end", 40),
                 site("/a/pkg/m.py", 9, "run", 30), site("/b/pkg/m.py", 9, "run", 20),   # the same label: added
                 site("/lib/libtorch_cuda.so", None, "at::launch\x1b[0m", 10, kind="native"),
                 CallSite(kind="python", frames=(), total_samples=5),
                 site(None, None, None, 3))
    c = SnapshotCollector(ExportOptions(call_site_metrics=20), clock)
    c.update(snap(proc(41, call_sites=evil)))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)
    text = generate_latest(reg).decode()
    m = scrape(c)           # prometheus_client's parser reads it back
    got = series(m, SITES)
    # a Python site whose frames were not read yet (no file: its label would be an address) is left out
    assert len(got) == 3 and sum(got.values()) == 100
    labels = [s for s, _ in got]
    assert all(len(s) <= SITE_LIMIT for s in labels)
    long = next(s for s in labels if s.endswith("_end"))
    assert long.startswith("d" * 50) and "…" in long and len(long) == SITE_LIMIT   # cut in the middle
    assert got[("pkg/m.py:9 run", "python")] == 50
    assert got[("at::launch\\x1b[0m (/lib/libtorch_cuda.so)", "native")] == 10
    assert ("(no frame)", "python") not in got and ("? ?", "python") not in got
    assert "\x07" not in text and "\x1b" not in text and "\u202e" not in text
    # short enough to be kept whole: every escape visible
    short = sites(site("/tmp/\x1b[2Jx\u202e/m.py", 1, "f\x07\n", 1))
    c.update(snap(proc(41, call_sites=short)))
    assert series(scrape(c), SITES) == {("\\x1b[2Jx\\u{202e}/m.py:1 f\\x07\\x0a", "python"): 1}


def test_counters_only_grow_across_snapshots_as_ranks_change(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(call_site_metrics=2), clock)
    seen: dict[tuple[str, str], float] = {}
    launches = 0.0
    for step in range(1, 30):
        a, b = 100 * step, 7 * step * step             # b overtakes a at step 15
        cs = sites(site("/x/m/a.py", 1, "a", a, samples=100), site("/x/m/b.py", 2, "b", b, samples=14 * step),
                   site("/x/m/c.py", 3, "c", 5 * step, samples=5), total=a + b + 5 * step + step)
        clock.t += 1
        c.update(snap(proc(41, launches=1000 * step, call_sites=cs)))
        m = scrape(c)
        assert m[(LAUNCHES, lbl(**P1))] >= launches
        launches = m[(LAUNCHES, lbl(**P1))]
        now = series(m, SITES)
        assert len(now) == 2
        for key, v in now.items():
            assert v >= seen.get(key, 0), (step, key)
            seen[key] = v
    assert set(seen) == {("m/a.py:1 a", "python"), ("m/b.py:2 b", "python")}


def test_exited_processes_keep_their_call_sites_for_the_grace_period(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(exited_grace_s=300, call_site_metrics=5), clock)
    c.update(snap(proc(41, call_sites=THREE), proc(42, launches=10)))
    clock.t += 1
    c.update(snap(proc(41, state="exited", call_sites=THREE), proc(42, launches=12)))
    clock.t += 1
    c.update(snap(proc(42, launches=14)))
    clock.t += 299
    m = scrape(c)
    assert m[(LAUNCHES, lbl(**P1))] == 1000 and series(m, SITES)[(BLOCK, "python")] == 600
    assert m[("gputop_kernel_launches_total", lbl(**P1))] == 6000
    clock.t += 2
    m = scrape(c)                       # past the grace period: gone with the process's other counters
    assert not series(m, SITES) and (LAUNCHES, lbl(**P1)) not in m
    assert ("gputop_kernel_launches_total", lbl(**P1)) not in m


def test_no_call_sites_in_rows_that_sum_processes(clock: Clock) -> None:
    # over --max-processes: the others' sum (pid="") has none
    c = SnapshotCollector(ExportOptions(max_processes=1, call_site_metrics=5), clock)
    c.update(snap(proc(41, launches=9000, call_sites=THREE), proc(43, launches=5, call_sites=THREE)))
    pids = {dict(k[1])["pid"] for k in scrape(c) if k[0] in (SITES, LAUNCHES)}
    assert pids == {"41"}
    # --aggregate container (the command line refuses the flag there): none
    c = SnapshotCollector(ExportOptions(aggregate="container", call_site_metrics=5), clock)
    c.update(snap(proc(41, container="abc", call_sites=THREE)))
    m = scrape(c)
    assert ("gputop_kernel_launches_total", lbl(container="abc")) in m
    assert not [k for k in m if k[0] in (SITES, LAUNCHES)]


def test_promtool_lints_the_exposition(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(call_site_metrics=20, kernel_metrics=20), clock)
    c.update(snap(proc(41, call_sites=THREE)))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)
    res = subprocess.run([promtool(), "check", "metrics"], input=generate_latest(reg), capture_output=True,
                         timeout=60)
    assert res.returncode == 0 and not res.stdout and not res.stderr, res.stdout + res.stderr


def _doc_query(marker: str) -> str:
    text = (ROOT / "docs" / "metrics.md").read_text()
    found = re.search(rf"<!-- {marker} -->\n```promql\n(.*?)```", text, re.S)
    assert found is not None, marker
    return " ".join(found[1].split())


def test_the_documented_estimate_and_error_on_known_series(tmp_path: Path) -> None:
    """1,000 launches/s, 100 samples a minute: 60 % from one site, 30 % from another, 10 % native.
    Over 5 minutes n = 500, so the first site's half-width is 1.96 x sqrt(0.24 / 500) x 1,000."""
    proc_labels = 'pid="41",comm="python3",container="abc"'
    shares = {("model/block.py:88 Block.forward", "python"): 60, ("model/attn.py:41 f", "python"): 30,
              ("cudaLaunchKernel", "native"): 10}
    series_in = [{"series": f"gputop_kernel_launches_total{{{proc_labels}}}", "values": "0+60000x15"},
                 {"series": f"gputop_launch_samples_total{{{proc_labels}}}", "values": "0+100x15"}]
    series_in += [{"series": f'gputop_call_site_samples_total{{{proc_labels},site="{s}",kind="{k}"}}',
                   "values": f"0+{n}x15"} for (s, k), n in shares.items()]

    def expect(value: Callable[[float], float]) -> list[dict[str, object]]:
        """The samples expected, rounded as PromQL's round(v, 0.001) rounds (promtool compares exactly)."""
        return [{"labels": f'{{{proc_labels},site="{s}",kind="{k}"}}',
                 "value": math.floor(value(n / 100) * 1000 + 0.5) / 1000} for (s, k), n in shares.items()]

    cases = [
        {"expr": f"round({_doc_query('call-site-estimate')}, 0.001)", "eval_time": "10m",
         "exp_samples": expect(lambda p: 1000 * p)},
        {"expr": f"round({_doc_query('call-site-error')}, 0.001)", "eval_time": "10m",
         "exp_samples": expect(lambda p: 1.96 * (p * (1 - p) / 500) ** 0.5 * 1000)},
    ]
    (tmp_path / "none.yml").write_text("groups: []\n")
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["none.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series_in, "promql_expr_test": cases}]}))
    res = subprocess.run([promtool(), "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(("args", "message", "hint"), [
    (["--call-site-metrics", "21"], "--call-site-metrics 21: gputop keeps the top 20 call sites of each process",
     "hint: choose at most --call-site-metrics 20"),
    (["--aggregate", "container", "--call-site-metrics", "5"],
     "--call-site-metrics applies to per-process series, not to --aggregate container",
     "hint: drop --call-site-metrics, or export per process"),
])
def test_usage_errors(args: list[str], message: str, hint: str) -> None:
    r = subprocess.run([sys.executable, "-m", "gputop.cli", "exporter", *args], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"gputop: error: {message}", hint]


def test_a_negative_count_is_a_usage_error_and_help_names_the_flag() -> None:
    r = subprocess.run([sys.executable, "-m", "gputop.cli", "exporter", "--call-site-metrics", "-3"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.startswith("gputop: error: ") and "expected a whole number" in r.stderr
    r = subprocess.run([sys.executable, "-m", "gputop.cli", "exporter", "--help"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 0 and "--call-site-metrics N" in r.stdout


def test_the_docs_name_the_families_and_the_flag() -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text()
    for name in (f"`{SITES}`", f"`{LAUNCHES}`", "`--call-site-metrics N`"):
        assert name in doc
    assert ExportOptions().call_site_metrics == 0
