"""The fleet view's pure parts: option parsing, log2 buckets back from Prometheus's cumulative ones,
the snapshot built from fixed query results, and the CLI's usage errors (exit 2, one line and a hint)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gputop.exporter.families import BLOCK_FINITE, GRID_FINITE, cumulative
from gputop.feeds.prometheus import Results, build_snapshot, check_url, log2_hist, parse_duration, selector_body
from gputop.model import CallBytes, snapshot_from_json, snapshot_to_json


def test_durations_are_prometheus_durations() -> None:
    assert [parse_duration(t) for t in ("30s", "2m", "1h30m", "1m30s", "500ms", "1d")] == [
        30.0, 120.0, 5400.0, 90.0, 0.5, 86400.0]
    for bad in ("", "5", "5x", "m5", "1.5m", "5s "[:-1] + "!"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_match_takes_label_matchers_with_or_without_braces() -> None:
    assert selector_body('job="gputop"') == 'job="gputop"'
    assert selector_body(' {job="gputop", cluster=~"eu-.*"} ') == 'job="gputop", cluster=~"eu-.*"'
    for bad in ("gputop", "{job}", 'up{job="x"}', 'job="a"}'):
        with pytest.raises(ValueError):
            selector_body(bad)


def test_urls() -> None:
    assert check_url("http://prom:9090/") == "http://prom:9090"
    assert check_url("https://example.org/prometheus") == "https://example.org/prometheus"
    for bad in ("prom:9090", "ftp://prom", "http://", "http://prom:99999"):
        with pytest.raises(ValueError):
            check_url(bad)


@pytest.mark.parametrize("finite", [GRID_FINITE, BLOCK_FINITE])
def test_log2_buckets_round_trip_through_the_exporters_cumulative_ones(finite: int) -> None:
    hist = {"2^0": 3, "2^6": 6000, "2^7": 12, "2^10": 1}
    buckets = cumulative(hist, finite)
    assert buckets is not None
    back = log2_hist([(float(le), v) for le, v in buckets])
    assert back == hist


def sample(metric: str, value: float, /, **labels: str) -> dict[str, object]:
    return {"metric": {"__name__": metric, **labels}, "value": [1.0, repr(value)]}


def test_snapshot_from_fixed_results() -> None:
    a = {"instance": "10.0.0.1:9464", "job": "gputop"}
    b = {"instance": "10.0.0.2:9464", "job": "gputop"}
    p = {"pid": "4242", "comm": "python", "container": ""}
    res = Results(
        build_info=[sample("gputop_build_info", 1, node="n1", **a), sample("gputop_build_info", 1, node="n2", **b)],
        source_up=[sample("gputop_source_up", 1, source="bpf", **a), sample("gputop_source_up", 0, source="bpf", **b)],
        gpus=[sample("gputop_gpu_utilization_ratio", 0.5, gpu="0", mig="", uuid="U", name="H100", **b),
              sample("gputop_gpu_sm_clock_hertz", 1.98e9, gpu="0", mig="", uuid="U", name="H100", **b)],
        totals=[sample("gputop_kernel_launches_total", 7000, **p, **a),
                sample("gputop_memcpy_bytes_total", 4000, direction="h2d", **p, **a),
                sample("gputop_memcpy_calls_total", 4, direction="h2d", **p, **a),
                sample("gputop_kernel_launches_total", 10, user="bob", **p, **b)],     # --user-label
        gauges=[sample("gputop_process_sm_utilization_ratio", 0.25, gpu="1", **p, **a)],
        increases={"gputop_kernel_launches_total": [sample("", 6000.4, **p, **a),
                                                    sample("", 3.0, pid="99", comm="gone", **a)],
                   "gputop_kernel_grid_blocks_sum": [sample("", 480000.0, **p, **a)],
                   "gputop_kernel_grid_blocks_count": [sample("", 6000.0, **p, **a)],
                   "gputop_sync_wait_seconds_total": [sample("", 15.0, **p, **a)]},
    )
    snap = build_snapshot(res, at=100.0, window_s=60.0, host="http://prom:9090")
    procs = {(q.node, q.pid): q for q in snap.processes}
    assert set(procs) == {("n1", 4242), ("n2", 4242)}      # pid 99: increases only (exited), left out
    one = procs[("n1", 4242)]
    assert one.instance == "10.0.0.1:9464" and one.key == ("10.0.0.1:9464", 4242)
    assert one.total is not None and one.total.launches == 7000
    assert one.total.memcpy == {"h2d": CallBytes(4, 4000)}
    assert one.interval is not None and one.interval.launches == 6000
    assert one.rates is not None and one.rates.launches_per_s == pytest.approx(6000.4 / 60)
    assert one.rates.sync_wait_pct == pytest.approx(25.0)
    assert one.grid_blocks_avg == 80.0 and one.gpu_index == 1 and one.gpu_util_pct == 25.0
    assert one.user is None and one.cpu_pct is None and one.container is None
    two = procs[("n2", 4242)]
    assert two.interval is None and two.rates is None          # unknown, not 0
    assert two.user == "bob"                                   # an exporter run with --user-label
    assert [(g.node, g.index, g.util_pct, g.sm_clock_mhz) for g in snap.gpus] == [("n2", 0, 50.0, 1980.0)]
    assert snap.sources["bpf"].status == "unavailable" and snap.sources["bpf"].reason == "off on 1 of 2 nodes: n2"
    assert snap.sources["prometheus"].status == "ok"
    assert snapshot_from_json(snapshot_to_json(snap)) == snap    # node and instance in schema gputop/1
    only = build_snapshot(res, at=100.0, window_s=60.0, host="h", nodes=frozenset({"n2"}))
    assert [q.node for q in only.processes] == ["n2"] and snap.process(("10.0.0.2:9464", 4242)) == two


@pytest.mark.parametrize(("argv", "message"), [
    (["--match", 'job="x"'], "gputop: error: --match only applies to the fleet view"),
    (["--prometheus", "prom:9090"], "gputop: error: expected an http:// or https:// URL of Prometheus"),
    (["--prometheus", "http://p:9090", "--window", "5x"], "gputop: error: not a Prometheus duration"),
    (["--prometheus", "http://p:9090", "--match", "gputop"], "gputop: error: expected label matchers"),
    (["--prometheus", "http://p:9090", "-u", "root"], "gputop: error: -u does not apply to the fleet view"),
    (["--prometheus", "http://p:9090", "--bpf"], "gputop: error: --bpf does not apply to the fleet view"),
    (["--prometheus", "http://p:9090", "-n", "1"], "gputop: error: -n only applies to batch mode"),
    (["--prometheus", "http://p:9090", "-b", "-s", "nope"], "gputop: error: unknown sort column 'nope'"),
])
def test_usage_errors_exit_2_with_a_hint(argv: list[str], message: str) -> None:
    res = subprocess.run([sys.executable, "-m", "gputop.cli", *argv], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(message) and lines[1].startswith("hint: "), lines
