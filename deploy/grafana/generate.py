"""Generates deploy/grafana/gputop.json, the Grafana dashboard over gputop's exporter, with Grafana's
own dashboards-as-code SDK (grafana-foundation-sdk, installed with gputop's test extras).

    .venv/bin/python deploy/grafana/generate.py > deploy/grafana/gputop.json

tests/bpf/test_exporter_prometheus.py evaluates every query below against a real Prometheus scraping
a real exporter, and tests/unit/test_deploy.py checks that the committed JSON is this script's output.
Process series carry ``job`` and ``instance`` (the scrape target); the node's name comes from
``gputop_build_info`` and is joined in by them.
"""

from __future__ import annotations

import itertools
import sys

from grafana_foundation_sdk.builders import dashboard, heatmap, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
NODE = 'gputop_build_info{node=~"$node"}'
RATE = "[$__rate_interval]"
_IDS = itertools.count(1)


def by_node(expr: str, keep: str = "node") -> str:
    """``expr`` restricted to the chosen nodes, with the node's name (``keep``) joined in."""
    return f"({expr}) * on(job, instance) group_left({keep}) {NODE}"


def per_process(expr: str, extra: str = "") -> str:
    return f"sum by (node, pid, comm{extra}) ({by_node(expr)})"


def query(expr: str, legend: str, ref: str = "A", fmt: PromQueryFormat | None = None) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    return q.format(fmt) if fmt is not None else q


def series(title: str, unit: str, desc: str, *targets: prometheus.Dataquery, width: int = 12,
           stepped: bool = False) -> timeseries.Panel:
    p = (timeseries.Panel().id(next(_IDS)).title(title).description(desc).unit(unit).datasource(DS)
         .height(8).span(width)
         .fill_opacity(10).line_width(1))
    if stepped:
        from grafana_foundation_sdk.models.common import LineInterpolation
        p = p.line_interpolation(LineInterpolation.STEP_AFTER).min(0).max(1)
    for t in targets:
        p = p.with_target(t)
    return p


def histogram_heatmap(title: str, metric: str, desc: str) -> heatmap.Panel:
    expr = f"sum by (le) ({by_node(f'rate({metric}_bucket{RATE})', keep='')})"
    return (heatmap.Panel().id(next(_IDS)).title(title).description(desc).datasource(DS).height(8).span(12)
            .with_target(query(expr, "{{le}}", fmt=PromQueryFormat.HEATMAP)))


def row(title: str) -> dashboard.Row:
    return dashboard.Row(title).id(next(_IDS))


