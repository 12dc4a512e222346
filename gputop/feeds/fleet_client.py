"""Prometheus's HTTP API for the fleet view: ``PromClient`` (instant and range queries, POST, answers
bounded in size and time), ``FleetError`` (what went wrong, said as the dashboard shows it) and
``Sample``, one element of an answer. Stdlib only (urllib, json)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from gputop.errors import EX_ERROR, GputopError
from gputop.feeds import bounded_http
from gputop.feeds.http_config import HttpConfig

Sample = dict[str, Any]   # one element of a Prometheus vector result: {"metric": {...}, "value": [t, "v"]}


def sample_value(s: Sample) -> float:
    """The value of one element of a vector result."""
    return float(s["value"][1])


class FleetError(GputopError):
    """Prometheus did not answer as needed. ``kind``: unreachable, slow, refused, empty."""

    def __init__(self, kind: str, message: str, hint: str) -> None:
        super().__init__(message, hint, EX_ERROR)
        self.kind = kind


#: a PromQL feature this Prometheus lacks, as its parser says so
_MISSING_PROMQL = re.compile(r'unknown function with name "(\w+)"')


def _refusal_hint(detail: str) -> str:
    """What to do about a refused query: an older Prometheus than the fleet view needs, said as such
    (its parser names what it lacks); otherwise the user's own matchers and window."""
    m = _MISSING_PROMQL.search(detail)
    if m:
        return (f"this Prometheus lacks the PromQL function {m.group(1)}: the fleet view needs Prometheus "
                "2.26 or newer (docs/fleet.md, \"Which Prometheus\")")
    return "check --match (label matchers such as job=\"gputop\") and --window"


#: the most one answer may hold: a 64,000-process fleet's largest is tens of MiB (docs/fleet.md, "At scale")
MAX_ANSWER_BYTES = 256 << 20
#: the most of an error answer read (its message is shown cut to 200 characters)
MAX_ERROR_BYTES = 64 << 10


class PromClient:
    """Instant and range queries through Prometheus's HTTP API (POST, so long selectors fit)."""

    def __init__(self, url: str, timeout_s: float, http: HttpConfig | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        #: --http.config.file: its headers go with every request, its TLS settings to https:// URLs
        # (a header given several values is sent once, its values joined, as HTTP reads a list)
        self._headers: dict[str, str] = {}
        for name, value in http.headers if http else ():
            self._headers[name] = f"{self._headers[name]}, {value}" if name in self._headers else value
        self._context = http.ssl_context() if http and urllib.parse.urlsplit(url).scheme == "https" else None
        self._config_path = http.path if http else None
        #: queries sent (tests and the benchmark count them)
        self.queries = 0
        self._lock = threading.Lock()

    def _post(self, path: str, params: Mapping[str, str]) -> Any:
        with self._lock:
            self.queries += 1
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        for name, value in self._headers.items():   # the login never follows a redirect to another host
            req.add_unredirected_header(name, value)
        where = f"Prometheus at {self.url}"
        slow = FleetError("slow", f"{where} did not answer within {self.timeout_s:g} s",
                          "check Prometheus's load (its /metrics, the query log) or narrow --match / --node")
        unreachable_hint = "check the URL and that Prometheus runs (curl URL/-/ready)"
        deadline = time.monotonic() + self.timeout_s     # for the whole answer, not each receive
        watchdog = bounded_http.Watchdog(deadline)       # the status line and headers too
        try:
            try:
                with bounded_http.opener(watchdog, self._context).open(req, timeout=self.timeout_s) as r:
                    body = bounded_http.read(r, MAX_ANSWER_BYTES, deadline)
            finally:
                watchdog.cancel()
            if watchdog.fired:                  # cut off: what was read is not the whole answer
                raise TimeoutError
        except urllib.error.HTTPError as e:
            try:
                body = bounded_http.read(e, MAX_ERROR_BYTES, deadline, cut=True)
            except (TimeoutError, OSError, http.client.HTTPException):
                body = b""
            try:
                detail = json.loads(body).get("error") or ""
            except (ValueError, AttributeError):
                detail = body[:200].decode("utf-8", "replace")
            if e.code in (401, 403):
                how = (f"the login of {self._config_path}" if self._config_path else
                       "a login: give one with --http.config.file (basic_auth, authorization, http_headers)")
                raise FleetError("unreachable", f"{where} answered HTTP {e.code} {e.reason}",
                                 f"check {how}") from None
            if e.code in (400, 422):
                raise FleetError("refused", f"{where} refused the query {params.get('query', '')!r}: {detail}",
                                 _refusal_hint(str(detail))) from None
            raise FleetError("unreachable", f"{where} answered HTTP {e.code} {e.reason}: {detail}",
                             "check the URL (it is Prometheus's, e.g. http://prometheus:9090) and any proxy "
                             "in front of it") from None
        except bounded_http.TooLarge:
            raise FleetError("unreachable", f"{where} answered more than {MAX_ANSWER_BYTES >> 20} MiB to one "
                             f"query: not read", "give the URL of Prometheus itself (http://HOST:9090), and narrow "
                             "--match / --node") from None
        except TimeoutError:
            raise slow from None
        except urllib.error.URLError as e:
            reason = e.reason
            if watchdog.fired or isinstance(reason, (TimeoutError, socket.timeout)):
                raise slow from None
            text = getattr(reason, "strerror", None) or str(reason)
            raise FleetError("unreachable", f"{where} is unreachable: {text}", unreachable_hint) from None
        except http.client.HTTPException as e:   # not HTTP: a status line or header http.client refuses
            if watchdog.fired:
                raise slow from None
            raise FleetError("unreachable", f"{where} did not answer in HTTP: {type(e).__name__}",
                             "give the URL of Prometheus itself (http://HOST:9090)") from None
        except OSError as e:
            if watchdog.fired:
                raise slow from None
            raise FleetError("unreachable", f"{where} is unreachable: {e.strerror or e}", unreachable_hint) from None
        try:
            doc = json.loads(body)
            assert doc["status"] == "success"
            return doc["data"]["result"]
        except (ValueError, KeyError, TypeError, AssertionError):
            raise FleetError("unreachable", f"{self.url} did not answer as Prometheus's HTTP API does",
                             "give the URL of Prometheus itself (http://HOST:9090), not of an exporter") from None

    def query(self, expr: str, at: float) -> list[Sample]:
        result: list[Sample] = self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        return result

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[Sample]:
        result: list[Sample] = self._post("/api/v1/query_range", {
            "query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"})
        return result
