"""``gputop exporter``: the live collector's snapshots over HTTP, as Prometheus metrics.

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

import argparse
import errno
import ipaddress
import json
import os
import resource
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.process_collector import ProcessCollector

from gputop.errors import EX_ERROR, EX_NOPERM, EX_OK, EX_USAGE, GputopError
from gputop.exporter.httpserver import LIMITS, BoundedHTTPServer, Limits, PreparsedRequestHandler
from gputop.exporter.metrics import AGGREGATES, BUCKETS, ExportOptions, LivenessCollector, SnapshotCollector
from gputop.exporter.sdnotify import Notifier
from gputop.model import Snapshot

DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_INTERVAL_S = 15.0     # Prometheus's default scrape interval: one refresh, one rendering per scrape
#: /healthz turns stale when the snapshot served is older than 2 refresh intervals and this
STALE_GRACE_S = 5.0


def stale_after(interval_s: float) -> float:
    """The age (seconds) past which the snapshot served is stale: two refreshes missed, and 5 s for a
    slow refresh."""
    return 2 * interval_s + STALE_GRACE_S


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise GputopError(message, f"see '{self.prog} --help'", EX_USAGE)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (every address) -> (host, port)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port from 1 to 65535: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"write an IPv6 address in brackets, [{host}]:{port_text}")
    return host, int(port_text)


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v <= 7 * 86400:     # nan fails both comparisons
        raise argparse.ArgumentTypeError(f"must be between 0 and 604800 seconds: {text!r}")
    return v


def _interval(text: str) -> float:
    v = _seconds(text)
    if v < 0.1:
        raise argparse.ArgumentTypeError(f"must be at least 0.1 seconds: {text!r}")
    return v


def _natural(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number: {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    from gputop.feeds.live import TOP_KERNELS

    p = _Parser(prog="gputop exporter", description="Serve gputop's live per-process counters and NVML's GPU "
                "values as Prometheus metrics (/metrics) with a health check (/healthz).")
    p.add_argument("--listen", type=parse_listen, default=parse_listen(DEFAULT_LISTEN), metavar="HOST:PORT",
                   help=f"address to serve on (default {DEFAULT_LISTEN}; ':9464' or '0.0.0.0:9464' for every "
                   "interface)")
    p.add_argument("-d", "--delay", type=_interval, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                   help=f"refresh interval of the collector (default {DEFAULT_INTERVAL_S:g})")
    p.add_argument("--exited-grace", type=_seconds, default=300.0, metavar="SECONDS",
                   help="keep an exited process's series this long (default 300)")
    p.add_argument("--kernel-metrics", type=_natural, default=0, metavar="N",
                   help=f"export the top N kernels of each process (at most {TOP_KERNELS}; default 0: none)")
    p.add_argument("--max-processes", type=_natural, default=None, metavar="N",
                   help="export at most N processes, those with the most launches (default: all)")
    p.add_argument("--aggregate", choices=AGGREGATES, default="process",
                   help="one row of series per process (default), or per container: fewer series under PID churn "
                   "(docs/metrics.md, Cardinality)")
    p.add_argument("--buckets", choices=tuple(BUCKETS), default="log2",
                   help="histogram buckets: a bound at every power of 2 (default), at every power of 16, or none "
                   "(+Inf, _count and _sum only)")
    p.add_argument("--cmdline-label", action="store_true",
                   help="add each process's command line as a label (command lines can hold secrets)")
    p.add_argument("--node", default=os.environ.get("GPUTOP_NODE") or None,
                   help="node name in gputop_build_info (default $GPUTOP_NODE, else the hostname)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--bpf", action="store_true", help="require the BPF collector (exit 77 without privileges)")
    src.add_argument("--no-bpf", action="store_true", help="run without the BPF collector")
    p.add_argument("--no-nvml", action="store_true", help="run without NVML")
    return p


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

    def get(self, accept: str) -> tuple[str, bytes]:
        encoder, content_type = choose_encoder(accept)
        with self._lock:
            key = (self._collector.version, content_type)
            if key != self._key:
                self._body, self._key = encoder(self._registry), key
            body = self._body
        if self._live is None:
            return content_type, body
        # what moves between refreshes (the snapshot's age) is rendered at every scrape, after the rest
        live = encoder(self._live)
        if body.endswith(b"# EOF\n") and live.endswith(b"# EOF\n"):     # OpenMetrics: one EOF, at the end
            body = body[:-len(b"# EOF\n")]
        return content_type, body + live


def make_server(host: str, port: int, registry: CollectorRegistry, collector: SnapshotCollector,
                max_age_s: float | None = None, limits: Limits = LIMITS,
                live: CollectorRegistry | None = None) -> BoundedHTTPServer:
    rendered = RenderCache(registry, collector, live)

    class Handler(PreparsedRequestHandler):
        server_version = "gputop-exporter"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, *rendered.get(self.headers.get("Accept", "")))
            elif path == "/healthz":
                code, body = health(collector, max_age_s)
                self._reply(code, "application/json", (json.dumps(body) + "\n").encode())
            elif path == "/":
                self._reply(200, "text/plain; charset=utf-8",
                            b"gputop exporter: /metrics (Prometheus), /healthz (sources as JSON)\n")
            else:
                self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

        def _reply(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
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
        return Server(("::" if dual else host, port), Handler, limits)
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


def main(argv: Sequence[str]) -> int:
    from gputop.feeds.base import Filters
    from gputop.feeds.live import TOP_KERNELS, Sampler, SamplerConfig
    from gputop.sources.bpfsys import privileges_error

    args = build_parser().parse_args(list(argv))
    raise_fd_limit()
    if args.kernel_metrics > TOP_KERNELS:
        raise GputopError(f"--kernel-metrics {args.kernel_metrics}: gputop keeps the top {TOP_KERNELS} kernels "
                          "of each process", f"choose at most --kernel-metrics {TOP_KERNELS}", EX_USAGE)
    if args.aggregate == "container" and (args.max_processes is not None or args.cmdline_label):
        flag = "--max-processes" if args.max_processes is not None else "--cmdline-label"
        raise GputopError(f"{flag} applies to per-process series, not to --aggregate container",
                          f"drop {flag}, or export per process", EX_USAGE)
    refusal = privileges_error() if args.bpf else None
    if refusal is not None:
        raise GputopError(refusal,
                          "run the exporter as root, or with the capabilities of "
                          "deploy/systemd/gputop-exporter.service",
                          EX_NOPERM)
    options = ExportOptions(exited_grace_s=args.exited_grace, kernel_metrics=args.kernel_metrics,
                            max_processes=args.max_processes, cmdline_label=args.cmdline_label, node=args.node,
                            interval_s=args.delay, aggregate=args.aggregate, buckets=args.buckets)
    collector = SnapshotCollector(options)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    registry.register(ProcessCollector(registry=None))      # the exporter's own CPU and memory
    live = CollectorRegistry(auto_describe=False)
    live.register(LivenessCollector(collector))             # the snapshot's age: rendered at every scrape
    host, port = args.listen
    max_age_s = stale_after(args.delay)     # two refreshes missed: the collector is stuck
    server = make_server(host, port, registry, collector, max_age_s, live=live)   # fails before the BPF compile
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    def say(message: str) -> None:
        print(f"gputop: {message}", file=sys.stderr, flush=True)

    notify = Notifier.from_environment(unset=True)
    watchdog_for(notify, max_age_s, args.delay, say)
    sampler = Sampler(SamplerConfig(interval_s=args.delay, first_interval_s=min(1.0, args.delay),
                                    use_bpf=not args.no_bpf, use_nvml=not args.no_nvml, filters=Filters()))
    sampler.notice = say
    stale = StaleLog(collector, max_age_s, args.delay, say)

    def serve() -> None:
        try:
            server.serve_forever()
        except Exception as e:          # a bug: one line; the main loop below exits so that systemd restarts us
            print(f"gputop: exporter: the HTTP server failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    ready = False

    def on_snapshot(snap: Snapshot) -> None:
        """On the collector thread: serve the snapshot, then tell systemd of the progress (only here,
        so that a stuck collector stops the watchdog's pings)."""
        nonlocal ready
        refresh = sampler.last_refresh      # None for the "starting" snapshot, posted before any refresh
        collector.update(snap, refresh)
        if refresh is None:
            return                      # the "starting" snapshot: no refresh yet
        if ready:
            notify.watchdog()
        elif health(collector)[0] == 200:
            ready = True
            notify.ready()

    http = threading.Thread(target=serve, name="gputop-http", daemon=True)
    http.start()
    print(f"gputop: exporter serving /metrics on {_show(host, server.server_port)}", file=sys.stderr, flush=True)
    sampler.start(on_snapshot)
    try:
        while not stop.wait(0.5):
            if args.bpf and sampler.bpf_error is not None:
                raise sampler.bpf_error
            if not sampler.running:         # a bug killed the collector: exit, so that a supervisor restarts it
                raise GputopError("the collector thread stopped unexpectedly",
                                  "see the messages above and report them; the exporter exits so that "
                                  "systemd or Kubernetes restarts it", EX_ERROR)
            if not http.is_alive():
                raise GputopError("the HTTP server thread stopped unexpectedly",
                                  "see the messages above and report them; the exporter exits so that "
                                  "systemd or Kubernetes restarts it", EX_ERROR)
            stale.check()
    finally:
        notify.stopping()
        server.shutdown()
        server.server_close()
        sampler.stop()
        notify.close()
    return EX_OK


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


def _show(host: str, port: int) -> str:
    if not host:
        return f"*:{port} (every interface)"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
