"""gputop's counts against PyTorch's profiler (Kineto/CUPTI) and nvidia-smi, workload by workload.

    sudo python3 bench/gpu_validate.py --gputop /opt/gputop/bin/gputop [--only eager,gemm] [--out DIR]
    sudo .venv/bin/python bench/gpu_validate.py --testbed --cudart .cache/testbed/cudart/libcudart.so.12

Run it with the Python that has PyTorch (on a GPU host, the host's own; gputop runs as the command
--gputop names, in its own Python). What it does:

1. Starts the workloads `before`, `driver_peer_before` and `driver_before` (bench/gpu_workloads.py), then
   gputop (`-b -f json -d 0.25 --bpf`), and waits for gputop's first snapshot with its BPF collector
   running: they are processes gputop finds already running.
2. Runs their measured phases alone, one after the other, then every other workload, --jobs at a time. Each warms up,
   stays idle, runs its phase under the profiler, stays idle again (gpu_workloads.GAP_S) and exits.
   While it is idle after its phase, nvidia-smi is asked for its GPU memory.
3. gputop's count of a phase: the process's totals in its last snapshot inside the idle time after the
   phase, less those in its last snapshot inside the idle time before. The profiler's: its trace.
4. Prints one line per workload and metric as each workload is compared: the oracle's figure and
   where it comes from, gputop's, and whether they are equal; lines marked `info` have no oracle and
   are not counted; then `gpu validation: K/N exact` (at SIGTERM: what was compared, "(stopped
   early)"). --out DIR keeps the snapshots, the traces, the reports and results.json.

Oracles (see docs/GPU-VALIDATION.md for what each is worth):
  kernels        kernel activities not run by a graph launch        -> launches, grid/block sums, per name
  graph kernels  kernel activities of graph launches                -> graph_kernel_launches
  graph API      cudaGraphLaunch / cuGraphLaunch calls              -> graph_launches
  capture API    launch calls whose kernel never ran (captured)     -> captured_launches
  memcpy         memcpy activities by direction, their bytes       -> memcpy.{h2d,d2h,d2d}
  sync/alloc API the outermost synchronisation / allocation calls   -> sync_calls, alloc_calls
  own            what the workload itself asked for (managed memory, prefetches; the test bed)
  nvidia-smi     --query-compute-apps used_memory, MiB              -> gpu_mem_bytes
`--testbed` runs the one workload that needs no GPU (known calls through the test bed's libcudart,
oracle `own`): how CI checks this harness (tests/bpf/test_gpu_validate.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:          # imported by the tests: found last, shadowing nothing of theirs
    sys.path.append(str(HERE))

from gpu_workloads import ALLOC_CONF, GAP_S, TESTBED, WORKLOADS  # noqa: E402

INTERVAL_S = 0.25
#: a snapshot counts as inside an idle time this far from its edges (map reads lag the snapshot's time)
MARGIN_S = 0.2
DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d", "HtoH": "h2h", "PtoP": "d2d"}
LAUNCH_API = {f"{n}{s}" for n in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
                                  "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel")
              for s in ("", "_ptsz")}
GRAPH_API = {"cudaGraphLaunch", "cudaGraphLaunch_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz"}
SYNC_API = {"cudaStreamSynchronize", "cudaStreamSynchronize_ptsz", "cudaDeviceSynchronize", "cudaEventSynchronize",
            "cudaThreadSynchronize", "cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuCtxSynchronize",
            "cuEventSynchronize"}
ALLOC_API = {"cudaMalloc", "cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync",
             "cudaMallocFromPoolAsync_ptsz", "cudaMallocPitch", "cudaMalloc3D", "cudaMallocManaged", "cudaMallocHost",
             "cudaHostAlloc", "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
             "cuMemAllocFromPoolAsync_ptsz", "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocHost_v2",
             "cuMemHostAlloc", "cuMemCreate", "cuMemAlloc", "cuMemAllocHost"}
#: the workloads started before gputop (names ending so), their phases run in this order: driver_peer_before's
#: before driver_before's, whose own look-ups after its go would teach gputop the driver's layout otherwise
BEFORE = ("before", "driver_peer_before", "driver_before")
#: the other workloads in the order they start (the longest warm-ups first)
ORDER = ("compiled", "reduce_overhead", "triton", "gemm", "cudagraph", "ptds_capture", "copies", "malloc_async",
         "expandable", "managed", "managed_prefetch", "eager", "idle")


@dataclass(frozen=True)
class Line:
    workload: str
    metric: str
    oracle: int | None
    source: str           # where the oracle's figure comes from; "info": no oracle, not counted
    gputop: int | None

    @property
    def exact(self) -> bool:
        return self.oracle is not None and self.oracle == self.gputop


def flatten(row: dict[str, Any]) -> dict[str, int | None]:
    """A process row's totals as flat metric names (memcpy.h2d.calls, prefetch.to_device.bytes, ...)."""
    total = row["total"]
    out: dict[str, int | None] = {}
    for key in ("launches", "graph_launches", "captured_launches", "graph_kernel_launches", "grid_blocks_sum",
                "block_threads_sum", "alloc_calls", "alloc_bytes", "free_calls", "managed_alloc_calls",
                "managed_alloc_bytes", "sync_calls", "uvm_cpu_faults", "uvm_gpu_faults"):
        out[key] = total.get(key)
    for group in ("memcpy", "prefetch"):
        for direction, figures in (total.get(group) or {}).items():
            for what in ("calls", "bytes"):
                out[f"{group}.{direction}.{what}"] = None if figures is None else figures.get(what)
    for k in row.get("kernels") or ():
        for key, value in ((_key(f"kernel {k['name']}"), k.get("launches")),
                           (_key(f"graph kernel {k['name']}"), k.get("graph_launches"))):
            _add(out, key, value)
    return out


