"""The command line's one parser module: every mode's options are parsed and checked here before
anything runs. ``Parser`` (errors as ``gputop: error:`` + ``hint:``, exit 2), the option types
(``positive``, ``count``, ``pid``, ``pids``, ``user``), ``build_parser`` (``gputop``'s options) and the
usage checks (``validate``, ``validate_fleet``); ``fail`` writes an error and its hint."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

from gputop import __version__
from gputop.errors import EX_USAGE, GputopError
from gputop.textsafe import sanitize

#: the fleet view's window of increase() and rate() unless --window says otherwise
FLEET_WINDOW = "2m"


def fail(message: str, hint: str, code: int) -> int:
    """Two lines on stderr, whatever the message quotes (a path, a name): sanitised, one line each."""
    sys.stderr.write(f"gputop: error: {sanitize(message)}\nhint: {sanitize(hint)}\n")
    return code


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are gputop's (``gputop: error:`` and a hint: ``hint``, else to
    see ``--help``), through ``GputopError`` (exit 2)."""

    def __init__(self, *args: Any, hint: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hint = hint

    def error(self, message: str) -> NoReturn:
        raise GputopError(message, self.hint or f"see '{self.prog} --help'", EX_USAGE)


#: the shortest refresh interval (the dashboard's and config.toml's too) and the longest
MIN_DELAY_S, MAX_DELAY_S = 0.05, 86400.0


def positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_DELAY_S <= v <= MAX_DELAY_S:   # false for nan too
        raise argparse.ArgumentTypeError(f"must be from {MIN_DELAY_S:g} to {MAX_DELAY_S:g} seconds: {text!r}")
    return v


def count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return v


#: Linux's largest possible PID (PID_MAX_LIMIT on 64-bit: pid_max can be raised up to it)
PID_LIMIT = 1 << 22


def pid(text: str) -> int:
    """One PID: decimal ASCII digits (int() would take '1_0', ' 7' or Arabic digits), 1..PID_LIMIT."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or not 1 <= int(t) <= PID_LIMIT:
        raise argparse.ArgumentTypeError(f"not a PID (1 to {PID_LIMIT}): {text!r}")
    return int(t)


def size_arg(text: str) -> int:
    """``--record-max-size``: bytes, with K, M or G (KiB, MiB, GiB), at least 64 KiB (a snapshot a line)."""
    t = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:].upper(), 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isascii() or not digits.isdigit():
        raise argparse.ArgumentTypeError(f"expected a size in bytes, K, M or G (256M): {text!r}")
    size = int(digits) * scale
    if size < 64 << 10:
        raise argparse.ArgumentTypeError(f"must be at least 64K: {text!r}")
    return size


def int_arg(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) > 1000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 1000: {text!r}")
    return int(text)


#: --sample-period's largest value (pystacks/sites.py's PERIOD_MAX)
SAMPLE_PERIOD_MAX = 1 << 20
SAMPLE_PERIOD_HELP = ("sample one CUDA launch in N on average for its call site (Python stack or native caller; "
                      "0: none; default: adapted so that sampling adds at most 5 %% to a launch's probe cost)")


def sample_period_arg(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) > SAMPLE_PERIOD_MAX:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {SAMPLE_PERIOD_MAX}: {text!r}")
    return int(text)


def pids(text: str) -> frozenset[int]:
    pids = frozenset(pid(p) for p in text.split(",") if p.strip())
    if not pids:
        raise argparse.ArgumentTypeError(f"expected comma-separated PIDs: {text!r}")
    return pids


#: the largest uid; (uid_t)-1 is no user
UID_MAX = (1 << 32) - 2


def user(text: str, replay: bool = False) -> str:
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
    if text.isascii() and text.isdigit() and int(text) <= UID_MAX:
        try:
            return pwd.getpwuid(int(text)).pw_name
        except KeyError:
            return str(int(text))
    raise GputopError(f"no such user: {text!r}",
                      "give a user name or a numeric uid of this host (getent passwd lists them)", EX_USAGE)


def add_source_options(p: argparse.ArgumentParser) -> None:
    """The sources' options the live modes share (the dashboard, batch mode, the exporter)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--bpf", action="store_true", help="require the BPF collector (exit 77 without privileges)")
    src.add_argument("--no-bpf", action="store_true", help="run without the BPF collector")
    p.add_argument("--no-nvml", action="store_true", help="run without NVML")
    p.add_argument("--sample-period", type=sample_period_arg, default=None, metavar="N", help=SAMPLE_PERIOD_HELP)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="gputop", description="A top for CUDA processes: kernel launches, copies, allocations "
                "and sync time per process, traced with eBPF, beside NVML's view of each GPU.")
    p.add_argument("-d", "--delay", type=positive, default=None, metavar="SECONDS",
                   help="refresh interval (default 1)")
    p.add_argument("-p", "--pid", type=pids, default=frozenset(), metavar="PID[,PID...]",
                   help="only these processes")
    p.add_argument("-u", "--user", default=None, metavar="USER", help="only processes of this user (name or uid)")
    p.add_argument("-s", "--sort", default=None, metavar="COLUMN",
                   help="initial sort column (default launches); batch mode sorts by it")
    p.add_argument("-b", "--batch", action="store_true", help="batch mode: print refreshes to stdout")
    p.add_argument("-n", "--iterations", type=count, default=None, metavar="N",
                   help="batch mode: stop after N refreshes")
    p.add_argument("-f", "--format", choices=("json", "table"), default=None,
                   help="batch mode output: JSON Lines (schema gputop/1) or a text table (default)")
    p.add_argument("--record", type=Path, metavar="FILE", help="also write every snapshot to FILE (JSON Lines)")
    p.add_argument("--record-max-size", type=size_arg, default=None, metavar="SIZE",
                   help="rotate the recording before it grows past SIZE (bytes; K, M, G: KiB, MiB, GiB): the full "
                        "file becomes FILE.1 (FILE.2 ...), between two snapshots")
    p.add_argument("--record-keep", type=int_arg, default=4, metavar="N",
                   help="rotated generations kept (default 4; 0: a full recording is dropped)")
    p.add_argument("--replay", type=Path, metavar="FILE", help="show a recording instead of live data")
    p.add_argument("--baseline", type=Path, metavar="FILE",
                   help="dashboard: compare live processes against a recording")
    p.add_argument("--baseline-pid", type=pid, default=None, metavar="PID",
                   help="dashboard: the recorded process to compare against (default: the one with the most launches)")
    add_source_options(p)
    p.add_argument("--theme", default=None, help="colour theme of the dashboard (batch output has no colours)")
    p.add_argument("--readonly", action="store_true", help="never send signals")
    fleet = p.add_argument_group("fleet view (gputop_* metrics of every node, read from Prometheus)")
    fleet.add_argument("--prometheus", default=None, metavar="URL", help="Prometheus's URL (http://HOST:9090)")
    fleet.add_argument("--http.config.file", dest="http_config", default=None, metavar="FILE",
                       help="how to log in to Prometheus, in Prometheus' HTTP client format as promtool takes it: "
                            "basic_auth, authorization (a bearer token), tls_config, http_headers (X-Scope-OrgID)")
    fleet.add_argument("--match", default=None, metavar="SELECTOR", help='only these series: label matchers, '
                       'e.g. job="gputop" or cluster=~"eu-.*"')
    fleet.add_argument("--window", default=None, metavar="DURATION",
                       help="window of increase() and rate() (default 2m; docs/fleet.md gives its error)")
    fleet.add_argument("--node", default=None, metavar="NODE[,NODE...]", help="only these nodes")
    p.add_argument("--ebpf", action="store_true", help="print the BPF program and exit")
    p.add_argument("--print-completion", choices=("bash", "zsh", "fish"), default=None, metavar="SHELL",
                   help="print the completion script of SHELL (bash, zsh, fish) and exit: "
                        "gputop --print-completion bash > /etc/bash_completion.d/gputop")
    p.add_argument("--print-man", action="store_true", help="print gputop's man page (roff) and exit: "
                   "gputop --print-man > /usr/local/share/man/man1/gputop.1")
    p.add_argument("--version", action="version", version=f"gputop {__version__}")
    return p


