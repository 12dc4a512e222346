"""The OTLP pusher's HTTP transport (``gputop exporter --otlp-endpoint``): a ``requests.Session`` as the
OpenTelemetry SDK's ``OTLPMetricExporter`` takes one, whose requests go through the fleet view's bounded
client (gputop/feeds/bounded_http.py) instead of requests' own adapters. So a push:

- ends by one deadline, the status line, headers and answer included (a socket timeout would only bound
  each receive: a receiver that sends a byte now and then would hold the pusher as long as it likes);
- takes the TLS settings of ``--otlp-http-config-file`` (Prometheus' HTTP client format, as the fleet view's
  ``--http.config.file``: a CA, a client certificate and key given inline or by file, the TLS versions,
  ``insecure_skip_verify``), or else the SDK's own: the paths it was told by ``OTEL_EXPORTER_OTLP_CERTIFICATE``,
  ``OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`` and ``OTEL_EXPORTER_OTLP_CLIENT_KEY`` (set on the session as
  ``verify`` and ``cert``);
- never follows a redirect (the login would go with it): an answer 3xx is a failure that says where to;
- reads at most ``MAX_ANSWER_BYTES`` of an answer (a receiver's answer to a push is a few bytes).

The SDK keeps what it does well: the protobuf encoding, ``OTEL_EXPORTER_OTLP_HEADERS`` and
``OTEL_EXPORTER_OTLP_COMPRESSION``, its retries of a 429, 502, 503 or 504 and of a lost connection within the
push's deadline. ``last_error`` says in one line why the last request failed (never a secret: no header's
value, the answer's first line with the login's values blanked out); a retry the deadline cut short keeps the
failure before it (the owner clears it at each push).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import requests
from requests.structures import CaseInsensitiveDict

from gputop.feeds import bounded_http
from gputop.feeds.http_config import HttpConfig
from gputop.textsafe import sanitize

#: the most of a receiver's answer read (a push's answer is an ExportMetricsServiceResponse: bytes)
MAX_ANSWER_BYTES = 64 << 10
#: the answer's text quoted in a failure's message, at most
DETAIL_CHARS = 160


class PushRefused(requests.exceptions.RequestException):
    """An answer the SDK would take for success that is not one (a redirect): never retried."""


class BoundedSession(requests.Session):
    """The session the SDK's exporter posts through (``OTLPMetricExporter(session=...)``)."""

    def __init__(self, http_config: HttpConfig | None = None, timeout_s: float = 10.0) -> None:
        super().__init__()
        self.trust_env = True
        self._http = http_config
        self._timeout_s = timeout_s
        #: the login's values, blanked out of any answer quoted in a message
        self._secrets = tuple(v for _, v in (http_config.headers if http_config else ()) if len(v) >= 4)
        self._context: ssl.SSLContext | None = None
        self._context_key: object = None
        #: why the last request failed, in one line; None when it succeeded (or none was sent)
        self.last_error: str | None = None
        #: requests sent (the tests count retries)
        self.requests = 0

    def _ssl_context(self, verify: object, cert: object) -> ssl.SSLContext:
        """The TLS context of https:// pushes: ``--otlp-http-config-file``'s ``tls_config``, else the SDK's CA
        and client certificate paths, else the system's CAs. Built once per setting."""
        key = (verify, cert)
        if self._context is not None and self._context_key == key:
            return self._context
        h = self._http
        if h is not None and (h.ca_pem or h.cert_pem or h.insecure_skip_verify or h.min_version or h.max_version):
            ctx = h.ssl_context()
        else:
            ctx = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if isinstance(cert, str):
                ctx.load_cert_chain(cert)
            elif isinstance(cert, tuple) and len(cert) == 2:
                ctx.load_cert_chain(cert[0], cert[1])
        self._context, self._context_key = ctx, key
        return ctx

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        """POST ``data`` to ``url`` within ``timeout`` seconds (the SDK's remaining time for the push); the
        answer as a ``requests.Response``, or the exceptions requests raises (ConnectionError, Timeout, SSLError)
        with a one-line text, which the SDK takes for retryable failures."""
        method = method.decode() if isinstance(method, bytes) else method
        url = url.decode() if isinstance(url, bytes) else url
        data = kwargs.get("data")
        headers: Mapping[str, str] = kwargs.get("headers") or {}
        timeout = kwargs.get("timeout")
        timeout_s = self._timeout_s if timeout is None else min(float(timeout if not isinstance(timeout, tuple)
                                                                      else sum(timeout)), self._timeout_s)
        self.requests += 1
        earlier, self.last_error = self.last_error, None
        try:
            return self._send(method, url, data, headers, timeout_s, kwargs.get("verify", self.verify),
                              kwargs.get("cert", self.cert))
        except requests.exceptions.RequestException as e:
            # a retry that the push's deadline cut short says less than the failure the SDK retried (a
            # certificate refused, then "no answer within 0.03 s" on a busy host): that one is kept
            self.last_error = earlier if isinstance(e, requests.exceptions.Timeout) and earlier else str(e)
            raise

    def _send(self, method: str, url: str, data: Any, headers: Mapping[str, str], timeout_s: float,
              verify: object, cert: object) -> requests.Response:
        if timeout_s <= 0:
            raise requests.exceptions.Timeout("no time left for the push")
        body = data if isinstance(data, (bytes, type(None))) else bytes(data)
        req = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            context = self._ssl_context(verify, cert) if url.lower().startswith("https:") else None
        except (ssl.SSLError, OSError, ValueError) as e:
            raise requests.exceptions.SSLError(f"TLS settings do not load: {getattr(e, 'reason', None) or e}") \
                from None
        deadline = time.monotonic() + timeout_s
        watchdog = bounded_http.Watchdog(deadline)
        slow = requests.exceptions.Timeout(f"no answer within {timeout_s:.3g} s")
        opener = bounded_http.opener(watchdog, context)
        for handler in getattr(opener, "handlers", ()):     # a redirect is never followed: the login goes with it
            if isinstance(handler, urllib.request.HTTPRedirectHandler):
                handler.redirect_request = lambda *a, **k: None     # type: ignore[method-assign]
        try:
            try:
                with opener.open(req, timeout=timeout_s) as r:
                    answer = bounded_http.read(r, MAX_ANSWER_BYTES, deadline, cut=True)
                    status, reason, got = r.status, r.reason, r.headers
            except urllib.error.HTTPError as e:
                try:
                    answer = bounded_http.read(e, MAX_ANSWER_BYTES, deadline, cut=True)
                except (TimeoutError, OSError, http.client.HTTPException):
                    answer = b""
                status, reason, got = e.code, e.reason, e.headers
            finally:
                watchdog.cancel()
            if watchdog.fired:
                raise slow
        except TimeoutError:
            raise slow from None
        except urllib.error.URLError as e:
            why = e.reason
            if watchdog.fired or isinstance(why, (TimeoutError, socket.timeout)):
                raise slow from None
            if isinstance(why, ssl.SSLError):
                raise requests.exceptions.SSLError(f"TLS: {why.reason or why}") from None
            text = getattr(why, "strerror", None) or str(why)
            raise requests.exceptions.ConnectionError(f"unreachable: {text}") from None
        except ssl.SSLError as e:
            raise requests.exceptions.SSLError(f"TLS: {e.reason or e}") from None
        except http.client.HTTPException as e:
            if watchdog.fired:
                raise slow from None
            raise requests.exceptions.ConnectionError(f"not an HTTP answer ({type(e).__name__})") from None
        except OSError as e:
            if watchdog.fired:
                raise slow from None
            raise requests.exceptions.ConnectionError(f"unreachable: {e.strerror or e}") from None
        if 300 <= status < 400:
            where = got.get("Location", "") if got is not None else ""
            raise PushRefused(f"HTTP {status} {reason}: redirected to {sanitize(where, 200)!s}, not followed "
                              "(give the receiver's own URL)")
        if status >= 400:
            self.last_error = f"HTTP {status} {reason}{self._detail(answer)}"
        return _response(url, status, str(reason), got, answer)

    def _detail(self, answer: bytes) -> str:
        lines = answer.decode("utf-8", "replace").strip().splitlines()
        text = lines[0] if lines else ""
        for secret in self._secrets:
            text = text.replace(secret, "…")
        return f": {sanitize(text, DETAIL_CHARS)}" if text else ""


def _response(url: str, status: int, reason: str, headers: Any, body: bytes) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    r.reason = reason
    r.url = url
    r._content = body
    r.headers = CaseInsensitiveDict(dict(headers.items()) if headers is not None else {})
    r.encoding = "utf-8"
    return r
