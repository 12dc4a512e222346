"""OTLP export (issue 38, item 3): ``gputop exporter --otlp-endpoint`` pushes what /metrics serves, and a real
receiver reads back every series exactly: VictoriaMetrics (Debian's package; tests/otlpreceiver.py), which names
the series as Prometheus' OTLP receiver does. Counters, gauges and histograms equal /metrics' samples of the same
refresh, label for label; the resource's attributes arrive; TLS and basic auth come from the same HTTP client
configuration as the fleet view's; a wrong password, a dead or silent receiver and a redirect are failed pushes,
counted and said once, never a traceback."""

from __future__ import annotations

import base64
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from otlpreceiver import RESOURCE_LABELS, Receiver
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from promserver import Exporter, http_get, wait_until
from support import ROOT, make_certs
from test_exporter_metrics import Clock, proc, snap

from gputop import latency
from gputop.errors import GputopError
from gputop.exporter import otlp
from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.feeds.http_config import load
from gputop.model import GpuSample

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.metric_exporter",
                    reason="the extra gputop-ebpf[otlp] is not installed (scripts/setup.sh --test installs it)")

PASSWORD = "correct horse battery staple"
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _key(name: str, labels: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A sample's identity as PromQL sees it: labels with empty values are no labels; ``le`` as a number."""
    kept = {k: (repr(float(v)) if k == "le" else v) for k, v in labels.items() if v != "" and k not in RESOURCE_LABELS}
    return name, tuple(sorted(kept.items()))


def scraped(*registries: CollectorRegistry) -> Series:
    out: Series = {}
    for reg in registries:
        for fam in text_string_to_metric_families(generate_latest(reg).decode()):
            for s in fam.samples:
                out[_key(s.name, s.labels)] = s.value
    return out


def received(rx: Receiver, selector: str, at_least: int = 1) -> tuple[Series, list[dict[str, str]]]:
    """The receiver's series of ``selector``: values by identity, and every series' full label set."""
    out: Series = {}
    full = []
    for r in rx.query(selector, at_least):
        labels = dict(r["metric"])
        full.append(labels)
        out[_key(labels.pop("__name__"), labels)] = float(r["value"][1])
    return out, full


def rich_collector() -> SnapshotCollector:
    """Every kind of family: counters, gauges, histograms (log2, sync latency), kernels, GPUs; fixed clock."""
    raw: dict[str, list[int]] = {}
    for api, ns, n in (("stream", 1_060_000, 90), ("stream", 100_100_000, 1), ("device", 900, 2)):
        raw.setdefault(api, [0] * latency.BUCKETS)[latency.bucket_of(ns)] += n
    sums = {"stream": 90 * 1_060_000 + 100_100_000, "device": 1800}
    p = proc(41, sync_latency=latency.sync_latency({a: (sums[a], tuple(b)) for a, b in raw.items()}, None))
    gpu = GpuSample(index=0, name="H100", uuid="GPU-1", util_pct=40.0, temp_c=40.0, mem_used_bytes=1 << 30)
    c = SnapshotCollector(ExportOptions(kernel_metrics=5, interval_s=0.5), Clock())
    c.update(snap(p, proc(42, launches=17, comm="other"), gpus=(gpu,)))
    return c


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    rx = Receiver(tmp_path)
    try:
        yield rx
    finally:
        rx.stop()


def test_every_family_name_comes_back_from_prometheus_translation() -> None:
    """The OpenTelemetry name and unit of each family give its /metrics name back through Prometheus' OTLP
    translation (docs/metrics.md, "OTLP": the table's examples)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(rich_collector())
    reg.register(ProcessCollector(registry=None))
    families = list(reg.collect())
    assert len(families) > 40
    for fam in families:
        name, unit = otlp.otel_name(fam.name, fam.type)
        want = fam.name + "_total" if fam.type == "counter" else fam.name
        assert otlp.prometheus_name(name, unit, fam.type) == want, (fam.name, name, unit)
    assert otlp.otel_name("gputop_kernel_launches", "counter") == ("gputop.kernel.launches", "")
    assert otlp.otel_name("gputop_sync_wait_seconds", "counter") == ("gputop.sync.wait", "s")
    assert otlp.otel_name("gputop_memcpy_bytes", "counter") == ("gputop.memcpy", "By")
    assert otlp.otel_name("gputop_process_gpu_memory_bytes", "gauge") == ("gputop.process.gpu.memory", "By")
    assert otlp.otel_name("gputop_process_sm_utilization_ratio", "gauge") == ("gputop.process.sm.utilization", "1")
    assert otlp.otel_name("gputop_gpu_pcie_rx_bytes_per_second", "gauge") == ("gputop.gpu.pcie.rx", "By/s")
    assert otlp.otel_name("gputop_probe_hits_per_second", "gauge") == ("gputop.probe.hits", "1/s")
    assert otlp.otel_name("gputop_gpu_temperature_celsius", "gauge") == ("gputop.gpu.temperature", "Cel")
    assert otlp.otel_name("gputop_sync_duration_seconds", "histogram") == ("gputop.sync.duration", "s")
    assert otlp.otel_name("gputop_build_info", "gauge") == ("gputop.build.info", "")
    # a name the translation would change (a counter with "total" inside): sent as it is
    assert otlp.otel_name("x_total_y", "counter") == ("x_total_y", "")


def test_a_push_reads_back_exactly_series_for_series(receiver: Receiver) -> None:
    collector = rich_collector()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    want = scraped(reg)
    pusher = otlp.OtlpPusher([reg], otlp.metrics_url(receiver.otlp_url), interval_s=5.0, node="node-a")
    try:
        assert pusher.push()
    finally:
        pusher.stop()
    got, full = received(receiver, '{__name__=~"gputop_.*"}', len(want))
    assert got == want          # every sample: name, labels and value, histograms' buckets, _sum and _count
    assert len(got) > 300
    assert got[_key("gputop_kernel_launches_total", {"pid": "41", "comm": "wl_dynamic"})] == 6000
    assert got[_key("gputop_kernel_launches_total", {"pid": "42", "comm": "other"})] == 17
    assert got[_key("gputop_sync_wait_seconds_total", {"pid": "41", "comm": "wl_dynamic"})] == 0.25
    # a histogram: per-bucket counts sent, Prometheus' cumulative buckets read back
    p41 = {"pid": "41", "comm": "wl_dynamic"}
    assert got[_key("gputop_kernel_grid_blocks_bucket", {**p41, "le": "63"})] == 0
    assert got[_key("gputop_kernel_grid_blocks_bucket", {**p41, "le": "127"})] == 6000
    assert got[_key("gputop_kernel_grid_blocks_count", p41)] == 6000
    assert got[_key("gputop_kernel_grid_blocks_sum", p41)] == 480000
    sync = {k: v for k, v in got.items() if k[0] == "gputop_sync_duration_seconds_bucket"}
    assert sync and max(sync.values()) == 91
    # the resource: who pushed, on every series
    for labels in full:
        assert labels["service_name"] == "gputop"
        assert labels["service_instance_id"] == "node-a"
        assert labels["host_name"] == socket.gethostname()
        assert labels["scope_name"] == "gputop"


def test_counters_start_again_when_they_go_down() -> None:
    starts = otlp.Starts()
    assert starts.start("c", {"pid": "1"}, 5, 100) == 100
    starts.done()
    assert starts.start("c", {"pid": "1"}, 7, 200) == 100
    starts.done()
    assert starts.start("c", {"pid": "1"}, 2, 300) == 300     # a new process under the PID
    starts.done()
    starts.done()                                               # a push without it: forgotten
    assert starts.start("c", {"pid": "1"}, 9, 400) == 400


def test_the_resource_names_the_container_and_pod_gputop_runs_in() -> None:
    cid = "a" * 64
    cgroup = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_12ab_34cd_56ef_1234567890ab" \
             f".slice/cri-containerd-{cid}.scope\n"
    attrs = otlp.resource_attributes("node-7", cgroup)
    assert attrs["container.id"] == cid
    assert attrs["k8s.pod.uid"] == "1234abcd-12ab-34cd-56ef-1234567890ab"
    assert attrs["k8s.node.name"] == "node-7" and attrs["service.instance.id"] == "node-7"
    host = otlp.resource_attributes(None, "0::/user.slice/user-0.slice/session-1.scope\n")
    assert "container.id" not in host and "k8s.pod.uid" not in host
    assert host["service.instance.id"] == host["host.name"] == socket.gethostname()


def test_endpoints() -> None:
    assert otlp.metrics_url("http://collector:4318") == "http://collector:4318/v1/metrics"
    assert otlp.metrics_url("http://p:9090/api/v1/otlp/") == "http://p:9090/api/v1/otlp/v1/metrics"
    assert otlp.metrics_url("https://h/x/v1/metrics") == "https://h/x/v1/metrics"
    for bad in ("collector:4318", "ftp://h", "http://user:secret@h:4318", "http://h:99999"):
        with pytest.raises(GputopError) as e:
            otlp.metrics_url(bad)
        assert "secret" not in e.value.message + e.value.hint


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("otlp-tls")
    make_certs(d)
    (d / "password").write_text(PASSWORD + "\n")
    (d / "wrong").write_text("hunter2\n")
    return d


def test_tls_and_basic_auth_from_the_http_config_and_a_wrong_password_is_a_counted_failure(
        certs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rx = Receiver(tmp_path, tls_dir=certs, user="alice", password_file=certs / "password")
    said: list[str] = []
    try:
        (certs / "good.yml").write_text("basic_auth:\n  username: alice\n  password_file: password\n"
                                        "tls_config:\n  ca_file: ca.crt\n")
        reg = CollectorRegistry(auto_describe=False)
        reg.register(rich_collector())
        good = otlp.OtlpPusher([reg], otlp.metrics_url(rx.otlp_url), interval_s=5.0, node="tls-node",
                               http_config=load(str(certs / "good.yml")), say=said.append)
        try:
            assert good.push()
        finally:
            good.stop()
        assert rx.value('gputop_kernel_launches_total{pid="42",service_instance_id="tls-node"}') == 17
        assert said == [f"exporter: the first OTLP push to {good.url} was taken"]
        said.clear()
        (certs / "wrong.yml").write_text("basic_auth:\n  username: alice\n  password_file: wrong\n"
                                         "tls_config:\n  ca_file: ca.crt\n")
        wrong = otlp.OtlpPusher([reg], otlp.metrics_url(rx.otlp_url), interval_s=5.0,
                                http_config=load(str(certs / "wrong.yml")), say=said.append)
        try:
            assert not wrong.push()
            assert not wrong.push()
        finally:
            wrong.stop()
        assert wrong.stats.pushes == 2 and wrong.stats.failures == 2
        assert wrong.session.requests == 2          # a 401 is not retried
        assert len(said) == 1, said                 # said once, not at every push
        assert said[0].startswith(f"warning: exporter: OTLP push to {wrong.url} failed: HTTP 401")
        assert "hunter2" not in said[0] and "Traceback" not in said[0] and "\n" not in said[0]
        # the server's certificate from a CA not given: refused
        noca = otlp.OtlpPusher([reg], otlp.metrics_url(rx.otlp_url), interval_s=1.0, say=said.append)
        try:
            assert not noca.push()
        finally:
            noca.stop()
        assert "certificate verify failed" in said[-1].lower() or "CERTIFICATE_VERIFY_FAILED" in said[-1]
        # the SDK's own variables: the CA and a header (the login) from the environment
        login = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(certs / "ca.crt"))
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Basic%20{login}")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=gputop-x1,k8s.namespace.name=gpu")
        env = otlp.OtlpPusher([reg], otlp.metrics_url(rx.otlp_url), interval_s=5.0, node="env-node")
        try:
            assert env.push()
        finally:
            env.stop()
        assert rx.value('gputop_kernel_launches_total{pid="42",service_instance_id="env-node",'
                        'k8s_pod_name="gputop-x1",k8s_namespace_name="gpu"}') == 17
    finally:
        rx.stop()


class _Silent(threading.Thread):
    """A TCP server that accepts and never answers."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []

    def run(self) -> None:
        try:
            while True:
                self.conns.append(self.sock.accept()[0])
        except OSError:
            pass


def _pusher(url: str, said: list[str], interval_s: float = 1.0) -> otlp.OtlpPusher:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(rich_collector())
    return otlp.OtlpPusher([reg], otlp.metrics_url(url), interval_s=interval_s, say=said.append)


def test_a_silent_receiver_is_cut_at_the_deadline_and_a_dead_one_is_said_once() -> None:
    silent = _Silent()
    silent.start()
    said: list[str] = []
    p = _pusher(f"http://127.0.0.1:{silent.port}", said)
    try:
        t0 = time.monotonic()
        assert not p.push()
        assert time.monotonic() - t0 < otlp.MIN_PUSH_S + 1.5
        assert p.stats.failures == 1 and "no answer within" in said[-1]
    finally:
        p.stop()
        silent.sock.close()
        for c in silent.conns:
            c.close()
    # on its thread: a refresh never waits for the receiver; those that come while a push hangs are skipped
    said.clear()
    silent = _Silent()
    silent.start()
    p = _pusher(f"http://127.0.0.1:{silent.port}", said)
    p.start()
    try:
        waits = []
        for _ in range(4):
            t0 = time.monotonic()
            p.offer()
            waits.append(time.monotonic() - t0)
            time.sleep(0.1)
        assert max(waits) < 0.05, waits
        wait_until("two pushes to fail", lambda: p.stats.failures >= 2, 10)
        assert (p.stats.pushes, p.stats.failures, p.stats.skipped, len(said)) == (2, 2, 2, 1), said
    finally:
        p.stop()
        silent.sock.close()
        for c in silent.conns:
            c.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]           # bound, not listening: refused
        said.clear()
        p = _pusher(f"http://127.0.0.1:{dead}", said)
        try:
            t0 = time.monotonic()
            assert not p.push() and not p.push()
            assert time.monotonic() - t0 < 2 * (otlp.MIN_PUSH_S + 1.5)
        finally:
            p.stop()
    assert len(said) == 1 and "unreachable" in said[0] and "refused" in said[0].lower(), said


