"""What the modes share at run time: the notice line on stderr, the words of "tracing is off", the
privileges check, signals that stop a mode, the live feed built from the command line."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from gputop.textsafe import sanitize

if TYPE_CHECKING:
    from gputop.feeds.live import Sampler


def notice(message: str) -> None:
    """``gputop: MESSAGE`` on stderr (sanitised), at once."""
    print(f"gputop: {sanitize(message)}", file=sys.stderr, flush=True)


def tracing_off(reason: str, hint: str) -> str:
    """The one line that says a live view runs without the BPF source, why and how to turn it on: on
    stderr in batch mode (``gputop -b``, ``gputop demo -b``, after ``gputop: ``), the dashboard's
    banner (``gputop``, ``gputop demo``). The one wording of each: ``no_privileges`` and BpfUnavailable's."""
    return f"tracing is off ({reason}): NVML and host data only. To trace: {hint}"


def no_privileges() -> tuple[str, str] | None:
    """(why, hint) when this process lacks the privileges to trace, else None: the words of the BPF
    source's own refusal (``privileges.privileges_error``), which ``gputop --bpf``,
    ``gputop -b``, the dashboard, ``gputop demo``, ``gputop doctor`` and its ``--selftest`` all say."""
    from gputop.sources.bpf.program.privileges import privileges_error

    return privileges_error()


def stop_on_signals(request_stop: Callable[[], None] | None = None) -> None:
    """SIGTERM and SIGHUP end batch mode and the dashboard as SIGINT does: the probes detach, exit 0.

    With ``request_stop`` (batch mode, whose main thread runs bcc's ring-buffer callbacks), SIGINT,
    SIGTERM and SIGHUP call it instead of raising: an exception raised in a ctypes callback is
    printed and dropped, so a signal that landed there was lost. A second signal raises."""
    requested = False

    def stop(signum: int, frame: object) -> None:
        nonlocal requested
        if request_stop is None or requested:
            raise KeyboardInterrupt
        requested = True
        request_stop()

    for sig in (signal.SIGTERM, signal.SIGHUP, *((signal.SIGINT,) if request_stop else ())):
        signal.signal(sig, stop)


def exit_now(code: int) -> NoReturn:
    """Exit without the interpreter's shutdown and exit hooks (the BPF source's is the child's job)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def live_sampler(args: argparse.Namespace) -> Sampler:
    """The live feed of ``gputop``'s options: -d, --no-bpf, --no-nvml, and -p/-u (which it applies, once)."""
    from gputop.feeds.base import Filters
    from gputop.feeds.live import Sampler, SamplerConfig

    cfg = SamplerConfig(interval_s=args.delay or 1.0, use_bpf=not args.no_bpf, use_nvml=not args.no_nvml,
                        filters=Filters(args.pid, args.user), sample_period=args.sample_period)
    sampler = Sampler(cfg)
    sampler.notice = notice
    return sampler