def _add(out: dict[str, int | None], key: str, value: int | None) -> None:
    """Adds ``value`` under ``key`` (names that differ only in white space are one name); None wins."""
    if key in out:
        prev = out[key]
        out[key] = None if prev is None or value is None else prev + value
    else:
        out[key] = value


def rows_of(snapshots: Iterable[dict[str, Any]], pid: int) -> list[tuple[float, dict[str, Any]]]:
    return [(s["time"], p) for s in snapshots for p in s["processes"] if p["pid"] == pid]


def row_in(rows: list[tuple[float, dict[str, Any]]], lo: float, hi: float) -> dict[str, Any] | None:
    """The process's last row whose snapshot was taken inside (lo + MARGIN_S, hi - MARGIN_S)."""
    inside = [r for t, r in rows if lo + MARGIN_S < t < hi - MARGIN_S]
    return inside[-1] if inside else None


def phase_counts(rows: list[tuple[float, dict[str, Any]]], phase: tuple[float, float]) -> dict[str, int | None] | str:
    """gputop's counts of the phase: totals after it less totals before it; a string says why not."""
    t0, t1 = phase
    before, after = row_in(rows, t0 - GAP_S, t0), row_in(rows, t1, t1 + GAP_S)
    if before is None or after is None:
        return (f"no gputop snapshot of the process in the idle time {'before' if before is None else 'after'} "
                f"its phase ({len(rows)} rows in all)")
    a, b = flatten(after), flatten(before)
    out: dict[str, int | None] = {}
    for key, value in a.items():
        prev = b.get(key, 0 if key.startswith(("kernel ", "graph kernel ")) else None)
        out[key] = None if value is None or prev is None else value - prev
    return out


#: a workload's own figure (0): the kernels it launched in its phase that gputop shows by address
BY_ADDRESS = "kernels shown as addresses"


def shown_as_addresses(rows: list[tuple[float, dict[str, Any]]], phase: tuple[float, float]) -> int | None:
    """The kernels launched in the phase that gputop shows by address (0x…, object@0x…), not by name, in
    its row after the phase (None without rows in both idle times: phase_counts says why)."""
    before, after = row_in(rows, phase[0] - GAP_S, phase[0]), row_in(rows, phase[1], phase[1] + GAP_S)
    if before is None or after is None:
        return None
    was = {k.get("address"): k.get("launches") or 0 for k in before.get("kernels") or ()}
    return sum(1 for k in after.get("kernels") or ()
               if k.get("address") is not None and (k.get("launches") or 0) > was.get(k["address"], 0))


