"""The Grafana dashboard (deploy/grafana/gputop.json, written by deploy/grafana/generate.py) against a real
Prometheus (Debian's package) holding a synthetic fleet loaded with promtool: every query of every panel
runs without error and returns data; the top-N table has exactly the 10 processes with the most launches and
their exact rates; the health row shows the exact up/down values of the synthetic targets (an unrelated job's
target excluded, a down target kept whatever the node); per-process panels draw exactly 10 processes; the
job, cluster and node variables filter every panel; and every panel has one unit (one per column in tables).
Pods by name: the Prometheus also holds synthetic kube-state-metrics series (containerd, CRI-O and Docker
container ids, a pod UID, a container it does not know, host processes) and the results of the recording
rules of deploy/prometheus/gputop-rules.yml, backfilled by promtool with Prometheus's own query engine over
those series (``promserver.tsdb_prometheus``, not values computed here): exact NAMESPACE and POD columns,
exact per-pod rows, and the namespace variable keeping a namespace's processes and pods only.
tests/bpf/test_exporter_prometheus.py runs the same queries against a real exporter."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from promserver import GRAFANA_PROMQL, http_get, tsdb_prometheus
from support import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "gputop.json"
RULES = ROOT / "deploy" / "prometheus" / "gputop-rules.yml"
STEP_S = 15
SAMPLES = 41                        # 10 minutes
RATE_INTERVAL = "60s"               # Grafana's $__rate_interval at a 15 s scrape interval
RANGE_S = 300                       # the dashboard's range: the samples span each window exactly
TOP = 10

#: scrape targets: (job, instance, cluster or None, node or None (down: no gputop series), up)
TARGETS = [("gputop", "10.0.0.1:9464", "eu-1", "node-a", 1),
           ("gputop", "10.0.0.2:9464", "us-1", "node-b", 1),
           ("gputop", "10.0.0.3:9464", None, "node-c", 1),
           ("gputop", "10.0.0.9:9464", "eu-1", None, 0),
           ("node-exporter", "10.0.0.1:9100", "eu-1", None, 1)]
NODES = [t for t in TARGETS if t[3] is not None]
PROCS_PER_NODE = 4
GPUS = 2
UID = "5f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"
#: kube-state-metrics's pods, by the process (j) whose container they hold: (namespace, pod, container_id);
#: j 6's container label is its pod's UID (kube_pod_info), j 7's container is unknown, node-c's on the host
KSM = {0: ("ml", "train-a", "containerd://c0"), 1: ("ml", "train-a", "cri-o://c1"),
       2: ("serving", "infer-a", "docker://c2"), 3: ("serving", "infer-b", "containerd://c3"),
       4: ("ml", "train-b", "containerd://c4"), 5: ("batch", "job-x", "containerd://c5"), 6: ("batch", "job-y", "")}


def pod_of(j: int) -> tuple[str, str]:
    """(namespace, pod) of process j as the dashboard shows it: empty where unknown."""
    return KSM[j][:2] if j in KSM else ("", "")


def procs() -> list[dict[str, Any]]:
    """Per process: its target, labels and rates; launch rates 1..12 (distinct)."""
    out = []
    for n, (job, inst, cluster, node, _) in enumerate(NODES):
        for i in range(PROCS_PER_NODE):
            j = n * PROCS_PER_NODE + i
            out.append({"job": job, "instance": inst, "cluster": cluster, "node": node, "pid": str(1000 + j),
                        "comm": f"app{j}", "container": "" if node == "node-c" else UID if j == 6 else f"c{j}",
                        "j": j, "namespace": pod_of(j)[0], "pod": pod_of(j)[1],
                        "launches": j + 1, "h2d": 1000 * (j + 1), "d2h": 10 * (j + 1) if j % 2 == 0 else 0,
                        "kernels": {f"k{j}a": 2 * (j + 1), f"k{j}b": j + 1.5}})
    return out


def write_fleet(path: Path, t_end: int) -> None:
    times = [t_end - STEP_S * (SAMPLES - 1 - i) for i in range(SAMPLES)]
    t0 = times[0]
    fams: dict[str, list[str]] = {}

    def add(name: str, labels: dict[str, str | None], value: Any) -> None:
        """``value``: a constant, or a function of the seconds since the first sample."""
        lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if v)
        fams.setdefault(name, []).extend(
            f"{name}{{{lab}}} {value(t - t0) if callable(value) else value} {t}" for t in times)

    def counter(rate: float, base: float = 1000.0) -> Any:
        return lambda s: base + rate * s

    for job, inst, cluster, node, up in TARGETS:
        tgt = {"job": job, "instance": inst, "cluster": cluster}
        add("up", tgt, up)
        if node is None:
            continue
        n = [x[3] for x in NODES].index(node)
        add("gputop_build_info", {**tgt, "node": node, "version": "0.1.0"}, 1)
        for src in ("bpf", "nvml", "uvm"):
            add("gputop_source_up", {**tgt, "source": src}, 0 if src == "uvm" or (src, node) == ("nvml", "node-b")
                else 1)
        add("gputop_probes_failed", tgt, 2 if node == "node-b" else 0)
        add("gputop_dropped_records_total", tgt, counter(3 if node == "node-b" else 0, 0))
        add("gputop_probe_hits_per_second", tgt, 1000 * (n + 1))
        add("gputop_bpf_run_seconds_per_second", tgt, 0.001)
        add("gputop_self_cost_seconds_per_second", tgt, 0.002)
        add("process_cpu_seconds_total", tgt, counter(0.125))
        for g in range(GPUS):
            gl = {**tgt, "gpu": str(g), "mig": "", "uuid": f"GPU-{n}-{g}", "name": "NVIDIA H100"}
            add("gputop_gpu_utilization_ratio", gl, 0.5)
            add("gputop_gpu_memory_used_bytes", gl, 1 << 30)
            add("gputop_gpu_temperature_celsius", gl, 50 + 10 * n + g)
            add("gputop_gpu_power_watts", gl, 300 + 10 * n + g)
            add("gputop_gpu_power_limit_watts", gl, 700)
            add("gputop_gpu_xid_errors_total", gl, counter(0.25 if (n, g) == (1, 1) else 0, 0))
            add("gputop_gpu_ecc_volatile_errors_total", gl, 7 * n + g)
    for p in procs():
        pl = {k: p[k] for k in ("job", "instance", "cluster", "pid", "comm", "container")}
        j, rate = p["j"], p["launches"]
        add("gputop_kernel_launches_total", pl, counter(rate))
        add("gputop_graph_launches_total", pl, counter(rate))
        add("gputop_captured_launches_total", pl, counter(rate))
        for hist, size in (("gputop_kernel_grid_blocks", 80), ("gputop_kernel_block_threads", 128)):
            add(f"{hist}_sum", pl, counter(rate * size))
            add(f"{hist}_count", pl, counter(rate))
            for le in ("63.0", "127.0", "+Inf"):
                add(f"{hist}_bucket", {**pl, "le": le}, counter(0 if le == "63.0" else rate))
        for d in ("h2d", "d2h"):
            if p[d]:
                add("gputop_memcpy_bytes_total", {**pl, "direction": d}, counter(p[d]))
        add("gputop_live_alloc_bytes", pl, 1 << (20 + j))
        add("gputop_uvm_cpu_faults_total", pl, counter(rate))
        add("gputop_sync_wait_seconds_total", pl, counter(rate / 64))
        add("gputop_process_gpu_memory_bytes", {**pl, "gpu": "0"}, 1 << (20 + j))
        add("gputop_process_launch_bound", {**pl, "gpu": "0"}, j % 2)
        for kernel, krate in p["kernels"].items():
            add("gputop_kernel_function_launches_total", {**pl, "kernel": kernel}, counter(krate))
    ksm = {"job": "kube-state-metrics", "instance": "10.0.0.50:8080"}
    for ns, pod, container_id in KSM.values():
        if container_id:
            add("kube_pod_container_info", {**ksm, "namespace": ns, "pod": pod, "container": "main",
                                            "container_id": container_id}, 1)
        add("kube_pod_info", {**ksm, "namespace": ns, "pod": pod, "uid": UID if pod == "job-y" else f"uid-{pod}"}, 1)
    add("kube_pod_container_info", {**ksm, "namespace": "web", "pod": "nginx-0", "container": "nginx",
                                    "container_id": "containerd://not-a-gpu-process"}, 1)
    with path.open("w") as f:
        for lines in fams.values():
            f.write("\n".join(lines) + "\n")
        f.write("# EOF\n")


class Prom:
    def __init__(self, url: str, t_end: int) -> None:
        self.url, self.t_end = url, t_end

    def _get(self, path: str, **params: Any) -> Any:
        code, body = http_get(f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}")
        data = json.loads(body)
        assert code == 200 and data["status"] == "success", f"{params}: {body}"
        return data["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._get("/api/v1/query", query=expr, time=self.t_end)["result"]
        return result

    def query_range(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._get("/api/v1/query_range", query=expr, start=self.t_end - 120,
                                                 end=self.t_end, step=STEP_S)["result"]
        return result

    def label_values(self, metric: str, label: str) -> list[str]:
        """Grafana's label_values(metric, label)."""
        values: list[str] = self._get(f"/api/v1/label/{label}/values", **{"match[]": metric,
                                                                         "start": self.t_end - RANGE_S,
                                                                         "end": self.t_end})
        return values


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    tmp = tmp_path_factory.mktemp("grafana")
    t_end = int(time.time()) // STEP_S * STEP_S
    om, data = tmp / "fleet.om", tmp / "data"
    write_fleet(om, t_end)
    # the recording rules, in two passes: the mappings, then the per-pod rules that read them
    (group,) = [g for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == "gputop-pods"]
    passes = []
    for n, part in enumerate((group["rules"][:2], group["rules"][2:])):
        passes.append(tmp / f"rules-{n}.yml")
        passes[-1].write_text(yaml.safe_dump({"groups": [{"name": f"gputop-pods-{n}", "rules": part}]}))
    with tsdb_prometheus(om, data, rules=passes, start=t_end - STEP_S * (SAMPLES - 1), end=t_end,
                         eval_interval_s=STEP_S, promql=GRAFANA_PROMQL) as url:
        yield Prom(url, t_end)


