"""Batch mode (``-b``): snapshots to stdout as JSON Lines or a top-like text table."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from gputop.model import ProcSample, Snapshot, snapshot_to_json
from gputop.ui import format as fmt

# (header, width) of the batch table's columns, in order; USER and COMMAND are left-aligned
_COLUMNS: tuple[tuple[str, int], ...] = (
    ("PID", 7), ("USER", 9), ("COMMAND", 16), ("LAUNCH/s", 9), ("GRID", 7), ("BLOCK", 6),
    ("H2D/s", 8), ("D2H/s", 8), ("D2D/s", 8), ("LIVE", 8), ("SYNC%", 5), ("GPU", 3), ("GPUMEM", 8),
    ("SM%", 4), ("CPU%", 5), ("LB", 3),
)


def _row(p: ProcSample) -> list[str]:
    r = p.rates
    bw = r.memcpy_bytes_per_s if r and r.memcpy_bytes_per_s is not None else None
    return [
        str(p.pid), fmt.text(p.user), fmt.text(p.comm) + (" (exited)" if p.state == "exited" else ""),
        fmt.si(r.launches_per_s if r else None), fmt.num(p.grid_blocks_avg, 1), fmt.num(p.block_threads_avg),
        fmt.bytes_(bw.get("h2d") if bw else None), fmt.bytes_(bw.get("d2h") if bw else None),
        fmt.bytes_(bw.get("d2d") if bw else None),
        fmt.bytes_(p.total.live_alloc_bytes if p.total else None), fmt.pct(r.sync_wait_pct if r else None),
        fmt.text(p.gpu_index), fmt.bytes_(p.gpu_mem_bytes), fmt.pct(p.gpu_util_pct), fmt.pct(p.cpu_pct, 1),
        "*" if p.launch_bound else ("N/A" if p.launch_bound is None else ""),
    ]


def table(snap: Snapshot) -> str:
    """One refresh as text: a summary line, GPU lines, then processes by launch rate."""
    src = " ".join(f"{k}:{v.status}" for k, v in snap.sources.items())
    bpf = snap.sources.get("bpf")
    cost = ""
    if bpf is not None and bpf.status == "ok":
        cost = f"  probes {fmt.si(bpf.probe_hits_per_s)}/s  bpf cpu {fmt.cpu_share(bpf.overhead_ns_per_s)}"
    lines = [f"gputop - {fmt.clock(snap.time)}  {snap.host}  interval {snap.interval_s:.2f}s  {src}{cost}"]
    for g in snap.gpus:
        lines.append(f"GPU {g.index} {fmt.text(g.name)}  util {fmt.pct(g.util_pct)}  "
                     f"mem {fmt.bytes_(g.mem_used_bytes)}/{fmt.bytes_(g.mem_total_bytes)}  "
                     f"temp {fmt.num(g.temp_c)}C  power {fmt.num(g.power_w)}/{fmt.num(g.power_limit_w)}W  "
                     f"xid {fmt.text(g.xid_errors)}")
    lines.append(" ".join(h.rjust(w) if i not in (1, 2) else h.ljust(w)
                          for i, (h, w) in enumerate(_COLUMNS)))
    procs = sorted(snap.processes, key=lambda p: -(p.rates.launches_per_s or 0.0) if p.rates else 1.0)
    for p in procs:
        cells = _row(p)
        lines.append(" ".join(fmt.fit(c, w).rjust(w) if i not in (1, 2) else fmt.fit(c, w).ljust(w)
                              for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS, strict=False))))
    return "\n".join(lines) + "\n"


def emit(snaps: Iterable[Snapshot], form: str, out: TextIO = sys.stdout) -> None:
    for snap in snaps:
        out.write(snapshot_to_json(snap) + "\n" if form == "json" else table(snap) + "\n")
        out.flush()
