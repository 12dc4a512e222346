"""Generates deploy/grafana/gputop.json, the Grafana dashboard over gputop's exporter, with Grafana's
own dashboards-as-code SDK (grafana-foundation-sdk, installed with gputop's test extras).

    .venv/bin/python deploy/grafana/generate.py > deploy/grafana/gputop.json

tests/unit/test_grafana.py runs every query below against a real Prometheus holding a synthetic fleet
(exact top-N rows, health values, series counts, one unit per panel), tests/bpf/test_exporter_prometheus.py
against a real Prometheus scraping a real exporter, and tests/unit/test_deploy.py checks that the committed
JSON is this script's output.

Process series carry ``job`` and ``instance`` (the scrape target) and, where the scrape configuration adds
it, ``cluster``; the node's name comes from ``gputop_build_info`` and is joined in by them (cluster
included: two clusters may reuse a target's address). The variables
``job``, ``cluster`` and ``node`` filter every query: ``job`` and ``cluster`` in every selector, ``node``
through the join with ``gputop_build_info`` (the scrape-target panels of the health row keep targets that
are down, whose node is unknown). Panels that draw a series per process, GPU or node draw the top
``TOP`` by the dashboard's range (``topk`` over ``[$__range] @ end()``: the same series the whole graph).

Pods by name: the recording rules of ``deploy/prometheus/gputop-rules.yml`` (group ``gputop-pods``) map the
exporter's ``container`` label (a container id or a pod UID) to the Kubernetes namespace and pod, and record
per-pod rates. The top-N process table joins them in (NAMESPACE and POD columns, empty where unknown), the
pod panels read the per-pod series, and the ``namespace`` variable filters both: a chosen namespace keeps
only its processes and pods; All keeps every process, those without a pod included. Without the rules (or
without kube-state-metrics) the columns stay empty and the pod panels show only the series without a pod.
"""

from __future__ import annotations

import itertools
import sys

from grafana_foundation_sdk.builders import dashboard, heatmap, prometheus, stat, table, text, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LineInterpolation
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.text import TextMode

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
#: the variables' matchers, in every selector of every query
SEL = 'job=~"$job", cluster=~"$cluster"'
NODE = f'gputop_build_info{{{SEL}, node=~"$node"}}'
#: join key of a target's series and its gputop_build_info
TARGET = "cluster, job, instance"
RATE = "[$__rate_interval]"
#: the dashboard's range, ending at its end: the window top-N panels rank by
RANGE = "[$__range] @ end()"
TOP = 10
PROC = "node, pid, comm"
GPU = "node, gpu, mig"
#: container id (or pod UID) -> namespace, pod: the recording rules' mappings as of the range's end
POD_MAP = ("(last_over_time(container:kube_pod_container_info:relabel[$__range] @ end()) or "
           "last_over_time(container:kube_pod_info:relabel[$__range] @ end()))")
#: one series (value 1) when the namespace variable lets through processes without a pod (All), else none:
#: the variable's regex tried on an absent label (the empty value) by label_replace
NO_POD_SHOWN = ('(label_replace(vector(1), "shown", "yes", "namespace", "$namespace") and on(shown) '
                'label_replace(vector(1), "shown", "yes", "", ""))')
PODS = "namespace, pod"
#: the per-pod recording rules (deploy/prometheus/gputop-rules.yml, group gputop-pods)
POD_LAUNCHES = "instance_namespace_pod:gputop_kernel_launches:rate2m"
_IDS = itertools.count(1)


def m(metric: str, matchers: str = "") -> str:
    """``metric`` restricted to the chosen jobs and clusters (and ``matchers``)."""
    return f"{metric}{{{SEL}{', ' + matchers if matchers else ''}}}"


def rate_of(metric: str, window: str, fn: str = 'rate') -> str:
    """``fn`` (rate, increase, max_over_time) of ``metric`` over ``window``."""
    return f"{fn}({m(metric)}{window})"


def by_node(expr: str, keep: str = "node", ranked: bool = False) -> str:
    """``expr`` restricted to the chosen nodes, with the node's name (``keep``) joined in; ``ranked``: the
    nodes as of the range's end (for expressions over ``RANGE``)."""
    info = f"last_over_time({NODE}{RANGE})" if ranked else NODE
    return f"({expr}) * on({TARGET}) group_left({keep}) {info}"


def per_process(expr: str, extra: str = "", ranked: bool = False) -> str:
    return f"sum by ({PROC}{extra}) ({by_node(expr, ranked=ranked)})"


