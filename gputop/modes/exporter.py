"""``gputop exporter``: its options, and the mode that wires the live feed to the Prometheus collector
and the HTTP server of ``gputop.exporter`` (``server``: /metrics, /healthz, the watchdog; ``metrics``:
the families), with systemd's notifications and the signals that stop it."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gputop.errors import EX_ERROR, EX_NOPERM, EX_OK, EX_USAGE, GputopError
from gputop.exporter.admission import MAX_PROCESSES
from gputop.exporter.metrics import AGGREGATES, BUCKETS, ExportOptions, LivenessCollector, SnapshotCollector
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
from gputop.feeds.live import TOP_KERNELS, Sampler, SamplerConfig
from gputop.model import Snapshot
from gputop.model.limits import MAX_CALL_SITES
from gputop.modes.args import SAMPLE_PERIOD_HELP, Parser, sample_period_arg
from gputop.sources.bpf.program.privileges import PERF_ADMIN_HINT, privileges_error

DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_INTERVAL_S = 15.0     # Prometheus's default scrape interval: one refresh, one rendering per scrape


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


def seconds_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v <= 7 * 86400:     # nan fails both comparisons
        raise argparse.ArgumentTypeError(f"must be between 0 and 604800 seconds: {text!r}")
    return v


def interval_arg(text: str) -> float:
    v = seconds_arg(text)
    if v < 0.1:
        raise argparse.ArgumentTypeError(f"must be at least 0.1 seconds: {text!r}")
    return v


def natural_arg(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number: {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="gputop exporter", description="Serve gputop's live per-process counters and NVML's GPU "
                "values as Prometheus metrics (/metrics) with a health check (/healthz).")
    p.add_argument("--listen", "--web.listen-address", dest="listen", type=parse_listen,
                   default=parse_listen(DEFAULT_LISTEN), metavar="HOST:PORT",
                   help=f"address to serve on (default {DEFAULT_LISTEN}; ':9464' or '0.0.0.0:9464' for every "
                   "interface)")
    p.add_argument("--web.config.file", dest="web_config", default=None, metavar="FILE",
                   help="TLS and basic auth, in the format node_exporter takes (Prometheus exporter-toolkit's): "
                   "tls_server_config, basic_auth_users (docs/deploy.md)")
    p.add_argument("-d", "--delay", type=interval_arg, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                   help=f"refresh interval of the collector (default {DEFAULT_INTERVAL_S:g})")
    p.add_argument("--exited-grace", type=seconds_arg, default=300.0, metavar="SECONDS",
                   help="keep an exited process's series this long (default 300)")
    p.add_argument("--kernel-metrics", type=natural_arg, default=0, metavar="N",
                   help=f"export the top N kernels of each process (at most {TOP_KERNELS}; default 0: none)")
    p.add_argument("--call-site-metrics", type=natural_arg, default=0, metavar="N",
                   help=f"export the samples of the top N call sites of each process (at most {MAX_CALL_SITES}; "
                   "default 0: none; per process only)")
    p.add_argument("--max-processes", type=natural_arg, default=None, metavar="N",
                   help=f"series of their own for at most N processes, the busiest newcomers first; the others "
                   f"summed per container (pid=\"\") (default {MAX_PROCESSES}; docs/metrics.md, Cardinality)")
    p.add_argument("--aggregate", choices=AGGREGATES, default="process",
                   help="one row of series per process (default), or per container: fewer series under PID churn "
                   "(docs/metrics.md, Cardinality)")
    p.add_argument("--buckets", choices=tuple(BUCKETS), default="log2",
                   help="histogram buckets: a bound at every power of 2 (default), at every power of 16, or none "
                   "(+Inf, _count and _sum only)")
    p.add_argument("--cmdline-label", action="store_true",
                   help="add each process's command line as a label (command lines can hold secrets)")
    p.add_argument("--user-label", action="store_true",
                   help="add each process's user as a label (tells tenants apart; the fleet view shows it)")
    p.add_argument("--node", default=os.environ.get("GPUTOP_NODE") or None,
                   help="node name in gputop_build_info (default $GPUTOP_NODE, else the hostname)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--bpf", action="store_true", help="require the BPF collector (exit 77 without privileges)")
    src.add_argument("--no-bpf", action="store_true", help="run without the BPF collector")
    p.add_argument("--no-nvml", action="store_true", help="run without NVML")
    p.add_argument("--sample-period", type=sample_period_arg, default=None, metavar="N", help=SAMPLE_PERIOD_HELP)
    return p


def main(argv: Sequence[str]) -> int:
    """``gputop exporter [options]``: serve until SIGTERM, SIGINT or SIGHUP (then exit 0)."""
    args = build_parser().parse_args(list(argv))
    raise_fd_limit()
    if args.kernel_metrics > TOP_KERNELS:
        raise GputopError(f"--kernel-metrics {args.kernel_metrics}: gputop keeps the top {TOP_KERNELS} kernels "
                          "of each process", f"choose at most --kernel-metrics {TOP_KERNELS}", EX_USAGE)
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
                                    sample_period=args.sample_period))
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
        notify.close()
    return EX_OK
