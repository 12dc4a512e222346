"""Load every program of bpf/gputop.bpf.c (and its headers) in one Debian kernel of the matrix and keep each
verifier log.

    python3 scripts/matrix/verifier_log.py SUITE OUTDIR [SOURCE.c ...]     (as root)

Boots the suite's cached root (scripts/matrix/vm.py's build_root, run disk and QEMU) with
guest-verifier.sh instead of guest-run.sh: no set-up, no venv; the suite's own python3-bpfcc (and so
its LLVM) compiles bpf/gputop.bpf.c, then each SOURCE.c given (variants of it to try, with the headers of
this bpf/), with the cflags gputop uses (abi.cflags(): the map sizes and shared constants; the guest's
PID_GEN_WORDS), and loads each uprobe program alone.
OUTDIR/out/SRC/result.txt lists `ok NAME` or `FAIL NAME`; OUTDIR/out/SRC/NAME.log holds the
verifier's log of each refused program. Exit status: the guest's (0 when every program of every
source loaded, 3 when some did not), 124 on the timeout.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("sources", type=Path, nargs="*")
    ap.add_argument("--timeout-s", type=float, default=900.0)
    args = ap.parse_args()
    out: Path = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    cache = vm.build_root(args.suite)
    with tempfile.TemporaryDirectory(prefix="gputop-verifier-") as tmp:
        src = Path(tmp) / "run"
        src.mkdir()
        vm.stage(src)
        shutil.copy(vm.HERE / "guest-verifier.sh", src / "guest-run.sh")
        (src / "srcs").mkdir()
        for i, s in enumerate(args.sources):
            shutil.copy(s, src / "srcs" / f"{i:02d}-{s.name}")
        disk = Path(tmp) / "run.img"
        vm.make_disk(src, disk)
        rc, wall_s = vm.boot(cache, disk, out / "console.log", args.timeout_s)
        shutil.rmtree(out / "out", ignore_errors=True)
        subprocess.run(["debugfs", "-R", f"rdump /out {out}", str(disk)], check=True, capture_output=True)
    print(f"matrix: {args.suite}: guest {wall_s:.0f} s", file=sys.stderr)
    if rc is None:
        return 124
    status = out / "out" / "status"
    return int(status.read_text().strip() or "1") if status.is_file() else 1


if __name__ == "__main__":
    sys.exit(main())
