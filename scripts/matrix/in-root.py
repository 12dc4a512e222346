"""A shell command in a suite's userland on this machine's kernel (as vm.py --on-host runs the checks),
with this repository in /opt/gputop: to run the README's commands, or a part of ./test.sh, where Debian
11's bcc 0.18 or Debian 13's userland is, in minutes rather than a whole matrix run. As root.

    python3 scripts/matrix/in-root.py SUITE DIR [COMMAND]       # default COMMAND: an interactive bash
    python3 scripts/matrix/in-root.py bullseye /var/tmp/b11 'GPUTOP_MATRIX=0 ./test.sh -q tests/bpf/test_signals.py'

DIR/root is made from the suite's cached root image (scripts/matrix/build-root.sh) the first time and
kept (the set-up's venv and test bed stay there for the next command); the repository's tracked and
unignored files are copied into DIR/root/opt/gputop at every call. The command runs in /opt/gputop
under bash, in mount and UTS namespaces of its own, with the root pivoted to; its exit status is this
script's (92, 93: the binds or the pivot failed).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vm


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite")
    ap.add_argument("dir", type=Path)
    ap.add_argument("command", nargs="?", default=None)
    args = ap.parse_args()
    root = args.dir.resolve() / "root"
    if not (root / "etc" / "os-release").exists():
        cache = vm.build_root(args.suite)
        root.parent.mkdir(parents=True, exist_ok=True)
        vm.copy_root(cache, root)
    vm.copy_repo(root / "opt" / "gputop")
    inner = "cd /opt/gputop && " + (args.command or "exec bash -i")
    env = {"HOME": "/root", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": "C.UTF-8", "TERM": "xterm-256color"}
    return subprocess.run(vm.pivoted(root, f"/bin/bash -c {shlex.quote(inner)}"), env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
