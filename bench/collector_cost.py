"""The collector's CPU per refresh: ``gputop -b -f json -d 1 --no-nvml`` tracing many processes.

Run as root after ./test.sh has set up the test bed:

    .venv/bin/python bench/collector_cost.py [--procs 64] [--refreshes 20] [--rounds 2]
                                             [--baseline-tree DIR]

1. Starts ``--procs`` traced processes (the test bed's real libcudart and libcuda, dlopen'd), each
   launching a kernel at a fixed rate (``--rate`` a second) for the whole run.
2. Runs gputop in batch JSON mode (a 1 s refresh, NVML off) on them, waits until every process is
   in its output, then takes the CPU time (user + system, all its threads) gputop used over
   ``--refreshes`` refreshes: CPU per refresh. Start-up (the BPF compile) is not counted.
3. With ``--baseline-tree DIR`` (``git archive <commit> | tar -x -C DIR``), the same with
   PYTHONPATH=DIR, side by side (A B A B, ``--rounds``), medians: the ratio current / baseline.
4. The parts, in a process of their own per tree (same A B A B): the host source's read of the
   PIDs gputop showed (psutil) and the JSON encoding of one of gputop's own snapshots, CPU per refresh;
   the rest (BPF reads, the sampler, output) is the total less these.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import benchjson  # noqa: E402
from support import TESTBED, build_native  # noqa: E402
from support import cpu_seconds as cpu_s  # noqa: E402

CUDART = TESTBED / "cudart" / "libcudart.so.12"
CUDA = TESTBED / "nvidia" / "libcuda.so.1"

#: run with PYTHONPATH=<tree>: argv[1] a file of PIDs (every process gputop showed; argv[4]: how
#: many of them are the bench's, alive throughout), argv[2] a file holding one snapshot line;
#: prints the median CPU seconds of one host read and of one JSON encoding
PARTS = r"""
import json, statistics, sys, time
from gputop.model import snapshot_from_json, snapshot_to_json
from gputop.sources.host import HostSource
pids = [int(p) for p in open(sys.argv[1]).read().split()]
snap = snapshot_from_json(open(sys.argv[2]).read())
n = int(sys.argv[3])
src = HostSource()
src.read(pids)
host = []
for _ in range(n):
    time.sleep(0.05)
    t0 = time.process_time()
    got = src.read(pids)
    host.append(time.process_time() - t0)
assert len(got) >= int(sys.argv[4]), (len(got), sys.argv[4])
enc = []
for _ in range(n):
    t0 = time.process_time()
    snapshot_to_json(snap)
    enc.append(time.process_time() - t0)
