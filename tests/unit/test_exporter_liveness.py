"""A stalled collector is visible (issue 24, item 3): the snapshot's age, the refresh's duration and
phases, the configured interval and a count of refreshes as metrics; /healthz turns 503 "stale" once
the snapshot served is older than 2 intervals + 5 s (not before), with one stderr line when it goes
stale and one when it recovers; systemd's notify protocol (READY=1, WATCHDOG=1 at each refresh and
never while the collector is stuck, STOPPING=1) over a unix datagram socket of the test's own. The
real exporter runs on loopback only, with --no-bpf --no-nvml; its collector is stalled by a gate file
that its ``Sampler.collect`` waits on (SIGSTOP would stop every thread, the HTTP side too)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from promserver import free_port
from support import ROOT

from gputop.exporter.metrics import ExportOptions, LivenessCollector, SnapshotCollector
from gputop.exporter.sdnotify import Notifier, socket_address
from gputop.exporter.server import STALE_GRACE_S, RenderCache, StaleLog, health, stale_after, watchdog_for
from gputop.feeds.live import RefreshTiming, Sampler, SamplerConfig
from gputop.model import Snapshot, SourceStatus
from gputop.sources.nvml import NvmlReading

LOOPBACK = "127.0.0.1"
LIVE = ("gputop_snapshot_age_seconds", "gputop_refresh_duration_seconds", "gputop_refresh_phase_seconds",
        "gputop_refresh_interval_seconds", "gputop_refreshes_total")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def snap(bpf: str = "unavailable") -> Snapshot:
    return Snapshot(time=5.0, interval_s=1.0, host="n", sources={"bpf": SourceStatus(bpf, "why")})


TIMING = RefreshTiming(0.5, (("bpf", 0.25), ("host", 0.125), ("build", 0.0625)))


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def live(c: SnapshotCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LivenessCollector(c))
    return parse(RenderCache(CollectorRegistry(auto_describe=False), c, reg).get("")[1].decode())


# -- the metrics, on a fixed clock ------------------------------------------------------------------

def test_unknown_liveness_values_are_absent_never_0() -> None:
    clock = Clock()
    c = SnapshotCollector(ExportOptions(), clock)
    assert live(c) == {("gputop_refreshes_total", ()): 0.0}      # no snapshot, no refresh, no interval known
    c = SnapshotCollector(ExportOptions(interval_s=0.25), clock)
    c.update(snap("starting"))                                  # posted before any refresh: an age, no duration
    clock.t += 2.0
    assert live(c) == {("gputop_snapshot_age_seconds", ()): 2.0, ("gputop_refresh_interval_seconds", ()): 0.25,
                       ("gputop_refreshes_total", ()): 0.0}


def test_the_age_moves_at_every_scrape_though_the_snapshot_is_rendered_once() -> None:
    clock = Clock()
    c = SnapshotCollector(ExportOptions(interval_s=0.25), clock)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)
    lreg = CollectorRegistry(auto_describe=False)
    lreg.register(LivenessCollector(c))
    cache = RenderCache(reg, c, lreg)
    c.update(snap(), TIMING)
    clock.t += 0.5
    first = parse(cache.get("")[1].decode())
    assert first[("gputop_snapshot_age_seconds", ())] == 0.5
    assert first[("gputop_refresh_duration_seconds", ())] == 0.5
    assert {k[1][0][1]: v for k, v in first.items() if k[0] == "gputop_refresh_phase_seconds"} == {
        "bpf": 0.25, "host": 0.125, "build": 0.0625}
    assert first[("gputop_refresh_interval_seconds", ())] == 0.25
    assert first[("gputop_refreshes_total", ())] == 1.0
    clock.t += 7.0                                  # no refresh: the same cached snapshot, an older age
    again = parse(cache.get("")[1].decode())
    assert again[("gputop_snapshot_age_seconds", ())] == 7.5 and again[("gputop_refreshes_total", ())] == 1.0
    c.update(snap(), TIMING)
    c.update(snap(), TIMING)
    assert parse(cache.get("")[1].decode())[("gputop_refreshes_total", ())] == 3.0
    om = cache.get("application/openmetrics-text; version=1.0.0")[1].decode()
    assert om.count("# EOF") == 1 and om.endswith("# EOF\n") and "gputop_snapshot_age_seconds 0.0" in om


# -- /healthz's rule, exactly -----------------------------------------------------------------------

def test_healthz_turns_stale_past_two_intervals_and_5_s_not_before() -> None:
    assert STALE_GRACE_S == 5.0 and stale_after(0.25) == 5.5 and stale_after(15) == 35.0
    clock = Clock()
    c = SnapshotCollector(ExportOptions(interval_s=0.25), clock)
    c.update(snap(), TIMING)
    clock.t += 5.5                                  # exactly 2 x 0.25 + 5: still fresh
    code, body = health(c, stale_after(0.25))
    assert (code, body["status"], body["age_s"]) == (200, "ok", 5.5)
    clock.t += 0.001
    code, body = health(c, stale_after(0.25))
    assert (code, body["status"], body["age_s"], body["max_age_s"]) == (503, "stale", 5.501, 5.5)
    assert body["reason"] == "no new snapshot for 5.5 s (more than 5.5 s): the collector is stuck"
    c.update(snap(), TIMING)
    assert health(c, stale_after(0.25))[0] == 200
    c.update(snap("starting"))                      # starting beats stale: the BPF compile may take a minute
    clock.t += 100
    assert health(c, stale_after(0.25))[1]["status"] == "starting"


def test_stale_and_recovered_are_said_once_each() -> None:
    clock = Clock()
    c = SnapshotCollector(ExportOptions(interval_s=0.25), clock)
    said: list[str] = []
    log = StaleLog(c, stale_after(0.25), 0.25, said.append)
    c.update(snap(), TIMING)
    for _ in range(12):                             # 6 s in half-second checks, as the main loop does
        clock.t += 0.5
        log.check()
    assert said == ["warning: exporter: the collector has not refreshed for 6.0 s (more than 2 refreshes of "
                    "0.25 s + 5 s): /healthz answers 503 stale until it does"]
    assert log.stale
    c.update(snap(), TIMING)
    for _ in range(3):
        log.check()
    assert said[1:] == ["exporter: the collector refreshes again after 6.0 s; /healthz answers 200"]
    assert not log.stale


# -- the sampler's timing -------------------------------------------------------------------------

class OkNvml:
    def read(self) -> NvmlReading:
        return NvmlReading(SourceStatus("ok"), (), {})

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("nvml", "phases"), [(False, ["host", "build"]), (True, ["nvml", "host", "build"])])
def test_the_sampler_times_only_the_phases_that_ran(nvml: bool, phases: list[str]) -> None:
    s = Sampler(SamplerConfig(use_bpf=False, use_nvml=False), nvml=OkNvml() if nvml else None)  # type: ignore[arg-type]
    assert s.last_refresh is None
    s.collect()
    t = s.last_refresh
    assert t is not None and [p for p, _ in t.phases] == phases
    assert all(v >= 0 for _, v in t.phases) and sum(v for _, v in t.phases) <= t.duration_s < 5.0


# -- sd_notify ----------------------------------------------------------------------------------------

def receiver(address: str | bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.setblocking(False)
    return sock


def drain(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_sdnotify_over_a_path_and_an_abstract_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    name = f"gputop-test-{os.getpid()}-{time.monotonic_ns()}"
    for env, address in [(path, path), (f"@{name}", b"\0" + name.encode())]:
        assert socket_address(env) == address
        with receiver(address) as sock:
            n = Notifier.from_environment({"NOTIFY_SOCKET": env})
            assert n.enabled and n.ready() and n.watchdog() and n.stopping() and n.send("STATUS=a", "X=1")
            assert drain(sock) == ["READY=1", "WATCHDOG=1", "STOPPING=1", "STATUS=a\nX=1"]
            n.close()
            assert not n.watchdog() and drain(sock) == []


def test_sdnotify_is_a_no_op_without_a_usable_socket(tmp_path: Path) -> None:
    for env in ({}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "vsock:2:1234"}, {"NOTIFY_SOCKET": "relative"}):
        n = Notifier.from_environment(env)
        assert not n.enabled and not n.ready() and not n.watchdog() and not n.stopping()
    gone = Notifier.from_environment({"NOTIFY_SOCKET": str(tmp_path / "nobody")})   # nobody listens: no error
    assert gone.enabled and not gone.watchdog()


def test_sdnotify_reads_the_watchdog_for_this_process_and_unsets_the_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Notifier.from_environment({"WATCHDOG_USEC": "60000000"}).watchdog_usec == 60_000_000
    assert Notifier.from_environment({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}).watchdog_usec is None
    assert Notifier.from_environment({"WATCHDOG_USEC": "x"}).watchdog_usec is None
    for key, value in (("NOTIFY_SOCKET", str(tmp_path / "n")), ("WATCHDOG_USEC", "1"),
                       ("WATCHDOG_PID", str(os.getpid()))):
        monkeypatch.setenv(key, value)
    n = Notifier.from_environment(unset=True)
    assert n.enabled and n.watchdog_usec == 1
    assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} & set(os.environ)


def test_a_watchdog_shorter_than_the_stale_rule_is_lengthened(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    with receiver(path) as sock:
        said: list[str] = []
        n = Notifier(path, 60_000_000)              # WatchdogSec=60s, -d 15: stale at 35 s, nothing to change
        watchdog_for(n, stale_after(15), 15, said.append)
        assert (drain(sock), said, n.watchdog_usec) == ([], [], 60_000_000)
        watchdog_for(n, stale_after(60), 60, said.append)      # -d 60: stale at 125 s
        assert drain(sock) == ["WATCHDOG_USEC=250000000"] and n.watchdog_usec == 250_000_000
        assert said == ["warning: exporter: WatchdogSec=60s is not longer than 2 refreshes of 60 s + 5 s; the "
                        "exporter asked systemd for 250 s"]


# -- the real exporter, stalled ------------------------------------------------------------------------

#: the exporter, its collector waiting before each refresh while the gate file exists
STALLABLE = """\
import os, sys, time
from gputop.feeds import live as sampler
gate = sys.argv.pop(1)
collect = sampler.Sampler.collect
def gated(self):
    while os.path.exists(gate):
        time.sleep(0.01)
    return collect(self)
