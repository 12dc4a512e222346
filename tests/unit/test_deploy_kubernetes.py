"""deploy/kubernetes/ and the alert rules: every manifest parsed and checked field by field (kinds,
namespace, the selectors against the DaemonSet's pod labels, port names, tolerations, the NetworkPolicy's
peers, the Pod Security level the pods need), the core kinds with kubernetes-validate, and the rules with
promtool: `check rules` (exact count), `test rules` on deploy/prometheus/gputop-rules.test.yml (a firing
and a quiet case per alert, each shown to fail when its alert's expression matches nothing), and the
PrometheusRule carrying exactly the plain file's groups. docs/deploy.md describes it all. The recording rules
of group gputop-pods are tested in tests/unit/test_prometheus_rules.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from promserver import promtool, rule_groups
from support import ROOT

KUBE = ROOT / "deploy" / "kubernetes"
PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "gputop-rules.yml"
RULES_TEST = PROM / "gputop-rules.test.yml"
DOCS = ROOT / "docs" / "deploy.md"
VENV_BIN = Path(sys.executable).parent
POD_LABELS = {"app.kubernetes.io/name": "gputop-exporter"}

ALERTS = {  # alert: (severity, for)
    "GputopExporterDown": ("warning", "2m"),
    "GputopSnapshotStale": ("warning", "1m"),
    "GputopProbesFailed": ("warning", "10m"),
    "GputopDroppedRecords": ("warning", None),
    "GputopSourceDown": ("warning", "5m"),
    "GpuXidErrors": ("critical", None),
    "GputopProcessLaunchBound": ("info", "5m"),
}
#: recording rules (group gputop-pods: tests/unit/test_prometheus_rules.py)
RECORDS = 6


def docs_of(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KUBE / name).read_text()) if d is not None]


def the(kind: str) -> dict[str, Any]:
    found = [d for f in sorted(KUBE.glob("*.yaml")) for d in docs_of(f.name) if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s"
    return found[0]


def pod_spec() -> dict[str, Any]:
    return the("DaemonSet")["spec"]["template"]["spec"]


def container() -> dict[str, Any]:
    containers = pod_spec()["containers"]
    assert [c["name"] for c in containers] == ["exporter"]
    return containers[0]


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's matchLabels (the only form these manifests use) against an object's labels."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def rules() -> list[dict[str, Any]]:
    """The alert rules (not the recording rules)."""
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]



# --- the manifests ---------------------------------------------------------------------------------------

def test_the_manifests_are_these_documents_all_in_namespace_gputop() -> None:
    found = {f.name: [(d["apiVersion"], d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
                      for d in docs_of(f.name)] for f in sorted(KUBE.glob("*.yaml"))}
    assert found == {
        "gputop-exporter.yaml": [("v1", "Namespace", "gputop", None),
                                 ("apps/v1", "DaemonSet", "gputop-exporter", "gputop"),
                                 ("v1", "Service", "gputop-exporter", "gputop"),
                                 ("networking.k8s.io/v1", "NetworkPolicy", "gputop-exporter", "gputop")],
        "gputop-podmonitor.yaml": [("monitoring.coreos.com/v1", "PodMonitor", "gputop-exporter", "gputop")],
        "gputop-prometheusrule.yaml": [("monitoring.coreos.com/v1", "PrometheusRule", "gputop", "gputop")],
        "gputop-servicemonitor.yaml": [("monitoring.coreos.com/v1", "ServiceMonitor", "gputop-exporter", "gputop")],
    }
    for f in sorted(KUBE.glob("*.yaml")):
        for d in docs_of(f.name):
            expected = {"apiVersion", "kind", "metadata"} | (set() if d["kind"] == "Namespace" else {"spec"})
            assert set(d) == expected, (f.name, d["kind"], set(d))
            assert d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == (
                None if d["kind"] == "Namespace" else "gputop-exporter"), (f.name, d["kind"])


@pytest.mark.parametrize("name", ["gputop-exporter.yaml", "gputop-servicemonitor.yaml", "gputop-podmonitor.yaml",
                                  "gputop-prometheusrule.yaml"])
def test_kubernetes_validate_passes_the_core_kinds_and_has_no_schema_for_the_operators(name: str) -> None:
    """kubernetes-validate --strict checks every core kind against Kubernetes's own schema; it has none for
    the Prometheus Operator's kinds (it says so, and they are checked field by field below)."""
    res = subprocess.run([str(VENV_BIN / "kubernetes-validate"), "--strict", "--quiet", str(KUBE / name)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    crd = {d["kind"] for d in docs_of(name)} - {"Namespace", "DaemonSet", "Service", "NetworkPolicy"}
    warn = "".join(f"WARN {KUBE / name} Couldn't find schema for kind {k} with api version monitoring.coreos.com/v1 "
                   f"for kubernetes version 1.37\n" for k in sorted(crd))
    assert (res.returncode, res.stdout + res.stderr) == (0, warn)


def test_namespace_enforces_privileged_pod_security_because_baseline_refuses_the_pods() -> None:
    ns = the("Namespace")
    assert ns["metadata"]["labels"] == {
        "pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/audit": "privileged", "pod-security.kubernetes.io/audit-version": "latest",
        "pod-security.kubernetes.io/warn": "privileged", "pod-security.kubernetes.io/warn-version": "latest"}
    # what the Pod Security Standards' baseline level refuses in the pod (the kubernetes.io
    # pod-security-standards page), though the container is not privileged: hence `privileged`
    baseline_caps = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                     "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
    spec, sc = pod_spec(), container()["securityContext"]
    refused = []
    if spec.get("hostPID") or spec.get("hostNetwork") or spec.get("hostIPC"):
        refused.append("host namespaces")
    refused += [f"hostPath {v['hostPath']['path']}" for v in spec["volumes"] if "hostPath" in v]
    refused += [f"capability {c}" for c in sc["capabilities"]["add"] if c not in baseline_caps]
    if sc.get("privileged"):
        refused.append("privileged")
    refused += [f"{k} Unconfined" for k in ("seccompProfile", "appArmorProfile") if sc[k]["type"] == "Unconfined"]
    assert refused == ["host namespaces", "hostPath /sys/kernel/tracing", "capability BPF", "capability PERFMON",
                       "capability DAC_READ_SEARCH", "capability SYS_PTRACE", "capability CHECKPOINT_RESTORE",
                       "capability SYS_ADMIN",
                       "seccompProfile Unconfined", "appArmorProfile Unconfined"]


def test_daemonset_keeps_what_it_had() -> None:
    ds = the("DaemonSet")
    assert ds["spec"]["selector"] == {"matchLabels": POD_LABELS}
    assert ds["spec"]["template"]["metadata"]["labels"] == POD_LABELS
    assert ds["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9464", "prometheus.io/path": "/metrics"}
    spec, c = pod_spec(), container()
    assert (spec["hostPID"], spec["automountServiceAccountToken"], spec["terminationGracePeriodSeconds"],
            spec["nodeSelector"]) == (True, False, 90, {"nvidia.com/gpu.present": "true"})
    assert (c["image"], c["args"]) == ("gputop:0.1.0", ["--listen", ":9464", "--bpf"])
    assert c["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert c["readinessProbe"]["httpGet"] == c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert [v["name"] for v in spec["volumes"]] == ["tracefs", "cache", "tmp"]


def tolerated(tolerations: list[dict[str, str]], key: str, value: str, effect: str) -> bool:
    """Kubernetes's toleration matching: an empty key with Exists matches every key; an empty effect every
    effect; Exists ignores the value, Equal (the default) compares it."""
    for t in tolerations:
        if t.get("effect", "") not in ("", effect):
            continue
        if t.get("key", "") not in ("", key):
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == value:
            return True
    return False


def test_daemonset_tolerates_the_gpu_taints_noexecute_included() -> None:
    tolerations = pod_spec()["tolerations"]
    assert tolerations == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute"},
    ]
    for taint in [("nvidia.com/gpu", "present", "NoSchedule"), ("nvidia.com/gpu", "true", "NoExecute"),
                  ("sku", "gpu", "NoSchedule"), ("nvidia.com/gpu.health", "xid-79", "NoExecute"),
                  ("node.kubernetes.io/unreachable", "", "NoExecute")]:
        assert tolerated(tolerations, *taint), taint
    # NoSchedule taints of other keys still keep it off (the nodeSelector's GPU nodes are what it runs on)
    for taint in [("dedicated", "database", "NoSchedule"), ("sku", "cpu", "NoSchedule")]:
        assert not tolerated(tolerations, *taint), taint


def test_headless_service_selects_the_pods_by_the_containers_port_name() -> None:
    svc = the("Service")
    assert svc["spec"] == {"clusterIP": "None", "selector": POD_LABELS,
                           "ports": [{"name": "metrics", "port": 9464, "targetPort": "metrics", "protocol": "TCP"}]}
    port = container()["ports"][0]
    assert selects({"matchLabels": svc["spec"]["selector"]}, the("DaemonSet")["spec"]["template"]["metadata"]["labels"])
    assert (svc["spec"]["ports"][0]["targetPort"], svc["spec"]["ports"][0]["port"]) == (port["name"],
                                                                                        port["containerPort"])


ENDPOINT = {"port": "metrics", "scheme": "http", "path": "/metrics", "interval": "15s",
            "relabelings": [{"action": "labeldrop", "regex": "container"},
                            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "kubernetes_node"}]}


def test_servicemonitor_scrapes_the_services_metrics_port() -> None:
    sm, svc = the("ServiceMonitor"), the("Service")
    assert sm["spec"] == {"jobLabel": "app.kubernetes.io/name", "namespaceSelector": {"matchNames": ["gputop"]},
                          "selector": {"matchLabels": POD_LABELS}, "endpoints": [ENDPOINT]}
    assert selects(sm["spec"]["selector"], svc["metadata"]["labels"])
    assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"] == container()["ports"][0]["name"]


def test_podmonitor_scrapes_the_pods_metrics_port() -> None:
    pm, ds = the("PodMonitor"), the("DaemonSet")
    assert pm["spec"] == {"jobLabel": "app.kubernetes.io/name", "namespaceSelector": {"matchNames": ["gputop"]},
                          "selector": {"matchLabels": POD_LABELS}, "podMetricsEndpoints": [ENDPOINT]}
    assert selects(pm["spec"]["selector"], ds["spec"]["template"]["metadata"]["labels"])
    assert ds["metadata"]["namespace"] in pm["spec"]["namespaceSelector"]["matchNames"]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == container()["ports"][0]["name"]


def test_monitor_endpoints_use_only_fields_and_values_the_operators_schema_has() -> None:
    """The Prometheus Operator's v1 CRDs (example/prometheus-operator-crd/ of prometheus-operator): the
    fields used here, the interval's duration pattern, the scheme and relabel action enums."""
    duration = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
                          r"(([0-9]+)ms)?)$")
    actions = {"replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep", "lowercase", "uppercase",
               "keepequal", "dropequal"}
    relabel_fields = {"action", "regex", "sourceLabels", "targetLabel", "replacement", "separator", "modulus"}
    for kind, list_field in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        for ep in the(kind)["spec"][list_field]:
            assert set(ep) <= {"port", "scheme", "path", "interval", "scrapeTimeout", "relabelings",
                               "metricRelabelings", "honorLabels"}, (kind, set(ep))
            assert duration.fullmatch(ep["interval"]) and ep["scheme"] in ("http", "https"), kind
            for r in ep["relabelings"]:
                assert set(r) <= relabel_fields and r.get("action", "replace").lower() in actions, (kind, r)
                for name in [*r.get("sourceLabels", []), r.get("targetLabel", "x")]:
                    assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name), (kind, name)