def build() -> dashboard.Dashboard:
    global _IDS
    _IDS = itertools.count(1)
    proc_legend = "{{node}} {{comm}} ({{pid}})"
    d = (dashboard.Dashboard("gputop: CUDA processes").uid("gputop").tags(["gputop", "cuda", "gpu"])
         .description("What CPU code asks of the GPU, per process and node: kernel launches, grid and block "
                      "sizes, copies, allocations, unified memory and synchronisation (gputop exporter).")
         .refresh("30s").time("now-1h", "now").editable()
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
         .with_variable(dashboard.QueryVariable("node").label("Node").datasource(DS)
                        .query("label_values(gputop_build_info, node)").multi(True).include_all(True)
                        .all_value(".*").refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)))
    d = d.with_row(row("Launches"))
    d = d.with_panel(series(
        "Kernel launches/s by process", "ops", "Kernel launches per second that ran (captured ones excluded).",
        query(per_process(f"rate(gputop_kernel_launches_total{RATE})"), proc_legend)))
    d = d.with_panel(series(
        "Launch-bound processes", "bool", "1 while a process launches fast and its GPU idles (the launch-bound "
        "rule, docs/nvml.md); needs NVML.",
        query(per_process("gputop_process_launch_bound"), proc_legend), stepped=True))
    d = d.with_panel(series(
        "Graph and captured launches/s", "ops", "CUDA graph launches, and launches recorded into graphs by stream "
        "capture (not run).",
        query(per_process(f"rate(gputop_graph_launches_total{RATE})"), "graph " + proc_legend),
        query(per_process(f"rate(gputop_captured_launches_total{RATE})"), "captured " + proc_legend, "B")))
    d = d.with_panel(series(
        "Average blocks per grid and threads per block", "short", "Exact averages over the rate window: the "
        "histograms' _sum over their _count.",
        query(per_process(f"rate(gputop_kernel_grid_blocks_sum{RATE})") + " / "
              + per_process(f"rate(gputop_kernel_grid_blocks_count{RATE})"), "blocks " + proc_legend),
        query(per_process(f"rate(gputop_kernel_block_threads_sum{RATE})") + " / "
              + per_process(f"rate(gputop_kernel_block_threads_count{RATE})"), "threads " + proc_legend, "B")))
    d = d.with_panel(histogram_heatmap("Blocks per grid", "gputop_kernel_grid_blocks",
                                       "Launches per second by grid size (log2 buckets; le is the bucket's top)."))
    d = d.with_panel(histogram_heatmap("Threads per block", "gputop_kernel_block_threads",
                                       "Launches per second by block size (log2 buckets)."))
    d = d.with_row(row("Memory"))
    d = d.with_panel(series(
        "memcpy bandwidth by direction", "Bps", "Bytes per second of the copies CPU code asked for, by direction "
        "(unknown: cudaMemcpyDefault between pointers gputop could not classify).",
        query(f"sum by (direction) ({by_node(f'rate(gputop_memcpy_bytes_total{RATE})', keep='')})",
              "{{direction}}")))
    d = d.with_panel(series(
        "memcpy bandwidth by process", "Bps", "Bytes per second of copies, by process and direction.",
        query(per_process(f"rate(gputop_memcpy_bytes_total{RATE})", ", direction"),
              "{{direction}} " + proc_legend)))
    d = d.with_panel(series(
        "Live allocations", "bytes", "Bytes allocated and not freed yet (absent for processes that allocated "
        "before gputop started).", query(per_process("gputop_live_alloc_bytes"), proc_legend)))
    d = d.with_panel(series(
        "UVM CPU faults/s", "ops", "CPU page faults on managed memory per second.",
        query(per_process(f"rate(gputop_uvm_cpu_faults_total{RATE})"), proc_legend)))
    d = d.with_panel(series(
        "Time blocked in synchronisation", "percentunit", "Share of wall time spent in stream, device, context "
        "and event synchronisation calls.",
        query(per_process(f"rate(gputop_sync_wait_seconds_total{RATE})"), proc_legend)))
    d = d.with_panel(series(
        "GPU memory by process", "bytes", "GPU memory each process uses (NVML).",
        query(per_process("gputop_process_gpu_memory_bytes", ", gpu"), "GPU {{gpu}} " + proc_legend)))
    d = d.with_row(row("GPUs"))
    d = d.with_panel(series(
        "GPU utilisation", "percentunit", "Share of time a kernel ran on each GPU (NVML), beside the launch "
        "rate of the node's processes.",
        query(f"max by (node, gpu, mig) ({by_node('gputop_gpu_utilization_ratio')})", "{{node}} GPU {{gpu}}")))
    d = d.with_panel(series(
        "Launches/s by node", "ops", "All kernel launches per second on each node, beside its GPUs' utilisation.",
        query(f"sum by (node) ({by_node(f'rate(gputop_kernel_launches_total{RATE})')})", "{{node}}")))
    d = d.with_panel(series(
        "GPU memory used", "bytes", "GPU memory in use on each GPU (NVML).",
        query(f"max by (node, gpu, mig) ({by_node('gputop_gpu_memory_used_bytes')})", "{{node}} GPU {{gpu}}")))
    d = d.with_panel(series(
        "GPU power", "watt", "Power drawn by each GPU (NVML).",
        query(f"max by (node, gpu) ({by_node('gputop_gpu_power_watts')})", "{{node}} GPU {{gpu}}")))
    d = d.with_row(row("gputop's own cost"))
    d = d.with_panel(series(
        "gputop CPU", "percentunit", "CPU time per second: what the traced processes pay for gputop's probes "
        "(uprobe traps + BPF programs, last statistics window), of it the BPF programs, and the exporter process "
        "itself.",
        query(by_node("gputop_bpf_run_seconds_per_second"), "BPF {{node}}"),
        query(by_node(f"rate(process_cpu_seconds_total{RATE})"), "exporter {{node}}", "B"),
        query(by_node("gputop_self_cost_seconds_per_second"), "probes (traps + BPF) {{node}}", "C")))
    d = d.with_panel(series(
        "Probe hits/s and dropped records", "short", "Hits of gputop's probes per second, and records the BPF "
        "maps had no room for (per second: above 0 means counts are missing).",
        query(by_node("gputop_probe_hits_per_second"), "hits/s {{node}}"),
        query(by_node(f"rate(gputop_dropped_records_total{RATE})"), "dropped/s {{node}}", "B"),
        query(by_node("gputop_probes_failed"), "probes failed {{node}}", "C")))
    return d


def main() -> int:
    sys.stdout.write(JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
