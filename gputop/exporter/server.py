"""The exporter's serving (``gputop exporter``, run by ``gputop.modes.exporter``): the live collector's
snapshots over HTTP, as Prometheus metrics.

``/metrics`` (Prometheus text or OpenMetrics, as the scraper asks), ``/healthz`` (200 with the sources'
statuses as JSON once BPF is attached or known unavailable, 503 before, and 503 "stale" once the
snapshot served is older than two refreshes and 5 s: ``stale_after``). Under systemd's ``Type=notify``
(gputop/exporter/sdnotify.py) it says READY=1 at the first refresh once BPF is attached or known
unavailable, WATCHDOG=1 at every refresh after it (the collector's progress, never a timer), and
STOPPING=1 when it stops. One collector thread, the
same as the dashboard's; the HTTP server's threads only read the latest snapshot. The server is
bounded whatever its clients do (gputop/exporter/httpserver.py): one I/O thread, a fixed pool of
workers, a cap on open connections, on each request's head and on the time to send it. SIGTERM, SIGINT
and SIGHUP stop it cleanly: the server closes, then the collector detaches every probe.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import resource
import socket
import threading
import zlib
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from gputop.errors import EX_ERROR, GputopError
from gputop.exporter import exposition
from gputop.exporter.httpserver import LIMITS, BoundedHTTPServer, Limits, PreparsedRequestHandler
from gputop.exporter.metrics import SnapshotCollector
from gputop.exporter.sdnotify import Notifier
from gputop.exporter.webconfig import WebConfig

#: /healthz turns stale when the snapshot served is older than 2 refresh intervals and this
STALE_GRACE_S = 5.0


def stale_after(interval_s: float) -> float:
    """The age (seconds) past which the snapshot served is stale: two refreshes missed, and 5 s for a
    slow refresh."""
    return 2 * interval_s + STALE_GRACE_S


def health(collector: SnapshotCollector, max_age_s: float | None = None,
           now: float | None = None) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body): 200 once the BPF source is attached or known unavailable; 503 while it
    starts, and when the snapshot served is older than ``max_age_s`` (the collector is stuck: a
    liveness probe should restart the exporter). The age is the collector's (monotonic clock);
    ``now``, for tests, is a wall-clock time to compare with the snapshot's ``time`` instead."""
    snap = collector.snapshot
    if snap is None:
        return 503, {"status": "starting", "sources": {}}
    sources = {k: {"status": v.status, "reason": v.reason} for k, v in snap.sources.items()}
    body: dict[str, Any] = {"status": "ok", "time": snap.time, "sources": sources}
    bpf = snap.sources.get("bpf")
    if bpf is not None and bpf.status == "starting":
        return 503, {**body, "status": "starting"}
    age = max(0.0, now - snap.time) if now is not None else collector.age()
    if age is None:
        return 200, body
    body["age_s"] = round(age, 3)
    if max_age_s is not None and age > max_age_s:
        return 503, {**body, "status": "stale", "max_age_s": max_age_s,
                     "reason": f"no new snapshot for {age:.1f} s (more than {max_age_s:g} s): the collector is stuck"}
    return 200, body


class StaleLog:
    """One stderr line when the collector goes stale (``health`` says so) and one when it refreshes
    again, whoever asks /healthz; the exporter's main loop checks every half second."""

    def __init__(self, collector: SnapshotCollector, max_age_s: float, interval_s: float,
                 say: Callable[[str], None]) -> None:
        self._collector = collector
        self._max_age_s = max_age_s
        self._interval_s = interval_s
        self._say = say
        self._stale_since: float | None = None      # posted time of the snapshot that went stale

    @property
    def stale(self) -> bool:
        return self._stale_since is not None

    def check(self) -> None:
        code, body = health(self._collector, self._max_age_s)
        if body["status"] == "stale" and self._stale_since is None:
            self._stale_since = self._collector.posted
            self._say(f"warning: exporter: the collector has not refreshed for {body['age_s']:.1f} s (more than "
                      f"2 refreshes of {self._interval_s:g} s + {STALE_GRACE_S:g} s): /healthz answers 503 "
                      "stale until it does")
        elif body["status"] != "stale" and self._stale_since is not None:
            posted = self._collector.posted
            gap = f" after {posted - self._stale_since:.1f} s" if posted is not None else ""
            self._stale_since = None
            self._say(f"exporter: the collector refreshes again{gap}; /healthz answers {code}")


#: gzip's level for scrapers that ask for it: 1 is most of the saving at a fraction of the CPU
GZIP_LEVEL = 1