sampler.Sampler.collect = gated
from gputop.cli import main
sys.exit(main(sys.argv[1:]))
"""


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(url: str) -> dict[str, float]:
    code, text = get(url + "/metrics")
    assert code == 200
    return {k[0] + (str(dict(k[1])) if k[1] else ""): v for k, v in parse(text).items()
            if k[0].startswith(LIVE)}


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify")
    with receiver(path) as sock:
        yield path, sock


def test_a_stalled_collector_is_seen_said_and_no_longer_pets_the_watchdog(
        tmp_path: Path, notify_socket: tuple[str, socket.socket]) -> None:
    interval = 0.2
    limit = stale_after(interval)                                   # 5.4 s
    path, sock = notify_socket
    gate = tmp_path / "stall"
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    proc = subprocess.Popen([sys.executable, "-c", STALLABLE, str(gate), "exporter", "--no-bpf", "--no-nvml",
                             "-d", str(interval), "--listen", f"{LOOPBACK}:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "NOTIFY_SOCKET": path})
    messages: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not messages and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            messages += drain(sock)
            time.sleep(0.05)
        assert messages[:1] == ["READY=1"]                         # ready before anything else
        assert get(url + "/healthz")[0] == 200
        seen = []
        for _ in range(5):
            time.sleep(0.3)
            m = scrape(url)
            seen.append(m["gputop_refreshes_total"])
            assert 0 <= m["gputop_snapshot_age_seconds"] < 2 * interval + 1
            assert m["gputop_refresh_interval_seconds"] == interval
            phases = {k: v for k, v in m.items() if k.startswith("gputop_refresh_phase_seconds")}
            assert sorted(phases) == ["gputop_refresh_phase_seconds{'phase': 'build'}",
                                      "gputop_refresh_phase_seconds{'phase': 'host'}"]
            assert 0 <= sum(phases.values()) <= m["gputop_refresh_duration_seconds"] < 2 * interval + 1
        assert seen == sorted(seen) and seen[-1] > seen[0] >= 1

        gate.touch()                                                # the next refresh waits
        m = scrape(url)
        while m["gputop_snapshot_age_seconds"] < 1.0:               # the refresh in flight, if any, is done
            time.sleep(0.1)
            m = scrape(url)
        messages += drain(sock)
        stalled_at = m["gputop_refreshes_total"]
        # every refresh after the first pets the watchdog once: exact, now that none is in flight
        assert messages == ["READY=1"] + ["WATCHDOG=1"] * int(stalled_at - 1)

        answers: list[tuple[int, dict[str, object]]] = []
        ages = []
        while not answers or answers[-1][0] == 200:
            assert proc.poll() is None
            code, text = get(url + "/healthz")
            answers.append((code, json.loads(text)))
            ages.append(scrape(url)["gputop_snapshot_age_seconds"])
            assert len(answers) < 400
            time.sleep(0.05)
        fresh = [b for c, b in answers if c == 200]
        code, stale = answers[-1]
        assert code == 503 and stale["status"] == "stale" and stale["max_age_s"] == limit
        assert isinstance(stale["age_s"], float) and limit < stale["age_s"] < limit + 2.0
        assert all(isinstance(b["age_s"], float) and b["age_s"] <= limit for b in fresh)    # not before
        assert max(b["age_s"] for b in fresh) > limit - 1.0                                  # seen near the edge
        assert ages == sorted(ages) and ages[-1] > limit - 1.0                              # the age grows
        assert scrape(url)["gputop_refreshes_total"] == stalled_at
        time.sleep(1.2)                                             # the main loop's check ran, twice
        assert drain(sock) == []                                    # no WATCHDOG=1 while stuck

        gate.unlink()
        deadline = time.monotonic() + 30
        while get(url + "/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert get(url + "/healthz")[0] == 200
        time.sleep(1.0)
        after = drain(sock)
        assert after and set(after) == {"WATCHDOG=1"}               # progress pets it again
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert drain(sock)[-1:] == ["STOPPING=1"]
    lines = err.splitlines()
    went = [ln for ln in lines if "the collector has not refreshed" in ln]
    back = [ln for ln in lines if "the collector refreshes again" in ln]
    assert len(went) == 1 and went[0].startswith("gputop: warning: exporter: the collector has not refreshed for ")
    assert went[0].endswith(f"(more than 2 refreshes of {interval:g} s + 5 s): /healthz answers 503 stale "
                            "until it does")
    assert len(back) == 1 and back[0].startswith("gputop: exporter: the collector refreshes again after ")
    assert "Traceback" not in err, err
