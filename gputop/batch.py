"""Batch mode (``-b``): snapshots to stdout as JSON Lines or a top-like text table.

The table is the dashboard's process table (``gputop.view.columns.COLUMNS``: the same columns,
headers, formatting and sort), except that COMMAND goes last and is printed whole, like the
COMMAND of ``top -b``. No Textual: ``columns`` and ``format`` are pure.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

from gputop.model import GpuSample, ProcSample, Snapshot, snapshot_to_json
from gputop.view import columns
from gputop.view import format as fmt
from gputop.view.summary import summary_text

#: the dashboard's columns in its order, COMMAND moved to the end (the fleet view adds NODE after PID, and
#: NAMESPACE and POD after it where some process has a pod)
TABLE_COLUMNS: tuple[columns.Column, ...] = (
    *(c for c in columns.COLUMNS if c.key != "command" and c.key not in columns.FLEET_ONLY),
    columns.BY_KEY["command"],
)

#: what follows the command of a process that is not running (``ProcSample.state``)
_STATE_MARKS = {"exited": " (exited)", "stopped": " (stopped)"}


def _cell(col: columns.Column, p: ProcSample) -> str:
    text = col.render(p)   # every render sanitises text from other processes (gputop.textsafe)
    if col.key == "command":
        text += _STATE_MARKS.get(p.state, "")
    return text


def _line(shown: Sequence[columns.Column], cells: Sequence[str], widths: Sequence[int]) -> str:
    out = []
    for col, cell, width in zip(shown, cells, widths):
        if col is shown[-1]:
            out.append(cell)                    # the command: last, whole, not padded
        elif col.align == "left":
            out.append(cell.ljust(width))
        else:
            out.append(cell.rjust(width))
    return " ".join(out).rstrip()


def process_table(procs: Sequence[ProcSample], sort: str = columns.DEFAULT_SORT, reverse: bool = False) -> list[str]:
    """The header line and one line per process, sorted like the dashboard (``sort`` key, its natural
    direction unless ``reverse``). A column is as wide as its header, its values and the dashboard's
    width for it, whichever is widest."""
    fleet = columns.is_fleet(procs)
    keys = columns.visible([c.key for c in TABLE_COLUMNS], fleet, fleet and columns.has_pods(procs))
    shown = [columns.BY_KEY[k] for k in keys]
    rows = [[_cell(c, p) for c in shown] for p in columns.sort_processes(procs, sort, reverse)]
    headers = [c.header for c in shown]
    widths = [max([c.width, len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(shown)]
    return [_line(shown, headers, widths)] + [_line(shown, r, widths) for r in rows]


def _power(g: GpuSample) -> str:
    if g.power_w is None:
        return fmt.NA
    limit = f"/{fmt.num(g.power_limit_w)}" if g.power_limit_w is not None else ""
    return f"{fmt.num(g.power_w)}{limit}W"


def _rate(bytes_per_s: float | None) -> str:
    return fmt.NA if bytes_per_s is None else f"{fmt.bytes_(bytes_per_s)}/s"


def gpu_line(g: GpuSample) -> str:
    """One GPU as text, with the fields of the dashboard's GPU panel (without its bars and sparkline):
    utilisation, memory used/total, temperature, power/limit, PCIe RX (↓) / TX (↑), XID errors; in
    the fleet view the node comes first."""
    index = f"{g.index}" + (f".{g.mig_instance}" if g.mig_instance is not None else "")
    if g.node is not None:
        index = f"{fmt.text(g.node)}/{index}"
    temp = fmt.NA if g.temp_c is None else f"{g.temp_c:.0f}°C"
    mem = fmt.NA if g.mem_used_bytes is None and g.mem_total_bytes is None else (
        f"{fmt.bytes_(g.mem_used_bytes)}/{fmt.bytes_(g.mem_total_bytes)}")
    return (f"GPU {index} {fmt.text(g.name)}  util {fmt.pct(g.util_pct)}  mem {mem}  temp {temp}  "
            f"power {_power(g)}  pcie ↓{_rate(g.pcie_rx_bytes_per_s)} ↑{_rate(g.pcie_tx_bytes_per_s)}  "
            f"xid {fmt.text(g.xid_errors)}")


def table(snap: Snapshot, sort: str = columns.DEFAULT_SORT, reverse: bool = False,
          interval_s: float | None = None) -> str:
    """One refresh as text: a status line, the summary line (htop's Tasks:, ``Snapshot.summary``), GPU
    lines, then the process table. The status line says ``interval_s``, the refresh interval asked for
    (live: ``-d``), as the dashboard's header does; None (a recording): the snapshot's own, rounded."""
    # the dashboard header's words (fmt.source_state): "BPF ok  NVML off  UVM CPU only"
    src = "  ".join(f"{fmt.SOURCE_LABELS.get(k, fmt.text(k).upper())} {fmt.source_state(k, v)}"
                    # the fleet view with a node down: which, where the status is
                    + (f": {fmt.text(v.reason)}" if v.status == "degraded" and v.reason else "")
                    for k, v in snap.sources.items())
    bpf = snap.sources.get("bpf")
    cost = ""
    if bpf is not None and bpf.status == "ok" and "prometheus" not in snap.sources:   # the fleet has no such cost
        cost = (f"  cost {fmt.si(bpf.probe_hits_per_s)} hits/s {fmt.cpu_share(bpf.cost_ns_per_s)} CPU"
                f" (traps {fmt.cpu_share(bpf.traps_ns_per_s)} + programs {fmt.cpu_share(bpf.overhead_ns_per_s)})")
        if bpf.dropped:             # records that found no room: some counts are unknown (as the header says)
            cost += f"  dropped {fmt.si(bpf.dropped)}"
    every = fmt.interval(snap.interval_s if interval_s is None else interval_s)
    lines = [f"gputop - {fmt.clock(snap.time)}  {fmt.text(snap.host)}  every {every}  {src}{cost}"]
    lines.append(summary_text(snap.summary))
    lines += [gpu_line(g) for g in snap.gpus]
    lines += process_table(snap.processes, sort, reverse)
    return "\n".join(lines) + "\n"


def emit(snaps: Iterable[Snapshot], form: str, out: TextIO = sys.stdout, sort: str = columns.DEFAULT_SORT,
         reverse: bool = False, interval_s: float | None = None) -> None:
    for snap in snaps:
        out.write(snapshot_to_json(snap) + "\n" if form == "json" else table(snap, sort, reverse, interval_s) + "\n")
        out.flush()
