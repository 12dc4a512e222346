"""Command line: argument parsing, preflight, choosing the mode (dashboard, batch, doctor...)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from gputop import __version__
from gputop.errors import EX_ERROR, EX_NOPERM, EX_OK, EX_USAGE, GputopError
from gputop.textsafe import sanitize


def fail(message: str, hint: str, code: int) -> int:
    """Two lines on stderr, whatever the message quotes (a path, a name): sanitised, one line each."""
    sys.stderr.write(f"gputop: error: {sanitize(message)}\nhint: {sanitize(hint)}\n")
    return code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"gputop: error: {sanitize(message)}\nhint: see '{self.prog} --help'\n")
        raise SystemExit(EX_USAGE)


#: the shortest refresh interval (the dashboard's and config.toml's too) and the longest
MIN_DELAY_S, MAX_DELAY_S = 0.05, 86400.0


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_DELAY_S <= v <= MAX_DELAY_S:   # false for nan too
        raise argparse.ArgumentTypeError(f"must be from {MIN_DELAY_S:g} to {MAX_DELAY_S:g} seconds: {text!r}")
    return v


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return v


#: Linux's largest possible PID (PID_MAX_LIMIT on 64-bit: pid_max can be raised up to it)
PID_LIMIT = 1 << 22


def _pid(text: str) -> int:
    """One PID: decimal ASCII digits (int() would take '1_0', ' 7' or Arabic digits), 1..PID_LIMIT."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or not 1 <= int(t) <= PID_LIMIT:
        raise argparse.ArgumentTypeError(f"not a PID (1 to {PID_LIMIT}): {text!r}")
    return int(t)


def _pids(text: str) -> frozenset[int]:
    pids = frozenset(_pid(p) for p in text.split(",") if p.strip())
    if not pids:
        raise argparse.ArgumentTypeError(f"expected comma-separated PIDs: {text!r}")
    return pids


#: the largest uid; (uid_t)-1 is no user
_UID_MAX = (1 << 32) - 2


def _user(text: str, replay: bool = False) -> str:
    """``-u USER`` as the process owner that the collector reports (psutil's user name): a user name
    of this host, or a numeric uid, which becomes its name when the host has one and stays a number
    otherwise (psutil reports a uid without a name as the number). A replay matches the recorded
    names as given: the recording may come from another host."""
    import pwd

    if replay:
        return text
    try:
        return pwd.getpwnam(text).pw_name
    except (KeyError, ValueError):
        pass
    if text.isascii() and text.isdigit() and int(text) <= _UID_MAX:
        try:
            return pwd.getpwuid(int(text)).pw_name
        except KeyError:
            return str(int(text))
    raise GputopError(f"no such user: {text!r}",
                      "give a user name or a numeric uid of this host (getent passwd lists them)", EX_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gputop", description="A top for CUDA processes: kernel launches, copies, allocations "
                "and sync time per process, traced with eBPF, beside NVML's view of each GPU.",
                epilog="subcommands: 'gputop doctor' checks the host; 'gputop demo' runs a fused vs unfused "
                "comparison; 'gputop exporter' serves Prometheus metrics.")
    p.add_argument("-d", "--delay", type=_positive, default=None, metavar="SECONDS",
                   help="refresh interval (default 1)")
    p.add_argument("-p", "--pid", type=_pids, default=frozenset(), metavar="PID[,PID...]",
                   help="only these processes")
    p.add_argument("-u", "--user", default=None, metavar="USER", help="only processes of this user (name or uid)")
    p.add_argument("-s", "--sort", default=None, metavar="COLUMN",
                   help="initial sort column (default launches); batch mode sorts by it")
    p.add_argument("-b", "--batch", action="store_true", help="batch mode: print refreshes to stdout")
    p.add_argument("-n", "--iterations", type=_count, default=None, metavar="N",
                   help="batch mode: stop after N refreshes")
    p.add_argument("-f", "--format", choices=("json", "table"), default=None,
                   help="batch mode output: JSON Lines (schema gputop/1) or a text table (default)")
    p.add_argument("--record", type=Path, metavar="FILE", help="also write every snapshot to FILE (JSON Lines)")
    p.add_argument("--replay", type=Path, metavar="FILE", help="show a recording instead of live data")
    p.add_argument("--baseline", type=Path, metavar="FILE",
                   help="dashboard: compare live processes against a recording")
    p.add_argument("--baseline-pid", type=_pid, default=None, metavar="PID",
                   help="dashboard: the recorded process to compare against (default: the one with the most launches)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--bpf", action="store_true", help="require the BPF collector (exit 77 without privileges)")
    src.add_argument("--no-bpf", action="store_true", help="run without the BPF collector")
    p.add_argument("--no-nvml", action="store_true", help="run without NVML")
    p.add_argument("--theme", default=None, help="colour theme of the dashboard (batch output has no colours)")
    p.add_argument("--readonly", action="store_true", help="never send signals")
    fleet = p.add_argument_group("fleet view (gputop_* metrics of every node, read from Prometheus)")
    fleet.add_argument("--prometheus", default=None, metavar="URL", help="Prometheus's URL (http://HOST:9090)")
    fleet.add_argument("--match", default=None, metavar="SELECTOR", help='only these series: label matchers, '
                       'e.g. job="gputop" or cluster=~"eu-.*"')
    fleet.add_argument("--window", default=None, metavar="DURATION",
                       help="window of increase() and rate() (default 2m; docs/fleet.md gives its error)")
    fleet.add_argument("--node", default=None, metavar="NODE[,NODE...]", help="only these nodes")
    p.add_argument("--ebpf", action="store_true", help="print the BPF program and exit")
    p.add_argument("--version", action="version", version=f"gputop {__version__}")
    return p


