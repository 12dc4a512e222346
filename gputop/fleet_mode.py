"""``gputop --prometheus URL [--match SELECTOR] [--window DURATION] [--node NODE,...]``: the dashboard
(or ``-b``) over every node Prometheus scrapes, through ``gputop.feeds.fleet.FleetFeed``.

The options are parsed by ``gputop.cli``; this module checks the fleet-only ones and runs the mode.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from dataclasses import replace

from gputop.errors import EX_ERROR, EX_OK, EX_USAGE, GputopError

#: refresh interval of the fleet view unless -d says otherwise: a refresh is a few dozen queries
DEFAULT_INTERVAL_S = 5.0
DEFAULT_WINDOW = "2m"


def wanted(args: argparse.Namespace) -> bool:
    return any(getattr(args, name) is not None for name in ("prometheus", "match", "window", "node"))


def _check(args: argparse.Namespace) -> None:
    from gputop.feeds import prometheus as fleet

    if args.prometheus is None:
        given = next(f"--{n}" for n in ("match", "window", "node") if getattr(args, n) is not None)
        raise GputopError(f"{given} only applies to the fleet view", "add --prometheus URL (Prometheus's address, "
                          "e.g. http://prometheus:9090)", EX_USAGE)
    refused: tuple[tuple[str, bool], ...] = (
        ("--replay", args.replay is not None), ("-u", args.user is not None), ("--bpf", bool(args.bpf)),
        ("--no-bpf", bool(args.no_bpf)), ("--no-nvml", bool(args.no_nvml)))
    for option, on in refused:
        if on:
            why = ("the exporter's metrics carry no user names" if option == "-u" else
                   "a recording is one host's" if option == "--replay" else
                   "the fleet view traces nothing itself: each node's exporter does")
            raise GputopError(f"{option} does not apply to the fleet view (--prometheus): {why}",
                              "drop it, or filter with --node, --match or -p", EX_USAGE)
    try:
        args.prometheus = fleet.check_url(args.prometheus)
        args.match = fleet.selector_body(args.match) if args.match is not None else ""
        fleet.parse_duration(args.window or DEFAULT_WINDOW)
    except ValueError as e:
        raise GputopError(str(e), "see 'gputop --help' (fleet view)", EX_USAGE) from None
    if args.node is not None:
        nodes = frozenset(n.strip() for n in args.node.split(",") if n.strip())
        if not nodes:
            raise GputopError(f"expected comma-separated node names: {args.node!r}",
                              "gputop --prometheus URL --node gpu-node-07,gpu-node-08", EX_USAGE)
        args.node = nodes


def run(args: argparse.Namespace) -> int:
    from gputop import cli
    from gputop.feeds.base import Filters
    from gputop.feeds.fleet import FleetFeed
    from gputop.feeds.prometheus import FleetConfig

    _check(args)
    cli._validate(args)  # the options shared with the live view: -s, --theme, -f/-b, -n, --baseline
    config = FleetConfig(url=args.prometheus, match=args.match, window=args.window or DEFAULT_WINDOW,
                         interval_s=args.delay or DEFAULT_INTERVAL_S, nodes=args.node or frozenset())
    filters = Filters(args.pid, None)
    if args.batch:
        return _batch(args, FleetFeed(config), filters)
    from gputop.ui.app import DashboardOptions, run_dashboard

    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise GputopError("the dashboard needs a terminal",
                          f"use batch mode: gputop --prometheus {args.prometheus} -b -n 1 [-f json]", EX_USAGE)
    opts = DashboardOptions(interval_s=config.interval_s, sort=args.sort, filters=filters, theme=args.theme,
                            readonly=args.readonly, baseline=args.baseline, baseline_pid=args.baseline_pid,
                            record=args.record)
    # the dashboard reads what its table shows (everything when recording) in a child process
    feed = FleetFeed(replace(config, table_only=not args.record, child=True))
    try:
        return run_dashboard(feed, opts)
    except ValueError as e:
        raise GputopError(str(e), "see 'gputop --help'", EX_USAGE) from None


def _batch(args: argparse.Namespace, feed: object, filters: object) -> int:
    """One line (JSON) or one table per refresh; Prometheus failing ends it: exit 1, one line, a hint.
    A scrape target down at a refresh (its ``up`` is 0) does not end it, but the exit status is 1, with
    the last such refresh's ``N of M nodes down: …`` line and a hint, after the output."""
    from gputop import batch
    from gputop.feeds.base import Filters
    from gputop.feeds.fleet import FleetFeed
    from gputop.feeds.prometheus import down_clause
    from gputop.record import Recorder
    from gputop.ui.columns import DEFAULT_SORT

    assert isinstance(feed, FleetFeed) and isinstance(filters, Filters)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    recorder = Recorder(args.record) if args.record else None
    down: str | None = None
    try:
        i = 0
        next_at = time.monotonic()
        while args.iterations is None or i < args.iterations:
            if i:
                next_at += feed.interval_s
                time.sleep(max(0.0, next_at - time.monotonic()))
            snap = filters.apply(feed.collect())     # FleetError: the CLI prints it, exit 1
            prom = snap.sources.get("prometheus")
            said = down_clause(prom.reason) if prom is not None else None
            if said is not None:
                down = said
            batch.emit([snap], args.format or "table", sort=args.sort or DEFAULT_SORT, interval_s=feed.interval_s)
            if recorder:
                recorder.write(snap)
            i += 1
    finally:
        feed.stop()
        if recorder:
            recorder.close()
    if down is not None:
        sys.stdout.flush()
        raise GputopError(down, "check those nodes' exporters (systemctl status gputop-exporter, or the DaemonSet's "
                          "pods) and the targets page of Prometheus (its /targets): up is 0 where a scrape fails",
                          EX_ERROR)
    return EX_OK
