"""How long `q` takes: the real dashboard in tmux, with the BPF collector attached to two CUDA workloads
of the test bed (run as root), timed from the key to the terminal given back and to the process's exit.

    sudo .venv/bin/python bench/quit_time.py [--runs 5] [--no-bpf] [--tree DIR]

``--tree DIR`` runs another checkout's gputop (e.g. ``git worktree add /tmp/before REV``) the same way,
side by side, so the two medians come from one run on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from tmux_driver import TmuxSession  # noqa: E402

NATIVE = ROOT / ".cache" / "native"


def once(tree: Path, bpf: bool) -> tuple[float, float]:
    """(seconds from q to the terminal restored, to the process exited)."""
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        procs = [subprocess.Popen([str(NATIVE / w), "--wait", str(go), "paced:1000:60000"], stdout=subprocess.PIPE)
                 for w in ("wl_dynamic", "wl_static")]
        try:
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
            go.touch()
            pids = ",".join(str(p.pid) for p in procs)
            args = ["--no-nvml", "-p", pids] + ([] if bpf else ["--no-bpf"])
            with TmuxSession([sys.executable, "-m", "gputop.cli", *args], width=120, height=30,
                             env={"XDG_CONFIG_HOME": tmp}, cwd=tree) as t:
                t.wait_for(lambda s: ("BPF ok" in s and "wl_static" in s) if bpf else "BPF off" in s, timeout=90)
                time.sleep(2)
                t0 = time.monotonic()
                t.send_keys("q")
                t.wait_for(lambda s: "q Quit" not in s, timeout=60, poll=0.005)
                restored = time.monotonic() - t0
                assert t.wait_exit(timeout=60, poll=0.005) == 0
                return restored, time.monotonic() - t0
        finally:
            for p in procs:
                p.kill()
                p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-bpf", action="store_true", help="without the BPF collector (nothing to detach)")
    ap.add_argument("--tree", type=Path, action="append", default=[], help="also time this checkout's gputop")
    args = ap.parse_args()
    for tree in [ROOT, *args.tree]:
        runs = [once(tree, not args.no_bpf) for _ in range(args.runs)]
        restored = statistics.median(r for r, _ in runs)
        exited = statistics.median(e for _, e in runs)
        print(f"{tree}: q -> terminal restored {restored:.3f} s, -> process exited {exited:.3f} s "
              f"(medians of {args.runs}; exits {', '.join(f'{e:.2f}' for _, e in runs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
