"""docs/PERFORMANCE.md, written from the benchmarks' ``--json`` figures (bench/performance.py runs
them). One renderer per section; each takes the figures of its benchmark and returns its Markdown.
The prose says how each figure is measured; every number in it comes from the figures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]


@dataclass(frozen=True)
class Section:
    name: str                       # the figures' file: <json dir>/<name>.json
    title: str
    script: str                     # bench/<script>
    args: tuple[str, ...]           # as bench/performance.py runs it
    render: Callable[[Doc], str]    # the section's body from the figures
    #: the tree before a change, to measure beside the current one: (git revision, the option naming it, the
    #: path inside that tree the option takes: "" for the tree itself)
    baseline: tuple[str, str, str] | None = None
    #: measured only when asked for by name or with --slow (the soak runs an hour)
    slow: bool = False


# -- number formats --------------------------------------------------------------------------------

def num(x: float | None, digits: int = 1) -> str:
    """A figure with thousands separators; N/A when unknown."""
    return "N/A" if x is None else f"{x:,.{digits}f}"


def ms(x_s: float | None, digits: int = 1) -> str:
    return "N/A" if x_s is None else f"{x_s * 1e3:,.{digits}f} ms"


def sec(x_s: float | None, digits: int = 2) -> str:
    return "N/A" if x_s is None else f"{x_s:,.{digits}f} s"


def pct(x: float | None, digits: int = 2) -> str:
    return "N/A" if x is None else f"{x:.{digits}f} %"


def ratio(x: float | None, digits: int = 2) -> str:
    return "N/A" if x is None else f"{x:.{digits}f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def measured(doc: Doc) -> str:
    """The command block and the conditions line every section starts with."""
    c = doc.get("conditions", {})
    start, end = c.get("loadavg_1m_start"), c.get("loadavg_1m")
    load = (f", load average {start:.1f} at the start and {end:.1f} at the end" if start is not None and end is not None
            else f", load average {end:.1f} at the end" if end is not None else "")
    cond = (f"Measured {c.get('date', '?')} on Linux {c.get('kernel', '?')}, {c.get('cpus', '?')} CPUs, "
            f"Python {c.get('python', '?')}{load}.")
    return f"```\n{doc['command']}\n```\n\n{cond}\n"


# -- sections ---------------------------------------------------------------------------------------

def graph_launch(doc: Doc) -> str:
    f = doc["figures"]
    return f"""{measured(doc)}
BPF run time per call (the kernel's BPF statistics) of gputop's handlers at both layers, through
the shim runtime, whose calls enter the real `libcuda.so.1`'s twins: `cudaLaunchKernel` →
`cuLaunchKernel` against `cudaGraphLaunch` → `cuGraphLaunch` of a captured graph of
{f['graph_kernels']} kernels, alternating rounds of {f['calls']:,} calls in one process (medians of
{f['rounds']} rounds). A graph launch adds the exec's kernel count and one launch to its content (three
hash lookups) instead of a kernel's record, so a graph launch costs
{ratio(f['graph_over_kernel'])} kernel launches of BPF time for the {f['graph_kernels']} kernels it runs
({num(f['graph_launch_bpf_ns'] / f['graph_kernels'])} ns per kernel). The benchmark also checks that every graph
kernel was counted.

{table(("kernel launch", "graph launch", "ratio graph / kernel"),
       [(f"{num(f['kernel_launch_bpf_ns'])} ns", f"{num(f['graph_launch_bpf_ns'])} ns",
         f"**{ratio(f['graph_over_kernel'])}**")])}
"""


def discovery(doc: Doc) -> str:
    f = doc["figures"]
    rows = []
    for kind, what in (("stays", "a process that keeps running"), ("exits", "a process that exits after ~5 ms")):
        for mode in ("events", "polling"):
            rows.append((what, mode, f"{f[f'{kind}_{mode}_probed']}/{f['rounds']}", ms(f[f"{kind}_{mode}_median_s"])))
    return f"""{measured(doc)}
The time from a process's first `mmap` of the real `libcudart.so.12` to gputop's probes on it, with
gputop's exec/mmap events (the default) and with the polling collector alone (a /proc scan every
{f['interval_s']:g} s), alternating, {f['rounds']} rounds each:

{table(("workload", "discovery", "probed", "median time to probes"), rows)}

A process that exits within a few milliseconds is probed only through the events: the BPF side names
the file it was asked about, and gputop probes it through that path (docs/collector.md).
"""


def exit_cost(doc: Doc) -> str:
    f = doc["figures"]
    quit_row = ("dashboard, `q` to exit (links)",
                f"median {sec(f['quit_median_s'])} ({sec(f['quit_min_s'])}–{sec(f['quit_max_s'])}, "
                f"{f['quit_runs']} runs)") if f["quit_runs"] else None
    rows = [("detach, uprobe_multi links (Linux 6.6+)", sec(f["detach_links_s"], 3)),
            ("detach, a perf event per probe", sec(f["detach_perf_s"], 3)),
            ("ratio perf / links", ratio(f["perf_over_links"], 1))]
    if quit_row:
        rows.append(quit_row)
    return f"""{measured(doc)}
A waiting process maps the real `libcudart.so.12` and `libcuda.so.1`; gputop attaches its full
probe set to both ({f['probes']} probes) and detaches it (`BpfSource.close()`), alternating the two
ways of attaching, medians of {f['rounds']} rounds; then the real dashboard, in tmux, probes the same
objects and `q` is pressed:

{table(("measured", "time"), rows)}

The kernel detaches perf-event uprobes one at a time, each waiting for an RCU grace period; links are
closed from parallel threads and their grace periods overlap.
"""


def nvml(doc: Doc) -> str:
    f = doc["figures"]
    return f"""{measured(doc)}
The fake `libnvidia-ml.so.1` (tests/native/fake_nvml.c) serves {f['gpus']} GPUs and {f['procs']}
processes, so this is gputop's own cost around NVML (Python, pynvml, ctypes); on a real driver every
call also enters the kernel. Side by side: the same pynvml calls in a bare loop, the floor any
pynvml-based reader pays. Medians of {f['reads']} reads:

