"""gputop/exporter/exposition.py writes what prometheus_client's encoders write, byte for byte, for every
family the exporter makes (the scenario's processes under every option that adds series or labels, label
values with the characters the formats escape), and leaves to prometheus_client what it does not write."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector

from gputop.exporter import exposition
from gputop.exporter.metrics import ExportOptions, LivenessCollector, SnapshotCollector
from gputop.exporter.server import RenderCache
from gputop.feeds.live import RefreshTiming
from gputop.model import Snapshot, snapshot_from_json

SCENARIO = Path(__file__).resolve().parents[1] / "data" / "scenario.jsonl"
#: what Prometheus 2.42 asks for, what curl asks for, the text format by name, and formats left to the library
ACCEPTS = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
           "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "*/*", "", "text/plain;version=0.0.4",
           "application/openmetrics-text", "application/openmetrics-text;version=1.0.0;escaping=underscores",
           "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8", "text/plain;version=1.0.0",
           "application/openmetrics-text;version=2.0.0")
#: label values with what the formats escape (backslash, newline, quote) and what they do not
ODD = 'a\\b\nc"d \u00e9\u4e2d\U0001f600 {x="y"} \t'


@functools.cache
def _snapshots() -> list[Snapshot]:
    lines = [line for line in SCENARIO.read_text().splitlines() if line.strip()]
    snaps = [snapshot_from_json(lines[0]), snapshot_from_json(lines[-1])]
    last = snaps[-1]
    odd = tuple(dataclasses.replace(p, comm=ODD[:15], cmdline=ODD, user=ODD, container=ODD) for p in last.processes)
    return [snaps[0], last, dataclasses.replace(last, processes=odd, host=ODD)]


OPTIONS = (ExportOptions(), ExportOptions(kernel_metrics=20, call_site_metrics=8, cmdline_label=True, user_label=True,
                                          node="n\\ode\n\"1\"", interval_s=15.0),
           ExportOptions(aggregate="container", buckets="log16"), ExportOptions(buckets="none", max_processes=1))


def _registries(options: ExportOptions, snap: Snapshot) -> tuple[CollectorRegistry, CollectorRegistry]:
    return _wired(options, snap)[1:]


def _wired(options: ExportOptions, snap: Snapshot) -> tuple[SnapshotCollector, CollectorRegistry, CollectorRegistry]:
    collector = SnapshotCollector(options)
    collector.update(snap, RefreshTiming(0.25, (("bpf", 0.125), ("host", 0.0625))))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    registry.register(ProcessCollector(registry=None))
    live = CollectorRegistry(auto_describe=False)
    live.register(LivenessCollector(collector))
    return collector, registry, live


class Frozen:
    """Families collected once (the process collector's values move between two collections)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.families = list(registry.collect())

    def collect(self) -> list[Metric]:
        return self.families


@pytest.mark.parametrize("options", OPTIONS, ids=("defaults", "every-label", "containers", "capped"))
@pytest.mark.parametrize("accept", ACCEPTS)
def test_the_bytes_are_prometheus_clients(options: ExportOptions, accept: str) -> None:
    encoder, content_type = choose_encoder(accept)
    for snap in _snapshots():
        for registry in _registries(options, snap):
            frozen = Frozen(registry)
            assert exposition.render(frozen, encoder, content_type) == encoder(frozen)


def _values() -> list[Metric]:
    g = GaugeMetricFamily("gputop_v", "every kind of value, twice", labels=("a", "z"))
    for i, v in enumerate((0.0, -0.0, 0, 5, 5.0, -1.5, 1e20, 123456789.0, 1e-9, float("nan"), float("inf"),
                           float("-inf")) * 2):
        g.add_metric([str(i), ODD], v)
    h = HistogramMetricFamily("gputop_h", "buckets with labels both sides of le", labels=("a", "m", "z"))
    h.add_metric(["x", ODD, "y"], [("1.0", 0.0), ("3.0", -0.0), ("+Inf", 2.0)], -0.0)
    h.add_metric(["x", "", "y"], [("1.0", 1.0), ("+Inf", 2.0)], 3.0)
    c = CounterMetricFamily("gputop_c", "a counter\\ with \"quotes\"\nand lines", labels=())
    c.add_metric([], 7.0)
    return [g, h, c]


@pytest.mark.parametrize("accept", ACCEPTS)
def test_every_value_and_label_set_is_written_as_prometheus_client_writes_it(accept: str) -> None:
    encoder, content_type = choose_encoder(accept)
    odd = Odd(_values())
    assert exposition.render(odd, encoder, content_type) == encoder(Odd(odd.family))


def test_prometheus_and_curl_get_the_fast_path() -> None:
    for accept in ACCEPTS[:4]:
        assert choose_encoder(accept)[1] in (exposition.OPENMETRICS, exposition.TEXT), accept


class Odd:
    """A registry of the families given (one, or a list), counting its collections."""

    def __init__(self, family: Metric | list[Metric]) -> None:
        self.family = family
        self.collected = 0

    def collect(self) -> list[Metric]:
        self.collected += 1
        return self.family if isinstance(self.family, list) else [self.family]


def _unit() -> Metric:
    return GaugeMetricFamily("gputop_x_seconds", "with a unit", value=1.0, unit="seconds")


def _timestamped() -> Metric:
    g = GaugeMetricFamily("gputop_x", "timestamped", labels=("a",))
    g.add_metric(["1"], 2.0, timestamp=1234.5)
    return g


def _colon() -> Metric:
    return GaugeMetricFamily("gputop:x", "a recording rule's name", value=1.0)


def _created() -> Metric:
    return CounterMetricFamily("gputop_c", "with its creation time", value=3.0, created=100.0)


def _info() -> Metric:
    m = Metric("gputop_i", "an info family", "info")
    m.add_sample("gputop_i_info", {"a": "b"}, 1.0)
    return m


@pytest.mark.parametrize("make", (_unit, _timestamped, _colon, _created, _info))
@pytest.mark.parametrize("accept", ACCEPTS[:4])
def test_what_it_does_not_write_is_prometheus_clients_collected_once(make: object, accept: str) -> None:
    encoder, content_type = choose_encoder(accept)
    assert callable(make)
    odd = Odd(make())
    assert exposition.render(odd, encoder, content_type) == encoder(Odd(odd.family))
    assert odd.collected == 1


def test_the_render_cache_serves_the_same_bytes_as_before() -> None:
    """The cache's body (the snapshot's families, then the live ones) against prometheus_client's encoders
    over the same families, gzip included."""
    import gzip

    snap = _snapshots()[-1]
    collector, registry, live = _wired(ExportOptions(interval_s=15.0), snap)
    frozen = Frozen(registry)
    cache = RenderCache(frozen, collector, live)  # type: ignore[arg-type]
    for accept in ACCEPTS:
        encoder, content_type = choose_encoder(accept)
        got_type, body = cache.get(accept)
        assert got_type == content_type
        want = encoder(frozen)
        assert body.startswith(want.removesuffix(b"# EOF\n"))
        got_type, zipped = cache.get(accept, gzip_ok=True)
        assert gzip.decompress(zipped).startswith(want.removesuffix(b"# EOF\n"))


def test_the_scenario_has_what_the_test_needs() -> None:
    """Processes with kernels, call sites, histograms and sync latency: every kind of family."""
    snap = _snapshots()[-1]
    assert any(p.kernels for p in snap.processes)
    assert any(p.call_sites for p in snap.processes)
    assert any(p.sync_latency for p in snap.processes)
    assert json.loads(SCENARIO.read_text().splitlines()[0])["schema"] == "gputop/1"