def validate(args: argparse.Namespace) -> None:
    """The usage checks of the options the dashboard, batch mode and the fleet view share, before
    anything runs (``-u`` becomes the user name the collector reports)."""
    from gputop.view.columns import SORT_KEYS  # pure, no Textual

    if args.batch:
        for option, value in (("--baseline", args.baseline), ("--baseline-pid", args.baseline_pid)):
            if value is not None:
                raise GputopError(f"{option} works in the dashboard only",
                                  "drop -b to compare in the dashboard; in batch mode, record both runs "
                                  "(gputop -b -f json --record FILE) and compare the files", EX_USAGE)
    elif args.format is not None:
        raise GputopError("-f only applies to batch mode", f"add -b: gputop -b -f {args.format}", EX_USAGE)
    if args.user is not None:
        args.user = user(args.user, replay=args.replay is not None)
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
    if args.record is None and (args.record_max_size is not None or args.record_keep != 4):
        raise GputopError("--record-max-size and --record-keep apply to --record", "add --record FILE", EX_USAGE)
    if args.record_keep != 4 and args.record_max_size is None:
        raise GputopError("--record-keep applies to a recording rotated by --record-max-size",
                          "add --record-max-size SIZE (256M)", EX_USAGE)
    for name in ("replay", "baseline"):         # --record appends to the file being read: it would never end
        path = getattr(args, name)
        if args.record is not None and path is not None and args.record.exists() and args.record.samefile(path):
            raise GputopError(f"--record {args.record} would overwrite the recording given to --{name}",
                              "record into another file", EX_USAGE)
    if args.iterations is not None and not args.batch:
        raise GputopError("-n only applies to batch mode", "add -b: gputop -b -n 5", EX_USAGE)
    if args.pid and args.replay is None and args.prometheus is None:
        gone = sorted(p for p in args.pid if not _is_process(p))
        if len(gone) == len(args.pid):      # none of them runs here: nothing could ever be shown
            raise GputopError(f"no such process: {', '.join(map(str, gone))}",
                              "-p takes PIDs of processes running on this host (ps -e lists them)")