def proc_rate(metric: str, matchers: str = "", extra: str = "", window: str = RATE) -> str:
    """Per process (and ``extra`` labels): the rate of a counter over ``window``."""
    return per_process(f"rate({m(metric, matchers)}{window})", extra, ranked=window == RANGE)


def with_pods(expr: str) -> str:
    """``expr`` (by ``container``) with the process's ``namespace`` and ``pod`` joined in, for the chosen
    namespaces; processes without a known pod kept, without them, while the namespace variable is All."""
    pods = POD_MAP.replace("relabel[", 'relabel{namespace=~"$namespace"}[')
    return (f"(({expr}) * on(container) group_left({PODS}) {pods}) or "
            f"(({expr}) unless on(container) {POD_MAP} and on() {NO_POD_SHOWN})")


def per_pod(metric: str, matchers: str = "", ranked: bool = False) -> str:
    """A per-pod recording rule, for the chosen namespaces and nodes, by namespace and pod (the series
    without a pod: every process without one, on the host or in a container kube-state-metrics does not
    know)."""
    sel = f'namespace=~"$namespace"{", " + matchers if matchers else ""}'
    series = f"max_over_time({m(metric, sel)}{RANGE})" if ranked else m(metric, sel)
    return f"sum by ({PODS}) ({by_node(series, keep='', ranked=ranked)})"


def top(expr: str, by: str, rank: str) -> str:
    """``expr``'s series of the ``TOP`` groups (``by``) with the highest ``rank`` over the range."""
    return f"({expr}) and on({by}) topk({TOP}, {rank})"


def top_procs_by_rate(metric: str, matchers: str = "", extra: str = "") -> str:
    return top(proc_rate(metric, matchers, extra), PROC, proc_rate(metric, matchers, window=RANGE))


def top_procs_by_gauge(metric: str, extra: str = "", over: str = "max_over_time") -> str:
    return top(per_process(m(metric), extra),
               PROC, per_process(f"{over}({m(metric)}{RANGE})", ranked=True))


def grouped(agg: str, by: str, metric: str, fn: str | None = None) -> str:
    """``agg by (by)`` of a gauge (``fn`` None) or of ``fn`` (rate, increase) of a counter over the rate
    window, for the ``TOP`` groups with the highest values over the range."""
    now = rate_of(metric, RATE, fn) if fn else m(metric)
    ranked = by_node(rate_of(metric, RANGE, fn or "max_over_time"), ranked=True)
    return top(f"{agg} by ({by}) ({by_node(now)})", by, f"{agg} by ({by}) ({ranked})")


def per_gpu(metric: str) -> str:
    """Per GPU, the ``TOP`` GPUs with the highest values over the range."""
    return grouped("max", GPU, metric)


def query(expr: str, legend: str, ref: str = "A", fmt: PromQueryFormat | None = None,
          instant: bool = False) -> prometheus.Dataquery:
    """A Prometheus query (a range query unless ``instant``)."""
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    if instant:
        q = q.instant()
    return q.format(fmt) if fmt is not None else q


def table_query(expr: str, ref: str = "A") -> prometheus.Dataquery:
    """An instant query in table format (a row per series, its labels as columns)."""
    return query(expr, "", ref, PromQueryFormat.TABLE, instant=True)


def series(title: str, unit: str, desc: str, *targets: prometheus.Dataquery, width: int = 12,
           stepped: bool = False) -> timeseries.Panel:
    """A time series panel: one unit, one axis."""
    p = (timeseries.Panel().id(next(_IDS)).title(title).description(desc).unit(unit).datasource(DS)
         .height(8).span(width)
         .fill_opacity(10).line_width(1))
    if stepped:
        p = p.line_interpolation(LineInterpolation.STEP_AFTER).min(0).max(1)
    for t in targets:
        p = p.with_target(t)
    return p


def single(title: str, unit: str, desc: str, expr: str, red_from: float | None = None) -> stat.Panel:
    """A stat panel of one number (green, or red from ``red_from``)."""
    steps = [Threshold(value=None, color="green")]
    if red_from is not None:
        steps.append(Threshold(value=red_from, color="red"))
    return (stat.Panel().id(next(_IDS)).title(title).description(desc).unit(unit).datasource(DS)
            .height(8).span(4)
            .thresholds(dashboard.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps))
            .with_target(query(expr, "", instant=True)))


