"""``gputop -b``: refreshes to stdout (``gputop.batch``'s JSON Lines or table), from the live feed
or a recording; ``loop`` is batch mode's one loop, which the fleet view and the demo run too."""

from __future__ import annotations

import argparse
import io
import sys
import threading
from collections.abc import Callable, Generator
from itertools import islice
from pathlib import Path

from gputop import batch
from gputop.errors import EX_OK
from gputop.feeds.base import Filters
from gputop.model import Snapshot
from gputop.modes.common import live_sampler, notice, stop_on_signals, tracing_off
from gputop.record import Recorder, read_recording
from gputop.view.columns import DEFAULT_SORT


def loop(refreshes: Generator[Snapshot, None, None], *, form: str = "table", sort: str = DEFAULT_SORT,
         interval_s: float | None = None, iterations: int | None = None, record: Path | None = None,
         record_rotation: tuple[int | None, int] = (None, 4), filters: Filters | None = None,
         seen: Callable[[Snapshot], None] | None = None) -> None:
    """Print each of the first ``iterations`` (None: all) of ``refreshes``, through ``filters`` where
    the feed did not apply -p/-u itself (a recording, the fleet), as ``form`` (the table sorted
    by ``sort``; its status line says ``interval_s``, None: the snapshot's own), append it to ``record``
    and show it to ``seen``. The recording is opened before the first refresh is asked for, and the
    refreshes are closed (a feed's sources with them) however the loop ends."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")   # a non-UTF-8 locale: escapes, not a crash
    recorder = Recorder(record, *record_rotation) if record else None
    try:
        try:
            for snap in islice(refreshes, iterations):
                if filters is not None:
                    snap = filters.apply(snap)
                if seen is not None:
                    seen(snap)
                batch.emit([snap], form, sort=sort, interval_s=interval_s)
                if recorder:
                    recorder.write(snap)
        finally:
            refreshes.close()
    finally:
        if recorder:
            recorder.close()


def live(args: argparse.Namespace) -> Generator[Snapshot, None, None]:
    """The live feed's refreshes for ``gputop -b``: SIGINT, SIGTERM and SIGHUP end them after the
    refresh under way (this thread runs bcc's callbacks: a signal must not raise there); --bpf without
    the BPF source is an error, else one line says tracing is off."""
    sampler = live_sampler(args)
    stopping = threading.Event()

    def request_stop() -> None:
        stopping.set()
        sampler.stop()          # wakes its wait(); batch mode has no collector thread to join

    stop_on_signals(request_stop)
    sampler.open_bpf()
    if sampler.bpf_error is not None and args.bpf:
        sampler.close()
        raise sampler.bpf_error
    if sampler.bpf_error is not None:       # one line: why, and how to turn it on
        notice(tracing_off(sampler.bpf_error.reason, sampler.bpf_error.hint))
    # a first sample, not printed: -n 1 prints one refresh an interval after the start, as the dashboard's first
    yield from sampler.refreshes(stopping)


def run(args: argparse.Namespace) -> int:
    """``gputop -b`` over the live feed, or ``--replay FILE`` (read as it streams, -p/-u applied)."""
    form = args.format or "table"
    sort = args.sort or DEFAULT_SORT   # the dashboard's default; config.toml is the dashboard's, not batch's
    if args.replay:
        loop(read_recording(args.replay, notice=notice), form=form, sort=sort, iterations=args.iterations,
             record=args.record, record_rotation=(args.record_max_size, args.record_keep),
             filters=Filters(args.pid, args.user))
    else:
        # the header says the interval asked for; the snapshot's interval_s is what was measured
        loop(live(args), form=form, sort=sort, interval_s=args.delay or 1.0, iterations=args.iterations,
             record=args.record, record_rotation=(args.record_max_size, args.record_keep))
    return EX_OK
