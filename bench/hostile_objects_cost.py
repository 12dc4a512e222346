"""Issue 25's crafted objects through gputop's ELF reader: time and peak memory per object.

    .venv/bin/python bench/hostile_objects_cost.py [--before REV]

Each case runs in a fresh interpreter (its VmHWM is that case's peak): a sparse 1 GiB memfd named
libcudart.so.12 (the CUDA prefilter), a .symtab of entry size 1 over 2 MiB and 300 symbols sharing
one unterminated 1 MiB name (the symbol reader). ``--before REV`` runs the same cases through
``gputop/sources/bpf/attach/symbols.py`` as it was at REV too, side by side (it needs that revision's
pyelftools installed).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("memfd", "entsize", "shared")

_CASE = r"""
import os, sys, time
sys.path[:0] = sys.argv[3:]
from hostile_objects import entsize_one, symbols_sharing_one_name
if sys.argv[1] == "before":
    import symbols as S
    def mentions(fd): return S.mentions_cuda(f"/proc/self/fd/{fd}")
    def read(fd): return S.read_symbols(f"/proc/self/fd/{fd}")
else:
    from gputop.sources.bpf.attach import symbols as S
    mentions, read = S.mentions_cuda, (lambda fd: S.read_symbols(fd, "crafted"))
t = time.perf_counter()
fd = os.memfd_create("libcudart.so.12")
if sys.argv[2] == "memfd":
    os.ftruncate(fd, 1 << 30)
    os.pwrite(fd, b"cudaLaunchKernel", (1 << 30) - 64)
    verdict = mentions(fd)
else:
    os.write(fd, entsize_one(2 << 20) if sys.argv[2] == "entsize" else symbols_sharing_one_name(300, 1 << 20))
    verdict = read(fd) is not None
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(f"{time.perf_counter() - t:.2f} {peak // 1024} {verdict}")
"""


def run(which: str, case: str, paths: list[str]) -> str:
    res = subprocess.run([sys.executable, "-c", _CASE, which, case, *paths], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    if res.returncode != 0:
        return f"failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}"
    seconds, mib, verdict = res.stdout.split()
    return f"{float(seconds):6.2f} s {int(mib):5d} MiB  {verdict}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", metavar="REV", help="also run symbols.py as it was at REV")
    args = ap.parse_args()
    tests = str(ROOT / "tests")
    with tempfile.TemporaryDirectory() as old:
        if args.before:
            shown = [subprocess.run(["git", "show", f"{args.before}:gputop/sources/bpf/{where}symbols.py"], cwd=ROOT,
                                    capture_output=True, text=True) for where in ("attach/", "")]
            src = next(r.stdout for r in shown if r.returncode == 0)    # its place before the subpackages: bpf/
            (Path(old) / "symbols.py").write_text(src)
        for case in CASES:
            line = f"{case:8} now    {run('now', case, [tests, str(ROOT)])}"
            if args.before:
                line += f"   | before {run('before', case, [old, tests, str(ROOT)])}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
