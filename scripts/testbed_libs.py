#!/usr/bin/env python3
"""The test bed's library matrix: every NVIDIA driver branch's user space and every CUDA runtime (stdlib only).

scripts/testbed.sh fetches the two libraries the everyday tests use (one driver branch, the newest
CUDA 12 and 13.0 runtimes); this script fetches, beside them, what the support matrix
(docs/support.md, tests/bpf/test_support_table.py) runs on:

* ``drivers/<BRANCH>/``: ``libcuda.so.1`` and ``libnvidia-ml.so.1`` of each driver branch Debian's
  archive holds (470, 535, 550, 555), from the suite that carries it, through the machine's own
  Debian mirror (the URIs of its apt sources) with a private apt state (scripts/privapt.py): the
  machine's package lists and dpkg database are left alone; ``VERSION`` holds the package's version;
* ``runtimes/<MAJOR.MINOR>/``: ``libcudart.so.<MAJOR>`` (and ``libcudart_static.a`` where the wheel
  has one) of the newest patch release of each CUDA runtime minor, from the
  ``nvidia-cuda-runtime-cu12`` and ``nvidia-cuda-runtime`` wheels, downloaded by the venv's pip
  (the machine's own pip configuration).

Everything is cached: a folder that holds its files is not fetched again. Other distributions than
Debian get no driver branches, and a library its archive or index no longer holds is left out with a
warning (the support tests skip, saying so); a mirror that cannot be reached at all is an error.

Commands:
  testbed_libs.py drivers STATE DEST     the driver branches into DEST/<BRANCH>
  testbed_libs.py everyday DRIVERS DEST  EVERYDAY_BRANCH's two libraries from DRIVERS into DEST (exit 3: absent)
  testbed_libs.py runtimes PYTHON DEST   the runtimes into DEST/<MAJOR.MINOR> (PYTHON runs pip)
  testbed_libs.py list                   the matrix as JSON (tests read it)
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import privapt


@dataclass(frozen=True)
class Branch:
    """One driver branch's user space in Debian's archive."""
    branch: str         # "470"
    suite: str          # the Debian suite that carries it
    cuda: str           # the package holding libcuda.so.1
    nvml: str           # the package holding libnvidia-ml.so.1


@dataclass(frozen=True)
class Runtime:
    """One CUDA runtime wheel: the newest patch release of its minor version on the index."""
    minor: str          # "12.0"
    wheel: str          # pip requirement, pinned
    soname: str         # libcudart.so.12 / libcudart.so.13


#: Debian's archive: 470 is the Tesla 470 build (bookworm), 535 bookworm's libcuda1, 550 trixie's,
#: 555 experimental's
BRANCHES = (
    Branch("470", "bookworm", "libnvidia-tesla-470-cuda1", "libnvidia-tesla-470-ml1"),
    Branch("535", "bookworm", "libcuda1", "libnvidia-ml1"),
    Branch("550", "trixie", "libcuda1", "libnvidia-ml1"),
    Branch("555", "experimental", "libcuda1", "libnvidia-ml1"),
)

#: every CUDA 12 and 13 minor version with a runtime wheel (there is no 12.7), its newest patch release
RUNTIMES = (
    Runtime("12.0", "nvidia-cuda-runtime-cu12==12.0.146", "libcudart.so.12"),
    Runtime("12.1", "nvidia-cuda-runtime-cu12==12.1.105", "libcudart.so.12"),
    Runtime("12.2", "nvidia-cuda-runtime-cu12==12.2.140", "libcudart.so.12"),
    Runtime("12.3", "nvidia-cuda-runtime-cu12==12.3.101", "libcudart.so.12"),
    Runtime("12.4", "nvidia-cuda-runtime-cu12==12.4.127", "libcudart.so.12"),
    Runtime("12.5", "nvidia-cuda-runtime-cu12==12.5.82", "libcudart.so.12"),
    Runtime("12.6", "nvidia-cuda-runtime-cu12==12.6.77", "libcudart.so.12"),
    Runtime("12.8", "nvidia-cuda-runtime-cu12==12.8.90", "libcudart.so.12"),
    Runtime("12.9", "nvidia-cuda-runtime-cu12==12.9.79", "libcudart.so.12"),
    Runtime("13.0", "nvidia-cuda-runtime==13.0.96", "libcudart.so.13"),
    Runtime("13.1", "nvidia-cuda-runtime==13.1.80", "libcudart.so.13"),
    Runtime("13.2", "nvidia-cuda-runtime==13.2.86", "libcudart.so.13"),
    Runtime("13.3", "nvidia-cuda-runtime==13.3.29", "libcudart.so.13"),
    Runtime("13.4", "nvidia-cuda-runtime==13.4.92", "libcudart.so.13"),
    Runtime("13.5", "nvidia-cuda-runtime==13.5.37", "libcudart.so.13"),
)

DRIVER_FILES = ("libcuda.so.1", "libnvidia-ml.so.1")

#: the everyday tests' driver (.cache/testbed/nvidia) on every Debian release: the branch whose entry
#: points they call (470, Debian 11's own libcuda1, has no cuLaunchKernelEx: a workload calling it
#: fails); each branch's own tests run on drivers/<BRANCH>
EVERYDAY_BRANCH = "535"


def branch_sources(release: privapt.Release, etc: Path = privapt.ETC_APT) -> list[privapt.Source]:
    """The machine's own Debian mirrors (the entries of its own release), one entry per suite a branch
    needs, component non-free."""
    own = privapt.own_release(privapt.read_sources(etc), release, privapt.RELEASE_ONLY)
    suites = dict.fromkeys(b.suite for b in BRANCHES)
    seen: set[str] = set()
    out = []
    for s in own:
        if s.uri in seen:
            continue
        seen.add(s.uri)
        out += [replace(s, suite=suite, components=("non-free",)) for suite in suites]
    return out


def _fetched(branch_dir: Path) -> bool:
    """Whether a branch's folder holds its libraries and VERSION (what fetch_drivers writes)."""
    return all((branch_dir / f).is_file() for f in (*DRIVER_FILES, "VERSION"))


