"""``gputop [--replay FILE]``: the dashboard over the live feed of this host, or over a recording."""

from __future__ import annotations

import argparse
import sys

from gputop.errors import EX_NOPERM, EX_USAGE, GputopError
from gputop.feeds.base import Feed, Filters
from gputop.feeds.live import Sampler
from gputop.feeds.replay import ReplayFeed
from gputop.modes.common import exit_now, live_sampler, no_privileges, stop_on_signals, tracing_off
from gputop.ui.app import DashboardOptions, run_dashboard


def run(args: argparse.Namespace) -> int:
    """The dashboard until the user quits (``validate``d options); the live feed's probes detach
    after the terminal is back (in a child, when that is quicker)."""
    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise GputopError("the dashboard needs a terminal", "use batch mode: gputop -b -n 5 [-f json]", EX_USAGE)
    refusal = None if args.replay or args.no_bpf else no_privileges()
    if args.bpf and refusal is not None:
        raise GputopError(*refusal, EX_NOPERM)
    # None: the interval, sort and theme saved in config.toml apply. -p/-u are applied once: by the
    # live feed as it collects, by the dashboard over a recording
    opts = DashboardOptions(interval_s=args.delay, sort=args.sort,
                            filters=Filters(args.pid, args.user) if args.replay else Filters(),
                            theme=args.theme, readonly=args.readonly, baseline=args.baseline,
                            baseline_pid=args.baseline_pid, record=args.record,
                            record_max_bytes=args.record_max_size, record_keep=args.record_keep,
                            banner=tracing_off(*refusal) if refusal else None, quit_on_signals=True)
    live: Sampler | None = None
    feed: Feed
    if args.replay:
        feed = ReplayFeed(args.replay)
    else:
        feed = live = live_sampler(args)
        live.close_elsewhere = True     # the probes detach once the terminal is back (below)
    # SIGINT, SIGTERM, SIGHUP: the app quits as q does (quit_on_signals); before and after it, they raise
    stop_on_signals()
    try:
        code = run_dashboard(feed, opts)
    except KeyboardInterrupt:       # a signal before the app handled them: a quit all the same; the probes
        code = 0                    # detach in a child below (perf events: 0.1 s each, 15 s in all here)
    except ValueError as e:
        if live is not None:
            live.close()
        raise GputopError(str(e), "see 'gputop --help'", EX_USAGE) from None
    except BaseException:
        if live is not None:
            live.close()
        raise
    stop_on_signals()               # the app's event loop left them at their defaults
    if live is not None:
        if live.detach_in_child():      # a child detaches the probes: this process exits at once
            exit_now(code)
        live.close()
    return code