def _sampler(args: argparse.Namespace) -> object:
    from gputop.feeds.base import Filters
    from gputop.feeds.live import Sampler, SamplerConfig

    cfg = SamplerConfig(interval_s=args.delay or 1.0, use_bpf=not args.no_bpf, use_nvml=not args.no_nvml,
                        filters=Filters(args.pid, args.user))
    sampler = Sampler(cfg)
    sampler.notice = _notice
    return sampler


def _notice(message: str) -> None:
    print(f"gputop: {sanitize(message)}", file=sys.stderr, flush=True)


def tracing_off(reason: str, hint: str) -> str:
    """The one line that says a live view runs without the BPF source, why and how to turn it on: on
    stderr in batch mode (``gputop -b``, ``gputop demo -b``, after ``gputop: ``), the dashboard's
    banner (``gputop``, ``gputop demo``). The one wording of each: ``no_privileges`` and BpfUnavailable's."""
    return f"tracing is off ({reason}): NVML and host data only. To trace: {hint}"


def no_privileges() -> tuple[str, str] | None:
    """(why, hint) when this process lacks the privileges to trace, else None: the words of the BPF
    source's own refusal (``bpfsys.privileges_error``, ``bpfsys.ENABLE_HINT``), which ``gputop --bpf``,
    ``gputop -b``, the dashboard, ``gputop demo``, ``gputop doctor`` and its ``--selftest`` all say."""
    from gputop.sources.bpfsys import ENABLE_HINT, privileges_error

    refusal = privileges_error()
    return None if refusal is None else (refusal, ENABLE_HINT)


def _stop_on_signals(request_stop: Callable[[], None] | None = None) -> None:
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


def _batch(args: argparse.Namespace) -> int:
    from itertools import islice

    from gputop import batch
    from gputop.feeds.base import Filters
    from gputop.feeds.live import Sampler
    from gputop.record import Recorder, read_recording
    from gputop.ui.columns import DEFAULT_SORT

    form = args.format or "table"
    sort = args.sort or DEFAULT_SORT   # the dashboard's default; config.toml is the dashboard's, not batch's
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")   # a non-UTF-8 locale: escapes, not a crash
    recorder = Recorder(args.record) if args.record else None
    try:
        if args.replay:
            filters = Filters(args.pid, args.user)
            snaps = (filters.apply(s) for s in read_recording(args.replay, notice=_notice))
            for snap in islice(snaps, args.iterations):
                batch.emit([snap], form, sort=sort)
                if recorder:
                    recorder.write(snap)
            return EX_OK
        sampler = _sampler(args)
        assert isinstance(sampler, Sampler)
        stopping = threading.Event()

        def request_stop() -> None:
            stopping.set()
            sampler.stop()          # wakes its wait(); batch mode has no collector thread to join

        _stop_on_signals(request_stop)
        sampler.open_bpf()
        if sampler.bpf_error is not None and args.bpf:
            sampler.close()
            raise sampler.bpf_error
        if sampler.bpf_error is not None:       # one line: why, and how to turn it on
            _notice(tracing_off(sampler.bpf_error.reason, sampler.bpf_error.hint))
        try:
            # a first sample, not printed: every printed refresh covers one interval after another
            # sample, so the values that need two (CPU%, the cost, NVML's SM%) are real from the first
            # line on; -n 1 prints one refresh an interval after the start, as the dashboard's first
            sampler.collect()
            i = 0
            while (args.iterations is None or i < args.iterations) and not stopping.is_set():
                sampler.wait(sampler.config.interval_s)
                if stopping.is_set():
                    break
                snap = sampler.collect()
                # the header says the interval asked for; the snapshot's interval_s is what was measured
                batch.emit([snap], form, sort=sort, interval_s=sampler.config.interval_s)
                if recorder:
                    recorder.write(snap)
                i += 1
        finally:
            sampler.close()
        return EX_OK
    finally:
        if recorder:
            recorder.close()