def _is_process(pid: int) -> bool:
    """Whether ``pid`` is a process here (/proc/PID also answers for a thread's id: its Tgid says which)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f.read(4096).splitlines():
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1]) == pid
    except (OSError, ValueError, IndexError):
        return False
    return False


def fleet_wanted(args: argparse.Namespace) -> bool:
    """Whether the command line asks for the fleet view (any of its options)."""
    return any(getattr(args, name) is not None for name in ("prometheus", "match", "window", "node", "http_config"))


def validate_fleet(args: argparse.Namespace) -> None:
    """The fleet view's own checks (before ``validate``'s): --prometheus's URL, --match, --window,
    --node; the options that do not apply to it."""
    from gputop.feeds import prometheus  # stdlib HTTP and JSON: loaded for the fleet view only

    if args.prometheus is None:
        given = next(f"--{n}" for n, attr in (("match", "match"), ("window", "window"), ("node", "node"),
                                               ("http.config.file", "http_config")) if getattr(args, attr) is not None)
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
    if args.http_config is not None:
        from gputop.feeds import http_config

        try:
            args.http_config = http_config.load(args.http_config)
        except ValueError as e:
            raise GputopError(str(e), "the format is Prometheus' HTTP client configuration, as promtool takes "
                              "it (docs/fleet.md, \"Logging in\")", EX_USAGE) from None
    try:
        args.prometheus = prometheus.check_url(args.prometheus)
        args.match = prometheus.selector_body(args.match) if args.match is not None else ""
        prometheus.parse_duration(args.window or FLEET_WINDOW)
    except ValueError as e:
        raise GputopError(str(e), "see 'gputop --help' (fleet view)", EX_USAGE) from None
    if args.node is not None:
        nodes = frozenset(n.strip() for n in args.node.split(",") if n.strip())
        if not nodes:
            raise GputopError(f"expected comma-separated node names: {args.node!r}",
                              "gputop --prometheus URL --node gpu-node-07,gpu-node-08", EX_USAGE)
        args.node = nodes
