"""The exporter's TLS and basic auth (issue 38, item 1): ``--web.config.file`` in exporter-toolkit's format, as
node_exporter takes it. A real Prometheus scrapes the real ``gputop exporter`` over TLS with basic auth; a wrong
password and plain HTTP are refused; client certificates are verified where asked; a TLS client that never
finishes its handshake holds its slot no longer than a head's deadline."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client import CollectorRegistry
from promserver import free_port, http_get, wait_until
from support import make_certs

from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.model import Snapshot, SourceStatus

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
PASSWORD = "s3cret-scrape"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("exporter-tls")
    make_certs(d)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    (d / "web.yml").write_text(json.dumps({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "basic_auth_users": {"prometheus": hashed}}))
    (d / "mtls.yml").write_text(json.dumps({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                              "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt"}}))
    return d


def _get(url: str, ctx: ssl.SSLContext | None, user: str | None = None, password: str = "") -> tuple[int, bytes]:
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=ctx, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@contextlib.contextmanager
def exporter(config: Path) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gputop.cli", "exporter", "--no-bpf", "--no-nvml", "-d", "1",
                             "--web.listen-address", f"{LOOPBACK}:{port}", "--web.config.file", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex((LOOPBACK, port)) == 0
        wait_until("the exporter to listen", listening, 60)
        yield port, proc
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "Traceback" not in err, err


def test_a_real_prometheus_scrapes_over_tls_with_basic_auth(certs: Path, tmp_path: Path) -> None:
    if not shutil.which("prometheus"):
        pytest.skip("Debian's prometheus package is not installed (scripts/setup.sh --test installs it)")
    with exporter(certs / "web.yml") as (port, _proc):
        ca = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        url = f"https://{LOOPBACK}:{port}"
        assert _get(url + "/metrics", ca)[0] == 401                             # no login
        assert _get(url + "/metrics", ca, "prometheus", "wrong")[0] == 401      # a wrong password
        code, body = _get(url + "/metrics", ca, "prometheus", PASSWORD)
        assert code == 200 and b"gputop_build_info" in body
        assert _get(url + "/healthz", ca, "prometheus", PASSWORD)[0] in (200, 503)
        # plain HTTP to the TLS port: no answer in plain text, the connection closed
        with socket.create_connection((LOOPBACK, port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            try:
                got = s.recv(4096)
            except ConnectionResetError:        # closed with the request unread: a reset
                got = b""
            assert b"gputop_build_info" not in got and not got.startswith(b"HTTP/")
        # Prometheus: one job with the login, one with a wrong password, one in plain HTTP
        prom_port = free_port()
        (tmp_path / "password").write_text(PASSWORD)
        (tmp_path / "wrong").write_text("not-it")
        tls = {"ca_file": str(certs / "ca.crt")}
        jobs = [{"job_name": name, "scheme": scheme, "static_configs": [{"targets": [f"{LOOPBACK}:{port}"]}],
                 **({"tls_config": tls} if scheme == "https" else {}),
                 **({"basic_auth": {"username": "prometheus", "password_file": str(tmp_path / pw)}} if pw else {})}
                for name, scheme, pw in (("good", "https", "password"), ("badpass", "https", "wrong"),
                                         ("plain", "http", None))]
        (tmp_path / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs}))
        log = open(tmp_path / "log", "w")  # noqa: SIM115 (closed below)
        prom = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address={LOOPBACK}:{prom_port}", "--log.level=warn"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            base = f"http://{LOOPBACK}:{prom_port}"

            def up() -> dict[str, float]:
                code, body = http_get(f"{base}/api/v1/query?query=up")
                if code != 200:
                    return {}
                return {r["metric"]["job"]: float(r["value"][1]) for r in json.loads(body)["data"]["result"]}
            wait_until("three scrapes", lambda: len(up()) == 3, 60, 0.25)
            wait_until("the login's scrape", lambda: up().get("good") == 1.0, 30, 0.25)
            assert up() == {"good": 1.0, "badpass": 0.0, "plain": 0.0}
            code, body = http_get(f"{base}/api/v1/query?query=gputop_build_info")
            assert [r["metric"]["job"] for r in json.loads(body)["data"]["result"]] == ["good"]
        finally:
            prom.terminate()
            prom.wait(timeout=30)
            log.close()


def test_client_certificates_are_verified_where_asked(certs: Path) -> None:
    with exporter(certs / "mtls.yml") as (port, _proc):
        url = f"https://{LOOPBACK}:{port}/metrics"
        no_cert = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            _get(url, no_cert)
        with_cert = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        with_cert.load_cert_chain(certs / "client.crt", certs / "client.key")
        assert _get(url, with_cert)[0] == 200


def test_a_handshake_that_never_ends_is_cut_at_the_heads_deadline(certs: Path) -> None:
    from gputop.exporter import webconfig
    from gputop.exporter.httpserver import Limits
    from gputop.exporter.server import make_server

    c = SnapshotCollector(ExportOptions())
    c.update(Snapshot(time=time.time(), interval_s=1.0, host="n", sources={"bpf": SourceStatus("ok")}))
    web = webconfig.load(str(certs / "web.yml"))
    srv = make_server(LOOPBACK, 0, CollectorRegistry(auto_describe=False), c,
                      limits=Limits(request_deadline_s=0.5), web=web)
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        with socket.create_connection((LOOPBACK, srv.server_port), timeout=10) as s:
            s.sendall(b"\x16\x03\x01")          # the start of a ClientHello, and then nothing
            started = time.monotonic()
            assert s.recv(4096) == b""          # closed, without an answer in plain text
            assert time.monotonic() - started < 5
        wait_until("the slot given back", lambda: srv.open_connections == 0, 5)
        assert srv.refused.get("deadline", 0) + srv.refused.get("tls", 0) >= 1
        ca = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        assert _get(f"https://{LOOPBACK}:{srv.server_port}/metrics", ca, "prometheus", PASSWORD)[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_a_login_long_past_72_bytes_and_an_unknown_user(certs: Path) -> None:
    """bcrypt reads 72 bytes of a password (as Go's, node_exporter's); an unknown user is checked against a
    dummy hash, taking the time a known one takes (no user names told by timing)."""
    from gputop.exporter import webconfig

    long = "x" * 100
    (certs / "long.yml").write_text(json.dumps({"basic_auth_users": {
        "p": bcrypt.hashpw(long[:72].encode(), bcrypt.gensalt(rounds=10)).decode()}}))
    web = webconfig.load(str(certs / "long.yml"))

    def auth(user: str, password: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    assert web.allows(auth("p", long)) and web.allows(auth("p", long[:72])) and not web.allows(auth("p", "x"))
    started = time.monotonic()
    assert not web.allows(auth("nobody", "x"))
    assert time.monotonic() - started > 0.005           # a bcrypt check ran (cost 10: tens of ms)
    assert not web.allows("Bearer abc") and not web.allows(None) and not web.allows("Basic !!!")


@pytest.mark.parametrize(("config", "message"), [
    ({"tls_server_config": {"cert_file": "server.crt"}}, "cert_file and key_file are needed"),
    ({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                            "client_auth_type": "RequireAnyClientCert"}}, "RequireAnyClientCert"),
    ({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                            "client_auth_type": "RequireAndVerifyClientCert"}}, "needs client_ca_file"),
    ({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key", "cipher_suites": ["x"]}},
     "cipher_suites is not supported"),
    ({"tls_server_config": {"cert_file": "nope.crt", "key_file": "server.key"}}, "cannot read"),
    ({"basic_auth_users": {"u": "plaintext"}}, "expected a bcrypt hash"),
    ({"frobnicate": 1}, "unknown field 'frobnicate'"),
    ({"http_server_config": {"headers": {"X": "y"}}}, "http_server_config.headers is not supported"),
])
def test_a_bad_web_config_is_a_usage_error_naming_the_field(certs: Path, tmp_path: Path, config: dict[str, object],
                                                            message: str) -> None:
    for name in ("server.crt", "server.key"):
        shutil.copy(certs / name, tmp_path / name)
    (tmp_path / "web.yml").write_text(json.dumps(config))
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "exporter", "--no-bpf", "--no-nvml",
                          "--listen", f"{LOOPBACK}:{free_port()}", "--web.config.file", str(tmp_path / "web.yml")],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 2 and message in lines[0] and lines[1].startswith("hint: "), res.stderr


def test_gzip_when_the_scraper_asks_for_it(certs: Path) -> None:
    """Prometheus asks for gzip: the snapshot's part compressed once per refresh, the live part at each scrape,
    in one gzip stream (a reader of one member, curl --compressed's, reads it all); plain text otherwise."""
    import zlib

    from gputop.exporter.server import wants_gzip

    assert wants_gzip("gzip") and wants_gzip("deflate, gzip;q=0.5") and wants_gzip("*")
    assert not wants_gzip("") and not wants_gzip("gzip;q=0") and not wants_gzip("identity")
    with exporter(certs / "web.yml") as (port, _proc):
        ca = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        login = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
        req = urllib.request.Request(f"https://{LOOPBACK}:{port}/metrics",
                                     headers={"Authorization": login, "Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, context=ca, timeout=10) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            one = zlib.decompressobj(31)            # one member, as curl and aiohttp read
            text = one.decompress(r.read()).decode()
            assert one.eof and one.unused_data == b""
        assert "gputop_build_info" in text and "gputop_snapshot_age_seconds" in text
        plain = urllib.request.Request(f"https://{LOOPBACK}:{port}/metrics", headers={"Authorization": login})
        with urllib.request.urlopen(plain, context=ca, timeout=10) as r:
            assert r.headers["Content-Encoding"] is None and b"gputop_build_info" in r.read()