def dashboard() -> dict[str, Any]:
    d: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return d


def panels() -> list[dict[str, Any]]:
    """Every panel, rows' panels included (rows themselves left out)."""
    out, stack = [], list(dashboard()["panels"])
    while stack:
        p = stack.pop(0)
        stack.extend(p.get("panels") or ())
        if p["type"] != "row":
            out.append(p)
    return out


def panel(title: str) -> dict[str, Any]:
    (p,) = [p for p in panels() if p["title"] == title]
    return p


def exact(v: str) -> float:
    """A value Prometheus returned, to 9 decimals: the synthetic rates are exact, and so is each window's rise
    (its samples span it exactly), but rate() multiplies the rise by one factor (1/300 for a 300 s window),
    which can cost the result its last bit (4200 over 300 s is 14.000000000000002)."""
    return round(float(v), 9)


def instantiate(expr: str, prom: Prom, **chosen: str) -> str:
    """A query as Grafana sends it: the rate interval and range, and each variable's value (``chosen``, else
    All: the regex of every value for ``job``, which has no custom all value; ``.*`` for the others)."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", f"{RANGE_S}s")
    for var in dashboard()["templating"]["list"]:
        name = var["name"]
        if name == "datasource":
            continue
        if name in chosen:
            value = re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", chosen[name])     # as Grafana escapes it
        elif var.get("allValue"):
            value = var["allValue"]
        else:
            metric, label = re.fullmatch(r"label_values\(([\w:]+), (\w+)\)", var["query"]).groups()  # type: ignore[union-attr]
            value = "(" + "|".join(prom.label_values(metric, label)) + ")"
        expr = expr.replace(f"${name}", value)
    assert "$" not in expr, expr
    return expr


def rows(p: dict[str, Any], prom: Prom, **chosen: str) -> dict[tuple[str, ...], dict[str, float]]:
    """A table panel as Grafana's merge transformation shows it: one row per label set (the panel's columns),
    each query's value under its column's name."""
    org = next(t["options"] for t in p["transformations"] if t["id"] == "organize")
    columns = [c for c, _ in sorted(org["indexByName"].items(), key=lambda kv: kv[1]) if not c.startswith("Value")]
    out: dict[tuple[str, ...], dict[str, float]] = {}
    for t in p["targets"]:
        assert (t["instant"], t["format"]) == (True, "table")
        name = org["renameByName"].get(f"Value #{t['refId']}" if len(p["targets"]) > 1 else "Value")
        for r in prom.query(instantiate(t["expr"], prom, **chosen)):
            key = tuple(r["metric"].get(c, "") for c in columns)
            out.setdefault(key, {})[name] = exact(r["value"][1])
    return out


def stat_value(title: str, prom: Prom, **chosen: str) -> float:
    (t,) = panel(title)["targets"]
    (r,) = prom.query(instantiate(t["expr"], prom, **chosen))
    return exact(r["value"][1])


def test_variables_are_job_cluster_node_all_by_default(prom: Prom) -> None:
    got = {v["name"]: (v["query"], v.get("includeAll"), v.get("multi"), v.get("allValue"), v.get("current"))
           for v in dashboard()["templating"]["list"] if v["name"] != "datasource"}
    all_ = {"selected": True, "text": "All", "value": "$__all"}
    assert got == {"job": ("label_values(gputop_build_info, job)", True, True, None, all_),
                   "cluster": ("label_values(gputop_build_info, cluster)", True, True, ".*", all_),
                   "node": ("label_values(gputop_build_info, node)", True, True, ".*", all_),
                   "namespace": ("label_values(instance_namespace_pod:gputop_kernel_launches:rate2m, namespace)",
                                 True, True, ".*", all_)}
    assert prom.label_values("gputop_build_info", "job") == ["gputop"]
    assert prom.label_values("gputop_build_info", "cluster") == ["eu-1", "us-1"]
    assert prom.label_values("gputop_build_info", "node") == ["node-a", "node-b", "node-c"]
    # the namespaces with CUDA processes (not web's nginx)
    assert prom.label_values("instance_namespace_pod:gputop_kernel_launches:rate2m", "namespace") == [
        "batch", "ml", "serving"]


def test_every_query_runs_and_returns_data(prom: Prom) -> None:
    empty, count = [], 0
    for p in panels():
        for t in p.get("targets") or ():
            count += 1
            expr = instantiate(t["expr"], prom)
            if not prom.query(expr):
                empty.append(f"{p['title']} (instant): {t['expr']}")
            if p["type"] in ("timeseries", "heatmap") and not prom.query_range(expr):
                empty.append(f"{p['title']} (range): {t['expr']}")
    assert not empty, "queries without data:\n" + "\n".join(empty)
    assert count == 45


def test_health_row_shows_the_targets_exactly(prom: Prom) -> None:
    assert [p["title"] for p in dashboard()["panels"][:9]] == [
        "Health", "Targets up", "Targets down", "Probes failed", "Dropped records/s", "Scrape targets",
        "Sources by node", "Probes failed by node", "Dropped records/s by node"]
    # the node-exporter job's target is not gputop's: All of $job is gputop's jobs only
    assert stat_value("Targets up", prom) == 3
    assert stat_value("Targets down", prom) == 1
    assert rows(panel("Scrape targets"), prom) == {
        ("gputop", "10.0.0.1:9464"): {"up": 1}, ("gputop", "10.0.0.2:9464"): {"up": 1},
        ("gputop", "10.0.0.3:9464"): {"up": 1}, ("gputop", "10.0.0.9:9464"): {"up": 0}}
    assert rows(panel("Sources by node"), prom) == {
        (node, src): {"up": 0.0 if src == "uvm" or (src, node) == ("nvml", "node-b") else 1.0}
        for node in ("node-a", "node-b", "node-c") for src in ("bpf", "nvml", "uvm")}
    assert stat_value("Probes failed", prom) == 2
    assert stat_value("Dropped records/s", prom) == 3
    # a node chosen: the other nodes' targets go, the down target (node unknown) stays
    assert stat_value("Targets up", prom, node="node-b") == 1
    assert rows(panel("Scrape targets"), prom, node="node-a") == {
        ("gputop", "10.0.0.1:9464"): {"up": 1}, ("gputop", "10.0.0.9:9464"): {"up": 0}}
    assert stat_value("Probes failed", prom, node="node-a") == 0
    assert stat_value("Dropped records/s", prom, node="node-a") == 0
    assert rows(panel("Scrape targets"), prom, cluster="us-1") == {("gputop", "10.0.0.2:9464"): {"up": 1}}
    by_node = panel("Probes failed by node")["targets"][0]["expr"]
    assert {r["metric"]["node"]: float(r["value"][1]) for r in prom.query(instantiate(by_node, prom))} == {
        "node-a": 0, "node-b": 2, "node-c": 0}


def test_top_processes_table_has_the_ten_most_launching_exactly(prom: Prom) -> None:
    p = panel(f"Top {TOP} processes by launches/s")

    def row_of(q: dict[str, Any]) -> tuple[tuple[str, ...], dict[str, float]]:
        return ((q["node"], q["pid"], q["comm"], q["container"], q["namespace"], q["pod"]),
                {"launches/s": q["launches"], "H2D bytes/s": q["h2d"], "D2H bytes/s": q["d2h"]})

    want = dict(row_of(q) for q in sorted(procs(), key=lambda q: -q["launches"])[:TOP])
    got = rows(p, prom)
    assert len(got) == TOP
    assert got == want
    # pods by name: containerd, CRI-O and Docker ids, the pod UID; j 7 unknown, node-c on the host
    assert {k[1]: k[4:] for k in got} == {
        "1002": ("serving", "infer-a"), "1003": ("serving", "infer-b"), "1004": ("ml", "train-b"),
        "1005": ("batch", "job-x"), "1006": ("batch", "job-y"), "1007": ("", ""), "1008": ("", ""),
        "1009": ("", ""), "1010": ("", ""), "1011": ("", "")}
    # the cluster variable: only eu-1's processes (node-a's four)
    assert rows(p, prom, cluster="eu-1") == dict(row_of(q) for q in procs() if q["node"] == "node-a")
    # the namespace variable: only its processes (none without a pod); All keeps them all (above)
    assert rows(p, prom, namespace="ml") == dict(row_of(q) for q in procs() if q["namespace"] == "ml")
    assert {k[1] for k in rows(p, prom, namespace="batch")} == {"1005", "1006"}


def test_pods_table_and_series_exactly(prom: Prom) -> None:
    """Per pod: the recording rules' rates of its processes, summed; the row without namespace and pod holds
    every process without a known pod (j 7, and node-c's four on the host): node totals stay whole."""
    want: dict[tuple[str, str], dict[str, float]] = {}
    for q in procs():
        r = want.setdefault((q["namespace"], q["pod"]), dict.fromkeys(
            ("launches/s", "graph launches/s", "H2D bytes/s", "D2H bytes/s", "GPU memory"), 0.0))
        r["launches/s"] += q["launches"]
        r["graph launches/s"] += q["launches"]
        r["H2D bytes/s"] += q["h2d"]
        r["D2H bytes/s"] += q["d2h"]
        r["GPU memory"] += 1 << (20 + q["j"])
    assert want[("", "")]["launches/s"] == 8 + 9 + 10 + 11 + 12 and len(want) == 7
    p = panel(f"Top {TOP} pods by launches/s")
    assert rows(p, prom) == want
    assert sum(r["launches/s"] for r in rows(p, prom).values()) == sum(q["launches"] for q in procs())
    assert rows(p, prom, namespace="ml") == {k: v for k, v in want.items() if k[0] == "ml"}
    assert rows(p, prom, node="node-b") == {
        ("ml", "train-b"): {**want[("ml", "train-b")]}, ("batch", "job-x"): want[("batch", "job-x")],
        ("batch", "job-y"): want[("batch", "job-y")],
        ("", ""): {"launches/s": 8, "graph launches/s": 8, "H2D bytes/s": 8000, "D2H bytes/s": 0,
                   "GPU memory": 1 << 27}}
    (t,) = panel("Kernel launches/s by pod")["targets"]
    got = {(r["metric"].get("namespace", ""), r["metric"].get("pod", "")): {exact(v) for _, v in r["values"]}
           for r in prom.query_range(instantiate(t["expr"], prom))}
    assert got == {k: {v["launches/s"]} for k, v in want.items()}


def test_top_kernels_table_exactly(prom: Prom) -> None:
    ranked = sorted(((q["node"], q["pid"], q["comm"], k), r) for q in procs() for k, r in q["kernels"].items())
    ranked.sort(key=lambda kv: -kv[1])
    assert ranked[TOP - 1][1] != ranked[TOP][1]         # no tie at the cut
    assert rows(panel(f"Top {TOP} kernels by launches/s"), prom) == {k: {"launches/s": r} for k, r in ranked[:TOP]}


def test_series_panels_draw_the_top_ten_processes(prom: Prom) -> None:
    per_process = [p for p in panels() if p["type"] == "timeseries"
                   and any("{{pid}}" in t["legendFormat"] for t in p["targets"])]
    assert len(per_process) == 10
    for p in per_process:
        # the things drawn: processes, or a process's kernels in the per-kernel panel
        keys = ("node", "pid", "kernel") if "kernel" in p["title"] else ("node", "pid")
        drawn = {tuple(r["metric"].get(k) for k in keys) for t in p["targets"]
                 for r in prom.query_range(instantiate(t["expr"], prom))}
        assert len(drawn) == TOP, p["title"]
    launches = panel("Kernel launches/s by process")["targets"][0]["expr"]
    got = {(r["metric"]["pid"], exact(v)) for r in prom.query_range(instantiate(launches, prom))
           for _, v in r["values"]}
    assert got == {(q["pid"], float(q["launches"])) for q in sorted(procs(), key=lambda q: -q["launches"])[:TOP]}


@pytest.mark.parametrize("chosen", [{"node": "node-b"}, {"cluster": "us-1"}, {"node": "node-b", "cluster": "us-1"}])
def test_variables_filter_every_panel(prom: Prom, chosen: dict[str, str]) -> None:
    """node-b is us-1's one node: every query has data, and only node-b's where a node is named."""
    for p in panels():
        for t in p.get("targets") or ():
            result = prom.query(instantiate(t["expr"], prom, **chosen))
            assert result, (p["title"], t["expr"])
            nodes = {r["metric"]["node"] for r in result if "node" in r["metric"]}
            assert nodes <= {"node-b"}, (p["title"], nodes)
    assert stat_value("Targets up", prom, **chosen) == 1
    assert stat_value("Probes failed", prom, **chosen) == 2
    assert len(rows(panel(f"Top {TOP} processes by launches/s"), prom, **chosen)) == PROCS_PER_NODE


def test_gpu_panels_exact(prom: Prom) -> None:
    def values(title: str, ref: str = "A") -> dict[tuple[str, str], float]:
        (t,) = [t for t in panel(title)["targets"] if t["refId"] == ref]
        return {(r["metric"]["node"], r["metric"]["gpu"]): exact(r["value"][1])
                for r in prom.query(instantiate(t["expr"], prom))}

    gpus = [(node[3], n, g) for n, node in enumerate(NODES) for g in range(GPUS)]
    assert values("GPU temperature") == {(node, str(g)): 50 + 10 * n + g for node, n, g in gpus}
    assert values("GPU power and power limit") == {(node, str(g)): 300 + 10 * n + g for node, n, g in gpus}
    assert values("GPU power and power limit", "B") == {(node, str(g)): 700 for node, _, g in gpus}
    assert values("ECC volatile errors") == {(node, str(g)): 7 * n + g for node, n, g in gpus}
    assert values("XID errors") == {(node, str(g)): 15.0 if (n, g) == (1, 1) else 0.0 for node, n, g in gpus}


def test_each_panel_has_one_unit() -> None:
    units = {}
    for p in panels():
        if p["type"] == "text":
            assert "targets" not in p or not p["targets"]
            continue
        cfg = p["fieldConfig"]
        units[p["title"]] = cfg["defaults"]["unit"]
        for o in cfg.get("overrides") or ():
            # tables only: a unit per value column (by its name), never an axis of mixed units
            assert p["type"] == "table" and o["matcher"]["id"] == "byName", p["title"]
            assert [prop["id"] for prop in o["properties"]] == ["unit"], p["title"]
    assert units == {
        "Targets up": "short", "Targets down": "short", "Probes failed": "short", "Dropped records/s": "cps",
        "Scrape targets": "bool", "Sources by node": "bool", "Probes failed by node": "short",
        "Dropped records/s by node": "cps", f"Top {TOP} processes by launches/s": "ops",
        f"Top {TOP} pods by launches/s": "ops", "Kernel launches/s by pod": "ops",
        "Kernel launches/s by process": "ops", "Launch-bound processes": "bool",
        "Graph and captured launches/s": "ops", "Average blocks per grid and threads per block": "short",
        "Blocks per grid": "ops", "Threads per block": "ops", f"Top {TOP} kernels by launches/s": "ops",
        "Kernel launches/s by kernel": "ops", "memcpy bandwidth by direction": "Bps",
        "memcpy bandwidth by process": "Bps", "Live allocations": "bytes", "UVM CPU faults/s": "ops",
        "Time blocked in synchronisation": "percentunit", "GPU memory by process": "bytes",
        "GPU utilisation": "percentunit", "Launches/s by node": "ops", "GPU memory used": "bytes",
        "GPU temperature": "celsius", "GPU power and power limit": "watt", "XID errors": "short",
        "ECC volatile errors": "short", "gputop CPU": "percentunit", "Probe hits/s": "ops"}
    top = panel(f"Top {TOP} processes by launches/s")
    assert {o["matcher"]["options"]: o["properties"][0]["value"] for o in top["fieldConfig"]["overrides"]} == {
        "H2D bytes/s": "Bps", "D2H bytes/s": "Bps"}
    assert next(t["options"] for t in top["transformations"] if t["id"] == "organize")["renameByName"] == {
        "Value #A": "launches/s", "Value #B": "H2D bytes/s", "Value #C": "D2H bytes/s"}
    note = panel("Per-kernel metrics")
    assert "--kernel-metrics" in note["options"]["content"]
