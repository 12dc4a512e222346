"""Regenerate docs/PERFORMANCE.md: run every benchmark with ``--json``, then write the document from
their figures (each section names the command that measured it and the conditions it ran under).

Run as root after ./test.sh has set up the test bed (bpftrace and htop are optional columns):

    .venv/bin/python bench/performance.py                  # all but the soak, about 40 minutes on 2 cores
    .venv/bin/python bench/performance.py --slow           # and the hour-long soak
    .venv/bin/python bench/performance.py --only probe_cost ui_cpu
    .venv/bin/python bench/performance.py --render-only    # rewrite the document from the last figures

The figures are kept in ``--json-dir`` (default docs/perf/, in git); ``--render-only`` rewrites the
document from them without measuring. Benchmarks run one after another, never side by side with
each other: each one's own comparisons are side by side within its run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import perfdoc  # noqa: E402

DEFAULT_DIR = ROOT / "docs" / "perf"  # kept in git: the document can be rewritten from them


def baseline_args(section: perfdoc.Section, tmp: Path) -> list[str]:
    """Extract the section's baseline revision into ``tmp`` (git archive); [] where that fails."""
    if section.baseline is None:
        return []
    rev, option, inside = section.baseline
    tree = tmp / f"{section.name}-{rev}"
    tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True)
    if archive.returncode != 0 or subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout).returncode:
        print(f"== {section.name}: no baseline (git archive {rev} failed); measured without it", file=sys.stderr)
        return []
    return [option, str(tree / inside) if inside else str(tree)]


def run_one(section: perfdoc.Section, json_dir: Path) -> bool:
    out = json_dir / f"{section.name}.json"
    with tempfile.TemporaryDirectory(prefix="gputop-perf-") as tmp:
        return _run(section, [*section.args, *baseline_args(section, Path(tmp))], out)


def _run(section: perfdoc.Section, args: list[str], out: Path) -> bool:
    argv = [sys.executable, str(ROOT / "bench" / section.script), *args, "--json", str(out)]
    print(f"== {section.name}: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rc = subprocess.run(argv, cwd=ROOT).returncode
    print(f"== {section.name}: exit {rc} after {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return rc == 0 and out.exists()


def load(json_dir: Path) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for s in perfdoc.SECTIONS:
        path = json_dir / f"{s.name}.json"
        if path.exists():
            docs[s.name] = json.loads(path.read_text())
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [s.name for s in perfdoc.SECTIONS]
    ap.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"measure only these: {', '.join(names)}")
    ap.add_argument("--json-dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--slow", action="store_true", help="also the hour-long soak (bench/soak.py)")
    ap.add_argument("--render-only", action="store_true", help="write the document from the figures already kept")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "PERFORMANCE.md")
    args = ap.parse_args()
    if not args.render_only and os.geteuid() != 0:
        print("gputop: error: the benchmarks need root (BPF)\nhint: sudo .venv/bin/python bench/performance.py",
              file=sys.stderr)
        return 77
    args.json_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    if not args.render_only:
        for s in perfdoc.SECTIONS:
            wanted = s.name in args.only if args.only is not None else (args.slow or not s.slow)
            if wanted and not run_one(s, args.json_dir):
                failed.append(s.name)
    docs = load(args.json_dir)
    text = perfdoc.render(docs)
    args.out.write_text(text)
    missing = [s.name for s in perfdoc.SECTIONS if s.name not in docs]
    print(f"wrote {args.out}" + (f"; no figures yet for: {', '.join(missing)}" if missing else ""), file=sys.stderr)
    if failed:
        print(f"gputop: error: benchmarks failed: {', '.join(failed)}\nhint: run each alone to see why",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
