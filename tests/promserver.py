"""A real Prometheus server (Debian's package) on loopback with a temporary config and data dir, and
the real `gputop exporter` as a subprocess: for the exporter's and the deployment's tests; and a real
Prometheus over a TSDB that promtool built from OpenMetrics text (``tsdb_prometheus``): for the fleet
view's and the dashboard's tests over synthetic fleets."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import ROOT

GPUTOP = [sys.executable, "-m", "gputop.cli"]


RULES = ROOT / "deploy" / "prometheus" / "gputop-rules.yml"


def promtool() -> str:
    """promtool's path (Debian's prometheus package), or the test is skipped without it."""
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian's prometheus package; scripts/setup.sh --test)")
    return tool


def rule_groups() -> list[dict[str, Any]]:
    """The groups of deploy/prometheus/gputop-rules.yml."""
    import yaml

    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_until(what: str, check: Any, timeout_s: float = 30.0, step_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except (OSError, urllib.error.URLError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step_s)


class Exporter:
    """`gputop exporter` on a free loopback port; stopped with SIGTERM."""

    def __init__(self, *args: str, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 cwd: Path = ROOT, command: tuple[str, ...] = tuple(GPUTOP)) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([*prefix, *command, "exporter", "--listen", f"127.0.0.1:{self.port}", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, cwd=cwd)

    def healthy(self, timeout_s: float = 60.0) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            assert self.proc.poll() is None, f"the exporter exited: {self.proc.communicate()[1]}"
            code, body = http_get(self.url + "/healthz")
            return json.loads(body) if code == 200 else None
        body: dict[str, Any] = wait_until("the exporter's /healthz", check, timeout_s)
        return body

    def metrics(self) -> str:
        code, body = http_get(self.url + "/metrics")
        assert code == 200
        return body

    def listed(self) -> set[int]:
        """The PIDs the exporter serves a process row for."""
        return {int(m) for m in re.findall(r'^gputop_process_start_time_seconds\{[^}]*\bpid="([0-9]+)"', self.metrics(),
                                           re.MULTILINE)}

    def wait_listed(self, *pids: int, timeout_s: float = 60.0) -> None:
        """Until the exporter lists ``pids``: their objects probed (a process is listed once an object it
        maps is), so a workload released then is counted from its first call. A fixed second was short on a
        host loaded by other work: a runtime's probes attach one program after another, and a workload
        released meanwhile lost its syncs."""
        wait_until(f"the exporter listing {sorted(pids)}", lambda: set(pids) <= self.listed() or None, timeout_s)
        time.sleep(0.6)                 # the objects the first call maps (libcuda) too, a refresh later

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


#: gputop's alert and recording rules (deploy/prometheus/gputop-rules.yml), as the deployment loads them
RULES = ROOT / "deploy" / "prometheus" / "gputop-rules.yml"


class Prometheus:
    """Debian's `prometheus` on a free loopback port, scraping ``targets`` every ``scrape_s`` and evaluating
    gputop's rules (``RULES``: the Grafana dashboard's pod panels read the recording rules) as often."""

    def __init__(self, tmp: Path, targets: list[str], scrape_s: float = 1.0) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip("Debian's prometheus package is not installed (scripts/setup.sh --test installs it)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = tmp / "prometheus"
        self.dir.mkdir()
        config = self.dir / "prometheus.yml"
        config.write_text(json.dumps({   # YAML is a superset of JSON
            "global": {"scrape_interval": f"{scrape_s:g}s", "scrape_timeout": f"{scrape_s:g}s",
                       "evaluation_interval": f"{scrape_s:g}s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "gputop", "static_configs": [{"targets": targets}]}],
        }))
        self.log = open(self.dir / "log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
                                      f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                     stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        wait_until("Prometheus to be ready", lambda: http_get(self.url + "/-/ready")[0] == 200)

    def query(self, expr: str) -> list[dict[str, Any]]:
        code, body = http_get(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        data = json.loads(body)
        assert code == 200 and data["status"] == "success", f"{expr}: {body}"
        result: list[dict[str, Any]] = data["data"]["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The single value of an instant query (None when it returns nothing)."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {result}"
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, expr: str, want: float, timeout_s: float = 30.0) -> None:
        wait_until(f"{expr} == {want}", lambda: self.value(expr) == want, timeout_s, 0.25)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _need_prometheus() -> None:
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        pytest.skip("Debian's prometheus package is not installed (scripts/setup.sh --test installs it)")


#: what the fleet view's queries need of PromQL (docs/fleet.md, "Which Prometheus")
FLEET_PROMQL = ("last_over_time(up[1m])",)
#: what the Grafana dashboard's queries need besides
GRAFANA_PROMQL = (*FLEET_PROMQL, "up @ end()")
_PARSED: dict[str, str | None] = {}


def promql_parses(expr: str, tmp: Path) -> bool:
    """Whether this host's Prometheus parses ``expr`` (its own promtool; feature detection: Debian 11's
    Prometheus 2.24 has neither last_over_time nor the @ modifier)."""
    return _parse_error(expr, tmp) is None


def _parse_error(expr: str, tmp: Path) -> str | None:
    if expr not in _PARSED:
        rules = tmp / "promql-feature.yml"
        rules.write_text(json.dumps({"groups": [{"name": "feature", "rules": [{"record": "feature", "expr": expr}]}]}))
        res = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
        _PARSED[expr] = None if res.returncode == 0 else (res.stdout + res.stderr).strip().splitlines()[-1]
    return _PARSED[expr]


def need_promql(exprs: Sequence[str], tmp: Path) -> None:
    """Skip unless this host's Prometheus parses every one of ``exprs``."""
    for expr in exprs:
        why = _parse_error(expr, tmp)
        if why is not None:
            pytest.skip(f"this host's Prometheus cannot parse {expr!r}, which gputop's queries use "
                        f"(docs/fleet.md, \"Which Prometheus\"): {why}")


