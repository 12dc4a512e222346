"""``gputop --prometheus URL [--match SELECTOR] [--window DURATION] [--node NODE,...]``: the dashboard
(or ``-b``) over every node Prometheus scrapes, through ``gputop.feeds.fleet.FleetFeed``.

The options are parsed and checked by ``gputop.modes.args`` (``validate_fleet``, then ``validate``).
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import replace

from gputop.errors import EX_ERROR, EX_OK, EX_USAGE, GputopError
from gputop.feeds.base import Filters
from gputop.feeds.fleet import FleetFeed
from gputop.feeds.fleet_topk import TOP_K
from gputop.feeds.prometheus import FleetConfig, down_clause
from gputop.model import Snapshot
from gputop.modes import batch
from gputop.modes.args import FLEET_WINDOW, validate, validate_fleet
from gputop.view.columns import DEFAULT_SORT

#: refresh interval of the fleet view unless -d says otherwise: a refresh is a few dozen queries
DEFAULT_INTERVAL_S = 5.0


def run(args: argparse.Namespace) -> int:
    validate_fleet(args)
    validate(args)  # the options shared with the live view: -s, --theme, -f/-b, -n, --baseline
    config = FleetConfig(url=args.prometheus, match=args.match, window=args.window or FLEET_WINDOW,
                         interval_s=args.delay or DEFAULT_INTERVAL_S, nodes=args.node or frozenset(),
                         http=args.http_config)
    filters = Filters(args.pid, None)
    if args.batch:
        return _batch(args, FleetFeed(config), filters)
    from gputop.ui.app import DashboardOptions, run_dashboard

    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise GputopError("the dashboard needs a terminal",
                          f"use batch mode: gputop --prometheus {args.prometheus} -b -n 1 [-f json]", EX_USAGE)
    opts = DashboardOptions(interval_s=config.interval_s, sort=args.sort, filters=filters, theme=args.theme,
                            readonly=args.readonly, baseline=args.baseline, baseline_pid=args.baseline_pid,
                            record=args.record, record_max_bytes=args.record_max_size,
                            record_keep=args.record_keep, quit_on_signals=True)
    # the dashboard reads what its table shows (everything when recording) in a child process: its top
    # rows by the sort column and the fleet's totals summed by Prometheus (docs/fleet.md, "At scale")
    feed = FleetFeed(replace(config, table_only=not args.record, child=True, top=0 if args.record else TOP_K,
                             pids=frozenset(args.pid or ())))
    try:
        return run_dashboard(feed, opts)
    except ValueError as e:
        raise GputopError(str(e), "see 'gputop --help'", EX_USAGE) from None


def _batch(args: argparse.Namespace, feed: FleetFeed, filters: Filters) -> int:
    """One line (JSON) or one table per refresh; Prometheus failing ends it: exit 1, one line, a hint.
    A scrape target down at a refresh (its ``up`` is 0) does not end it, but the exit status is 1, with
    the last such refresh's ``N of M nodes down: …`` line and a hint, after the output."""
    down: str | None = None

    def seen(snap: Snapshot) -> None:
        nonlocal down
        prom = snap.sources.get("prometheus")
        said = down_clause(prom.reason) if prom is not None else None
        if said is not None:
            down = said

    # FleetError ends it: the CLI prints it, exit 1
    batch.loop(feed.refreshes(threading.Event()), form=args.format or "table", sort=args.sort or DEFAULT_SORT,
               interval_s=feed.interval_s, iterations=args.iterations, record=args.record,
               record_rotation=(args.record_max_size, args.record_keep), filters=filters,
               seen=seen)
    if down is not None:
        sys.stdout.flush()
        raise GputopError(down, "check those nodes' exporters (systemctl status gputop-exporter, or the DaemonSet's "
                          "pods) and the targets page of Prometheus (its /targets): up is 0 where a scrape fails",
                          EX_ERROR)
    return EX_OK