def test_the_operators_target_container_label_is_dropped_so_the_exporters_survives() -> None:
    """The operator labels every target container="<the pod's container>"; Prometheus would then rename
    the exporter's own `container` label (the traced process's container id) exported_container."""
    target = {"namespace": "gputop", "pod": "gputop-exporter-x7k2p", "container": "exporter",
              "endpoint": "metrics", "job": "gputop-exporter", "__meta_kubernetes_pod_node_name": "gpu-node-1"}
    for kind, list_field in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        labels = dict(target)
        for r in the(kind)["spec"][list_field][0]["relabelings"]:   # the actions used, as Prometheus does them
            if r.get("action") == "labeldrop":
                labels = {k: v for k, v in labels.items() if not re.fullmatch(r["regex"], k)}
            else:
                labels[r["targetLabel"]] = ";".join(labels[s] for s in r["sourceLabels"])
        kept = {k: v for k, v in labels.items() if not k.startswith("__")}
        assert kept == {"namespace": "gputop", "pod": "gputop-exporter-x7k2p", "endpoint": "metrics",
                        "job": "gputop-exporter", "kubernetes_node": "gpu-node-1"}, kind


def allowed(policy: dict[str, Any], ns_labels: dict[str, str], pod_labels: dict[str, str], port: int) -> bool:
    """NetworkPolicy ingress semantics for these peers: a peer with namespaceSelector and podSelector
    needs both; with a namespaceSelector only, every pod of the matching namespaces."""
    for rule in policy["spec"]["ingress"]:
        if not any(p["port"] == port and p["protocol"] == "TCP" for p in rule["ports"]):
            continue
        for peer in rule["from"]:
            assert set(peer) <= {"namespaceSelector", "podSelector"}, peer
            if selects(peer["namespaceSelector"], ns_labels) and selects(peer.get("podSelector", {}), pod_labels):
                return True
    return False


