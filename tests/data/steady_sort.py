"""Record ``tests/data/steady_sort.jsonl``: the real gputop (BPF, the test bed's libcudart) tracing three
real workloads that launch in bursts, as training and serving loops do, at 300, 400 and 500 launches/s.

Each workload is ``tests/native/cuda_workload.c`` repeating one step: a burst of B ``cudaLaunchKernel``
calls, then a sleep of P ms: (B, P) = (210, 700), (360, 900) and (300, 600), i.e. 300, 400 and 500
launches/s. A 1 s refresh holds one burst or two, so each row's instantaneous LAUNCH/s swings between
about B and 2B (210/420, 360/720, 300/600) and the rows trade places (the review of issue 22: "300,
400 and 500/s rows trade places"); the dashboard's smoothed sort (docs/dashboard.md, "Steady
sorting") holds them in place. The recording is what
``tests/ui/test_ui_habits_sort.py`` replays.

    sudo .venv/bin/python tests/data/steady_sort.py [--out tests/data/steady_sort.jsonl] [--refreshes 30]

Needs root (BPF) and the test bed (scripts/testbed.sh).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support import TESTBED, Testbed, runtime  # noqa: E402

#: (launches per burst, ms between bursts) of each workload: 300, 400 and 500 launches/s
BURSTS = ((210, 700), (360, 900), (300, 600))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "steady_sort.jsonl")
    ap.add_argument("--refreshes", type=int, default=30)
    args = ap.parse_args()
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia", TESTBED / "cudart13")
    wl = runtime(tb, 12).dynamic
    go = Path("/tmp") / f"steady-sort-go-{time.time_ns()}"
    procs = []
    for burst, step_ms in BURSTS:
        steps = (args.refreshes + 20) * 1000 // step_ms
        ops = [a for _ in range(steps) for a in (f"launch:{burst}:1,1,1:32,1,1:0", f"sleep:{step_ms}")]
        procs.append(subprocess.Popen([str(wl), "--wait", str(go), *ops], stdout=subprocess.PIPE))
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
        pids = ",".join(str(p.pid) for p in procs)
        if args.out.exists():
            args.out.unlink()
        gputop = subprocess.Popen([sys.executable, "-m", "gputop.cli", "--no-nvml", "-p", pids, "-b", "-f", "json",
                                   "-n", str(args.refreshes + 3), "--record", str(args.out)],
                                  cwd=ROOT, stdout=subprocess.DEVNULL)
        time.sleep(1.0)
        go.touch()
        return gputop.wait()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        go.unlink(missing_ok=True)


if __name__ == "__main__":
    raise SystemExit(main())