def test_a_redirect_is_a_failure_never_followed() -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append(self.path)
            self.send_response(302)
            self.send_header("Location", "http://elsewhere.invalid/v1/metrics")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    said: list[str] = []
    p = _pusher(f"http://127.0.0.1:{server.server_address[1]}", said)
    try:
        assert not p.push()
    finally:
        p.stop()
        server.shutdown()
        server.server_close()
    assert hits == ["/v1/metrics"]
    assert "HTTP 302" in said[0] and "elsewhere.invalid" in said[0] and "not followed" in said[0]


# ---------------------------------------------------------------- the command


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", "exporter", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def test_without_the_sdk_the_flag_says_how_to_install_it(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "opentelemetry"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('the OpenTelemetry SDK is not installed here')\n")
    res = _run("--otlp-endpoint", "http://127.0.0.1:4318", env={"PYTHONPATH": f"{shim.parent}:{ROOT}"})
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("gputop: error: --otlp-endpoint needs the OpenTelemetry SDK"), res.stderr
    assert lines[1] == f"hint: {otlp.INSTALL_HINT}" and len(lines) == 2
    assert "pip install 'gputop-ebpf[otlp]'" in lines[1]


@pytest.mark.parametrize(("args", "message"), [
    (("--otlp-endpoint", "http://alice:s3cret@127.0.0.1:4318"), "a login in the URL is refused"),
    (("--otlp-endpoint", "127.0.0.1:4318"), "expected an http:// or https:// URL"),
    (("--otlp-http-config-file", "/nonexistent.yml"), "--otlp-http-config-file is the login of --otlp-endpoint"),
    (("--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-http-config-file", "CONFIG"), "oauth2 is not supported"),
])
def test_bad_otlp_options_are_usage_errors(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    config = tmp_path / "c.yml"
    config.write_text("oauth2:\n  client_id: x\n")
    res = _run(*(str(config) if a == "CONFIG" else a for a in args))
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "s3cret" not in res.stderr and "Traceback" not in res.stderr


def _metric(exp: Exporter, name: str) -> float | None:
    for fam in text_string_to_metric_families(exp.metrics()):
        for s in fam.samples:
            if s.name == name and not s.labels:
                return s.value
    return None


def test_the_exporter_pushes_every_refresh_and_a_wrong_password_never_stops_it(
        certs: Path, tmp_path: Path) -> None:
    rx = Receiver(tmp_path, tls_dir=certs, user="alice", password_file=certs / "password")
    exp = wrong = None
    try:
        (certs / "cli-good.yml").write_text("basic_auth:\n  username: alice\n  password_file: password\n"
                                            "tls_config:\n  ca_file: ca.crt\n")
        exp = Exporter("-d", "0.5", "--no-bpf", "--no-nvml", "--node", "cli-node", "--otlp-endpoint", rx.otlp_url,
                       "--otlp-http-config-file", str(certs / "cli-good.yml"))
        exp.healthy()
        sel = 'service_instance_id="cli-node"'
        wait_until("three refreshes pushed", lambda: (rx.value(f"gputop_refreshes_total{{{sel}}}") or 0) >= 3, 30)
        assert rx.value(f'gputop_build_info{{{sel},node="cli-node"}}') == 1
        assert rx.value(f"gputop_refresh_interval_seconds{{{sel}}}") == 0.5
        assert (rx.value(f"gputop_otlp_pushes_total{{{sel}}}") or 0) >= 2
        assert rx.value(f"process_resident_memory_bytes{{{sel}}}")
        assert _metric(exp, "gputop_otlp_push_failures_total") == 0
        code, err = exp.stop()
        assert code == 0 and "Traceback" not in err, err
        assert "exporter pushing OTLP metrics to" in err and "first OTLP push" in err
        (certs / "cli-wrong.yml").write_text("basic_auth:\n  username: alice\n  password_file: wrong\n"
                                             "tls_config:\n  ca_file: ca.crt\n")
        wrong = Exporter("-d", "0.5", "--no-bpf", "--no-nvml", "--otlp-endpoint", rx.otlp_url,
                         "--otlp-http-config-file", str(certs / "cli-wrong.yml"))
        wrong.healthy()
        wait_until("three failed pushes", lambda: (_metric(wrong, "gputop_otlp_push_failures_total") or 0) >= 3, 30)
        assert http_get(wrong.url + "/healthz")[0] == 200
        code, err = wrong.stop()
        assert code == 0, err
        failed = [line for line in err.splitlines() if "OTLP push" in line and "failed" in line]
        assert len(failed) == 1 and "HTTP 401" in failed[0], err
        assert "Traceback" not in err and "hunter2" not in err and PASSWORD not in err
    finally:
        for e in (exp, wrong):
            if e is not None:
                e.stop()
        rx.stop()
