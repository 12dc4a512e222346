"""CPU cost of the dashboard: gputop replaying 64 processes at 1 Hz vs htop, side by side in tmux.

    .venv/bin/python bench/ui_cpu.py [--seconds 60] [--procs 64] [--command CMD]

Both programs run at the same time in their own detached tmux sessions (160×45). gputop replays a
generated recording in which every process's rates change every second (so every visible row is
redrawn each refresh); htop refreshes every second (-d 10). CPU time is user+system of each
program's process tree from /proc, over the measured window after a warm-up. Also reports the
time to the first frame ("starting…") and to the first frame with data.

The gputop command is ``gputop --replay FILE`` (the real CLI).
htop is optional (apt-get install -y htop); without it only gputop is measured.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "e2e"), str(ROOT / "tests" / "data")]

from scenario import HOST, bench_snapshots, write  # noqa: E402
from tmux_driver import TmuxSession, cpu_seconds, have_tmux, process_tree  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window (default 60)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument(
        "--command",
        default=None,
        help="gputop command before the file (default: python -m gputop.cli --replay)",
    )
    args = ap.parse_args()
    if not have_tmux():
        print("gputop: error: tmux not found\nhint: apt-get install -y tmux", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="gputop-bench-"))
    rec = tmp / "bench.jsonl"
    frames = int(args.warmup + args.seconds + 15)
    write(rec, bench_snapshots(args.procs, frames))
    env = {"XDG_CONFIG_HOME": str(tmp / "config")}
    cmd = (args.command.split() if args.command else [sys.executable, "-m", "gputop.cli", "--replay"]) + [
        str(rec)
    ]
    htop = shutil.which("htop")

    sessions: dict[str, TmuxSession] = {"gputop": TmuxSession(cmd, env=env, cwd=ROOT)}
    if htop:
        sessions["htop"] = TmuxSession([htop, "-d", "10"], env={"HOME": str(tmp)})
    try:
        g = sessions["gputop"].start()
        g.wait_for(lambda s: "gputop" in s, timeout=20, poll=0.01)
        first_frame = time.monotonic() - g.started_at
        g.wait_for(HOST, timeout=20, poll=0.01)
        first_data = time.monotonic() - g.started_at
        if htop:
            sessions["htop"].start().wait_for("PID", timeout=10)
        time.sleep(args.warmup)
        trees = {name: process_tree(s.pid) for name, s in sessions.items()}
        before = {name: cpu_seconds(pids) for name, pids in trees.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        after = {name: cpu_seconds(trees[name]) for name in sessions}
        screen = g.capture()
    finally:
        for s in sessions.values():
            s.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    pct = {name: 100 * (after[name] - before[name]) / elapsed for name in sessions}
    rows = [
        ("command", " ".join(cmd[:-1]) + " FILE"),
        ("processes", str(args.procs)),
        ("refresh", "1 s"),
        ("window", f"{elapsed:.1f} s, after {args.warmup:g} s warm-up"),
        ("cores", str(os.cpu_count())),
        ("first frame", f"{first_frame:.2f} s"),
        ("first data frame", f"{first_data:.2f} s"),
        ("gputop CPU", f"{pct['gputop']:.2f} % of one core"),
    ]
    if htop:
        rows.append(("htop CPU", f"{pct['htop']:.2f} % of one core"))
        if pct["htop"] > 0:
            rows.append(("ratio gputop/htop", f"{pct['gputop'] / pct['htop']:.1f}×"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    ok = pct["gputop"] <= 2.0 and first_frame <= 2.0
    print(f"target (≤ 2 % of one core, first frame ≤ 2 s): {'met' if ok else 'NOT met'}")
    if "REPLAY" not in screen:
        print("warning: the gputop screen did not show the replay header at the end", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
