"""Start-up: how soon gputop counts an already-running process, where the time goes, and its memory.

Run as root after ./test.sh has set up the test bed:

    .venv/bin/python bench/startup.py [--runs 5] [--steady-s 30] [--json PATH]

A workload on the REAL libcudart.so.12 launches at a steady ``--rate`` before gputop starts. Each
round runs gputop twice, side by side in alternating order:

- ``cached``: as users run it; the compiled BPF program is reused across runs (gputop/sources/
  bpf/compilecache.py; the cache is filled once before the first round);
- ``uncached``: ``GPUTOP_BPF_CACHE=off``, the full clang/LLVM compile at every start.

End to end, through the real ``gputop -b -n 1 -d 0.2 -f json -p PID --no-nvml --bpf``: the first
snapshot's time after the exec, and "probes live", the moment its first counted launch was made:
the snapshot's time minus its total launches over the workload's rate (the workload paces itself to
within a millisecond's launches; one launch at 2,000/s is 0.5 ms).

In-process (a fresh interpreter per round, the same steps as the collector): import time, each
start-up step (``BpfSource.startup_s``: bcc's module, headers and BTF, the compile, waiting for the
ELF reads done meanwhile, handing the compiler's memory back, attaching) and the resident memory
after each (``startup_rss_bytes``), then after ``--steady-s`` of 1 s refreshes; at the end, where
the memory is (``/proc/self/smaps`` by mapping). Prints medians and ratios; ``--json`` writes them all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import benchjson  # noqa: E402
from support import TESTBED, Testbed, runtime  # noqa: E402

MODES = ("cached", "uncached")

#: the collector's start-up in a fresh interpreter, reporting what it measured as one JSON line
_CHILD = r"""
import json, re, sys, time
t0 = time.perf_counter()
import gputop.cli
from gputop.sources.bpf import BpfSource
from gputop.sources.bpf.program.startup import rss_bytes
imports_s = time.perf_counter() - t0
rss_imports = rss_bytes()
src = BpfSource()
t1, c1 = time.perf_counter(), time.process_time()
src.start()
start_s, start_cpu_s = time.perf_counter() - t1, time.process_time() - c1
pid = int(sys.argv[1])
steady = []
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    src.poll(1.0)
    r = src.read()
    steady.append(rss_bytes())
launches = src.read().procs[pid].counters["launches"] if pid in src.read().procs else None
maps = {}
cur = None
for line in open("/proc/self/smaps"):
    if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
        parts = line.split(None, 5)
        cur = parts[5].strip() if len(parts) > 5 else "[anon]"
    elif line.startswith("Rss:"):
        maps[cur] = maps.get(cur, 0) + int(line.split()[1]) * 1024
rollup = {}
for line in open("/proc/self/smaps_rollup").read().splitlines()[1:]:
    k, v = line.split(":")
    rollup[k] = int(v.split()[0]) * 1024
top = dict(sorted(maps.items(), key=lambda kv: -kv[1])[:8])
print(json.dumps({"imports_s": imports_s, "start_s": start_s, "start_cpu_s": start_cpu_s, "compiled": src.compiled,
                  "steps_s": src.startup_s,
                  "rss_imports": rss_imports, "rss_steps": src.startup_rss_bytes,
                  "rss_steady": steady[-1] if steady else None, "released_bytes": src.startup_released_bytes,
                  "launches": launches, "rollup": rollup, "top_maps": top}))
src.close()
"""


#: parts of the start-up measured apart, in a fresh interpreter (with the cache filled)
_PARTS = r"""
import json, mmap, os, time
from gputop.sources.bpf.attach import discovery, symbols
from gputop.sources.bpf.common import btf
from gputop.sources.bpf.program import compilecache
from gputop.sources.bpf import TRACEFS, BpfSource, load_bcc, use_headers
from gputop.sources.bpf.common.abi import LIMITS
from gputop.sources.bpf.common.linux import BPF_TRACE_UPROBE_MULTI
out = {}
refs = discovery.scan()
def whole(path):
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return any(mm.find(m) >= 0 for m in symbols._MARKERS)
    except (OSError, ValueError):
        return False
t = time.perf_counter(); old = [whole(r.open_path) for r in refs]
out["prefilter_whole_file_s"] = time.perf_counter() - t
t = time.perf_counter(); new = [symbols.mentions_cuda(r.open_path) for r in refs]
out["prefilter_string_tables_s"] = time.perf_counter() - t
out["prefilter_objects"] = len(refs)
out["prefilter_mapped_bytes"] = sum(os.stat(r.open_path).st_size for r in refs if os.path.exists(r.open_path))
out["prefilter_verdicts_differ"] = sum(a != b for a, b in zip(old, new))
t = time.perf_counter(); btf.file_offsets.__wrapped__(btf.VMLINUX); out["btf_parse_s"] = time.perf_counter() - t
t = time.perf_counter(); compilecache.file_offsets(btf.file_offsets.__wrapped__, btf.VMLINUX)
out["btf_cached_s"] = time.perf_counter() - t
bcc = load_bcc(); headers = use_headers()
def decls(limits):
    src = BpfSource(limits=limits); src.uvm_cpu_faults = True
    text, cflags = compilecache.declarations_only(src.program_text()).encode(), src.cflags()
    t = time.perf_counter(); b = bcc.BPF(text=text, cflags=cflags); dt = time.perf_counter() - t
    b.cleanup()
    return dt
