"""How long gputop takes to detach its probes (what a user waits for after pressing q).

Run as root after ./test.sh has set up the test bed:

    .venv/bin/python bench/exit_cost.py [--rounds 5]

A waiting process maps the REAL libcudart.so.12 and libcuda.so.1 (dlopen); gputop attaches its
full probe set to both, once with uprobe_multi links (Linux 6.6+) and once with a perf event per
probe (older kernels), alternating A B A B; prints the median time of BpfSource.close() for each
and their ratio.
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

from support import TESTBED, build_native  # noqa: E402

from gputop.sources.bpf import BpfSource  # noqa: E402


def close_time(pid: int, links: bool) -> tuple[float, int, str]:
    src = BpfSource(uprobe_links=links)
    src.start()
    src.scan([pid])
    probes, mode = src.probes, src.uprobes.mode if src.uprobes else "?"
    t0 = time.monotonic()
    src.close()
    return time.monotonic() - t0, probes, mode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
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
    finally:
        wl.kill()
        wl.wait()
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"detach time (BpfSource.close), medians of {args.rounds} alternating rounds:")
    for k, v in med.items():
        print(f"  {k:<6} {v:7.3f} s   ({probes[k]} probes)")
    print(f"ratio perf/links: {med['perf'] / med['links']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