def test_networkpolicy_lets_only_prometheus_reach_the_metrics_port() -> None:
    np = the("NetworkPolicy")
    assert np["spec"] == {
        "podSelector": {"matchLabels": POD_LABELS},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                               "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}],
                     "ports": [{"port": 9464, "protocol": "TCP"}]}]}
    assert selects(np["spec"]["podSelector"], the("DaemonSet")["spec"]["template"]["metadata"]["labels"])
    port = container()["ports"][0]["containerPort"]
    monitoring = {"kubernetes.io/metadata.name": "monitoring"}
    team = {"kubernetes.io/metadata.name": "ml-team"}
    prometheus = {"app.kubernetes.io/name": "prometheus", "prometheus": "k8s"}
    assert allowed(np, monitoring, prometheus, port)
    # issue 40: a tenant's pod labelled as Prometheus in its own namespace is not
    assert not allowed(np, team, prometheus, port)
    assert not allowed(np, monitoring, {"app.kubernetes.io/name": "grafana-agent"}, port)
    assert not allowed(np, team, {"app": "notebook"}, port)
    assert not allowed(np, {"kubernetes.io/metadata.name": "gputop"}, POD_LABELS, port)
    assert not allowed(np, monitoring, {}, 22)


# --- the alert rules -------------------------------------------------------------------------------------