def _outermost(api: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """API events not nested in another API event of the same thread (a runtime call's own driver calls)."""
    by_tid: dict[Any, list[dict[str, Any]]] = {}
    for e in api:
        by_tid.setdefault(e.get("tid"), []).append(e)
    for events in by_tid.values():
        events.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        end = float("-inf")
        for e in events:
            if e["ts"] >= end:
                yield e
                end = e["ts"] + e.get("dur", 0)


def _norm(name: str) -> str:
    """A kernel's name without its white space (demanglers space templates differently)."""
    return "".join(name.split())


def _key(metric: str) -> str:
    for prefix in ("kernel ", "graph kernel "):
        if metric.startswith(prefix):
            return prefix + _norm(metric[len(prefix):])
    return metric


def profiler_counts(trace: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """The profiler's figures from its Chrome trace: metric -> (count, oracle name)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    api = list(_outermost([e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]))
    api_by_corr = {e.get("args", {}).get("correlation"): e["name"] for e in api}
    kernels = [e for e in events if e.get("cat") == "kernel"]

    def in_graph(e: dict[str, Any]) -> bool:
        args = e.get("args", {})
        return api_by_corr.get(args.get("correlation")) in GRAPH_API or bool(args.get("graph node id"))
    direct = [k for k in kernels if not in_graph(k)]
    ran = {k.get("args", {}).get("correlation") for k in kernels}
    # captures: from a Begin to an End call of the same thread; a launch in one is recorded, not run
    windows: list[tuple[Any, float, float]] = []
    for e in api:
        if e["name"].startswith(("cudaStreamBeginCapture", "cuStreamBeginCapture")):
            end = next((f["ts"] for f in api if f.get("tid") == e.get("tid") and f["ts"] > e["ts"]
                        and f["name"].startswith(("cudaStreamEndCapture", "cuStreamEndCapture"))), float("inf"))
            windows.append((e.get("tid"), e["ts"], end))

    def captured(e: dict[str, Any]) -> bool:
        return any(tid == e.get("tid") and lo < e["ts"] < hi for tid, lo, hi in windows)
    launch_calls = [e for e in api if e["name"] in LAUNCH_API]
    lost = [e for e in launch_calls if not captured(e) and e.get("args", {}).get("correlation") not in ran]

    def volume(dims: Any) -> int:
        x, y, z = [*dims, 1, 1, 1][:3] if dims else (0, 0, 0)
        return int(x) * int(y) * int(z)
    out: dict[str, tuple[int, str]] = {
        "launches": (len(direct), "kernels"),
        "grid_blocks_sum": (sum(volume(k.get("args", {}).get("grid")) for k in direct), "kernels"),
        "block_threads_sum": (sum(volume(k.get("args", {}).get("block")) for k in direct), "kernels"),
        "graph_kernel_launches": (len(kernels) - len(direct), "graph kernels"),
        "graph_launches": (sum(e["name"] in GRAPH_API for e in api), "graph API"),
        "captured_launches": (sum(captured(e) for e in launch_calls), "capture API"),
        # launch calls outside captures whose kernel the trace lacks (lost by the profiler): info only
        "profiler: kernels missing": (len(lost), "info"),
        "sync_calls": (sum(e["name"] in SYNC_API for e in api), "sync API"),
        "alloc_calls": (sum(e["name"] in ALLOC_API for e in api), "alloc API"),
    }
    copies: Counter[str] = Counter()
    for e in events:
        # the copies the application asked for: a memcpy call's correlation (not the driver's own
        # migrations, not a graph's copy nodes)
        if e.get("cat") != "gpu_memcpy" or not str(api_by_corr.get(e.get("args", {}).get("correlation"), "")
                                                  ).startswith(("cudaMemcpy", "cuMemcpy")):
            continue
        words = e["name"].split()
        direction = DIRECTIONS.get(words[1] if len(words) > 1 else "", "unknown")
        copies[f"memcpy.{direction}.calls"] += 1
        copies[f"memcpy.{direction}.bytes"] += int(e.get("args", {}).get("bytes", 0))
    for direction in ("h2d", "d2h", "d2d"):
        for what in ("calls", "bytes"):
            out[f"memcpy.{direction}.{what}"] = (copies[f"memcpy.{direction}.{what}"], "memcpy")
    for name, n in Counter(_norm(k["name"]) for k in direct).items():
        out[f"kernel {name}"] = (n, "kernels")
    for name, n in Counter(_norm(k["name"]) for k in kernels if in_graph(k)).items():
        out[f"graph kernel {name}"] = (n, "graph kernels")
    return out


#: own counts' names -> gputop's flat metric names
OWN = {"memcpy_h2d_calls": "memcpy.h2d.calls", "memcpy_h2d_bytes": "memcpy.h2d.bytes",
       "memcpy_d2h_calls": "memcpy.d2h.calls", "memcpy_d2h_bytes": "memcpy.d2h.bytes",
       "prefetch_to_device_calls": "prefetch.to_device.calls", "prefetch_to_device_bytes": "prefetch.to_device.bytes",
       "prefetch_to_host_calls": "prefetch.to_host.calls", "prefetch_to_host_bytes": "prefetch.to_host.bytes"}
#: gputop's figures shown without an oracle (nothing here counts them independently)
INFO = ("uvm_cpu_faults", "uvm_gpu_faults", "alloc_bytes", "free_calls")


def compare(name: str, report: dict[str, Any], counts: dict[str, int | None],
            smi_mib: int | None, gputop_mem: int | None) -> list[Line]:
    """One workload's lines."""
    oracle: dict[str, tuple[int, str]] = {}
    if report.get("trace"):
        oracle |= profiler_counts(json.loads(Path(report["trace"]).read_text()))
    oracle |= {OWN.get(k, k): (v, "own") for k, v in report.get("own", {}).items()}
    got: dict[str, int | None] = {}
    for k, v in counts.items():
        _add(got, _key(k), v)
    for metric in report.get("no_oracle", ()):
        oracle.pop(metric, None)
    lines = [Line(name, metric, value, source, None if source == "info" else
                  got.get(metric, 0 if metric.startswith(("kernel ", "graph kernel ")) else None))
             for metric, (value, source) in oracle.items()]
    lines += [Line(name, metric, None, "info", got.get(metric))
              for metric in (*INFO, *report.get("no_oracle", ())) if metric not in oracle]
    if smi_mib is not None or report.get("trace"):
        lines.append(memory_line(name, smi_mib, gputop_mem))
    return lines


def memory_line(name: str, smi_mib: int | None, gputop_mem: int | None) -> Line:
    """The process's GPU memory, MiB, against nvidia-smi's (no row there, a PID namespace: shown, not counted)."""
    return Line(name, "gpu_mem_mib", smi_mib, "nvidia-smi" if smi_mib is not None else "info",
                None if gputop_mem is None else round(gputop_mem / (1 << 20)))


def nvidia_smi_mib() -> dict[int, int]:
    """Per-process GPU memory (MiB) as nvidia-smi shows it."""
    if shutil.which("nvidia-smi") is None:
        return {}
    res = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30)
    out: dict[int, int] = {}
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = int(parts[1])
    return out


@dataclass
class Started:
    name: str
    proc: subprocess.Popen[bytes]
    report: Path
    smi_mib: int | None = None


def read_snapshots(path: Path) -> list[dict[str, Any]]:
    """gputop's JSON Lines so far: whole lines only (a long one is written in pieces)."""
    out = []
    for line in path.read_text().split("\n")[:-1]:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def start_gputop(cmd: list[str], out: Path, err: Path, bpf: bool = True) -> subprocess.Popen[bytes]:
    """gputop's batch JSON into ``out``, once its first snapshot is there (with ``bpf``: once its BPF
    collector runs); its pid in ``out``.pid. Exits with gputop's words when it does not start."""
    proc = subprocess.Popen(cmd, stdout=out.open("wb"), stderr=err.open("wb"))
    out.with_suffix(".pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if any(not bpf or s["sources"]["bpf"]["status"] == "ok" for s in read_snapshots(out)):
            return proc
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    said = err.read_text().strip().splitlines()
    raise SystemExit(f"gputop: error: gputop's {'BPF collector' if bpf else 'first snapshot'} did not come: "
                     f"{said[0] if said else 'it printed nothing'}\nhint: run `gputop doctor` on this host")


class Stopped(Exception):
    """SIGTERM (the caller's time limit): what was compared so far is kept."""


#: the width of a line's first column (workload and metric)
NAME_WIDTH = 56


def render_line(ln: Line) -> str:
    verdict = "info" if ln.source == "info" else "exact" if ln.exact else "DIFF"
    na = "N/A"
    name = f"{ln.workload}  {ln.metric}"
    name = name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 1] + "…"
    return (f"{name:<{NAME_WIDTH}}  {na if ln.oracle is None else ln.oracle:>12} {'(' + ln.source + ')':<16} "
            f"{na if ln.gputop is None else ln.gputop:>12}  {verdict}")


def summary(lines: list[Line]) -> str:
    counted = [ln for ln in lines if ln.source != "info"]
    return f"gpu validation: {sum(ln.exact for ln in counted)}/{len(counted)} exact"


class Harness:
    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args, self.out = args, out
        self.snapshots = out / "snapshots.jsonl"
        self.lines: list[Line] = []
        self.children: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        self.closed = False             # stopped: no more lines (a workload killed by the stop is not one)

    def start(self, name: str, go: Path | None = None) -> Started:
        report = self.out / f"{name}.report.json"
        cmd = [self.args.python, str(HERE / "gpu_workloads.py"), name, str(report),
               "--trace", str(self.out / f"{name}.trace.json")]
        if go is not None:
            cmd += ["--go", str(go), "--ready", str(self.out / f"{name}.ready")]
        if name.startswith("testbed"):
            cmd += ["--cudart", self.args.cudart]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
        if name in ALLOC_CONF:
            env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF[name]
        log = (self.out / f"{name}.log").open("wb")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.children.append(proc)
        return Started(name, proc, report)

    def finish(self, s: Started) -> Started:
        """Waits for the report; asks nvidia-smi while the workload is idle after its phase; waits for the exit."""
        deadline = time.monotonic() + self.args.timeout_s
        while not s.report.exists() and s.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if s.report.exists() and self.args.nvidia_smi:
            s.smi_mib = nvidia_smi_mib().get(s.proc.pid)
        try:
            s.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
        return s

    def gputop(self) -> subprocess.Popen[bytes]:
        cmd = [*shlex.split(self.args.gputop), "-b", "-f", "json", "-d", str(INTERVAL_S),
               "--no-bpf" if self.args.no_bpf else "--bpf", *([] if self.args.nvidia_smi else ["--no-nvml"])]
        proc = start_gputop(cmd, self.snapshots, self.out / "gputop.err", bpf=not self.args.no_bpf)
        self.children.append(proc)
        return proc

    def read(self) -> list[dict[str, Any]]:
        return read_snapshots(self.snapshots)

    def evaluate(self, s: Started) -> None:
        """One finished workload's lines, printed at once (a time limit that stops the run keeps them)."""
        report: dict[str, Any] = json.loads(s.report.read_text()) if s.report.exists() else {
            "error": f"no report: exit status {s.proc.returncode} (see {self.out / (s.name + '.log')})"}
        lines: list[Line] = []
        if report.get("error") or not report.get("phase"):
            print(f"{s.name}: not measured: {report.get('error')}", file=sys.stderr)
            lines.append(Line(s.name, "ran", 1, "own", 0))
        else:
            t1 = report["phase"][1]
            deadline = time.monotonic() + 10        # a snapshot past the idle time after the phase
            while time.monotonic() < deadline and not any(x["time"] > t1 + GAP_S for x in self.read()[-3:]):
                time.sleep(INTERVAL_S)
            rows = rows_of(self.read(), s.proc.pid)
            # gputop's GPU memory for the process while it is idle after its phase, when nvidia-smi was asked
            near = row_in(rows, t1, t1 + GAP_S) if self.args.nvidia_smi else None
            mem = None if near is None else near.get("gpu_mem_bytes")
            counts = None if self.args.no_bpf else phase_counts(rows, tuple(report["phase"]))
            if isinstance(counts, dict) and BY_ADDRESS in report.get("own", {}):
                counts[BY_ADDRESS] = shown_as_addresses(rows, tuple(report["phase"]))
            if counts is None:          # NVML's view only
                lines = [memory_line(s.name, s.smi_mib, mem)]
            elif isinstance(counts, str):
                print(f"{s.name}: {counts}", file=sys.stderr)
                lines.append(Line(s.name, "seen in both idle times", 1, "own", 0))
            else:
                lines = compare(s.name, report, counts, s.smi_mib, mem)
        with self.lock:
            if not self.closed:
                self.lines += lines
                print("\n".join(render_line(ln) for ln in lines), flush=True)

    def run(self, names: list[str]) -> None:
        first = [n for n in names if n.endswith("before")]
        befores = [self.start(n, go=self.out / f"{n}.go") for n in first]
        deadline = time.monotonic() + self.args.timeout_s
        for before in befores:          # warmed up (CUDA going) before gputop starts
            while not (self.out / f"{before.name}.ready").exists() and before.proc.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
        self.gputop()
        for before in befores:          # their phases one at a time, each alone
            (self.out / f"{before.name}.go").touch()
            self.evaluate(self.finish(before))
        rest = [n for n in names if n not in first]
        # SIGTERM goes to the main thread only: the kernel gives a process's signal to any thread that does not
        # block it, and one taken by a worker leaves the main thread asleep in future.result() (its handler runs
        # only there) until that workload is compared too
        pool = ThreadPoolExecutor(max_workers=self.args.jobs, initializer=signal.pthread_sigmask,
                                  initargs=(signal.SIG_BLOCK, {signal.SIGTERM}))
        try:
            for future in [pool.submit(lambda n: self.evaluate(self.finish(self.start(n))), n) for n in rest]:
                future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> list[Line]:
        """Every child gone (gputop with SIGTERM: it exits cleanly, detaching its probes); the lines so far."""
        with self.lock:
            self.closed = True
            lines = list(self.lines)
        for proc in self.children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.children:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return lines


def positive(text: str) -> int:
    """An argument that counts something: a whole number above 0."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"not a whole number above 0: {text!r}")
    return n


def _stopped(signum: int, frame: object) -> None:
    raise Stopped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gputop", default=f"{sys.executable} -m gputop.cli",
                    help="the command that runs gputop (default: this Python's gputop)")
    ap.add_argument("--python", default=sys.executable, help="the Python the workloads run in (PyTorch's)")
    ap.add_argument("--only", help="comma-separated workloads (default: all)")
    ap.add_argument("--jobs", type=positive, default=8, help="workloads at a time after `before` (default 8)")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="per workload")
    ap.add_argument("--out", type=Path, help="keep the snapshots, traces, reports and results.json here")
    ap.add_argument("--testbed", action="store_true", help="no GPU: the test bed's workload only (CI)")
    ap.add_argument("--no-bpf", action="store_true",
                    help="where BPF cannot run (gputop doctor says why): only NVML's per-process memory against "
                         "nvidia-smi")
    ap.add_argument("--cudart", help="--testbed: the libcudart it calls")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("gputop: error: the validation runs gputop's BPF collector, which needs root\nhint: run it with sudo",
              file=sys.stderr)
        return 77
    if args.testbed and not args.cudart:
        ap.error("--testbed needs --cudart")
    names = list(TESTBED) if args.testbed else (args.only.split(",") if args.only else [*BEFORE, *ORDER])
    unknown = [n for n in names if n not in WORKLOADS and n not in TESTBED]
    if unknown:
        ap.error(f"unknown workloads: {', '.join(unknown)} (known: {', '.join(WORKLOADS)})")
    args.nvidia_smi = not args.testbed
    out = args.out or Path(tempfile.mkdtemp(prefix="gputop-gpu-validate-"))
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):          # an earlier run's go, ready and report files would stand for this one's
        print(f"gputop: error: {out} is not empty\nhint: give --out a new or empty folder", file=sys.stderr)
        return 2
    harness = Harness(args, out)
    signal.signal(signal.SIGTERM, _stopped)
    complete = False
    try:
        harness.run(names)
        complete = True
    except Stopped:
        print("stopped (SIGTERM): the workloads not yet compared are left out", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        lines = harness.stop()
        print(summary(lines) + ("" if complete else " (stopped early)"), flush=True)
        (out / "results.json").write_text(json.dumps([ln.__dict__ | {"exact": ln.exact} for ln in lines], indent=1))
    counted = [ln for ln in lines if ln.source != "info"]
    return 0 if complete and counted and all(ln.exact for ln in counted) else 1


if __name__ == "__main__":
    sys.exit(main())