def wants_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip (``gzip`` or ``*`` without ``q=0``)."""
    for part in accept_encoding.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() in ("gzip", "*"):
            q = params.strip().lower().removeprefix("q=")
            try:
                return not params or float(q) > 0
            except ValueError:
                return False
    return False


class RenderCache:
    """The exposition of the latest snapshot, rendered once per snapshot and format: rendering is
    most of a scrape's cost, and every scrape between two refreshes (Prometheus pairs, a curl) gets
    the same bytes. The exporter's own process metrics and the grace period's end therefore move at
    refreshes, not at scrapes; the ``live`` registry (the snapshot's age) is rendered at every scrape."""

    def __init__(self, registry: CollectorRegistry, collector: SnapshotCollector,
                 live: CollectorRegistry | None = None) -> None:
        self._registry = registry
        self._collector = collector
        self._live = live
        self._lock = threading.Lock()
        self._key: tuple[int, str] | None = None
        self._body = b""
        #: the body compressed once per snapshot and format, and the compressor as it stands after it (each
        #: scrape compresses the live part with a copy, then flushes: one gzip stream, one trailer)
        self._gzipped: tuple[bytes, Any] | None = None

    def get(self, accept: str, gzip_ok: bool = False) -> tuple[str, bytes]:
        """(content type, body) for a scraper that accepts ``accept``; ``gzip_ok``: the body gzip-compressed
        (the snapshot's part compressed once per snapshot, the live part at each scrape, in one stream)."""
        encoder, content_type = choose_encoder(accept)
        live = exposition.render(self._live, encoder, content_type) if self._live is not None else b""
        with self._lock:
            key = (self._collector.version, content_type)
            if key != self._key:
                self._body = exposition.render(self._registry, encoder, content_type)
                self._key, self._gzipped = key, None
            body = self._body
            # what moves between refreshes (the snapshot's age) is rendered at every scrape, after the rest
            if body.endswith(b"# EOF\n") and live.endswith(b"# EOF\n"):     # OpenMetrics: one EOF, at the end
                body = body[:-len(b"# EOF\n")]
            if not gzip_ok:
                return content_type, body + live
            if self._gzipped is None:
                co = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)      # 31: a gzip header and trailer
                self._gzipped = co.compress(body), co
            prefix, co = self._gzipped
            rest = co.copy()
        return content_type, prefix + rest.compress(live) + rest.flush()


def make_server(host: str, port: int, registry: CollectorRegistry, collector: SnapshotCollector,
                max_age_s: float | None = None, limits: Limits = LIMITS,
                live: CollectorRegistry | None = None, web: WebConfig | None = None) -> BoundedHTTPServer:
    """The exporter's server on HOST:PORT; ``web`` (``--web.config.file``): TLS and basic auth, asked of
    every path (as exporter-toolkit asks it)."""
    rendered = RenderCache(registry, collector, live)

    class Handler(PreparsedRequestHandler):
        server_version = "gputop-exporter"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if web is not None and not web.allows(self.headers.get("Authorization")):
                self._reply(401, "text/plain; charset=utf-8", b"401 Unauthorized\n",
                            ("WWW-Authenticate", 'Basic realm="gputop exporter"'))
                return
            if path == "/metrics":
                gz = wants_gzip(self.headers.get("Accept-Encoding", ""))
                content_type, exposition = rendered.get(self.headers.get("Accept", ""), gz)
                self._reply(200, content_type, exposition, *((("Content-Encoding", "gzip"),) if gz else ()))
            elif path == "/healthz":
                code, body = health(collector, max_age_s)
                self._reply(code, "application/json", (json.dumps(body) + "\n").encode())
            elif path == "/":
                self._reply(200, "text/plain; charset=utf-8",
                            b"gputop exporter: /metrics (Prometheus), /healthz (sources as JSON)\n")
            else:
                self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

        def _reply(self, code: int, content_type: str, body: bytes, *extra: tuple[str, str]) -> None:
            self.send_response(code)
            for name, value in extra:
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    # ':PORT' (no host): every interface, IPv6 and IPv4 on one dual-stack socket where the host has IPv6
    dual = not host and socket.has_ipv6
    family = socket.AF_INET6 if dual else socket.AF_INET
    try:
        if host and ipaddress.ip_address(host).version == 6:
            family = socket.AF_INET6
    except ValueError:
        pass                                    # a host name: resolved as IPv4

    class Server(BoundedHTTPServer):
        address_family = family

        def server_bind(self) -> None:
            if dual:
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()

    try:
        return Server(("::" if dual else host, port), Handler, limits, tls=web.tls if web is not None else None)
    except OSError as e:
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        why = e.strerror or str(e)
        if e.errno == errno.EADDRINUSE:
            hint = f"another program serves port {port} (ss -ltnp 'sport = :{port}'); choose one with --listen"
        elif e.errno == errno.EACCES:
            hint = "ports below 1024 need root or CAP_NET_BIND_SERVICE; choose a higher one with --listen"
        else:
            hint = "give an address of this host with --listen HOST:PORT (127.0.0.1:9464, [::1]:9464, :9464)"
        raise GputopError(f"cannot listen on {where}: {why}", hint, EX_ERROR) from None
    except (socket.gaierror, UnicodeError) as e:
        raise GputopError(f"cannot listen on {host}:{port}: {e}",
                          "give an address of this host with --listen HOST:PORT", EX_ERROR) from None


def watchdog_for(notify: Notifier, max_age_s: float, interval_s: float, say: Callable[[str], None]) -> None:
    """A systemd watchdog (``WatchdogSec=``) no longer than /healthz's stale rule would stop an exporter
    whose refreshes are merely slow (a long -d): ask systemd for twice the rule instead, and say so."""
    usec = notify.watchdog_usec
    if usec is None or usec / 1e6 > max_age_s:
        return
    want = int(2 * max_age_s * 1e6)
    if notify.send(f"WATCHDOG_USEC={want}"):
        notify.watchdog_usec = want
        say(f"warning: exporter: WatchdogSec={usec / 1e6:g}s is not longer than 2 refreshes of {interval_s:g} s + "
            f"{STALE_GRACE_S:g} s; the exporter asked systemd for {want / 1e6:g} s")


def raise_fd_limit() -> None:
    """The soft limit on open files up to the hard one: the probes take a descriptor each where the
    kernel has no uprobe_multi links (thousands on a busy host). The HTTP side needs no more than its
    connection cap, whatever the limit."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass                                    # a limit we may not raise: keep the one we have


def show_address(host: str, port: int) -> str:
    if not host:
        return f"*:{port} (every interface)"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
