"""A real OTLP/HTTP metrics receiver on loopback for the OTLP tests: VictoriaMetrics' single-node server
(Debian's victoria-metrics, fetched by scripts/otlp_receiver.py into .cache/otlp; Debian's Prometheus packages
have their OTLP receiver taken out). It takes OTLP/HTTP with protobuf, names the series as Prometheus' OTLP
receiver does (-opentelemetry.usePrometheusNaming) and answers Prometheus' query API, so what a push carried is
read back as PromQL reads it. TLS and basic auth on request, as a production receiver has them."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from promserver import free_port, wait_until
from support import ROOT

CACHED = ROOT / ".cache" / "otlp" / "victoria-metrics"
#: labels the receiver adds from the resource and the scope (promoted to every series)
RESOURCE_LABELS = ("service_name", "service_version", "service_instance_id", "host_name", "container_id",
                   "k8s_pod_uid", "k8s_node_name", "scope_name", "scope_version")


def binary() -> str:
    if CACHED.is_file():
        return str(CACHED)
    found = shutil.which("victoria-metrics")
    if found is None:
        pytest.skip("no OTLP receiver: scripts/setup.sh --test fetches Debian's victoria-metrics into .cache/otlp "
                    "(scripts/otlp_receiver.py)")
    return found


class Receiver:
    """VictoriaMetrics on a free loopback port; ``otlp_url``: the base URL of its OTLP receiver."""

    def __init__(self, tmp: Path, *, tls_dir: Path | None = None, user: str | None = None,
                 password_file: Path | None = None) -> None:
        self.port = free_port()
        scheme = "https" if tls_dir else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.otlp_url = f"{self.url}/opentelemetry"
        self.dir = tmp / f"vm-{self.port}"
        self.dir.mkdir()
        args = [binary(), f"-storageDataPath={self.dir / 'data'}", f"-httpListenAddr=127.0.0.1:{self.port}",
                "-opentelemetry.usePrometheusNaming", "-search.latencyOffset=0s", "-search.disableCache",
                "-loggerLevel=ERROR"]
        self._ctx: ssl.SSLContext | None = None
        if tls_dir is not None:
            args += ["-tls", f"-tlsCertFile={tls_dir / 'server.crt'}", f"-tlsKeyFile={tls_dir / 'server.key'}"]
            self._ctx = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
        self._auth: str | None = None
        if user is not None and password_file is not None:
            args += [f"-httpAuth.username={user}", f"-httpAuth.password=file://{password_file}"]
            login = f"{user}:{password_file.read_text().strip()}"
            self._auth = "Basic " + base64.b64encode(login.encode()).decode()
        self.log = open(self.dir / "log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        try:
            wait_until("VictoriaMetrics to be ready", lambda: self._get("/health")[0] == 200, 60)
        except BaseException:
            self.stop()
            raise

    def _get(self, path: str) -> tuple[int, str]:
        req = urllib.request.Request(self.url + path, headers={"Authorization": self._auth} if self._auth else {})
        try:
            with urllib.request.urlopen(req, timeout=10, context=self._ctx) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def query(self, expr: str, at_least: int = 1, timeout_s: float = 15.0) -> list[dict[str, Any]]:
        """An instant query's series, once it has ``at_least`` of them (what a push carried turns searchable
        a moment after it is flushed) or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._get("/internal/force_flush")
            code, body = self._get(f"/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
            data = json.loads(body)
            assert code == 200 and data["status"] == "success", f"{expr}: {body}"
            result: list[dict[str, Any]] = data["data"]["result"]
            if len(result) >= at_least or time.monotonic() > deadline:
                return result
            time.sleep(0.2)

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {result}"
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
