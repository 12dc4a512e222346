"""Command line: ``gputop``'s entry point (the console script and ``python -m gputop.cli``). It picks
the mode (``gputop.modes``: dashboard, batch, fleet, exporter, demo, doctor) and turns what ends one
into an exit status: ``gputop: error:`` + ``hint:`` for a ``GputopError``, 0 for ^C and a closed pipe."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from gputop.errors import EX_ERROR, EX_OK, EX_USAGE, GputopError
from gputop.modes.args import fail, fleet_wanted, validate
from gputop.modes.commands import full_parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "doctor":
            from gputop.modes import doctor

            return doctor.main(argv[1:], sys.stdout)
        if argv and argv[0] == "exporter":
            from gputop.modes import exporter

            return exporter.main(argv[1:])
        if argv and argv[0] == "demo":
            from gputop.modes import demo

            return demo.main(argv[1:])
        parser = full_parser()
        args = parser.parse_args(argv)
        if args.command is not None:    # a subcommand after gputop's own options: whose are they?
            raise GputopError(f"options before the command {args.command!r} are gputop's, not its own",
                              f"put the command first: gputop {args.command} [OPTIONS]", EX_USAGE)
        if args.print_completion is not None:
            from gputop.modes import manual

            sys.stdout.write(manual.completion(parser, args.print_completion))
            return EX_OK
        if args.print_man:
            from gputop.modes import manual

            sys.stdout.write(manual.man_page(parser))
            return EX_OK
        if args.ebpf:
            from gputop.sources.bpf import BpfSource

            src = BpfSource()
            sys.stdout.write(f"// cflags: {' '.join(src.cflags())}\n{src.program_text()}")
            return EX_OK
        if fleet_wanted(args):
            from gputop.modes import fleet

            return fleet.run(args)
        validate(args)
        if args.batch:
            from gputop.modes import batch

            return batch.run(args)
        from gputop.modes import dashboard

        return dashboard.run(args)
    except GputopError as e:           # BPF, recordings, the demo, usage: all say what to do
        return fail(e.message, e.hint, e.code)
    except KeyboardInterrupt:
        return EX_OK
    except BrokenPipeError:
        _settle_stdout()
        return EX_OK
    except OSError as e:
        _settle_stdout()
        return fail(str(e), "check the path and permissions", EX_ERROR)


def _settle_stdout() -> None:
    """Where what stdout still buffers cannot be written (a closed pipe, a full disk, a file-size cap:
    the recorder's unit), point it at /dev/null: else the interpreter's exit tries again, prints
    "Exception ignored" and exits 120 instead of the status returned (Python 3.9 did so)."""
    try:
        sys.stdout.flush()
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)


if __name__ == "__main__":
    raise SystemExit(main())