def listing(title: str, desc: str, labels: list[str], *values: tuple[prometheus.Dataquery, str, str],
            width: int = 12) -> table.Panel:
    """A table of instant queries merged on their labels: the ``labels`` columns, then one column per query,
    ``values`` = (query, column name, unit). One unit a column: the first column's is the panel's, the others'
    are overrides of their column alone."""
    fields = ["Value"] if len(values) == 1 else [f"Value #{q.build().ref_id}" for q, _, _ in values]
    unit = values[0][2]
    p = (table.Panel().id(next(_IDS)).title(title).description(desc).unit(unit).datasource(DS)
         .height(8).span(width)
         .with_transformation(DataTransformerConfig(id_val="merge", options={}))
         .with_transformation(DataTransformerConfig(id_val="organize", options={
             "excludeByName": {"Time": True}, "indexByName": {c: i for i, c in enumerate([*labels, *fields])},
             "renameByName": {f: name for f, (_, name, _) in zip(fields, values)}})))
    for q, name, col_unit in values:
        if col_unit != unit:
            p = p.override_by_name(name, [DynamicConfigValue(id_val="unit", value=col_unit)])
        p = p.with_target(q)
    return p


def histogram_heatmap(title: str, metric: str, desc: str) -> heatmap.Panel:
    expr = f"sum by (le) ({by_node(rate_of(metric + '_bucket', RATE), keep='')})"
    return (heatmap.Panel().id(next(_IDS)).title(title).description(desc).unit("ops").datasource(DS)
            .height(8).span(12)
            .with_target(query(expr, "{{le}}", fmt=PromQueryFormat.HEATMAP)))


def note(title: str, content: str) -> text.Panel:
    return text.Panel().id(next(_IDS)).title(title).mode(TextMode.MARKDOWN).content(content).height(8).span(6)


def row(title: str) -> dashboard.Row:
    return dashboard.Row(title).id(next(_IDS))