def _dashboard(args: argparse.Namespace) -> int:
    from gputop.feeds.base import Filters
    from gputop.feeds.live import Sampler
    from gputop.feeds.replay import ReplayFeed
    from gputop.ui.app import DashboardOptions, run_dashboard

    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise GputopError("the dashboard needs a terminal", "use batch mode: gputop -b -n 5 [-f json]", EX_USAGE)
    refusal = None if args.replay or args.no_bpf else no_privileges()
    if args.bpf and refusal is not None:
        raise GputopError(*refusal, EX_NOPERM)
    # None: the interval, sort and theme saved in config.toml apply
    # -p/-u applied once: by the live feed as it collects, by the dashboard over a recording
    opts = DashboardOptions(interval_s=args.delay, sort=args.sort,
                            filters=Filters(args.pid, args.user) if args.replay else Filters(),
                            theme=args.theme, readonly=args.readonly, baseline=args.baseline,
                            baseline_pid=args.baseline_pid, record=args.record,
                            banner=tracing_off(*refusal) if refusal else None)
    feed = ReplayFeed(args.replay) if args.replay else _sampler(args)
    live = feed if isinstance(feed, Sampler) else None
    if live is not None:
        live.close_elsewhere = True     # the probes detach once the terminal is back (below)
    _stop_on_signals()      # as SIGINT: the app closes, the terminal is restored, the probes detach
    try:
        code = run_dashboard(feed, opts)  # type: ignore[arg-type]
    except ValueError as e:
        if live is not None:
            live.close()
        raise GputopError(str(e), "see 'gputop --help'", EX_USAGE) from None
    except BaseException:
        if live is not None:
            live.close()
        raise
    if live is not None:
        if live.detach_in_child():      # a child detaches the probes: this process exits at once
            _exit_now(code)
        live.close()
    return code


def _exit_now(code: int) -> NoReturn:
    """Exit without the interpreter's shutdown and exit hooks (the BPF source's is the child's job)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _validate(args: argparse.Namespace) -> None:
    from gputop.ui.columns import SORT_KEYS

    if args.batch:
        for option, value in (("--baseline", args.baseline), ("--baseline-pid", args.baseline_pid)):
            if value is not None:
                raise GputopError(f"{option} works in the dashboard only",
                                  "drop -b to compare in the dashboard; in batch mode, record both runs "
                                  "(gputop -b -f json --record FILE) and compare the files", EX_USAGE)
    elif args.format is not None:
        raise GputopError("-f only applies to batch mode", f"add -b: gputop -b -f {args.format}", EX_USAGE)
    if args.user is not None:
        args.user = _user(args.user, replay=args.replay is not None)
    if args.sort is not None and args.sort not in SORT_KEYS:
        raise GputopError(f"unknown sort column {args.sort!r}", f"choose one of: {', '.join(SORT_KEYS)}", EX_USAGE)
    if args.theme is not None:
        from gputop.ui.themes import theme_names  # loads textual: only when a theme is named

        if args.theme not in theme_names():
            raise GputopError(f"unknown theme {args.theme!r}", f"choose one of: {', '.join(theme_names())}",
                              EX_USAGE)
    if args.baseline_pid is not None and args.baseline is None:
        raise GputopError("--baseline-pid needs --baseline FILE", "gputop --baseline run.jsonl --baseline-pid 123",
                        EX_USAGE)
    for name in ("replay", "baseline"):
        path = getattr(args, name)
        if path is None:
            continue
        try:
            is_file, exists = path.is_file(), path.exists()
        except PermissionError:      # a folder on the way that this user may not enter
            raise GputopError(f"--{name}: cannot read {path}: permission denied",
                              "make it readable to this user (ls -ld shows each folder's owner and mode)") from None
        if not is_file:
            what = "not a file" if exists else "no such file"
            raise GputopError(f"--{name}: {what}: {path}", "give the path of a file written by --record", EX_USAGE)
    for name in ("replay", "baseline"):         # --record appends to the file being read: it would never end
        path = getattr(args, name)
        if args.record is not None and path is not None and args.record.exists() and args.record.samefile(path):
            raise GputopError(f"--record {args.record} would overwrite the recording given to --{name}",
                              "record into another file", EX_USAGE)
    if args.iterations is not None and not args.batch:
        raise GputopError("-n only applies to batch mode", "add -b: gputop -b -n 5", EX_USAGE)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "doctor":
            from gputop import doctor

            return doctor.main(argv[1:], sys.stdout)
        if argv and argv[0] == "exporter":
            from gputop.exporter import server

            return server.main(argv[1:])
        if argv and argv[0] == "demo":
            from gputop import demo

            return demo.main(argv[1:])
        args = build_parser().parse_args(argv)
        if args.ebpf:
            from gputop.sources.bpf import BpfSource

            src = BpfSource()
            sys.stdout.write(f"// cflags: {' '.join(src.cflags())}\n{src.program_text()}")
            return EX_OK
        from gputop import fleet_mode

        if fleet_mode.wanted(args):
            return fleet_mode.run(args)
        _validate(args)
        return _batch(args) if args.batch else _dashboard(args)
    except GputopError as e:           # BPF, recordings, the demo, usage: all say what to do
        return fail(e.message, e.hint, e.code)
    except KeyboardInterrupt:
        return EX_OK
    except BrokenPipeError:
        return EX_OK
    except OSError as e:
        return fail(str(e), "check the path and permissions", EX_ERROR)


if __name__ == "__main__":
    raise SystemExit(main())