print(json.dumps({"host_s": statistics.median(host), "json_s": statistics.median(enc)}))
"""


def start_workloads(n: int, rate: int, go: Path) -> list[subprocess.Popen[bytes]]:
    exe = build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread")
    procs = []
    for _ in range(n):
        p = subprocess.Popen([str(exe), "--cudart", str(CUDART), "--cuda", str(CUDA), "--wait", str(go),
                              f"paced:{rate}:3600000"], stdout=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
        procs.append(p)
    return procs



def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "XDG_CONFIG_HOME": "/nonexistent-gputop-bench"}


def measure(tree: Path, pids: set[int], refreshes: int, timeout_s: float) -> tuple[float, str]:
    """CPU seconds per refresh of gputop from ``tree`` over ``refreshes`` refreshes once every PID
    is in its output, and its last snapshot line."""
    cmd = [sys.executable, "-m", "gputop.cli", "-b", "-f", "json", "-d", "1", "--no-nvml"]
    p = subprocess.Popen(cmd, cwd=tree, env=_env(tree), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    deadline = time.monotonic() + timeout_s
    try:
        line = ""
        while True:                             # until a snapshot has every process, launching
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"gputop ({tree}) ended: {p.stderr.read() if p.stderr else ''}")
            seen = {q["pid"] for q in json.loads(line)["processes"]
                    if (q.get("rates") or {}).get("launches_per_s")}
            if pids <= seen:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"gputop ({tree}) did not show every process: {len(pids - seen)} missing")
        p.stdout.readline()                     # a whole refresh after that one
        c0 = cpu_s(p.pid)
        for _ in range(refreshes):
            line = p.stdout.readline()
            snap = json.loads(line)
            missing = pids - {q["pid"] for q in snap["processes"]}
            assert not missing, f"{len(missing)} processes left gputop's output"
        return (cpu_s(p.pid) - c0) / refreshes, line
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def parts(tree: Path, pid_file: Path, snap_file: Path, n: int, alive: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PARTS, str(pid_file), str(snap_file), str(n), str(alive)], cwd=tree,
                         env=_env(tree), capture_output=True, text=True, check=True).stdout
    return {k: float(v) for k, v in json.loads(out).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--rate", type=int, default=100, help="kernel launches a second of each process")
    ap.add_argument("--refreshes", type=int, default=20, help="refreshes measured per run")
    ap.add_argument("--rounds", type=int, default=2, help="A B rounds")
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="a checkout of the tree before (git archive COMMIT | tar -x -C DIR), run side by side")
    benchjson.add_argument(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("gputop: error: bench/collector_cost.py traces processes: it needs root", file=sys.stderr)
        print("hint: sudo .venv/bin/python bench/collector_cost.py", file=sys.stderr)
        return 77
    trees: dict[str, Path] = {"current": ROOT}
    if args.baseline_tree is not None:
        if not (args.baseline_tree / "gputop" / "cli.py").is_file():
            print(f"gputop: error: {args.baseline_tree} holds no gputop tree", file=sys.stderr)
            print("hint: mkdir DIR && git archive 4c75dbd | tar -x -C DIR", file=sys.stderr)
            return 2
        trees["baseline"] = args.baseline_tree.resolve()

    tmp = Path(tempfile.mkdtemp(prefix="gputop-collector-bench-"))
    go = tmp / "go"
    procs: list[subprocess.Popen[bytes]] = []
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    split: dict[str, dict[str, list[float]]] = {name: {"host_s": [], "json_s": []} for name in trees}
    try:
        procs = start_workloads(args.procs, args.rate, go)
        go.touch()
        pids = {p.pid for p in procs}
        pid_file = tmp / "pids"
        snap_file = tmp / "snapshot.json"
        for r in range(args.rounds):
            for name, tree in trees.items():
                per_refresh, line = measure(tree, pids, args.refreshes, 180.0)
                cpu[name].append(per_refresh)
                if not snap_file.exists():
                    snap_file.write_text(line)      # the same snapshot for every tree's encoding
                    shown_pids = {q["pid"] for q in json.loads(line)["processes"]}
                    pid_file.write_text(" ".join(str(p) for p in sorted(shown_pids | pids)))
                for k, v in parts(tree, pid_file, snap_file, args.refreshes, len(pids)).items():
                    split[name][k].append(v)
                print(f"  round {r + 1}, {name}: {per_refresh * 1e3:.1f} ms of CPU per refresh", flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()

    # every process gputop shows: the bench's and any other CUDA process on the host
    shown = len(json.loads(snap_file.read_text())["processes"])
    figures: dict[str, Any] = {"procs": args.procs, "rate_per_s": args.rate, "refreshes": args.refreshes,
                               "rounds": args.rounds, "processes_shown": shown}
    print(f"collector_cost: gputop -b -f json -d 1 --no-nvml tracing {args.procs} processes "
          f"({args.rate} launches/s each; {shown} processes shown), {args.refreshes} refreshes x "
          f"{args.rounds} rounds, medians")
    ms: dict[str, float] = {}
    for name in trees:
        ms[name] = statistics.median(cpu[name]) * 1e3
        host_ms = statistics.median(split[name]["host_s"]) * 1e3
        json_ms = statistics.median(split[name]["json_s"]) * 1e3
        figures[f"cpu_ms_per_refresh_{name}"] = ms[name]
        figures[f"host_ms_per_refresh_{name}"] = host_ms
        figures[f"json_ms_per_refresh_{name}"] = json_ms
        figures[f"rest_ms_per_refresh_{name}"] = ms[name] - host_ms - json_ms
        print(f"  {name}: {ms[name]:.1f} ms of CPU per refresh ({ms[name] / 10:.1f} % of a core); "
              f"host read {host_ms:.1f} ms, JSON {json_ms:.1f} ms, the rest (BPF reads, sampler, output) "
              f"{ms[name] - host_ms - json_ms:.1f} ms")
    if "baseline" in ms:
        figures["ratio"] = ms["current"] / ms["baseline"]
        print(f"  current / baseline: {figures['ratio']:.2f}")
    benchjson.write(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