def variable(name: str, label: str, desc: str, all_value: str | None,
             metric: str = "gputop_build_info") -> dashboard.QueryVariable:
    v = (dashboard.QueryVariable(name).label(label).description(desc).datasource(DS)
         .query(f"label_values({metric}, {name})").multi(True).include_all(True)
         .current(VariableOption(selected=True, text="All", value="$__all"))
         .sort(VariableSort.ALPHABETICAL_ASC).refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
    return v.all_value(all_value) if all_value is not None else v


def build() -> dashboard.Dashboard:
    global _IDS
    _IDS = itertools.count(1)
    proc_legend = "{{node}} {{comm}} ({{pid}})"
    gpu_legend = "{{node}} GPU {{gpu}}"
    up = (f"up{{{SEL}}} unless on({TARGET}) gputop_build_info{{{SEL}, node!~\"$node\"}}")
    d = (dashboard.Dashboard("gputop: CUDA processes").uid("gputop").tags(["gputop", "cuda", "gpu"])
         .description("What CPU code asks of the GPU, per process and node: kernel launches, grid and block "
                      "sizes, copies, allocations, unified memory and synchronisation (gputop exporter).")
         .refresh("30s").time("now-1h", "now").editable()
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
         # All: the jobs that have gputop targets (Grafana's regex of every value), so up{} is gputop's only
         .with_variable(variable("job", "Job", "Prometheus jobs scraping gputop exporters.", None))
         .with_variable(variable("cluster", "Cluster", "The cluster label your scrape configuration adds, if "
                                 "any; All also matches series without it.", ".*"))
         .with_variable(variable("node", "Node", "gputop_build_info's node label (--node, else the hostname).",
                                 ".*"))
         .with_variable(variable("namespace", "Namespace", "Kubernetes namespaces with CUDA processes (the "
                                 "recording rules' per-pod series, from kube-state-metrics); All also keeps "
                                 "processes without a pod. Filters the top processes and the pods.", ".*",
                                 POD_LAUNCHES)))

    d = d.with_row(row("Health"))
    d = d.with_panel(single(
        "Targets up", "short", "Scrape targets of the chosen jobs that answered the last scrape (up == 1).",
        f"count(({up}) == 1) or vector(0)"))
    d = d.with_panel(single(
        "Targets down", "short", "Scrape targets of the chosen jobs that did not answer the last scrape "
        "(up == 0); a target never up has no node name, so the node variable keeps it.",
        f"count(({up}) == 0) or vector(0)", red_from=1))
    d = d.with_panel(single(
        "Probes failed", "short", "Probes the kernel refused, all chosen nodes together (0 when every probe "
        "attached).", f"sum({by_node(m('gputop_probes_failed'))}) or vector(0)", red_from=1))
    d = d.with_panel(single(
        "Dropped records/s", "cps", "Records the BPF maps had no room for, per second, all chosen nodes "
        "together: above 0, counts are missing.",
        f"sum({by_node(rate_of('gputop_dropped_records_total', RATE))}) or vector(0)", red_from=1e-9))
    d = d.with_panel(listing(
        "Scrape targets", "up of each target (1: the last scrape answered).", ["job", "instance"],
        (table_query(up), "up", "bool"), width=8))
    d = d.with_panel(listing(
        "Sources by node", "gputop_source_up: 1 when the source works (bpf, nvml, uvm); /healthz "
        "says why not.", ["node", "source"],
        (table_query(f"min by (node, source) ({by_node(m('gputop_source_up'))})"), "up", "bool"), width=8))
    d = d.with_panel(series(
        "Probes failed by node", "short", f"Probes the kernel refused, by node (the top {TOP} nodes).",
        query(grouped("max", "node", "gputop_probes_failed"), "{{node}}"), width=8))
    d = d.with_panel(series(
        "Dropped records/s by node", "cps", f"Records the BPF maps had no room for, per second (the top {TOP} "
        "nodes).", query(grouped("sum", "node", "gputop_dropped_records_total", "rate"), "{{node}}"), width=8))

    d = d.with_row(row(f"Top {TOP} processes"))
    table_by = f"{PROC}, container"
    launches = f"topk({TOP}, {with_pods(proc_rate('gputop_kernel_launches_total', extra=', container', window=RANGE))})"

    def copies(direction: str) -> str:
        rate = with_pods(proc_rate("gputop_memcpy_bytes_total", f'direction="{direction}"', ", container", RANGE))
        return f"({rate} or on({table_by}) 0 * {launches}) and on({table_by}) {launches}"

    d = d.with_panel(listing(
        f"Top {TOP} processes by launches/s", "The processes with the most kernel launches per second "
        "over the dashboard's range, with their host-to-device and device-to-host copy bandwidth, and the "
        "Kubernetes namespace and pod of each (empty: on the host, or unknown to kube-state-metrics; needs "
        "the recording rules of deploy/prometheus/gputop-rules.yml).",
        ["node", "pid", "comm", "container", "namespace", "pod"],
        (table_query(launches, "A"), "launches/s", "ops"),
        (table_query(copies("h2d"), "B"), "H2D bytes/s", "Bps"),
        (table_query(copies("d2h"), "C"), "D2H bytes/s", "Bps"), width=24))

    d = d.with_row(row("Pods"))
    pod_launches = per_pod(POD_LAUNCHES)
    top_pods = f"topk({TOP}, {pod_launches})"

    def pod_value(expr: str) -> str:
        """``expr`` (by namespace and pod) for the rows of ``top_pods``, 0 where it has none."""
        return f"({expr} or on({PODS}) 0 * {top_pods}) and on({PODS}) {top_pods}"

    d = d.with_panel(listing(
        f"Top {TOP} pods by launches/s", "Kubernetes pods with the most kernel launches per second (the "
        "recording rules' 2-minute rates, as of the range's end), with their graph launches, copy bandwidth "
        "and GPU memory. The row without namespace and pod: every process without a known pod (on the host, "
        "or in a container kube-state-metrics does not know). Needs the recording rules of "
        "deploy/prometheus/gputop-rules.yml and kube-state-metrics.", ["namespace", "pod"],
        (table_query(top_pods, "A"), "launches/s", "ops"),
        (table_query(pod_value(per_pod("instance_namespace_pod:gputop_graph_launches:rate2m")), "B"),
         "graph launches/s", "ops"),
        (table_query(pod_value(per_pod("instance_namespace_pod_direction:gputop_memcpy_bytes:rate2m",
                                       'direction="h2d"')), "C"), "H2D bytes/s", "Bps"),
        (table_query(pod_value(per_pod("instance_namespace_pod_direction:gputop_memcpy_bytes:rate2m",
                                       'direction="d2h"')), "D"), "D2H bytes/s", "Bps"),
        (table_query(pod_value(per_pod("instance_namespace_pod:gputop_process_gpu_memory_bytes:sum")), "E"),
         "GPU memory", "bytes"), width=12))
    d = d.with_panel(series(
        "Kernel launches/s by pod", "ops", f"Kernel launches per second of each pod (2-minute rates); the top "
        f"{TOP} pods over the range. The series without namespace and pod: processes without a known pod.",
        query(top(pod_launches, PODS, per_pod(POD_LAUNCHES, ranked=True)), "{{namespace}}/{{pod}}")))

    d = d.with_row(row("Launches"))
    d = d.with_panel(series(
        "Kernel launches/s by process", "ops", "Kernel launches per second that ran (captured ones excluded); "
        f"the top {TOP} processes over the range.",
        query(top_procs_by_rate("gputop_kernel_launches_total"), proc_legend)))
    d = d.with_panel(series(
        "Launch-bound processes", "bool", "1 while a process launches fast and its GPU idles (the launch-bound "
        f"rule, docs/nvml.md); needs NVML. The {TOP} processes launch-bound longest over the range.",
        query(top_procs_by_gauge("gputop_process_launch_bound", over="avg_over_time"), proc_legend),
        stepped=True))
    d = d.with_panel(series(
        "Graph and captured launches/s", "ops", "CUDA graph launches, and launches recorded into graphs by stream "
        f"capture (not run); the top {TOP} processes of each.",
        query(top_procs_by_rate("gputop_graph_launches_total"), "graph " + proc_legend),
        query(top_procs_by_rate("gputop_captured_launches_total"), "captured " + proc_legend, "B")))

    def average(hist: str) -> str:
        return top(proc_rate(f"{hist}_sum") + " / " + proc_rate(f"{hist}_count"), PROC,
                   proc_rate(f"{hist}_count", window=RANGE))

    d = d.with_panel(series(
        "Average blocks per grid and threads per block", "short", "Exact averages over the rate window: the "
        f"histograms' _sum over their _count; the top {TOP} processes by launches.",
        query(average("gputop_kernel_grid_blocks"), "blocks " + proc_legend),
        query(average("gputop_kernel_block_threads"), "threads " + proc_legend, "B")))
    d = d.with_panel(histogram_heatmap("Blocks per grid", "gputop_kernel_grid_blocks",
                                       "Launches per second by grid size (log2 buckets; le is the bucket's top)."))
    d = d.with_panel(histogram_heatmap("Threads per block", "gputop_kernel_block_threads",
                                       "Launches per second by block size (log2 buckets)."))

    d = d.with_row(row("Kernels"))
    kernel_by = f"{PROC}, kernel"
    kernel_rate = proc_rate("gputop_kernel_function_launches_total", extra=", kernel", window=RANGE)
    d = d.with_panel(note("Per-kernel metrics", (
        "These panels need the exporter started with `--kernel-metrics N` (the top N kernels of each "
        "process, N ≤ 20): without it `gputop_kernel_function_launches_total` does not exist and they stay "
        "empty. Direct launches only; launches inside CUDA graphs are "
        "`gputop_kernel_function_graph_launches_total`.")))
    d = d.with_panel(listing(
        f"Top {TOP} kernels by launches/s", "Kernels with the most launches per second over the "
        "dashboard's range (--kernel-metrics).", ["node", "pid", "comm", "kernel"],
        (table_query(f"topk({TOP}, {kernel_rate})"), "launches/s", "ops"), width=18))
    d = d.with_panel(series(
        "Kernel launches/s by kernel", "ops", f"The top {TOP} kernels over the range (--kernel-metrics).",
        query(top(proc_rate("gputop_kernel_function_launches_total", extra=", kernel"), kernel_by, kernel_rate),
              "{{kernel}} " + proc_legend), width=24))

    d = d.with_row(row("Memory"))
    d = d.with_panel(series(
        "memcpy bandwidth by direction", "Bps", "Bytes per second of the copies CPU code asked for, by direction "
        "(unknown: cudaMemcpyDefault between pointers gputop could not classify).",
        query(f"sum by (direction) ({by_node(rate_of('gputop_memcpy_bytes_total', RATE), keep='')})",
              "{{direction}}")))
    d = d.with_panel(series(
        "memcpy bandwidth by process", "Bps", f"Bytes per second of copies, by process and direction; the top "
        f"{TOP} processes by bytes copied.",
        query(top_procs_by_rate("gputop_memcpy_bytes_total", extra=", direction"),
              "{{direction}} " + proc_legend)))
    d = d.with_panel(series(
        "Live allocations", "bytes", "Bytes allocated and not freed yet (absent for processes that allocated "
        f"before gputop started); the top {TOP} processes.",
        query(top_procs_by_gauge("gputop_live_alloc_bytes"), proc_legend)))
    d = d.with_panel(series(
        "UVM CPU faults/s", "ops", f"CPU page faults on managed memory per second; the top {TOP} processes.",
        query(top_procs_by_rate("gputop_uvm_cpu_faults_total"), proc_legend)))
    d = d.with_panel(series(
        "Time blocked in synchronisation", "percentunit", "Share of wall time spent in stream, device, context "
        f"and event synchronisation calls; the top {TOP} processes.",
        query(top_procs_by_rate("gputop_sync_wait_seconds_total"), proc_legend)))
    d = d.with_panel(series(
        "GPU memory by process", "bytes", f"GPU memory each process uses (NVML); the top {TOP} processes.",
        query(top_procs_by_gauge("gputop_process_gpu_memory_bytes", ", gpu"), "GPU {{gpu}} " + proc_legend)))

    d = d.with_row(row("GPUs"))
    d = d.with_panel(series(
        "GPU utilisation", "percentunit", "Share of time a kernel ran on each GPU (NVML), beside the launch "
        f"rate of the node's processes; the {TOP} busiest GPUs.",
        query(per_gpu("gputop_gpu_utilization_ratio"), gpu_legend)))
    d = d.with_panel(series(
        "Launches/s by node", "ops", "All kernel launches per second on each node, beside its GPUs' utilisation; "
        f"the top {TOP} nodes.",
        query(grouped("sum", "node", "gputop_kernel_launches_total", "rate"),
              "{{node}}")))
    d = d.with_panel(series(
        "GPU memory used", "bytes", f"GPU memory in use on each GPU (NVML); the top {TOP} GPUs.",
        query(per_gpu("gputop_gpu_memory_used_bytes"), gpu_legend)))
    d = d.with_panel(series(
        "GPU temperature", "celsius", f"Temperature of each GPU (NVML); the {TOP} hottest.",
        query(per_gpu("gputop_gpu_temperature_celsius"), gpu_legend)))
    d = d.with_panel(series(
        "GPU power and power limit", "watt", f"Power drawn by each GPU and its power-management limit (NVML); "
        f"the {TOP} GPUs drawing most.",
        query(per_gpu("gputop_gpu_power_watts"), "drawn " + gpu_legend),
        query(f"max by ({GPU}) ({by_node(m('gputop_gpu_power_limit_watts'))}) and on({GPU}) "
              f"({per_gpu('gputop_gpu_power_watts')})", "limit " + gpu_legend, "B")))
    d = d.with_panel(series(
        "XID errors", "short", "XID errors (critical GPU errors the driver reported) within each rate window, "
        f"seen since gputop started; the top {TOP} GPUs.",
        query(grouped("sum", GPU, "gputop_gpu_xid_errors_total", "increase"),
              gpu_legend)))
    d = d.with_panel(series(
        "ECC volatile errors", "short", "Volatile ECC errors of each GPU since its driver loaded (NVML; a rise "
        f"is a new error); the top {TOP} GPUs.",
        query(per_gpu("gputop_gpu_ecc_volatile_errors_total"), gpu_legend)))

    d = d.with_row(row("gputop's own cost"))
    # the nodes whose exporter used the most CPU over the range (every exporter has the series)
    costly = f"sum by (node) ({by_node(rate_of('process_cpu_seconds_total', RANGE), ranked=True)})"
    d = d.with_panel(series(
        "gputop CPU", "percentunit", "CPU time per second: what the traced processes pay for gputop's probes "
        "(uprobe traps + BPF programs, last statistics window), of it the BPF programs, and the exporter process "
        f"itself; the {TOP} nodes whose exporter used the most CPU over the range.",
        query(top(by_node(m("gputop_bpf_run_seconds_per_second")), "node", costly), "BPF {{node}}"),
        query(top(by_node(rate_of("process_cpu_seconds_total", RATE)), "node", costly), "exporter {{node}}", "B"),
        query(top(by_node(m("gputop_self_cost_seconds_per_second")), "node", costly),
              "probes (traps + BPF) {{node}}", "C")))
    d = d.with_panel(series(
        "Probe hits/s", "ops", "Hits of gputop's probes per second, over the last BPF-statistics window; "
        f"the top {TOP} nodes.",
        query(grouped("max", "node", "gputop_probe_hits_per_second"),
              "{{node}}")))
    return d


def main() -> int:
    sys.stdout.write(JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
