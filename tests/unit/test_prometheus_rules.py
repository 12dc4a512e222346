"""The recording rules of deploy/prometheus/gputop-rules.yml (group gputop-pods, "Pods by name" in
docs/deploy.md): their names (Prometheus's level:metric:operations), the metrics they read, an exact
promtool case for every one (deploy/prometheus/gputop-rules.test.yml: a containerd and a CRI-O container
id, a pod UID, a host process, an unknown id, an id two pods claim, node totals kept whole), each case
shown to fail when its rule records nothing, and the same groups in the Operator's PrometheusRule; the alerts'
runbook URLs absolute, on the placeholder base docs/deploy.md says how to set, and that setting it as written
there keeps every file valid. The alert rules are tests/unit/test_deploy_kubernetes.py's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from promserver import promtool, rule_groups
from support import ROOT

PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "gputop-rules.yml"
RULES_TEST = PROM / "gputop-rules.test.yml"
OPERATOR = ROOT / "deploy" / "kubernetes" / "gputop-prometheusrule.yaml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
#: the runbook URLs' base the rules ship with: a placeholder that docs/deploy.md tells users to set
RUNBOOK_BASE = "https://gputop.example.com/docs"

RECORDS = ["container:kube_pod_container_info:relabel", "container:kube_pod_info:relabel",
           "instance_namespace_pod:gputop_kernel_launches:rate2m",
           "instance_namespace_pod:gputop_graph_launches:rate2m",
           "instance_namespace_pod_direction:gputop_memcpy_bytes:rate2m",
           "instance_namespace_pod:gputop_process_gpu_memory_bytes:sum"]


def records() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"] if "record" in r]



def test_the_recording_rules_are_these_in_their_own_group() -> None:
    pods = next(g for g in rule_groups() if g["name"] == "gputop-pods")
    assert [r.get("record") for r in pods["rules"]] == RECORDS
    assert [r["record"] for r in records()] == RECORDS          # no recording rule elsewhere
    for r in records():
        assert set(r) == {"record", "expr"}, r["record"]


def test_names_are_level_metric_operations_of_the_metric_read() -> None:
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text()
    for r in records():
        level, metric, ops = r["record"].split(":")
        assert re.fullmatch(r"[a-z_]+", level) and re.fullmatch(r"[a-z0-9_]+", ops), r["record"]
        # the metric part is the metric read (a counter without its _total, since a rate is taken)
        read = set(re.findall(r"\b((?:gputop|kube)_[a-z_]+)\b", r["expr"]))
        assert metric in read or f"{metric}_total" in read, (r["record"], read)
        if ops.startswith("rate"):
            assert f"rate({metric}_total[{ops[4:]}])" in r["expr"], r["record"]
        for name in read:
            if name.startswith("gputop_"):
                assert f"`{name}`" in metrics_doc, name
    # the level names the labels kept: each per-pod rule sums by them (cluster and job ride along)
    for r in records()[2:]:
        level = r["record"].split(":")[0]
        by = re.search(r"^sum by \(([^)]*)\)", r["expr"])
        assert by is not None, r["record"]
        assert [x.strip() for x in by.group(1).split(",")] == ["cluster", "job", *level.split("_")], r["record"]


def test_every_recording_rule_has_an_exact_case() -> None:
    tested = [case["expr"] for t in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for case in t.get("promql_expr_test", [])]
    assert set(RECORDS) <= set(tested)
    assert "sum by (instance) (instance_namespace_pod:gputop_kernel_launches:rate2m)" in tested


def test_the_operators_prometheusrule_carries_the_same_groups() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "gputop-prometheusrule.yaml").read_text())
            if d]
    assert docs[0]["spec"]["groups"] == rule_groups()


@pytest.mark.parametrize("record", RECORDS)
def test_the_cases_fail_when_a_rule_records_nothing(record: str, tmp_path: Path) -> None:
    """Each rule's case is real: with its expression replaced by one that matches nothing, promtool's
    unit tests fail on it (and on the rules that read it)."""
    tool = promtool()
    changed = rule_groups()
    for g in changed:
        for r in g["rules"]:
            if r.get("record") == record:
                r["expr"] = "vector(1) == 0"
    (tmp_path / "gputop-rules.yml").write_text(yaml.safe_dump({"groups": changed}))
    shutil.copy(RULES_TEST, tmp_path / "gputop-rules.test.yml")
    res = subprocess.run([tool, "test", "rules", str(tmp_path / "gputop-rules.test.yml")], capture_output=True,
                         text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    failed = set(re.findall(r'expr: "([^"]+)", time: 5m', out))
    assert record in failed, out
    # a mapping's own case fails, and those of the per-pod rules whose cases have a process it maps; the
    # node total only when the launches rule itself records nothing (a process without a pod stays in
    # its instance's series)
    total = "sum by (instance) (instance_namespace_pod:gputop_kernel_launches:rate2m)"
    readers = {RECORDS[0]: RECORDS[2:], RECORDS[1]: [RECORDS[2], RECORDS[5]], RECORDS[2]: [total]}.get(record, [])
    assert failed == {record, *readers}, failed


# --- the alerts' runbook URLs ----------------------------------------------------------------------------

def alerts(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for g in groups for r in g["rules"] if "alert" in r]


def on_call_anchors() -> set[str]:
    """The anchors of docs/deploy.md's on-call sections (a forge's: lower case, punctuation dropped)."""
    text = DEPLOY_DOC.read_text().split("\n## On call: what each alert means\n", 1)[1].split("\n## ", 1)[0]
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^### (.+)$", text, re.M)}


def test_runbook_urls_are_absolute_and_land_on_the_on_call_sections() -> None:
    """Issue 35: runbook_url was a relative path (docs/deploy.md#...), which no notification can open. Each is
    an absolute https URL, RUNBOOK_BASE/deploy.md#<alert>, whose anchor is the alert's on-call section; the
    promtool cases and the Operator's PrometheusRule expect the same URLs."""
    anchors = on_call_anchors()
    for r in alerts(rule_groups()):
        url = r["annotations"]["runbook_url"]
        parts = urlsplit(url)
        assert parts.scheme == "https" and parts.netloc and parts.fragment, url
        assert url == f"{RUNBOOK_BASE}/deploy.md#{r['alert'].lower()}", url
        assert parts.fragment in anchors, url
    expected = {r["annotations"]["runbook_url"] for r in alerts(rule_groups())}
    tested = {a["exp_annotations"]["runbook_url"] for t in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for case in t.get("alert_rule_test", []) for a in case["exp_alerts"]}
    assert tested == expected
    operator = next(d for d in yaml.safe_load_all(OPERATOR.read_text()) if d)["spec"]["groups"]
    assert {r["annotations"]["runbook_url"] for r in alerts(operator)} == expected
    # the placeholder is said to be one, where the rules are and where the docs say what to do
    assert RUNBOOK_BASE in DEPLOY_DOC.read_text() and "placeholder" in RULES.read_text()


def documented_base_change() -> str:
    """The command docs/deploy.md gives to set the runbook URLs' base."""
    m = re.search(r"```sh\n(sed -i 's#" + re.escape(RUNBOOK_BASE) + r"#.*?)\n```", DEPLOY_DOC.read_text(), re.S)
    assert m is not None, "docs/deploy.md gives no command to set the runbook URLs' base"
    return m.group(1)


def test_setting_the_runbook_base_as_documented_keeps_every_file_valid(tmp_path: Path) -> None:
    """The command of docs/deploy.md, run on a copy of the deploy files: no placeholder is left, every URL is
    on the new base, promtool still accepts the rules and their unit tests pass, and the Operator's
    PrometheusRule still carries the same groups."""
    tool = promtool()
    for src in (RULES, RULES_TEST, OPERATOR):
        dst = tmp_path / src.relative_to(ROOT)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    res = subprocess.run(["bash", "-ec", documented_base_change()], cwd=tmp_path, capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0, res.stderr
    rules, rules_test, operator = (tmp_path / p.relative_to(ROOT) for p in (RULES, RULES_TEST, OPERATOR))
    new = "https://github.com/ORG/gputop/blob/main/docs"
    for f in (rules, rules_test, operator):
        assert "gputop.example.com" not in f.read_text(), f
    groups = yaml.safe_load(rules.read_text())["groups"]
    assert {r["annotations"]["runbook_url"] for r in alerts(groups)} == {
        f"{new}/deploy.md#{r['alert'].lower()}" for r in alerts(groups)}
    assert next(d for d in yaml.safe_load_all(operator.read_text()) if d)["spec"]["groups"] == groups
    res = subprocess.run([tool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([tool, "test", "rules", str(rules_test)], capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"Unit Testing:  {rules_test}\n  SUCCESS\n\n", "")