{table(("figure", "value"), [
        ("NVML calls per refresh (C entry points)", num(f["c_calls_per_read"], 0)),
        ("pynvml calls per refresh", num(f["pynvml_calls_per_read"], 0)),
        ("time per refresh, `NvmlSource.read()`", ms(f["read_s"], 3)),
        ("time per refresh, bare pynvml loop", ms(f["bare_read_s"], 3)),
        ("ratio NvmlSource / bare", f"**{ratio(f['source_over_bare'])}**"),
    ])}

See [nvml.md](nvml.md) for what each call is for.
"""


def exporter(doc: Doc) -> str:
    f = doc["figures"]
    before = "cpu_before_pct" in f
    rev = COST_BEFORE[0]
    heads = ("figure", "`gputop exporter`", "`prometheus-node-exporter`",
             *((f"`gputop exporter` of {rev}",) if before else ()))

    def windows(key: str) -> str:
        return ", ".join(pct(x) for x in f[key])

    rows = [
        (f"CPU, % of a core (median of {f['rounds']} windows of {f['cpu_seconds']:g} s)",
         f"**{pct(f['cpu_gputop_pct'])}**", pct(f["cpu_node_pct"]), *((pct(f["cpu_before_pct"]),) if before else ())),
        ("each window", windows("gputop_cpu_pct_windows"), windows("node_cpu_pct_windows"),
         *((windows("before_cpu_pct_windows"),) if before else ())),
        ("scrape time (median)", ms(f["gputop_scrape_median_s"]), ms(f["node_scrape_median_s"]),
         *((ms(f["before_scrape_median_s"]),) if before else ())),
        ("one exposition", f"{f['gputop_series']:,} series, {f['gputop_body_bytes'] / 1024:,.0f} KiB",
         f"{f['node_series']:,} series, {f['node_body_bytes'] / 1024:,.0f} KiB", *(("",) if before else ())),
    ]
    side = (f"""Beside them over the same windows, the exporter of commit {rev} ({COST_BEFORE[1]}) at the same
defaults: now / before **{ratio(f['now_over_before'])}**.
""" if before else "")
    parts = f.get("breakdown")
    breakdown = ""
    if parts:
        cols = [k for k in ("now", "before") if k in parts]
        names = {"now": "now", "before": f"{rev}"}

        def row(label: str, key: str, unit: float = 1e3, digits: int = 1, suffix: str = " ms") -> tuple[str, ...]:
            return (label, *(f"{num(parts[c][key] * unit, digits)}{suffix}" for c in cols))

        breakdown = f"""
Where its CPU goes (`--breakdown`): the exporter's collector run in a process of its own as the exporter
runs it, on the same workloads, after the windows (each tree twice, A B then B A; medians of its thread's CPU
time):

{table(("part", *(names[c] for c in cols)), [
        row("a refresh (BPF maps, /proc of each process, deltas and rates)", "refresh_s"),
        row("rendering its snapshot for a scrape (families, exposition, gzip)", "render_s"),
        row("a full rescan of every process's maps (every 10 s)", "full_rescan_s"),
        row("between refreshes, per second (events of new programs, rescans, statistics windows)",
            "between_s_per_s", 1e3, 2, " ms/s"),
        ("so at the defaults (a refresh and a rendering every 15 s)",
         *(f"**{pct(parts[c]['steady_pct'])}** of a core" for c in cols)),
    ])}
"""
    return f"""{measured(doc)}
{f['procs']} traced processes of the test bed (its real `libcudart.so.12`), each launching a kernel
{f['rate_per_s']:,} times a second. `gputop exporter` at its defaults (`--listen` only: a
{f['scrape_interval_s']:g} s refresh, no per-kernel or call-site series, NVML where there is one: none here)
beside Debian's `prometheus-node-exporter` ({f['node_exporter'].split(" (")[0]}) at its defaults, both scraped every
{f['scrape_interval_s']:g} s as Prometheus scrapes them (its `Accept` header, gzip); the CPU of each (user +
system, every thread) over the same windows, side by side, as % of one core:

{table(heads, rows)}

{side}
The host forked {num(f['host_forks_per_s'], 1)} processes a second during the windows (median; each window:
{", ".join(num(x, 1) for x in f['host_forks_per_s_windows'])}), its load average
{", ".join(num(x, 1) for x in f['loadavg_windows'])} at their ends: the exporter handles every exec on the
host (it looks for CUDA libraries in each new program and classifies each new file a program maps), so
other work on a host adds to its figure; node_exporter's does not depend on it.
{breakdown}
The goal of at most {f['goal_pct']:g} % of a core: {verdict(f['cpu_gputop_pct'] <= f['goal_pct'])}{_exporter_gap(f)}.
What the exporter does less than before at the same defaults: a scrape's exposition is written by gputop's
own encoder (`gputop/exporter/exposition.py`, byte for byte what prometheus_client writes, in a fraction
of its time); the histograms' cumulative buckets are summed once; no launch is sampled for its call site unless
`--call-site-metrics` asks for call sites; an exec of a program that never called a probed function walks
no table (most execs on a host: each walked a million-bucket hash table five times); the launch slots and
every process's maps are read with less Python per entry.
"""


def _exporter_gap(f: Doc) -> str:
    """By how much the exporter misses its goal, and what its CPU is left with."""
    goal, cpu = f["goal_pct"], f["cpu_gputop_pct"]
    if cpu <= goal:
        return f" ({pct(cpu)})"
    text = f" here: {pct(cpu)}, {num(cpu - goal, 2)} points over"
    parts = (f.get("breakdown") or {}).get("now")
    if parts:
        steady = parts["steady_pct"]
        between = pct(100 * parts["between_s_per_s"])
        text += (f"; the breakdown's steady figure, {pct(steady)}, is {num(steady - goal, 2)} over, {between} of it "
                 "the collector's time between refreshes (it wakes "
                 "five times a second to poll the BPF ring buffer and open the statistics windows, and rescans every "
                 "process's maps every 10 s), which neither a refresh nor a scrape holds")
    return text


def self_cost(doc: Doc) -> str:
    f = doc["figures"]
    sh, cal, real = f["shown_median"], f["calibration"], f["real_libcudart"]
    ms_s = 1e6  # ns per s -> ms per s
    lk, pf = cal["links"], cal["perf"]
    return f"""The header's `cost … CPU (traps … + programs …)` (`sources.bpf.cost_ns_per_s`) is what the traced
