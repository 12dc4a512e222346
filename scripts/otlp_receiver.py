#!/usr/bin/env python3
"""Fetch a real OTLP/HTTP metrics receiver for the OTLP tests (tests/unit/test_otlp.py) into a cache folder:
Debian's ``victoria-metrics`` (its single-node server takes OTLP/HTTP with protobuf at /opentelemetry/v1/metrics,
turns the names into Prometheus' with ``-opentelemetry.usePrometheusNaming``, and answers Prometheus' query
API). Idempotent: nothing is fetched when DEST/victoria-metrics runs.

Why not Prometheus itself: Debian builds its ``prometheus`` packages with the OTLP receiver taken out
(trixie's 2.53.3 and testing's 3.5.3: "Disable OTLP Ingestion endpoint. This can be re-enabled once
golang-opentelemetry-collector is in Debian", #1080354), and no other package index this project uses
carries a Prometheus. victoria-metrics is in Debian's testing and unstable suites only: it comes from those
suites of the machine's own Debian mirror (the URIs of its apt sources, read at run time), through a
private apt state (scripts/privapt.py), its binary unpacked with ``dpkg -x``; the machine's package lists,
sources and dpkg database are left as they are.

Usage: otlp_receiver.py STATE DEST     (scripts/setup.sh --test: .cache/otlp/apt .cache/otlp)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import privapt

PACKAGE = "victoria-metrics"
BINARY = "victoria-metrics"
#: the suites that carry it, the first that has it wins (the binary is a Go program: it runs on older releases)
SUITES = ("testing", "unstable")


def runs(binary: Path) -> bool:
    try:
        return subprocess.run([str(binary), "-version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def mirror_sources(etc: Path = privapt.ETC_APT) -> list[privapt.Source]:
    """One entry per suite of SUITES on each Debian mirror of the machine's own release, component main."""
    release = privapt.parse_os_release(privapt.OS_RELEASE.read_text())
    if release.family != "debian":
        raise privapt.PrivAptError(f"{release.pretty} is not Debian: no {PACKAGE} package to fetch",
                                   "the OTLP tests skip without it")
    own = privapt.own_release(privapt.read_sources(etc), release, privapt.RELEASE_ONLY)
    out: list[privapt.Source] = []
    seen: set[str] = set()
    for s in own:
        if s.uri not in seen:
            seen.add(s.uri)
            out += [replace(s, suite=suite, components=("main",)) for suite in SUITES]
    if not out:
        raise privapt.PrivAptError(f"no Debian mirror among the apt sources of {release.pretty}",
                                   "add this release's mirror to /etc/apt/sources.list.d")
    return out


def fetch(state: Path, dest: Path) -> Path:
    """DEST/victoria-metrics, fetched unless it is there and runs."""
    target = dest / BINARY
    if runs(target):
        return target
    apt = privapt.PrivateApt(state, mirror_sources())
    apt.update()
    debs: list[privapt.Deb] = []
    for suite in SUITES:
        try:
            debs = apt.files([f"{PACKAGE}/{suite}"])
            break
        except privapt.PrivAptError:
            continue
    if not debs:
        raise privapt.PrivAptError(f"no {PACKAGE} package in the mirror's {' or '.join(SUITES)} suites",
                                   "the OTLP tests skip without it")
    got = apt.download(debs, state / "debs")
    with tempfile.TemporaryDirectory(dir=state) as tmp:
        subprocess.run(["dpkg", "-x", str(state / "debs" / got[0].filename), tmp], check=True)
        found = Path(tmp) / "usr" / "bin" / BINARY
        if not found.is_file():
            raise privapt.PrivAptError(f"{BINARY} is not in {got[0].filename}",
                                       "Debian's package changed; see scripts/otlp_receiver.py")
        dest.mkdir(parents=True, exist_ok=True)
        part = target.with_suffix(".new")
        part.write_bytes(found.read_bytes())
        part.chmod(0o755)
        part.replace(target)
    (dest / "VERSION").write_text(f"{got[0].name} {got[0].version}\n")
    if not runs(target):
        raise privapt.PrivAptError(f"{target} ({got[0].version}) does not run here",
                                   "the OTLP tests skip without it")
    print(f"otlp: {got[0].filename} -> {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="otlp_receiver.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("state", type=Path, help="the private apt state folder")
    ap.add_argument("dest", type=Path, help="where the binary goes")
    args = ap.parse_args(argv)
    try:
        fetch(args.state.resolve(), args.dest.resolve())
    except privapt.PrivAptError as e:
        print(f"otlp: warning: {e}\nhint: {e.hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
