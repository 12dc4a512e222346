"""The fleet view logs in (issue 38, item 2): ``--http.config.file`` in Prometheus' HTTP client format, against a
real Prometheus serving TLS with basic auth (its ``--web.config.file``) and a real nginx in front of one that
demands a bearer token and a tenant header, as Mimir, Cortex and hosted Prometheus do. Secrets never show."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from promserver import Prometheus, free_port, wait_until
from support import make_certs

from gputop.feeds.fleet_client import FleetError, PromClient
from gputop.feeds.http_config import HttpConfig, load, parse

with warnings.catch_warnings():     # deprecated (gone in 3.13): bcrypt through libxcrypt, the test's only use
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"
TOKEN = "tok-3f9a0c"


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def secure_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Prometheus serving https on loopback, basic auth (bcrypt) and client certificates verified if given."""
    if not shutil.which("prometheus"):
        pytest.skip("Debian's prometheus package is not installed (scripts/setup.sh --test installs it)")
    d = tmp_path_factory.mktemp("tls")
    make_certs(d)
    web = d / "web.yml"
    web.write_text(json.dumps({
        "tls_server_config": {"cert_file": str(d / "server.crt"), "key_file": str(d / "server.key"),
                              "client_ca_file": str(d / "ca.crt"), "client_auth_type": "VerifyClientCertIfGiven"},
        "basic_auth_users": {"alice": crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH))}}))
    (d / "prometheus.yml").write_text("{}\n")
    port = free_port()
    log = open(d / "log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(["prometheus", f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={web}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=d)
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))

    def ready() -> bool:
        login = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        req = urllib.request.Request(f"https://127.0.0.1:{port}/-/ready", headers={"Authorization": f"Basic {login}"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False
    try:
        wait_until("Prometheus over TLS to be ready", ready, 60)
        yield f"https://127.0.0.1:{port}", d
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _config(d: Path, name: str, text: str) -> HttpConfig:
    path = d / name
    path.write_text(text)
    return load(str(path))


def test_tls_and_basic_auth_against_a_real_prometheus(secure_prometheus: tuple[str, Path]) -> None:
    url, d = secure_prometheus
    (d / "password").write_text(PASSWORD + "\n")
    good = _config(d, "good.yml", "basic_auth:\n  username: alice\n  password_file: password\n"
                                  "tls_config:\n  ca_file: ca.crt\n")
    assert PASSWORD not in repr(good)
    got = PromClient(url, 10, good).query("vector(7)", time.time())
    assert [s["value"][1] for s in got] == ["7"]
    # a client certificate too (the server verifies one when given)
    mtls = _config(d, "mtls.yml", "basic_auth:\n  username: alice\n  password_file: password\n"
                                  "tls_config:\n  ca_file: ca.crt\n  cert_file: client.crt\n  key_file: client.key\n")
    assert [s["value"][1] for s in PromClient(url, 10, mtls).query("vector(8)", time.time())] == ["8"]
    # a wrong password: refused, said, the secret nowhere
    (d / "wrong").write_text("hunter2\n")
    wrong = _config(d, "wrong.yml", "basic_auth:\n  username: alice\n  password_file: wrong\n"
                                    "tls_config:\n  ca_file: ca.crt\n")
    with pytest.raises(FleetError) as e:
        PromClient(url, 10, wrong).query("vector(1)", time.time())
    assert "HTTP 401" in str(e.value) and "wrong.yml" in e.value.hint and "hunter2" not in str(e.value) + e.value.hint
    # no login at all
    with pytest.raises(FleetError) as e:
        PromClient(url, 10, _config(d, "nologin.yml", "tls_config:\n  ca_file: ca.crt\n")).query("vector(1)", 0)
    assert "HTTP 401" in str(e.value)
    # the server's certificate from an unknown CA: refused unless verification is skipped, as asked
    with pytest.raises(FleetError) as e:
        PromClient(url, 10, _config(d, "noca.yml", "basic_auth:\n  username: alice\n  password_file: password\n"))\
            .query("vector(1)", time.time())
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value) or "certificate verify failed" in str(e.value)
    skip = _config(d, "skip.yml", "basic_auth:\n  username: alice\n  password_file: password\n"
                                  "tls_config:\n  insecure_skip_verify: true\n")
    assert PromClient(url, 10, skip).query("vector(2)", time.time())
    # plain HTTP to the TLS port: not Prometheus's answer
    with pytest.raises(FleetError):
        PromClient(url.replace("https:", "http:"), 10, good).query("vector(1)", time.time())


def test_the_command_line_logs_in_and_keeps_secrets_out_of_its_messages(secure_prometheus: tuple[str, Path]) -> None:
    url, d = secure_prometheus
    (d / "password").write_text(PASSWORD + "\n")
    (d / "cli.yml").write_text("basic_auth:\n  username: alice\n  password_file: password\ntls_config:\n"
                               "  ca_file: ca.crt\n")
    res = gputop("--prometheus", url, "--http.config.file", str(d / "cli.yml"), "-b", "-n", "1")
    # logged in: Prometheus answered; it holds no gputop exporter, which is what the fleet view says
    assert "HTTP 401" not in res.stderr and "certificate" not in res.stderr, res.stderr
    assert "gputop_build_info" in res.stderr or "no gputop" in res.stderr.lower() or res.returncode == 0, res.stderr
    (d / "bad.yml").write_text(f"basic_auth:\n  username: alice\n  password: {PASSWORD}\n  password_file: password\n")
    res = gputop("--prometheus", url, "--http.config.file", str(d / "bad.yml"), "-b", "-n", "1")
    assert res.returncode == 2 and "at most one of password and password_file" in res.stderr
    assert PASSWORD not in res.stderr and "Traceback" not in res.stderr


def _nginx(d: Path, upstream: str) -> tuple[subprocess.Popen[bytes], str]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("Debian's nginx package is not installed (scripts/setup.sh --test installs it)")
    port = free_port()
    (d / "tmp").mkdir()
    conf = d / "nginx.conf"
    conf.write_text(f"""daemon off; pid {d}/nginx.pid; error_log {d}/error.log warn; worker_processes 1;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
    uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}
            if ($http_x_scope_orgid != "team-a") {{ return 403; }}
            proxy_pass {upstream};
        }}
    }}
}}
""")
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(d), "-e", str(d / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    wait_until("nginx to listen", listening, 30)
    return proc, f"http://127.0.0.1:{port}"


def test_a_bearer_token_and_a_tenant_header_through_a_real_reverse_proxy(tmp_path: Path) -> None:
    prom = Prometheus(tmp_path, [])
    proc = None
    try:
        (tmp_path / "nginx").mkdir()
        proc, url = _nginx(tmp_path / "nginx", prom.url)
        (tmp_path / "token").write_text(TOKEN + "\n")
        ok = _config(tmp_path, "ok.yml", "authorization:\n  credentials_file: token\n"
                                          "http_headers:\n  X-Scope-OrgID:\n    values: [team-a]\n")
        assert TOKEN not in repr(ok)
        assert [s["value"][1] for s in PromClient(url, 10, ok).query("vector(3)", time.time())] == ["3"]
        no_tenant = _config(tmp_path, "nt.yml", "authorization:\n  type: Bearer\n  credentials_file: token\n")
        with pytest.raises(FleetError) as e:
            PromClient(url, 10, no_tenant).query("vector(1)", time.time())
        assert "HTTP 403" in str(e.value)
        (tmp_path / "stale").write_text("tok-expired\n")
        (tmp_path / "tenant").write_text("team-a\n")
        stale = _config(tmp_path, "st.yml", "authorization:\n  credentials_file: stale\n"
                                             "http_headers:\n  X-Scope-OrgID:\n    files: [tenant]\n")
        with pytest.raises(FleetError) as e:
            PromClient(url, 10, stale).query("vector(1)", time.time())
        assert "HTTP 401" in str(e.value) and "tok-expired" not in str(e.value) + e.value.hint
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        prom.stop()


@pytest.mark.parametrize(("text", "message"), [
    ("oauth2: {client_id: x}\n", "oauth2 is not supported"),
    ("proxy_url: http://p:3128\n", "proxy_url is not supported"),
    ("basic_auth: {password: x}\n", "basic_auth: a username is needed"),
    ("basic_auth: {username: a, password: x, password_file: f}\n", "at most one of password and password_file"),
    ("basic_auth: {username: a}\nauthorization: {credentials: t}\n", "at most one of basic_auth, authorization"),
    ("authorization: {type: Basic, credentials: t}\n", "authorization.type"),
    ("authorization: {type: Bearer}\n", "credentials or credentials_file is needed"),
    ("tls_config: {cert: x}\n", "needs both cert(_file) and key(_file)"),
    ("tls_config: {min_version: TLS99}\n", "tls_config.min_version: one of TLS10"),
    ("tls_config: {server_name: x}\n", "server_name is not supported"),
    ("tls_config: {ca_file: nope.pem}\n", "tls_config.ca_file: cannot read"),
    ("http_headers: {Authorization: {values: [x]}}\n", "Authorization is set by the client itself"),
    ("http_headers: {X-Tenant: {values: [\"a\\r\\nInjected: 1\"]}}\n", "holds a line break"),
    ("follow_redirects: false\n", "follow_redirects: false is not supported"),
    ("bearer_token: ''\n", "bearer_token: empty"),
    ("http_headers: {X-Tenant: {values: [\"caf\u00e9\"]}}\n", "is not ASCII"),
    ("frobnicate: 1\n", "unknown field 'frobnicate'"),
    ("- a\n- b\n", "expected a mapping"),
    ("basic_auth: [\n", "not YAML at line"),
])
def test_a_config_is_held_to_the_format_and_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yml"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        load(str(path))
    assert message in str(e.value) and "c.yml" in str(e.value)


def test_a_header_of_several_values_is_sent_once_with_them_all_and_never_redirected() -> None:
    """X-Scope-OrgID of two tenants (Mimir's federation) is one header "a, b"; the login is an unredirected
    header (urllib does not carry it to the host a redirect names)."""
    cfg = parse({"http_headers": {"X-Scope-OrgID": {"values": ["team-a", "team-b"]}},
                 "authorization": {"credentials": "t"}}, Path("."))
    client = PromClient("https://prom.example", 5, cfg)
    assert client._headers == {"Authorization": "Bearer t", "X-Scope-OrgID": "team-a, team-b"}
    sent: list[urllib.request.Request] = []

    class Capture(urllib.request.BaseHandler):
        handler_order = 100                     # before urllib's own HTTPS handler

        def https_open(self, req: urllib.request.Request) -> None:
            sent.append(req)
            raise urllib.error.URLError("captured")
    import gputop.feeds.bounded_http as bh
    opener = bh.opener
    try:
        bh.opener = lambda *a, **k: urllib.request.build_opener(Capture)  # type: ignore[assignment]
        with pytest.raises(FleetError):
            client.query("up", 0)
    finally:
        bh.opener = opener  # type: ignore[assignment]
    (req,) = sent
    assert req.unredirected_hdrs.get("Authorization") == "Bearer t" and "Authorization" not in req.headers


def test_headers_each_form_gives() -> None:
    base = Path("/nonexistent")
    assert parse({"basic_auth": {"username": "u", "password": "p"}}, base).headers == (
        ("Authorization", "Basic dTpw"),)
    assert parse({"authorization": {"type": "Token", "credentials": "abc"}}, base).headers == (
        ("Authorization", "Token abc"),)
    assert parse({"bearer_token": "xyz"}, base).headers == (("Authorization", "Bearer xyz"),)
    assert parse({"http_headers": {"X-Scope-OrgID": {"values": ["a"], "secrets": ["b"]}}}, base).headers == (
        ("X-Scope-OrgID", "a"), ("X-Scope-OrgID", "b"))
    assert parse(None, base).headers == ()