processes pay for gputop's probes, in CPU ns per second:

    cost_ns_per_s = entry hits/s × trap_ns + return hits/s × return trap + programs' run ns/s

- **Programs**: BPF run-time statistics (`BPF_ENABLE_STATS`), held on {f['stats_window_s']:g} s in every
  {f['stats_period_s']:g} s ({100 * f['stats_window_s'] / f['stats_period_s']:g} % of the time: while they are on,
  every BPF program on the host pays two more clock reads per run), give the programs' run time and their runs
  by kind (uprobes at entry, at return, tracepoints).
- **Traps**: every uprobe hit first pays the breakpoint trap and the kernel's dispatch, several
  times the program's run time. gputop measures it on the host once per kernel release, CPU model
  and attach mode (cached in `trap-cost.json` in its cache directory), on a background thread after
  the first snapshot, or with `gputop doctor`: a machine-code loop calls a tiny function that starts
  with `push %rbp` (as libcudart's `cudaLaunchKernel` does; the kernel emulates it) without a probe,
  with an empty BPF program on its entry, and on its entry and return, attached as gputop attaches;
  the calling thread's CPU time, alternating rounds, medians (docs/collector.md).

{measured(doc)}
A loop launching through the real `libcudart.so.12` at {f['rate_per_s']:,} launches/s runs alone and with
gputop's BPF source attached (polled and read as the collector does), {f['rounds']} rounds of
{f['seconds']:g} s, A B A B ({f['rounds_discarded']} discarded); its CPU time per second, medians; against the
cost gputop showed over the same runs (its statistics windows' median), less the tracepoint programs' share
(exec/mmap/fault tracepoints run for every process on the host, not for the loop). Each round uses a fresh
private copy of the library, and a round is discarded when a short run through that copy afterwards shows
another tracer's uprobe on it (one trap serves every tracer probing a function):

{table(("figure", "measured"), [
        ("the loop alone", f"{num(f['loop_cpu_alone_median_ns_per_s'] / ms_s, 2)} ms/s of CPU"),
        ("the loop with gputop attached", f"{num(f['loop_cpu_with_gputop_median_ns_per_s'] / ms_s, 2)} ms/s"),
        ("extra CPU the loop paid (B − A)",
         f"**{num(f['extra_ns_per_s'] / ms_s, 2)} ms/s** ({num(f['extra_ns_per_launch'], 0)} ns per launch)"),
        ("gputop showed (`cost_ns_per_s`)",
         f"{num(sh['cost_ns_per_s'] / ms_s, 2)} ms/s = {num(sh['entry_hits_per_s'], 0)} entry hits/s × "
         f"{num(sh['trap_ns'], 0)} ns + programs {num(sh['programs_ns_per_s'] / ms_s, 2)} ms/s"),
        ("of which tracepoint programs (not the loop's)", f"{num(sh['tracepoint_ns_per_s'] / ms_s, 2)} ms/s"),
        ("shown for the loop", f"**{num(f['shown_for_loop_ns_per_s'] / ms_s, 2)} ms/s**"),
        ("shown / measured", f"**{ratio(f['shown_over_measured'])}** (must be {1 - f['tolerance']:.2f}–"
         f"{1 + f['tolerance']:.2f}: {verdict(bool(f['within_tolerance']))})"),
    ])}

The trap calibration, in the same run, against the trap the real `cudaLaunchKernel` pays (CPU ns per
call of {real['calls']:,} calls through a private copy of `libcudart.so.12` with an empty uprobe on it,
minus without, alternating rounds, medians):

{table(("", "ns per hit"), [
        ("calibration, uprobe_multi link (as gputop attaches on 6.6+)",
         f"{num(lk['trap_ns'], 0)} (+{num(lk['return_ns'], 0)} with a return probe)"),
        ("calibration, a perf event per probe",
         f"{num(pf['trap_ns'], 0)} (+{num(pf['return_ns'], 0)} with a return probe)"),
        ("the real `cudaLaunchKernel` (link)",
         f"{num(real['trap_ns'], 0)} ({num(real['none_ns'], 0)} → {num(real['empty_uprobe_ns'], 0)} per call)"),
        ("calibration / real", f"**{ratio(real['calibration_over_real'])}**"),
    ])}

The calibration moves between runs on a busy host (`gputop doctor` measures it again and refreshes
the cache). What the figure leaves out: a driver entry point whose first instruction the kernel cannot
emulate (`cuLaunchKernel` in `libcuda.so.1` begins with a RIP-relative `cmpl`) pays more per hit than
the calibrated trap; where another tracer probes the same function, the trap is shared.
"""


def fleet_scale(doc: Doc) -> str:
    f = doc["figures"]
    feed, ui, r = f["feed"], f["dashboard"], f["ratios"]
    cols = [("whole_dashboard", "whole"), ("whole_batch", "whole_before"), ("small_dashboard", "small")]
    have = [(fk, uk) for fk, uk in cols if uk in ui or uk != "whole_before"]
    n_small = feed["small_dashboard"]["processes"]

    def keys(uk: str, name: str) -> str:
        u = ui.get(uk)
        return "–" if u is None else f"{ms(u[name + '_ms'] / 1000, 0)} (max {ms(u[name + '_max_ms'] / 1000, 0)})"

    def mem(uk: str) -> str:
        u = ui.get(uk)
        if u is None:
            return "–"
        child = f" + reader {u['worker_max_rss_mib']:,.0f} MiB" if u["worker_max_rss_mib"] else ""
        return f"{u['max_rss_mib']:,.0f} MiB{child}"

    def ui_num(uk: str, name: str, digits: int = 2) -> str:
        u = ui.get(uk)
        return "–" if u is None else num(u[name], digits)

    rows = [
        ("queries per refresh", *(f"{feed[fk]['queries_per_refresh']}" for fk, _ in have)),
        (f"seconds per refresh, feed alone (median of {f['refreshes']})",
         *(sec(feed[fk]["s_per_refresh"]) for fk, _ in have)),
        ("CPU seconds of the dashboard's process per refresh, feed alone",
         *(num(feed[fk]["cpu_s_per_refresh"], 2) for fk, _ in have)),
        ("dashboard: seconds per refresh", *(ui_num(uk, "wall_s_per_refresh") for _, uk in have)),
        ("dashboard: CPU seconds per refresh (its process)", *(ui_num(uk, "cpu_s_per_refresh") for _, uk in have)),
        ("dashboard: peak memory (VmHWM)", *(mem(uk) for _, uk in have)),
        ("page down while a refresh is read, median of 20", *(keys(uk, "pagedown_busy") for _, uk in have)),
        ("sort by the next column while a refresh is read", *(keys(uk, "sort_busy") for _, uk in have)),
        ("page down, paused", *(keys(uk, "pagedown") for _, uk in have)),
        ("sort by the next column, paused", *(keys(uk, "sort") for _, uk in have)),
    ]
    def rows_of(name: str, nodes: int) -> str:
        """``N processes`` and, where the dashboard read its top rows only, how many it read."""
        procs, rows = nodes * f["procs_per_node"], ui.get(name, {}).get("rows", 0)
        return f"{procs:,} processes" + (f", the top {rows:,} rows read" if 0 < rows < procs else "")

    heads = {"whole_dashboard": f"{f['nodes']:,} nodes ({rows_of('whole', f['nodes'])}), now",
             "whole_batch": "the same, read as before (every family, parsed in the dashboard's process; today's table)",
             "small_dashboard": f"{f['small_nodes']} nodes ({rows_of('small', f['small_nodes'])}), now"}
    return f"""{measured(doc)}
A synthetic fleet written as OpenMetrics ({f['series']:,} series: 22 per process as the exporter
serves them, less histogram buckets, and 8 GPUs per node; 5 samples 30 s apart), loaded with
`promtool tsdb create-blocks-from openmetrics`, served by Debian's Prometheus 2.42 on loopback at
niceness {f['prometheus_nice']} (on this 2-core VM it stands in for the fleet's Prometheus on another host;
`--prometheus-nice 0` makes it compete with the dashboard), and read by the real fleet feed and the
real dashboard (Textual, headless, 160×45, configured as `gputop --prometheus` runs it). Keys are
timed from press to screen updated through Textual's test pilot (its own round trip is about 85 ms),
pressed only while the feed's thread is reading a refresh (the feed refreshes back to back).

{table(("figure", *(heads[fk] for fk, _ in have)), rows)}
{_fleet_side(f)}
Side by side in this run: reading the whole fleet as the dashboard does now takes
{ratio(1 / r['refresh_batch_over_dashboard'])} of the time it took before and
{_fraction(1 / r['cpu_batch_over_dashboard'])} of the CPU in the dashboard's process; the whole fleet takes
{num(r['refresh_whole_over_small'], 0)}× the time of {f['small_nodes']} nodes for
{num(f['nodes'] / f['small_nodes'], 0)}× the processes, with the same number of queries. Page down
while a refresh is read: {ratio(r['pagedown_busy_whole_over_small'])}× the time it takes at {n_small:,} rows;
sorting: {ratio(r['sort_busy_whole_over_small'])}× ({ratio(r['sort_whole_over_small'])}× paused). What each part does:

- The dashboard reads its table's top {f['dashboard']['whole']['rows']:,} rows by the sort column (`topk` in PromQL) and
  the fleet's totals summed by Prometheus ({feed['whole_dashboard']['queries_per_refresh']} queries: every one but the
  GPUs' answers at most a few hundred series), and everything for the one or two processes shown in details
  or compare ([fleet.md](fleet.md#the-tables-top-rows)); a sort or filter change reads again at once. Each
  per-process gauge family is a query of its own: one selector of the six by a regular expression on
  `__name__` cost Prometheus about twice the CPU.
- Answers are read and parsed in a child process (`gputop.feeds.fleet_worker`, niceness +10), which hands
  each snapshot back pickled in chunks of 500 processes; the feed's thread unpickles one chunk at a
  time, with the cyclic collector off while it does, and the dashboard's thread runs between
  chunks. Before, `json.loads` held the interpreter lock for a whole answer (tens of megabytes), and
  the cyclic collector walked the growing snapshot again and again: the seconds-long key waits in
  the middle column.
- Sorting the rows is the dashboard's own work on its thread (`gputop.view.columns.ProcOrder`), on the top
  rows read, or on 64,000 where a sort by a label (PID, node, command) reads the whole fleet:
  once a snapshot, lazily, the ties' order and each column's values as lists of plain values,
  built with C-level loops (a loop in Python bytecode hands the interpreter to the feed's thread
  every 5 ms while it unpickles a refresh; a tuple per row sets off collections over the snapshot);
  a sort is then one C-level `list.sort` of indices, kept per column and direction. The table gets
  a view of the rows (no list of 64,000) and finds the selected row with `list.index`; it draws
  only the visible lines.
"""


def _fleet_side(f: Doc) -> str:
    """The whole fleet read as the dashboard reads it, now and by the tree before (``--baseline-tree``), and
    the goal of issue 38 (item 7)."""
    wall = f["dashboard"]["whole"]["wall_s_per_refresh"]
    goal = (f"The goal of at most 5 s a refresh at {f['nodes'] * f['procs_per_node']:,} processes (the dashboard's "
            f"seconds per refresh above): {verdict(wall <= 5.0)} ({sec(wall)}).")
    side = f.get("side_by_side")
    if side is None:
        return f"\n{goal}\n"
    now, before = side["now"], side["before"]
    # the baseline tree's commit (its directory's name ends with it, as performance.py extracts it)
    base = f.get("baseline", COST_BEFORE[0])
    what = COST_BEFORE[1] if base == COST_BEFORE[0] else "before the dashboard read its top rows only"
    rows = [
        ("queries per refresh", str(now["queries_per_refresh"]), str(before["queries_per_refresh"]), ""),
        (f"seconds per refresh (median of {now['refreshes']})", sec(now["s_per_refresh"]),
         sec(before["s_per_refresh"]), ratio(now["s_per_refresh"] / before["s_per_refresh"])),
        ("CPU seconds of Prometheus per refresh", num(now["prometheus_cpu_s_per_refresh"], 2),
         num(before["prometheus_cpu_s_per_refresh"], 2),
         ratio(now["prometheus_cpu_s_per_refresh"] / before["prometheus_cpu_s_per_refresh"])),
        ("CPU seconds of the reader process per refresh", num(now["reader_cpu_s_per_refresh"], 2),
         num(before["reader_cpu_s_per_refresh"], 2),
         ratio(now["reader_cpu_s_per_refresh"] / before["reader_cpu_s_per_refresh"])),
        ("CPU seconds of the dashboard's process per refresh", num(now["cpu_s_per_refresh"], 2),
         num(before["cpu_s_per_refresh"], 2), ratio(now["cpu_s_per_refresh"] / before["cpu_s_per_refresh"])),
    ]
    return f"""
The whole fleet read as the dashboard reads it, this tree and commit {base} ({what}) side
by side (`--baseline-tree`: {f['rounds']} rounds, A B then B A, each a feed in a process of its own):

{table(("figure", "now", base, "now / before"), rows)}

{goal} A refresh at this size is about {num(now["prometheus_cpu_s_per_refresh"] + now["reader_cpu_s_per_refresh"]
                                            + now["cpu_s_per_refresh"], 0)} CPU seconds on a 2-core host that
runs Prometheus too: {_fleet_cost(f)}
"""


def _fraction(x: float) -> str:
    """A share: 0.42, or 1/997 where two decimals would read 0.00."""
    return ratio(x) if x >= 0.01 else f"1/{1 / x:,.0f}"


def _fleet_cost(f: Doc) -> str:
    """What a refresh's CPU goes to: the dashboard's top rows and the totals, or every process."""
    if f["dashboard"]["whole"]["rows"] < f["nodes"] * f["procs_per_node"]:     # it read the top rows only
        return """Prometheus selecting each summed family's 64,000 series once or twice for
the totals and the sort column's for `topk`, and the GPUs' series (the largest answer now: the GPU panel's
96,000, or the 48,000 its lines per node show once it has more than 16 GPUs); the reader process parsing a few
hundred rows and the GPUs. Before, Prometheus selected and
encoded some 1.3 million series (22 a process) and the reader parsed their JSON into 64,000 rows; at most
two cores work on it at once."""
    return """Prometheus selecting and encoding some 1.3 million series (22 a process), the reader
process parsing their JSON and building 64,000 rows, the dashboard's process taking them; at most two cores
work on it at once."""


#: the dashboard section's baseline: the commit before the last dashboard work, and that work
UI_BEFORE = ("ff1dd84", "issue 33's dashboard work")
#: the tree before issue 38's cost work (item 7): the exporter's and the fleet view's baseline
COST_BEFORE = ("8054b1c", "before issue 38's cost work")


def ui_cpu(doc: Doc) -> str:
    f = doc["figures"]
    rows = [
        (f"gputop, {f['processes']} rows, {1 / f['refresh_s']:g} Hz", f"{pct(f['gputop_cpu_pct'])} of a core"),
        ("htop, same seconds", pct(f["htop_cpu_pct"])),
        ("**gputop / htop**", f"**{ratio(f['ratio'])}×** (windows {ratio(min(f['ratio_windows']))}–"
         f"{ratio(max(f['ratio_windows']))}; target ≤ {f['target_ratio']:g}×: {verdict(bool(f['target_met']))})"),
    ]
    before = ""
    if f.get("baseline_cpu_pct") is not None:
        rows += [(f"gputop before {UI_BEFORE[1]} ({UI_BEFORE[0]}), same seconds", pct(f["baseline_cpu_pct"])),
                 ("gputop / before", f"{ratio(f['ratio_to_baseline'])}× (windows "
                  f"{ratio(min(f['ratio_to_baseline_windows']))}–{ratio(max(f['ratio_to_baseline_windows']))})")]
        before = (f" and, with `--baseline-tree` (bench/performance.py extracts commit {UI_BEFORE[0]} there), beside "
                  f"gputop from the tree before {UI_BEFORE[1]} (same Python, same recording)")
    rows.append(("first frame (`starting…`) / first frame with data",
                 f"{sec(f['first_frame_s'])} / {sec(f['first_data_frame_s'])}"))
    return f"""{measured(doc)}
gputop replays {f['processes']} busy processes at {1 / f['refresh_s']:g} Hz in a {f['terminal'].replace('x', '×')}
tmux pane (every process's rates change every second, so every visible row is redrawn at each refresh: the worst
case), beside htop (`-d 10`){before}. CPU is read from schedstat over {f['windows']} windows of {f['window_s']:g} s
after {f['warmup_s']:g} s of warm-up; figures are medians of the windows, ratios the median of the windows' ratios
({f['host_processes']} processes on the host):

{table(("figure", "value"), rows)}

htop's cost grows with the number of processes on the host (it reads all of them each second), so the
ratio depends on the host: it is what this run measured side by side, not a constant of gputop.

What a refresh costs, and what keeps it low (gputop/ui/widgets/, gputop/ui/driver.py, gputop/ui/gcsettings.py):
- The process table repaints only the screen lines whose text or look changed: `set_rows`
  compares each visible line's cells (and tag, cursor, exited) with what is drawn there and
  refreshes runs of changed lines. A process whose figures did not change costs no redraw (this
  bench changes every row, so it measures the redraw of all of them).
- The table hands Textual its lines itself (`ProcTable.render_lines`): Textual's generic pass for
  borders, padding, tint and opacity (the table has none) built two more strips a line, about
  three quarters of the table's drawing; a row kept from the last refresh keeps its filtered strip.
- Per line: the width is measured once a repaint, component styles are kept until the theme
  changes, cut and padded cell text is memoised, and a part Rich measures character by character
  (an ellipsis `…`) gets a segment of its own.
- The header, the summary line and the GPU panel lay their lines out once a state and are redrawn
  only when their text or styles change (a paused clock, an idle GPU cost nothing); they have no
  links, so Textual's per-segment link scan is off for them.
- The input thread: Textual's wakes ten times a second to look for a stop (1.2 ms of CPU a second,
  idle); gputop's driver (`gputop/ui/driver.py`) sleeps until a key, an escape sequence's timeout
  or the stop, so it takes no CPU between keys.
- The garbage collector: CPython collects its young generation after 700 net new containers,
  less than one 64-row repaint makes and frees, so it ran every frame, and now and then a full
  collection walked every object of the process. The dashboard sets the threshold to 5,000 and
  freezes the start-up objects (`gcsettings.tune`).

Left as they are: Textual's own per-line work (cutting lines at widget edges, writing them) and the
view's formatting and ordering of the rows (gputop/view) are now most of a frame; the GPU panel and
the header are drawn from `Content` when they change.
"""


def mb(x_bytes: float | None) -> str:
    return "N/A" if x_bytes is None else f"{x_bytes / 2**20:,.0f} MiB"


def startup(doc: Doc) -> str:
    f = doc["figures"]
    c, u, parts = f["cached"], f["uncached"], f["parts"]
    cs, us = c["steps_s"], u["steps_s"]
    cr, ur = c["rss_steps_bytes"], u["rss_steps_bytes"]
    rows = [
        ("probes live, from exec", f"{sec(c['probes_live_s'])} (max {sec(c['probes_live_max_s'])})",
         sec(u["probes_live_s"])),
        ("first snapshot (`-d 0.2`), from exec", sec(c["first_snapshot_s"]), sec(u["first_snapshot_s"])),
        ("`BpfSource.start()`", sec(c["start_s"]), sec(u["start_s"])),
        ("its CPU time (all threads)", sec(c["start_cpu_s"]), sec(u["start_cpu_s"])),
        ("the compile (cached: the declarations, the maps, the tracepoints)", sec(cs["compile"]), sec(us["compile"])),
        ("attaching (programs verified, links, code ranges)", sec(cs["attach"]), sec(us["attach"])),
        ("reading the mapped ELF objects, on a thread during the compile", sec(cs["elf_read"]), sec(us["elf_read"])),
        ("RSS after the compile", mb(cr["compile"]), mb(ur["compile"])),
        ("RSS once the compiler's memory is handed back", mb(cr["release"]), mb(ur["release"])),
        (f"RSS after attaching / after {f['steady_s']:g} s of refreshes",
         f"{mb(cr['attach'])} / {mb(c['rss_steady_bytes'])}", f"{mb(ur['attach'])} / {mb(u['rss_steady_bytes'])}"),
    ]
    live_ok = c["probes_live_s"] <= 1.0
    rss_ok = c["rss_steady_bytes"] <= 120e6
    return f"""{measured(doc)}
A workload on the real `libcudart.so.12` launches {f['rate_per_s']:,} times a second before gputop starts.
Each round runs gputop both ways, alternating the order: `cached`, as users run it (the compiled BPF
program reused across runs, `gputop/sources/bpf/program/compilecache.py`, [collector.md](collector.md)), and `uncached`
(`GPUTOP_BPF_CACHE=off`: bcc's full clang/LLVM compile at every start). End to end, through the real
`gputop -b -n 1 -d 0.2 -f json -p PID --no-nvml --bpf`: "probes live" is the first snapshot's time minus
its launches over the rate (when its first counted launch was made), from the exec. In-process, a fresh
interpreter per round runs the collector's start-up and reports each step (`BpfSource.startup_s`) and the
resident memory after it (`startup_rss_bytes`); a third one measures parts of the start-up apart. Medians
of {f['runs']} rounds; load average {f['loadavg_1m_before']:.1f} at the start and {f['loadavg_1m_after']:.1f}
at the end.

{table(("measured", "cached", "uncached"), rows)}

Ratios uncached / cached: probes live {ratio(f['probes_live_uncached_over_cached'], 1)}, start-up
{ratio(f['start_uncached_over_cached'], 1)}, its CPU time {ratio(f['start_cpu_uncached_over_cached'], 1)}. The
first start after an upgrade (of gputop, bcc, the kernel or its headers) compiles in full and fills the cache.
Targets (issue 12): probes live ≤ 1.0 s: {verdict(live_ok)}; RSS ≤ 120 MB (10⁶ bytes) after start-up:
{verdict(rss_ok)}.

Where the time goes (the parts measured apart, same run):

- **The compile**: bcc runs clang over the program (1,700 lines plus kernel headers) and LLVM's
  optimiser. With the bytecode reused, what is left is bcc's compile of the program's declarations,
  {sec(parts['declarations_compile_s'])} ({sec(parts['declarations_compile_tiny_tables_s'])} with 16-entry tables:
  creating the preallocated maps costs {sec(f['tables_cost_s'])}), and loading and attaching the tracepoints.
- **ELF reading**: the CUDA pre-filter searches the string tables the symbol tables name,
  {sec(parts['prefilter_string_tables_s'], 3)} for the {parts['prefilter_objects']} objects
  ({mb(parts['prefilter_mapped_bytes'])}) this host's processes mapped, against
  {sec(parts['prefilter_whole_file_s'], 3)} searching every file whole
  ({ratio(f['prefilter_whole_over_tables'], 0)}×; verdicts that differ: {parts['prefilter_verdicts_differ']}). The
  symbol reads run on a thread while the compile runs (libbcc holds no Python lock).
- **BTF**: parsing the kernel's BTF for the struct offsets takes {sec(parts['btf_parse_s'], 3)}; it runs at start
  on the collector's thread and is cached per kernel build ({sec(parts['btf_cached_s'], 4)}).
- **Verification**: the kernel verifies {parts['verify_programs']} programs in {sec(parts['verify_total_s'])}
  (`{parts['verify_slowest']}` alone {sec(parts['verify_slowest_s'], 3)}); launch probes are attached first, so a
  running process is counted before the rest.
- **Memory**: after the compile, {mb(c['released_bytes'])} (cached; {mb(u['released_bytes'])} uncached) are handed
  back: glibc's heap is trimmed and the clean, read-only pages of clang's and LLVM's code, which only the compile
  runs, are dropped with `madvise(MADV_DONTNEED)`.

`tests/bpf/test_startup.py` pins what can be pinned without timing: the cached program is the
compiled one (same maps; the kernel's tag of every function equal), a process running before gputop
starts is counted exactly by the start-up scan alone (both ways), a stored function the kernel refuses
drops its entry, and in a fresh interpreter RSS once the memory is handed back is below 0.6× RSS after
the compile.
"""


def soak(doc: Doc) -> str:
    """bench/soak.py's own JSON (``--out``): memory and exactness over a long churn."""
    a, base, after = doc["args"], doc["baseline"], doc["after"]
    cmd = (f"nice -n 10 .venv/bin/python bench/soak.py --duration-s {a['duration_s']:g} --short {a['short']} "
           f"--long {a['long']} --out FILE")
    rows = [
        ("gputop's RSS: at the baseline / after the churn / the most seen",
         f"{mb(base['rss_bytes'])} / {mb(after['rss_bytes'])} / {mb(doc['rss_max_bytes'])}"),
        ("objects probed at the baseline / after", f"{base['objects']} / {after['objects']}"),
        ("open fds besides the probes' at the baseline / after", f"{base['fds']} / {after['fds']}"),
        ("the probes' descriptors (links, perf events) at the baseline / after",
         f"{base['probe_fds']:,} / {after['probe_fds']:,}"),
        (f"long-lived processes exact ({doc['long_expected']:,} launches each)", f"{doc['long_exact']} / {a['long']}"),
        (f"short-lived processes exact ({a['short_launches']} launches each)",
         f"{doc['short_exact']:,} / {doc['short_started']:,} (under {doc['short_under']}, "
         f"missing {doc['short_missing']}, over {doc['short_over']})"),
    ]
    return f"""```
{cmd}
```

{a['long']} traced long-lived processes launch in bursts while {a['short']:,} short-lived ones come and go over
{a['duration_s'] / 60:g} minutes (docs/RELIABILITY.md says what each check proves); run at niceness 10 beside
other work on this host, so a miss can come from refreshes that ran late:

{table(("measured", "value"), rows)}

The memory after the churn holds each probed object's symbols and links: the objects probed are
every copy of the CUDA libraries the host's processes mapped during the run (other tests' private copies
on this host), and gputop keeps an object's probes attached after the last process that mapped it has
gone. (Since this run, objects no process maps are detached after 300 s unmapped, at most 8 kept
meanwhile: docs/collector.md, "Attaching and detaching"; the hour was not run again.)
"""


def probe_cost(doc: Doc) -> str:
    f = doc["figures"]
    ns, r, run, over = f["ns_per_call"], f["ratios"], f["handler_run_ns"], f["handler_run_ns_over_empty"]
    before = "gputop, before" in ns
    rows = [("nothing", num(ns["none"])), ("one empty uprobe", num(ns["empty uprobe"])),
            ("gputop (all its probes, collector polling, statistics windows included)", num(ns["gputop"])),
            ("gputop, a perf event per probe", num(ns["gputop, perf events"]))]
    if "bpftrace one-liner" in ns:
        rows.append(("bpftrace `uprobe:LIB:cudaLaunchKernel { @[pid] = count(); }`", num(ns["bpftrace one-liner"])))
    if before:
        rows.append(("gputop before the launch slots (4c75dbd)", num(ns["gputop, before"])))
    ratios = [("gputop / empty uprobe", r["gputop/empty uprobe"], ns.get("gputop, before"), ns["empty uprobe"], 1.10),
              ("gputop / bpftrace one-liner", r["gputop/bpftrace"], ns.get("gputop, before"),
               ns.get("bpftrace one-liner"), 0.9)]
    rrows = []
    for name, value, old, denom, target in ratios:
        was = ratio(old / denom, 3) if old is not None and denom else "—"
        ok = value is not None and value <= target
        rrows.append((name, f"**{ratio(value, 3)}**", was, f"≤ {target:g}: {verdict(ok)}"))
    rrows.append(("gputop links / perf events", ratio(r["gputop links/perf"], 3), "—", "—"))
    hrows = [("empty (`return 0`)", num(run["empty uprobe"]), "—"),
             ("gputop's `rt_launch`", num(run["gputop"]), f"**+{num(over['gputop'])}**")]
    if "gputop, before" in run:
        hrows.append(("gputop's `rt_launch` before (4c75dbd)", num(run["gputop, before"]),
                      f"+{num(over['gputop, before'])}"))
    cpu = ""
    if f.get("gputop_cpu_pct"):
        c = f["gputop_cpu_pct"]
        cpu = f"""
gputop's own CPU in the same run (user + system of `gputop -b -f json -d 1 --no-nvml` while one workload
launches at a fixed rate, two alternating runs per rate, medians): {pct(c['2000'])} of a core at 2,000
launches/s, {pct(c['100000'])} at 100,000 launches/s (ratio {ratio(f['gputop_cpu_ratio_100k_2k'])}): aggregation
happens in the kernel, so user space reads the same fixed-size records once per refresh whatever the launch rate.
gputop traces every CUDA process on the host, so other CUDA processes running at the time add to both figures
(what a refresh costs per process: the next section but one).
"""
    return f"""{measured(doc)}
A loop of `cudaLaunchKernel` calls through the real `libcudart.so.12` (each call fails right after
entry without a GPU, so the loop measures almost only the probe), {f['rounds']} alternating rounds of
{f['calls']:,} calls, each round on a fresh private copy of the library (its own inode: other tracers on
the host that probe the test bed's copy do not slow the loop; a "nothing attached" far above the bare
call would say one did, and the benchmark then exits 1). gputop is measured **continuously**, as the
traced processes pay it: its collector polls and opens its BPF-statistics windows on their own
schedule, whichever rounds they fall in. gputop and the empty uprobe attach with uprobe_multi links
where the kernel has them; "perf events" is gputop attached the way it attaches on kernels before 6.6;
"before" is gputop with the BPF program of commit 4c75dbd (before the launch slots), in the same rounds.
bpftrace is optional (`apt-get install -y bpftrace`).

{table(("attached", "ns per call (median)"), rows)}

{table(("ratio", "measured", "before (4c75dbd), same run", "target"), rrows)}

BPF run time per hit of the handler alone (the kernel's BPF statistics, switched on for these rounds
only; medians). The statistics themselves add two clock reads to every run, the same for every
program, so compare the differences:

{table(("program on `cudaLaunchKernel`", "ns a hit", "over the empty program"), hrows)}
{cpu}
Almost all of the cost is the uprobe trap itself (the empty uprobe's
{num(f['ns_over_none']['empty uprobe'], 0)} ns over the bare call, measured for gputop's self-cost as the
calibrated trap). What keeps gputop's share small (docs/collector.md):

- **Launch slots**: a (process, kernel) pair counts in a slot of a direct-mapped, mmap'd array
  (`gputop/sources/bpf/read/launchslots.py` reads it as memory, no system call per slot). The slot keeps the
  shape of the pair's first launch and counts the launches of exactly that shape with one atomic add;
  other shapes count their own launches, sums and log2 buckets. A pair whose slot another pair holds
  counts in its `kernels` entry, made first for every pair, so the kernel table's capacity and drops
  are unchanged. An array lookup is a few instructions the verifier inlines; a hash lookup is a call
  into the kernel (and on AMD hosts every kernel `ret` goes through the SRSO "Safe RET" thunk).
- **Captures**: a launch looks for a graph capture only while the host has one under way (three
  inlined counters), instead of reading its process record every time.
- The LPM trie of CUDA code ranges (≈ 200 ns a lookup) is not on the runtime's launch path: only
  the driver's entry points, the checked runtime handler of static runtimes and the copy and
  allocation handlers ask it. On a GPU host every runtime launch also takes the driver probe's trap
  and lookup: the next thing to cut.
- No per-thread state and no stack reads on the runtime's launch path; the stream argument is read
  only while a capture is under way.
"""


def collector_cost(doc: Doc) -> str:
    f = doc["figures"]
    rows = []
    for part, what in (("cpu", "total"), ("host", "host read (psutil, /proc)"), ("json", "JSON encoding"),
                       ("rest", "the rest (BPF reads, sampler, output)")):
        cur, base = f[f"{part}_ms_per_refresh_current"], f.get(f"{part}_ms_per_refresh_baseline")
        rows.append((what, num(base) if base is not None else "—", num(cur),
                     ratio(cur / base) if base else "—"))
    return f"""{measured(doc)}
The CPU time of `gputop -b -f json -d 1 --no-nvml` per 1 s refresh while it traces {f['procs']} processes
launching {f['rate_per_s']:,} times a second each ({f['processes_shown']} processes shown: every CUDA process on
the host is traced), {f['refreshes']} refreshes, {f['rounds']} rounds A B A B, medians; beside it the tree of
commit 4c75dbd (before this work), same workloads, same seconds. The host read and the JSON encoding are timed
apart in a process of each tree; "the rest" is the total less those two. Start-up (the BPF compile) is left out.

{table(("CPU per refresh (ms)", "before (4c75dbd)", "now", "ratio"), rows)}

At one refresh a second that is {pct(f['cpu_ms_per_refresh_current'] / 10, 1)} of a core. What changed: a
process's command line, user, container, namespaced PID and start time are read once per (PID, start time) and
again after an exec (its name changes, or the BPF source's exec event says so);
each refresh reads only `/proc/PID/stat` and `statm`. The snapshot is converted to JSON by one converter per
class instead of a generic walk (byte for byte the same output, `tests/unit/test_model_json.py`). Forgetting an
exited process deletes the code trie's entries by the keys gputop put there and finds its launch slots by their
hash, instead of walking every table.
"""


SECTIONS: list[Section] = [
    Section("probe_cost", "Probe cost on a launch", "probe_cost.py",
            ("--rounds", "15", "--calls", "300000", "--cpu-seconds", "10"), probe_cost,
            baseline=("4c75dbd", "--before", "bpf/gputop.bpf.c")),
    Section("self_cost", "Self-cost: what gputop's probes cost the traced processes", "self_cost.py", (), self_cost),
    Section("collector_cost", "gputop's own CPU per refresh", "collector_cost.py", (), collector_cost,
            baseline=("4c75dbd", "--baseline-tree", "")),
    Section("startup", "Start-up and memory", "startup.py", ("--runs", "5", "--steady-s", "30"), startup),
    Section("soak_hour", "Memory and exactness over an hour of churn", "soak.py", (), soak, slow=True),
    Section("graph_launch", "A CUDA graph launch", "graph_launch_cost.py", ("--rounds", "9"), graph_launch),
    Section("discovery", "A new process: time to probes", "discovery_latency.py", ("--rounds", "7"), discovery),
    Section("exit", "Quitting: detaching the probes", "exit_cost.py", ("--rounds", "3", "--dashboard", "5"),
            exit_cost),
    Section("ui_cpu", "Dashboard CPU", "ui_cpu.py", (), ui_cpu, baseline=(UI_BEFORE[0], "--baseline-tree", "")),
    Section("nvml", "NVML", "nvml_cost.py", ("--reads", "200"), nvml),
    Section("exporter", "The exporter", "exporter_cost.py", ("--cpu-seconds", "120", "--rounds", "4", "--breakdown"),
            exporter, baseline=(COST_BEFORE[0], "--baseline-tree", "")),
    Section("fleet_scale", "Fleet view at scale", "fleet_scale.py", ("--before-ui",), fleet_scale,
            baseline=(COST_BEFORE[0], "--baseline-tree", "")),
]

PREAMBLE = """# Performance

Written by `.venv/bin/python bench/performance.py` (as root, after `./test.sh` has set up the test
bed; about 40 minutes on 2 cores) from the figures each benchmark writes with `--json`; do not edit
by hand. Each section names the command that measured it and the machine's state when it ran.
Timings on the development VM (2 cores, no GPU) are noisy, so every comparison is measured side by
side in one run, alternating the configurations (A B A B ...) and taking medians; the ratios are the
figures to compare, not the absolute times.
"""


def render(docs: dict[str, Doc]) -> str:
    parts = [PREAMBLE]
    for s in SECTIONS:
        parts.append(f"## {s.title}\n")
        doc = docs.get(s.name)
        if doc is None:
            cmd = " ".join([".venv/bin/python", f"bench/{s.script}", *s.args])
            parts.append(f"Not measured yet: `{cmd}`.\n")
        else:
            parts.append(f"`.venv/bin/python bench/performance.py --only {s.name}` measures this section again; "
                         f"the run that gave the figures below:\n")
            parts.append(s.render(doc))
    return "\n".join(parts)
