"""``gputop exporter``: its options, and the mode that wires the live feed to the Prometheus collector
and the HTTP server of ``gputop.exporter`` (``server``: /metrics, /healthz, the watchdog; ``metrics``:
the families), with systemd's notifications and the signals that stop it."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gputop.errors import EX_ERROR, EX_NOPERM, EX_OK, EX_USAGE, GputopError
from gputop.exporter.admission import MAX_PROCESSES
from gputop.exporter.metrics import ExportOptions, LivenessCollector, SnapshotCollector
from gputop.exporter.sdnotify import Notifier
from gputop.exporter.server import (
    StaleLog,
    health,
    make_server,
    raise_fd_limit,
    show_address,
    stale_after,
    watchdog_for,
)
from gputop.feeds.base import Filters
from gputop.feeds.live import Sampler, SamplerConfig
from gputop.model import Snapshot
from gputop.model.limits import MAX_CALL_SITES, MAX_KERNELS
from gputop.modes.commands import exporter_parser
from gputop.sources.bpf.program.privileges import PERF_ADMIN_HINT, privileges_error

if TYPE_CHECKING:
    from gputop.exporter.otlp import OtlpPusher


def sample_period(asked: int | None, call_site_metrics: int) -> int | None:
    """The collector's call-site sampling period (``--sample-period``): as asked; else, without
    ``--call-site-metrics``, none (0): no series the exporter serves comes from the samples, and sampling
    costs every traced process a stack walk now and then and the exporter the reading of the stacks at
    each refresh; with it, adapted to the cost (None), as the dashboard samples."""
    if asked is not None:
        return asked
    return None if call_site_metrics > 0 else 0


def main(argv: Sequence[str]) -> int:
    """``gputop exporter [options]``: serve until SIGTERM, SIGINT or SIGHUP (then exit 0)."""
    args = exporter_parser().parse_args(list(argv))
    raise_fd_limit()
    if args.kernel_metrics > MAX_KERNELS:
        raise GputopError(f"--kernel-metrics {args.kernel_metrics}: gputop keeps the top {MAX_KERNELS} kernels "
                          "of each process", f"choose at most --kernel-metrics {MAX_KERNELS}", EX_USAGE)
    if args.call_site_metrics > MAX_CALL_SITES:
        raise GputopError(f"--call-site-metrics {args.call_site_metrics}: gputop keeps the top {MAX_CALL_SITES} "
                          "call sites of each process", f"choose at most --call-site-metrics {MAX_CALL_SITES}",
                          EX_USAGE)
    per_process = (("--max-processes", args.max_processes is not None), ("--cmdline-label", args.cmdline_label),
                   ("--user-label", args.user_label), ("--call-site-metrics", args.call_site_metrics > 0))
    if args.aggregate == "container" and any(given for _, given in per_process):
        flag = next(name for name, given in per_process if given)
        raise GputopError(f"{flag} applies to per-process series, not to --aggregate container",
                          f"drop {flag}, or export per process", EX_USAGE)
    refusal = privileges_error() if args.bpf else None
    if refusal is not None:
        unit = "deploy/systemd/gputop-exporter.service"
        if refusal[1] == PERF_ADMIN_HINT:
            unit += " and its drop-in deploy/systemd/perf-event-uprobes.conf (CAP_SYS_ADMIN)"
        raise GputopError(refusal[0], f"run the exporter as root, or with the capabilities of {unit}", EX_NOPERM)
    options = ExportOptions(exited_grace_s=args.exited_grace, kernel_metrics=args.kernel_metrics,
                            call_site_metrics=args.call_site_metrics,
                            max_processes=MAX_PROCESSES if args.max_processes is None else args.max_processes,
                            cmdline_label=args.cmdline_label, user_label=args.user_label, node=args.node,
                            interval_s=args.delay, aggregate=args.aggregate, buckets=args.buckets)
    collector = SnapshotCollector(options)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    registry.register(ProcessCollector(registry=None))      # the exporter's own CPU and memory
    live = CollectorRegistry(auto_describe=False)
    live.register(LivenessCollector(collector))             # the snapshot's age: rendered at every scrape
    host, port = args.listen
    max_age_s = stale_after(args.delay)     # two refreshes missed: the collector is stuck
    web = None
    if args.web_config is not None:
        from gputop.exporter import webconfig

        try:
            web = webconfig.load(args.web_config)
        except ValueError as e:
            raise GputopError(str(e), "the format is Prometheus exporter-toolkit's web configuration, as node_exporter "
                              "takes it (docs/deploy.md, \"TLS and basic auth\")", EX_USAGE) from None
    pusher = otlp_pusher(args, (registry, live), say_line)
    server = make_server(host, port, registry, collector, max_age_s, live=live, web=web)   # before the BPF compile
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
                                    use_bpf=not args.no_bpf, use_nvml=not args.no_nvml, filters=Filters(),
                                    sample_period=sample_period(args.sample_period, args.call_site_metrics)))
    sampler.notice = say
    stale = StaleLog(collector, max_age_s, args.delay, say)

    def serve() -> None:
        try:
            server.serve_forever()
        except Exception as e:          # a bug: one line; the main loop below exits so that systemd restarts us
            print(f"gputop: exporter: the HTTP server failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    ready = False
    stopping = False
    told = threading.Lock()         # no WATCHDOG=1 or READY=1 after STOPPING=1 (a refresh while stopping)

    def on_snapshot(snap: Snapshot) -> None:
        """On the collector thread: serve the snapshot, then tell systemd of the progress (only here,
        so that a stuck collector stops the watchdog's pings)."""
        nonlocal ready
        refresh = sampler.last_refresh      # None for the "starting" snapshot, posted before any refresh
        collector.update(snap, refresh)
        if refresh is None:
            return                      # the "starting" snapshot: no refresh yet
        if pusher is not None:
            pusher.offer()              # pushed on the pusher's thread: never waits for the receiver
        with told:
            if stopping:
                return
            if ready:
                notify.watchdog()
            elif health(collector)[0] == 200:
                ready = True
                notify.ready()

    http = threading.Thread(target=serve, name="gputop-http", daemon=True)
    http.start()
    print(f"gputop: exporter serving /metrics on {show_address(host, server.server_port)}", file=sys.stderr, flush=True)
    if pusher is not None:
        say(f"exporter pushing OTLP metrics to {pusher.url} at every refresh")
        pusher.start()
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
        with told:
            stopping = True
            notify.stopping()
        server.shutdown()
        server.server_close()
        sampler.stop()
        if pusher is not None:
            pusher.stop()
        notify.close()
    return EX_OK


def say_line(message: str) -> None:
    print(f"gputop: {message}", file=sys.stderr, flush=True)


def otlp_pusher(args: argparse.Namespace, registries: tuple[CollectorRegistry, CollectorRegistry],
                say: Callable[[str], None]) -> OtlpPusher | None:
    """``--otlp-endpoint``: the pusher of the registries' families (gputop/exporter/otlp.py), its own counts
    served with the other self-metrics (the second, live, registry); None without the flag."""
    if args.otlp_endpoint is None:
        if args.otlp_http_config is not None:
            raise GputopError("--otlp-http-config-file is the login of --otlp-endpoint's pushes",
                              "add --otlp-endpoint URL, or drop --otlp-http-config-file", EX_USAGE)
        return None
    from gputop.exporter import otlp

    url = otlp.metrics_url(args.otlp_endpoint)
    otlp.need_sdk()
    http = None
    if args.otlp_http_config is not None:
        from gputop import yamlconfig
        from gputop.feeds import http_config

        path = args.otlp_http_config
        try:
            http = yamlconfig.load(path, "--otlp-http-config-file",
                                   lambda doc, base: http_config.parse(doc, base, path))
        except ValueError as e:
            raise GputopError(str(e), "the format is Prometheus' HTTP client configuration "
                              "(basic_auth, authorization, tls_config, http_headers; docs/metrics.md, OTLP)",
                              EX_USAGE) from None
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            cgroup: str | None = f.read(1 << 16)
    except OSError:
        cgroup = None
    pusher = otlp.OtlpPusher(registries, url, interval_s=args.delay, http_config=http, node=args.node, say=say,
                             cgroup_text=cgroup)
    registries[1].register(otlp.StatsCollector(pusher.stats))
    return pusher