out["declarations_compile_s"] = decls(None)
out["declarations_compile_tiny_tables_s"] = decls({k: 16 for k in LIMITS})
src = BpfSource(); src.uvm_cpu_faults = True
b, how = compilecache.compile_program(bcc, src.program_text().encode(), src.cflags(), headers.path, TRACEFS)
data = compilecache.read(compilecache.key(bcc, src.program_text().encode(), src.cflags(), headers.path, TRACEFS))
times = {}
for name in (data or {}).get("funcs", {}):
    if not name.startswith("tracepoint__"):
        t = time.perf_counter(); b.load_func(name.encode(), 2, None, BPF_TRACE_UPROBE_MULTI)
        times[name] = time.perf_counter() - t
b.cleanup()
slowest = max(times, key=times.get) if times else None
out.update({"verify_programs": len(times), "verify_total_s": sum(times.values()), "verify_slowest": slowest,
            "verify_slowest_s": times.get(slowest) if slowest else None, "program_from": how})
print(json.dumps(out))
"""

def env_for(mode: str) -> dict[str, str]:
    env = {**os.environ}
    if mode == "uncached":
        env["GPUTOP_BPF_CACHE"] = "off"
    else:
        env.pop("GPUTOP_BPF_CACHE", None)
    return env


def end_to_end(mode: str, pid: int, rate: int) -> dict[str, float]:
    """Seconds from exec to the first counted launch and to the first snapshot, by the real CLI."""
    t_exec = time.time()
    out = subprocess.run([sys.executable, "-m", "gputop.cli", "-b", "-n", "1", "-d", "0.2", "-f", "json", "-p",
                          str(pid), "--no-nvml", "--bpf"], capture_output=True, text=True, timeout=120, check=True,
                         env=env_for(mode), cwd=ROOT).stdout
    snap = json.loads(out.splitlines()[0])
    (proc,) = [p for p in snap["processes"] if p["pid"] == pid]
    launches = proc["total"]["launches"]
    return {"probes_live_s": snap["time"] - launches / rate - t_exec, "first_snapshot_s": snap["time"] - t_exec,
            "launches": launches}


def in_process(mode: str, pid: int, steady_s: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(pid), str(steady_s)], capture_output=True, text=True,
                         timeout=300, check=True, env=env_for(mode), cwd=ROOT).stdout
    res: dict[str, Any] = json.loads(out.splitlines()[-1])
    return res


def parts() -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _PARTS], capture_output=True, text=True, timeout=300, check=True,
                         env=env_for("cached"), cwd=ROOT).stdout
    res: dict[str, Any] = json.loads(out.splitlines()[-1])
    return res


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="alternating rounds (medians over them)")
    ap.add_argument("--rate", type=int, default=2000, help="the workload's launches per second")
    ap.add_argument("--steady-s", type=float, default=30.0, help="refreshes before the steady RSS sample")
    benchjson.add_argument(ap)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/startup.py: error: needs root (BPF)\nhint: sudo .venv/bin/python bench/startup.py",
              file=sys.stderr)
        return 77
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia")
    wl_bin = runtime(tb, 12).dynamic
    load_before = os.getloadavg()
    duration_ms = int((args.runs * 2 * (12 + args.steady_s) + 120) * 1000)
    wl = subprocess.Popen([str(wl_bin), f"paced:{args.rate}:{duration_ms}"], stdout=subprocess.DEVNULL)
    e2e: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    inproc: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    part_runs: list[dict[str, Any]] = []
    try:
        time.sleep(0.5)
        end_to_end("cached", wl.pid, args.rate)           # fills the cache (not counted)
        for r in range(args.runs):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                e2e[mode].append(end_to_end(mode, wl.pid, args.rate))
                inproc[mode].append(in_process(mode, wl.pid, args.steady_s if r == 0 else 0.0))
                last, ip = e2e[mode][-1], inproc[mode][-1]
                print(f"round {r + 1} {mode:<8} probes live {last['probes_live_s']:.2f} s, first snapshot "
                      f"{last['first_snapshot_s']:.2f} s; in-process start {ip['start_s']:.2f} s ({ip['compiled']})",
                      flush=True)
            part_runs.append(parts())
    finally:
        wl.kill()
        wl.wait()
    load_after = os.getloadavg()
    figures: dict[str, Any] = {"runs": args.runs, "rate_per_s": args.rate, "steady_s": args.steady_s,
                               "loadavg_1m_before": load_before[0], "loadavg_1m_after": load_after[0]}
    for mode in MODES:
        ip = inproc[mode]
        steps = sorted({k for x in ip for k in x["steps_s"]})
        figures[mode] = {
            "probes_live_s": med([x["probes_live_s"] for x in e2e[mode]]),
            "probes_live_max_s": max(x["probes_live_s"] for x in e2e[mode]),
            "first_snapshot_s": med([x["first_snapshot_s"] for x in e2e[mode]]),
            "imports_s": med([x["imports_s"] for x in ip]),
            "start_s": med([x["start_s"] for x in ip]),
            "start_cpu_s": med([x["start_cpu_s"] for x in ip]),
            "steps_s": {k: med([x["steps_s"].get(k, 0.0) for x in ip]) for k in steps},
            "rss_imports_bytes": med([x["rss_imports"] for x in ip]),
            "rss_steps_bytes": {k: med([x["rss_steps"].get(k, 0) for x in ip]) for k in steps if k != "elf_read"},
            "rss_steady_bytes": ip[0]["rss_steady"],
            "released_bytes": med([x["released_bytes"] for x in ip]),
            "rollup_bytes": {k: ip[0]["rollup"][k] for k in ("Rss", "Pss", "Anonymous", "Shared_Clean")
                             if k in ip[0]["rollup"]},
            "top_maps_bytes": ip[0]["top_maps"],
            "compiled": sorted({x["compiled"] for x in ip}),
        }
    nums = [k for k, v in part_runs[0].items() if isinstance(v, (int, float))]
    figures["parts"] = {**{k: med([p[k] for p in part_runs]) for k in nums},
                        "verify_slowest": statistics.mode([p["verify_slowest"] for p in part_runs]),
                        "program_from": sorted({p["program_from"] for p in part_runs})}
    pt = figures["parts"]
    figures["prefilter_whole_over_tables"] = pt["prefilter_whole_file_s"] / pt["prefilter_string_tables_s"]
    figures["tables_cost_s"] = pt["declarations_compile_s"] - pt["declarations_compile_tiny_tables_s"]
    c, u = figures["cached"], figures["uncached"]
    figures["probes_live_uncached_over_cached"] = u["probes_live_s"] / c["probes_live_s"]
    figures["start_uncached_over_cached"] = u["start_s"] / c["start_s"]
    figures["start_cpu_uncached_over_cached"] = u["start_cpu_s"] / c["start_cpu_s"]
    figures["rss_attach_cached_over_uncached"] = (c["rss_steps_bytes"]["attach"] / u["rss_steps_bytes"]["attach"])
    mb = 1 << 20
    print(f"\nmedians of {args.runs} alternating rounds (load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after):")
    print(f"{'':<26}{'cached':>10}{'uncached':>10}")
    rows = [("probes live (exec ->)", "probes_live_s", 1, "s"), ("first snapshot (-d 0.2)", "first_snapshot_s", 1, "s"),
            ("imports", "imports_s", 1, "s"), ("BpfSource.start", "start_s", 1, "s"),
            ("  its CPU time", "start_cpu_s", 1, "s")]
    for label, k, scale, unit in rows:
        print(f"{label:<26}{c[k] / scale:>9.2f}{unit}{u[k] / scale:>9.2f}{unit}")
    for k in c["steps_s"]:
        print(f"  {k:<24}{c['steps_s'][k]:>9.2f}s{u['steps_s'].get(k, 0.0):>9.2f}s")
    print("RSS")
    print(f"  {'after imports':<24}{c['rss_imports_bytes'] / mb:>8.0f}MB{u['rss_imports_bytes'] / mb:>8.0f}MB")
    for k in c["rss_steps_bytes"]:
        cu = (c["rss_steps_bytes"][k] / mb, u["rss_steps_bytes"].get(k, 0) / mb)
        print(f"  {'after ' + k:<24}{cu[0]:>8.0f}MB{cu[1]:>8.0f}MB")
    print(f"  {f'after {args.steady_s:.0f} s':<24}{(c['rss_steady_bytes'] or 0) / mb:>8.0f}MB"
          f"{(u['rss_steady_bytes'] or 0) / mb:>8.0f}MB")
    print(f"ratios uncached/cached: probes live {figures['probes_live_uncached_over_cached']:.2f}, "
          f"start {figures['start_uncached_over_cached']:.2f}, its CPU time "
          f"{figures['start_cpu_uncached_over_cached']:.2f}")
    print(f"CUDA pre-filter over {pt['prefilter_objects']:.0f} mapped objects "
          f"({pt['prefilter_mapped_bytes'] / mb:.0f} MB): whole files {pt['prefilter_whole_file_s']:.3f} s, "
          f"symbol string tables {pt['prefilter_string_tables_s']:.3f} s "
          f"({pt['prefilter_verdicts_differ']:.0f} verdicts differ)")
    print(f"BTF offsets: parsed {pt['btf_parse_s']:.3f} s, cached {pt['btf_cached_s']:.4f} s")
    print(f"declarations compiled with gputop's tables {pt['declarations_compile_s']:.2f} s, with 16-entry tables "
          f"{pt['declarations_compile_tiny_tables_s']:.2f} s")
    print(f"verifying {pt['verify_programs']:.0f} programs {pt['verify_total_s']:.2f} s, slowest "
          f"{figures['parts']['verify_slowest']} {pt['verify_slowest_s']:.3f} s")
    benchjson.write(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