def _need_rules_backfill() -> None:
    res = subprocess.run(["promtool", "tsdb", "create-blocks-from", "rules", "--help"], capture_output=True,
                         timeout=60)
    if res.returncode != 0:
        pytest.skip("this host's promtool cannot backfill recording rules (tsdb create-blocks-from rules)")


def _serve_tsdb(data: Path, config: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y",
                             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until("Prometheus to be ready", lambda: http_get(url + "/-/ready")[0] == 200, 60)
    except BaseException:
        _stop(proc)
        raise
    return proc, url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def tsdb_prometheus(openmetrics: Path, data: Path, *, rules: Sequence[Path] = (), start: int | None = None,
                    end: int | None = None, eval_interval_s: int = 15,
                    promql: Sequence[str] = FLEET_PROMQL) -> Iterator[str]:
    """Prometheus's URL, serving the series of ``openmetrics`` (OpenMetrics text with timestamps, ending
    ``# EOF``) from a TSDB at ``data`` that ``promtool tsdb create-blocks-from openmetrics`` builds.

    ``rules``: rule files whose recording rules are then backfilled from ``start`` to ``end`` (unix
    seconds) every ``eval_interval_s`` by ``promtool tsdb create-blocks-from rules``, which evaluates them
    with this Prometheus's own query engine; one file after another, Prometheus restarted on the blocks
    after each, so a file's rules read what the files before it recorded (promtool's backfill cannot
    read a rule recorded in the same run). Skips the test without Debian's prometheus package, or
    where it cannot parse ``promql`` (what the queries under test need) or backfill ``rules``."""
    _need_prometheus()
    need_promql(promql, data.parent)
    if rules:
        _need_rules_backfill()
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
                   check=True, capture_output=True)
    config = data.parent / f"{data.name}-prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\n")
    proc, url = _serve_tsdb(data, config)
    try:
        for n, rule_file in enumerate(rules):
            assert start is not None and end is not None, "a rules backfill needs start and end"
            out = data.parent / f"{data.name}-rules-{n}"
            res = subprocess.run(["promtool", "tsdb", "create-blocks-from", "rules", f"--url={url}",
                                  f"--start={start}", f"--end={end}", f"--eval-interval={eval_interval_s}s",
                                  f"--output-dir={out}", "--quiet", str(rule_file)],
                                 capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stdout + res.stderr
            _stop(proc)
            for block in sorted(out.iterdir()):
                if block.is_dir():
                    shutil.move(str(block), str(data / block.name))
            proc, url = _serve_tsdb(data, config)
        yield url
    finally:
        _stop(proc)
