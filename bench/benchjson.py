"""The ``--json PATH`` option every benchmark shares: its figures, the command that produced them
and the conditions it ran under, for bench/performance.py to write docs/PERFORMANCE.md from."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

#: the host's load when the benchmark started (this module is imported at its start)
_LOAD_AT_START = os.getloadavg()[0]


def add_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--json", type=Path, metavar="PATH",
                    help="also write every figure to PATH as JSON (bench/performance.py reads it)")


def command() -> str:
    """The command line that ran this benchmark, as a user types it from the repository root."""
    script = Path(sys.argv[0])
    with contextlib.suppress(ValueError):  # a script outside the repository keeps its path
        script = script.resolve().relative_to(Path(__file__).resolve().parent.parent)
    return " ".join(shlex.quote(a) for a in [".venv/bin/python", str(script), *_without_json(sys.argv[1:])])


def _without_json(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif not a.startswith("--json="):
            out.append(a)
    return out


def conditions() -> dict[str, Any]:
    """What the figures depend on besides the code: the machine and how busy it was."""
    return {
        "date": time.strftime("%Y-%m-%d"),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_1m_start": _LOAD_AT_START,
        "loadavg_1m": os.getloadavg()[0],           # at the end
    }


def write(path: Path | None, figures: dict[str, Any]) -> None:
    """Write ``figures`` (plain JSON values) to ``path`` with the command and the conditions; no-op
    without ``--json``."""
    if path is None:
        return
    doc = {"command": command(), "conditions": conditions(), "figures": figures}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
