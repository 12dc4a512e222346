"""``python -m gputop.ui --replay FILE``: the dashboard over a recording (development and benchmarks).

The real command line is ``gputop --replay FILE``; this entry point needs nothing but the UI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gputop.feeds.replay import ReplayFeed
from gputop.record import RecordingError


def main(argv: list[str] | None = None) -> int:
    from gputop.ui.app import SORT_KEYS, THEME_NAMES, DashboardOptions, run_dashboard

    ap = argparse.ArgumentParser(prog="python -m gputop.ui", description=__doc__)
    ap.add_argument("--replay", type=Path, required=True, metavar="FILE", help="recording (JSON Lines)")
    ap.add_argument("--theme", choices=THEME_NAMES())
    ap.add_argument("-s", "--sort", choices=SORT_KEYS)
    ap.add_argument("-d", "--delay", type=float, help="replay step in seconds (default: as recorded)")
    ap.add_argument("--speed", type=float, default=1.0, help="replay speed factor")
    ap.add_argument("--loop", action="store_true", help="start again at the end")
    ap.add_argument("--readonly", action="store_true")
    ap.add_argument("--baseline", type=Path, metavar="FILE")
    ap.add_argument("--baseline-pid", type=int)
    ap.add_argument("--record", type=Path, metavar="FILE")
    ap.add_argument("--compare", metavar="A,B", help="open the compare screen on these two PIDs")
    ap.add_argument("--banner")
    args = ap.parse_args(argv)
    compare = None
    if args.compare:
        a, b = (int(x) for x in args.compare.split(","))
        compare = (a, b)
    try:
        feed = ReplayFeed(args.replay, speed=args.speed, loop=args.loop)
        options = DashboardOptions(
            interval_s=args.delay,
            sort=args.sort,
            theme=args.theme,
            readonly=args.readonly,
            baseline=args.baseline,
            baseline_pid=args.baseline_pid,
            record=args.record,
            compare_pids=compare,
            banner=args.banner,
        )
        return run_dashboard(feed, options)
    except RecordingError as e:
        print(f"gputop: error: {e.message}\nhint: {e.hint}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"gputop: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
