"""How long gputop takes to detach its probes (what a user waits for after pressing q).

Run as root after ./test.sh has set up the test bed:

    .venv/bin/python bench/exit_cost.py [--rounds 5] [--dashboard 0]

A waiting process maps the REAL libcudart.so.12 and libcuda.so.1 (dlopen); gputop attaches its
full probe set to both, once with uprobe_multi links (Linux 6.6+) and once with a perf event per
probe (older kernels), alternating A B A B; prints the median time of BpfSource.close() for each
and their ratio. Then, ``--dashboard N`` times (default 5), the real dashboard in tmux traces that
process; the time from pressing q to gputop's exit is printed (median, min, max).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import benchjson  # noqa: E402
from support import TESTBED, build_native  # noqa: E402
from tmux_driver import TmuxSession  # noqa: E402

from gputop.sources.bpf import BpfSource  # noqa: E402


def close_time(pid: int, links: bool) -> tuple[float, int, str]:
    src = BpfSource(uprobe_links=links)
    src.start()
    src.scan([pid])
    probes, mode = src.probes, src.uprobes.mode if src.uprobes else "?"
    t0 = time.monotonic()
    src.close()
    return time.monotonic() - t0, probes, mode


def quit_time(pid: int) -> float:
    """Seconds from q to the dashboard's exit once it has probed what ``pid`` maps."""
    with TmuxSession([sys.executable, "-m", "gputop.cli", "--no-nvml", "-p", str(pid)], cwd=ROOT,
                     env={"XDG_CONFIG_HOME": "/nonexistent-gputop-bench"}) as t:
        t.wait_for(lambda s: "BPF ok" in s and "/2obj" in s, timeout=60)     # libcudart and libcuda probed
        t0 = time.monotonic()
        t.send_keys("q")
        status = t.wait_exit(timeout=120)
        dt = time.monotonic() - t0
    if status != 0:
        raise SystemExit(f"gputop exited with {status}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dashboard", type=int, default=5, metavar="N")
    benchjson.add_argument(ap)
    args = ap.parse_args()
    exe = build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread")
    wl = subprocess.Popen([str(exe), "--cudart", str(TESTBED / "cudart" / "libcudart.so.12"),
                           "--cuda", str(TESTBED / "nvidia" / "libcuda.so.1"), "--wait", "/nonexistent-gputop-bench",
                           "sleep:1"], stdout=subprocess.PIPE)
    try:
        assert wl.stdout is not None
        pid = int(wl.stdout.readline().split()[1])
        time.sleep(0.5)                         # both libraries mapped
        samples: dict[str, list[float]] = {"links": [], "perf": []}
        probes: dict[str, int] = {}
        for _ in range(args.rounds):
            for want in ("links", "perf"):
                dt, n, mode = close_time(pid, want == "links")
                if mode != want:
                    print(f"{want}: not available on this kernel (got {mode})")
                    return 1
                samples[want].append(dt)
                probes[want] = n
        quits = [quit_time(pid) for _ in range(args.dashboard)]
    finally:
        wl.kill()
        wl.wait()
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"detach time (BpfSource.close), medians of {args.rounds} alternating rounds:")
    for k, v in med.items():
        print(f"  {k:<6} {v:7.3f} s   ({probes[k]} probes)")
    print(f"ratio perf/links: {med['perf'] / med['links']:.1f}")
    if quits:
        print(f"dashboard, q to exit ({len(quits)} runs): median {statistics.median(quits):.2f} s, "
              f"min {min(quits):.2f} s, max {max(quits):.2f} s")
    benchjson.write(args.json, {
        "rounds": args.rounds, "probes": probes["links"], "detach_links_s": med["links"], "detach_perf_s": med["perf"],
        "perf_over_links": med["perf"] / med["links"], "quit_runs": len(quits),
        "quit_median_s": statistics.median(quits) if quits else None, "quit_min_s": min(quits) if quits else None,
        "quit_max_s": max(quits) if quits else None})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
