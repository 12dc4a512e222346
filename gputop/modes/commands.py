"""The subcommands' parsers (``gputop doctor``, ``exporter``, ``demo``), built without the modes' imports: the
main parser lists them (``--help``, the shell completions and the man page of gputop.modes.manual see every
option), and each mode parses its own arguments with the same parser. ``COMMANDS`` is the one list of them."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from gputop.exporter.admission import MAX_PROCESSES
from gputop.exporter.options import AGGREGATES, BUCKETS
from gputop.model.limits import MAX_CALL_SITES, MAX_KERNELS
from gputop.modes.args import Parser, add_source_options, count, positive


def doctor_parser() -> argparse.ArgumentParser:
    """``gputop doctor``'s options."""
    p = Parser(prog="gputop doctor", description="Check what gputop needs here and say how to fix each gap.",
               hint="run: gputop doctor [--selftest [-n N] [--cudart PATH]]")
    p.add_argument("--selftest", action="store_true",
                   help="on a GPU host: launch and copy known work in this process and check that gputop counts "
                        "every figure exactly (exit 0 only then)")
    p.add_argument("-n", type=int, default=1000, metavar="N", help="launches per layer in the self-test (default 1000)")
    p.add_argument("--cudart", metavar="PATH", help="the libcudart the self-test uses (default: the newest found)")
    return p


#: the demo's workloads' steps per second unless --rate says (each step launches several kernels)
STEPS_PER_S = 2000.0
#: the fastest a demo workload steps (each step launches several kernels)
MAX_STEPS_PER_S = 1e6


def rate_arg(text: str) -> float:
    """``--rate``: steps per second, above 0 and at most MAX_STEPS_PER_S."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < v <= MAX_STEPS_PER_S:    # false for nan too
        raise argparse.ArgumentTypeError(f"must be above 0 and at most {MAX_STEPS_PER_S:g} steps per second: {text!r}")
    return v


def demo_parser() -> argparse.ArgumentParser:
    """``gputop demo``'s options."""
    p = Parser(prog="gputop demo", description="Run an unfused and a fused workload side by side and compare "
               "them live: the dashboard's compare screen on their two processes (needs a GPU, or the "
               "GPU-less test bed's libraries, and the BPF collector).",
               epilog="example: sudo gputop demo --rate 500; in batch mode: sudo gputop demo -b -n 5")
    p.add_argument("--rate", type=rate_arg, default=STEPS_PER_S, metavar="STEPS",
                   help=f"steps per second of each workload (default {STEPS_PER_S:g})")
    p.add_argument("-b", "--batch", action="store_true",
                   help="batch mode: print the two workloads' refreshes to stdout instead of the compare screen")
    p.add_argument("-n", "--iterations", type=count, default=5, metavar="N",
                   help="batch mode: stop after N refreshes (default 5)")
    p.add_argument("-d", "--delay", type=positive, default=1.0, metavar="SECONDS",
                   help="refresh interval (default 1)")
    p.add_argument("--theme", default=None, metavar="THEME",
                   help="colour theme of the compare screen (default: the one saved in config.toml, else dark)")
    return p


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


def exporter_parser() -> argparse.ArgumentParser:
    """``gputop exporter``'s options."""
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
                   help=f"export the top N kernels of each process (at most {MAX_KERNELS}; default 0: none)")
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
    p.add_argument("--otlp-endpoint", default=None, metavar="URL",
                   help="also push the metrics as OTLP/HTTP (protobuf) at every refresh to the receiver at URL "
                   "(/v1/metrics added unless there: http://collector:4318, http://prometheus:9090/api/v1/otlp); "
                   "needs the extra gputop-ebpf[otlp] (docs/metrics.md, OTLP)")
    p.add_argument("--otlp-http-config-file", dest="otlp_http_config", default=None, metavar="FILE",
                   help="the pushes' login, headers and TLS, in Prometheus' HTTP client format as --http.config.file "
                   "(basic_auth, authorization, tls_config, http_headers)")
    add_source_options(p)
    return p


#: the subcommands: name -> (one line for the main parser's --help, the parser)
COMMANDS: dict[str, tuple[str, Callable[[], argparse.ArgumentParser]]] = {
    "doctor": ("check what gputop needs here and how to fix each gap", doctor_parser),
    "exporter": ("serve the counters as Prometheus metrics (/metrics, /healthz)", exporter_parser),
    "demo": ("run an unfused and a fused workload and compare them live", demo_parser),
}


def full_parser() -> argparse.ArgumentParser:
    """gputop's parser with its subcommands: what --help, the completions and the man page show."""
    from gputop.modes.args import build_parser

    parser = build_parser()
    add_commands(parser)
    return parser


def add_commands(parser: argparse.ArgumentParser) -> None:
    """The subcommands as ``parser``'s (its --help lists them; completions and the man page walk them)."""
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND",
                                description="each with its own options: gputop COMMAND --help")
    for name, (summary, build) in COMMANDS.items():
        own = build()
        sub.add_parser(name, parents=[own], add_help=False, help=summary, description=own.description,
                       epilog=own.epilog)