def fetch_drivers(state: Path, dest: Path) -> int:
    todo = [b for b in BRANCHES if not _fetched(dest / b.branch)]
    if not todo:
        return 0
    release = privapt.parse_os_release(privapt.OS_RELEASE.read_text())
    if release.family != "debian":
        print(f"testbed: {release.pretty} is not Debian: no driver branches (their tests skip)", file=sys.stderr)
        return 0
    sources = branch_sources(release)
    if not sources:
        raise privapt.PrivAptError(f"no Debian mirror among the apt sources of {release.pretty}",
                                   "add this release's mirror to /etc/apt/sources.list.d")
    apt = privapt.PrivateApt(state, sources)
    apt.update()
    for b in todo:
        try:
            debs = apt.files([f"{b.cuda}/{b.suite}", f"{b.nvml}/{b.suite}"])
            got = apt.download(debs, state / "debs")
        except privapt.PrivAptError as e:      # one branch gone from its suite: the others still come
            print(f"testbed: warning: driver {b.branch} not fetched ({e}); its tests skip", file=sys.stderr)
            continue
        out = dest / b.branch
        with tempfile.TemporaryDirectory(dir=state) as tmp:
            for d in got:
                subprocess.run(["dpkg", "-x", str(state / "debs" / d.filename), tmp], check=True)
            out.mkdir(parents=True, exist_ok=True)
            for lib in DRIVER_FILES:
                found = sorted(Path(tmp).rglob(lib))
                if not found:
                    raise privapt.PrivAptError(f"{lib} is not in {', '.join(d.filename for d in got)}",
                                               "Debian's NVIDIA packages changed; see scripts/testbed_libs.py")
                (out / lib).write_bytes(found[0].resolve().read_bytes())
        version = next(d.version for d in got if d.name == b.cuda)
        (out / "VERSION").write_text(version + "\n")
        print(f"testbed: driver {b.branch}: {', '.join(d.filename for d in got)}")
    return 0


def everyday(drivers: Path, dest: Path) -> int:
    """EVERYDAY_BRANCH's libraries into ``dest``; 3 when that branch was not fetched (not Debian)."""
    src = drivers / EVERYDAY_BRANCH
    if not _fetched(src):
        return 3
    dest.mkdir(parents=True, exist_ok=True)
    for f in DRIVER_FILES:
        (dest / f).write_bytes((src / f).read_bytes())
    print(f"testbed: libcuda.so.1 and libnvidia-ml.so.1: driver {EVERYDAY_BRANCH}'s "
          f"({(src / 'VERSION').read_text().strip()})")
    return 0


def fetch_runtimes(python: str, dest: Path) -> int:
    for rt in RUNTIMES:
        out = dest / rt.minor
        if (out / rt.soname).is_file() and (out / "VERSION").is_file():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            res = subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                                  "-d", tmp, rt.wheel], capture_output=True, text=True)
            wheels = glob.glob(tmp + "/*.whl")
            if not wheels:     # one wheel gone from the index: the others still come, its tests skip
                print(f"testbed: warning: {rt.wheel} not fetched ({res.stderr.strip()[-400:]}); its tests skip",
                      file=sys.stderr)
                continue
            out.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(wheels[0]) as z:
                for n in z.namelist():
                    base = n.rsplit("/", 1)[-1]
                    if n.startswith("nvidia/") and "/lib/" in n and base in (rt.soname, "libcudart_static.a"):
                        (out / base).write_bytes(z.read(n))
            if not (out / rt.soname).is_file():
                raise privapt.PrivAptError(f"{rt.soname} is not in {Path(wheels[0]).name}",
                                           "the wheel's layout changed; see scripts/testbed_libs.py")
            (out / "VERSION").write_text(rt.wheel.split("==", 1)[1] + "\n")
        print(f"testbed: runtime {rt.minor}: {rt.wheel}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="testbed_libs.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("drivers", help="every driver branch's libcuda.so.1 and libnvidia-ml.so.1 into DEST/BRANCH")
    p.add_argument("state", type=Path)
    p.add_argument("dest", type=Path)
    p = sub.add_parser("everyday", help="the everyday tests' driver branch (fetched by drivers) into DEST; "
                                        "exit 3 when it is not there")
    p.add_argument("drivers", type=Path)
    p.add_argument("dest", type=Path)
    p = sub.add_parser("runtimes", help="every CUDA runtime minor's libcudart into DEST/MAJOR.MINOR")
    p.add_argument("python")
    p.add_argument("dest", type=Path)
    sub.add_parser("list", help="the matrix as JSON")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "drivers":
            return fetch_drivers(args.state.resolve(), args.dest.resolve())
        if args.cmd == "everyday":
            return everyday(args.drivers.resolve(), args.dest.resolve())
        if args.cmd == "runtimes":
            return fetch_runtimes(args.python, args.dest.resolve())
        print(json.dumps({"branches": [asdict(b) for b in BRANCHES], "runtimes": [asdict(r) for r in RUNTIMES]}))
    except privapt.PrivAptError as e:
        print(f"testbed: error: {e}\nhint: {e.hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
