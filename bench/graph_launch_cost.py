"""BPF run time of a CUDA graph launch against a kernel launch, side by side in one run (medians).

Run as root after ./test.sh has set up the test bed:

    .venv/bin/python bench/graph_launch_cost.py [--rounds 7] [--calls 20000]

The shim runtime (tests/native/shim_runtime.c) makes graph calls succeed and enters the real
libcuda.so.1's twin of each call, as the runtime does on a GPU host. One workload process captures
a graph of 50 kernels and instantiates it; then each round makes CALLS kernel launches
(cudaLaunchKernel -> cuLaunchKernel) and CALLS graph launches (cudaGraphLaunch -> cuGraphLaunch),
alternately, with the kernel's BPF statistics on. Per call: the BPF run time of both layers'
handlers (rt_launch + drv_launch, rt_graph_launch + drv_graph_launch). Prints each median and the
ratio graph / kernel launch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import benchjson  # noqa: E402
from support import TESTBED, build_native  # noqa: E402

from gputop.sources.bpf import BpfSource  # noqa: E402
from gputop.sources.bpf.common.linux import enable_stats, prog_run_stats  # noqa: E402

KERNEL = ("rt_launch", "drv_launch")
GRAPH = ("rt_graph_launch", "drv_graph_launch")


def run_stats(src: BpfSource, names: tuple[str, ...]) -> tuple[int, int]:
    ns = cnt = 0
    for name in names:
        fn = src.bpf.funcs.get(name.encode())       # loaded when first attached
        st = prog_run_stats(fn.fd) if fn is not None else (0, 0)
        assert st is not None, f"no statistics for {name}"
        ns += st[0]
        cnt += st[1]
    return ns, cnt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    benchjson.add_argument(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/graph_launch_cost.py: error: needs root (BPF)\nhint: sudo .venv/bin/python bench/...")
    wl = build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread")
    shim = build_native("shim_runtime.c", "libshimcudart.so", "-shared", "-fPIC", "-ldl")
    src = BpfSource()
    print("starting gputop's BPF source...", file=sys.stderr, flush=True)
    src.start()
    stats_fd = enable_stats()
    if stats_fd is None:
        sys.exit("bench/graph_launch_cost.py: error: the kernel refused BPF statistics\nhint: run as root")
    go = Path(f"/tmp/gputop-bench-go-{os.getpid()}")
    # the shim loads libcuda.so.1 at its first call: gputop probes it on that mmap, within the sleep
    ops = ["g_capture:50:0", "g_inst:1:0", "sleep:1500"]
    for r in range(args.rounds):
        ops += [f"launch:{args.calls}:1,1,1:1,1,1:0", f"sleep:{300 + r}", f"g_launch:{args.calls}", f"sleep:{301 + r}"]
    proc = subprocess.Popen([str(wl), "--wait", str(go), "--cudart", str(shim), *ops], stdout=subprocess.PIPE,
                            env={**os.environ, "SHIM_LIBCUDA": str(TESTBED / "nvidia" / "libcuda.so.1")})
    assert proc.stdout is not None
    pid = int(proc.stdout.readline().split()[1])
    src.scan([pid])
    print(f"measuring {args.rounds} rounds...", file=sys.stderr, flush=True)
    kernel: list[float] = []
    graph: list[float] = []
    try:
        go.touch()
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            src.poll(0.1)
        last = {"k": run_stats(src, KERNEL), "g": run_stats(src, GRAPH)}
        # the rounds are told apart by the counts: sample while the workload sleeps between phases
        while proc.poll() is None:
            src.poll(0.1)
            for key, names, out in (("k", KERNEL, kernel), ("g", GRAPH, graph)):
                ns, cnt = run_stats(src, names)
                d_ns, d_cnt = ns - last[key][0], cnt - last[key][1]
                if d_cnt >= 2 * args.calls:           # a whole phase: both layers fired once per call
                    out.append(d_ns / args.calls)
                    last[key] = (ns, cnt)
        reading = src.read()
    finally:
        os.close(stats_fd)
        go.unlink(missing_ok=True)
        src.close()
    raw = reading.procs[pid]
    assert raw.counters["graph_kernel_launches"] == 50 * args.calls * args.rounds, raw.counters
    k, g = statistics.median(kernel), statistics.median(graph)
    print(f"kernel launch  {k:7.1f} ns of BPF per call (median of {len(kernel)} rounds of {args.calls})")
    print(f"graph launch   {g:7.1f} ns of BPF per call (median of {len(graph)} rounds of {args.calls})")
    print(f"graph / kernel launch: {g / k:.2f}")
    benchjson.write(args.json, {"rounds": len(kernel), "calls": args.calls, "graph_kernels": 50,
                                "kernel_launch_bpf_ns": k, "graph_launch_bpf_ns": g, "graph_over_kernel": g / k})


if __name__ == "__main__":
    main()
