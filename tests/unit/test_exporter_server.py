"""The exporter's HTTP side without a network: /healthz's states, the render cache, --listen parsing."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.exporter.server import RenderCache, health, make_server
from gputop.model import Snapshot, SourceStatus
from gputop.modes.commands import parse_listen


def snap(bpf: str) -> Snapshot:
    return Snapshot(time=5.0, interval_s=1.0, host="n", sources={"bpf": SourceStatus(bpf, "why"),
                                                                 "nvml": SourceStatus("ok")})


def test_healthz_is_ready_once_bpf_is_attached_or_known_unavailable() -> None:
    c = SnapshotCollector(ExportOptions())
    assert health(c) == (503, {"status": "starting", "sources": {}})
    c.update(snap("starting"))
    assert health(c)[0] == 503
    c.update(snap("unavailable"))
    code, body = health(c)
    assert code == 200 and body["sources"]["bpf"] == {"status": "unavailable", "reason": "why"}
    c.update(snap("ok"))
    assert health(c)[0] == 200
    # a collector that stopped refreshing: stale, so that a liveness probe restarts the exporter
    assert health(c, max_age_s=60, now=64.0)[0] == 200
    code, body = health(c, max_age_s=60, now=66.0)
    assert (code, body["status"], body["age_s"]) == (503, "stale", 61.0)


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> Iterator[Metric]:
        self.calls += 1
        yield GaugeMetricFamily("x", "x", value=self.calls)


def test_a_snapshot_is_rendered_once_per_format() -> None:
    c = SnapshotCollector(ExportOptions())
    counting = Counting()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(counting)  # type: ignore[arg-type]
    cache = RenderCache(reg, c)
    first = cache.get("")
    assert cache.get("") is not None and cache.get("")[1] == first[1] and counting.calls == 1
    om = cache.get("application/openmetrics-text; version=1.0.0")
    assert om[0].startswith("application/openmetrics-text") and om[1].endswith(b"# EOF\n")
    assert counting.calls == 2
    c.update(snap("ok"))                # a new snapshot: rendered anew
    assert cache.get("")[1] != first[1] and counting.calls == 3


@pytest.mark.parametrize(("text", "parsed"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)), (":9464", ("", 9464)), ("[::1]:9100", ("::1", 9100)),
    ("0.0.0.0:1", ("0.0.0.0", 1)), ("node-a:9464", ("node-a", 9464)),
])
def test_listen_addresses(text: str, parsed: tuple[str, int]) -> None:
    assert parse_listen(text) == parsed


@pytest.mark.parametrize("text", ["9464", "host:", "host:http", "::1:9464", "[::1]:0", "h:65536"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_listen(text)


def _serving(host: str) -> tuple[Any, threading.Thread]:
    """A server of one "ok" snapshot on ``host``, port chosen by the kernel, serving on a thread."""
    c = SnapshotCollector(ExportOptions())
    c.update(snap("ok"))
    server = make_server(host, 0, CollectorRegistry(auto_describe=False), c)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return server, t


def test_every_interface_means_ipv6_and_ipv4() -> None:
    import socket
    import urllib.request

    server, _t = _serving("")
    try:
        hosts = ["127.0.0.1"] + (["[::1]"] if socket.has_ipv6 else [])
        for host in hosts:
            with urllib.request.urlopen(f"http://{host}:{server.server_port}/healthz", timeout=10) as r:
                assert r.status == 200
    finally:
        server.shutdown()
        server.server_close()


def test_an_idle_server_sleeps_until_shutdown_wakes_it() -> None:
    """The I/O thread of an idle server waits for sockets only (no wake-up every half second: issue 38
    item 7); shutdown() wakes it, and it still answers."""
    import time
    import urllib.request

    from gputop.exporter import httpserver

    assert httpserver.IDLE_WAIT_S >= 10
    server, t = _serving("127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/healthz", timeout=10) as r:
            assert r.status == 200
        time.sleep(0.3)                         # idle: in its long wait
    finally:
        t0 = time.monotonic()
        server.shutdown()
        took = time.monotonic() - t0
        server.server_close()
    t.join(5)
    assert not t.is_alive() and took < 2.0