def test_rules_are_these_alerts_each_with_severity_summary_description_and_a_runbook() -> None:
    assert [g["name"] for g in rule_groups()] == ["gputop-exporter", "gputop-gpu", "gputop-pods"]
    assert {r["alert"]: (r["labels"]["severity"], r.get("for")) for r in rules()} == ALERTS
    assert [r["alert"] for r in rules()] == list(ALERTS)
    headings = DOCS.read_text().split("\n## On call: what each alert means\n", 1)[1].split("\n## ", 1)[0]
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^### (.+)$", headings, re.M)}
    for r in rules():
        assert set(r) == {"alert", "expr", "labels", "annotations"} | ({"for"} if r.get("for") else set())
        assert set(r["labels"]) == {"severity"}
        assert set(r["annotations"]) == {"summary", "description", "runbook_url"}, r["alert"]
        assert r["annotations"]["runbook_url"] == f"https://gputop.example.com/docs/deploy.md#{r['alert'].lower()}"
        assert r["alert"].lower() in anchors, f"docs/deploy.md has no on-call section for {r['alert']}"
    assert anchors == {a.lower() for a in ALERTS}


def test_rules_expressions() -> None:
    node = " * on(job, instance) group_left(node) gputop_build_info"
    assert {r["alert"]: r["expr"] for r in rules()} == {
        "GputopExporterDown": 'up{job=~"gputop.*"} == 0',
        # refreshed at least once: the "starting" snapshot ages while the probes are compiled and attached
        "GputopSnapshotStale": "(gputop_snapshot_age_seconds > on(job, instance) clamp_min(3 * "
                               "gputop_refresh_interval_seconds, 60) and on(job, instance) gputop_refreshes_total > 0)"
                               + node,
        "GputopProbesFailed": "(gputop_probes_failed > 0)" + node,
        "GputopDroppedRecords": "(rate(gputop_dropped_records_total[5m]) > 0)" + node,
        "GputopSourceDown": '(gputop_source_up{source=~"bpf|nvml"} == 0)' + node,
        "GpuXidErrors": "(increase(gputop_gpu_xid_errors_total[5m]) > 0)" + node,
        "GputopProcessLaunchBound": "(gputop_process_launch_bound == 1)" + node,
    }
    # every metric named is one of docs/metrics.md's
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text()
    for r in rules():
        for name in set(re.findall(r"\bgputop_[a-z_]+", r["expr"])):
            assert f"`{name}`" in metrics_doc, name
    stale = next(r for r in rules() if r["alert"] == "GputopSnapshotStale")
    assert ("Needs an exporter that exports gputop_snapshot_age_seconds and gputop_refresh_interval_seconds"
            in stale["annotations"]["description"])


def test_exporter_down_covers_every_job_the_scrape_configs_and_monitors_name() -> None:
    expr = next(r["expr"] for r in rules() if r["alert"] == "GputopExporterDown")
    job_re = re.fullmatch(r'up\{job=~"(.+)"\} == 0', expr)
    assert job_re is not None
    jobs = [j["job_name"] for f in ("prometheus.yml", "prometheus-kubernetes.yml")
            for j in yaml.safe_load((PROM / f).read_text())["scrape_configs"]]
    # the operator's job is the value of the jobLabel label, on the Service (ServiceMonitor) or the pods
    jobs.append(the("Service")["metadata"]["labels"][the("ServiceMonitor")["spec"]["jobLabel"]])
    jobs.append(the("DaemonSet")["spec"]["template"]["metadata"]["labels"][the("PodMonitor")["spec"]["jobLabel"]])
    assert jobs == ["gputop", "gputop-kubernetes", "gputop-exporter", "gputop-exporter"]
    assert all(re.fullmatch(job_re[1], j) for j in jobs)
    assert not re.fullmatch(job_re[1], "node-exporter")


def test_prometheus_configs_load_the_rules_file() -> None:
    for name in ("prometheus.yml", "prometheus-kubernetes.yml"):
        cfg = yaml.safe_load((PROM / name).read_text())
        assert cfg["rule_files"] == ["gputop-rules.yml"], name
        assert (PROM / cfg["rule_files"][0]).is_file()
        assert cfg["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}, name


def test_prometheusrule_carries_exactly_the_plain_rules() -> None:
    pr = the("PrometheusRule")
    assert pr["metadata"] == {"name": "gputop", "namespace": "gputop", "labels": POD_LABELS}
    assert pr["spec"] == {"groups": rule_groups()}


def test_promtool_check_rules_finds_every_rule(tmp_path: Path) -> None:
    tool = promtool()
    res = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (
        0, f"Checking {RULES}\n  SUCCESS: {len(ALERTS) + RECORDS} rules found\n\n", "")
    # the PrometheusRule's groups as a rules file of their own
    operator = tmp_path / "operator-rules.yml"
    operator.write_text(yaml.safe_dump({"groups": the("PrometheusRule")["spec"]["groups"]}))
    res = subprocess.run([tool, "check", "rules", str(operator)], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"Checking {operator}\n  SUCCESS: 13 rules found\n\n", "")


def test_promtool_check_config_loads_the_rules_with_the_static_config() -> None:
    res = subprocess.run([promtool(), "check", "config", str(PROM / "prometheus.yml")], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "  SUCCESS: 1 rule files found\n" in res.stdout
    assert f"Checking {PROM / 'gputop-rules.yml'}\n  SUCCESS: 13 rules found\n" in res.stdout


def test_promtool_unit_tests_pass() -> None:
    res = subprocess.run([promtool(), "test", "rules", str(RULES_TEST)], capture_output=True, text=True,
                         timeout=120)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"Unit Testing:  {RULES_TEST}\n  SUCCESS\n\n", "")


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases: dict[str, list[int]] = {}
    for group in yaml.safe_load(RULES_TEST.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], []).append(len(case["exp_alerts"]))
            for alert in case["exp_alerts"]:
                assert set(alert) == {"exp_labels", "exp_annotations"}, case["alertname"]
                assert alert["exp_labels"]["severity"] == ALERTS[case["alertname"]][0]
                assert set(alert["exp_annotations"]) == {"summary", "description", "runbook_url"}
    assert set(cases) == set(ALERTS)
    for name, counts in cases.items():
        assert 0 in counts and 1 in counts, (name, counts)


@pytest.mark.parametrize("alert", list(ALERTS))
def test_the_unit_tests_fail_when_an_alert_never_fires(alert: str, tmp_path: Path) -> None:
    """Each alert's firing case is real: with its expression replaced by one that matches nothing,
    promtool's unit tests fail, naming that alert."""
    tool = promtool()
    groups = rule_groups()
    for g in groups:
        for r in g["rules"]:
            if r.get("alert") == alert:
                r["expr"] = "vector(1) == 0"
    (tmp_path / "gputop-rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(RULES_TEST, tmp_path / "gputop-rules.test.yml")
    res = subprocess.run([tool, "test", "rules", str(tmp_path / "gputop-rules.test.yml")], capture_output=True,
                         text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    # "alertname: X, ... got:[]" (promtool 2.42) or "alertname:X, ... got:\"[]\"" (2.24): the one alert
    # that failed, and no other
    failed = set(re.findall(r"alertname: ?(\w+),", out))
    assert failed == {alert} and re.search(r'got:"?\[\]"?', out), out
