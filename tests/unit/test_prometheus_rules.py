"""The recording rules of deploy/prometheus/gputop-rules.yml (group gputop-pods, "Pods by name" in
docs/deploy.md): their names (Prometheus's level:metric:operations), the metrics they read, an exact
promtool case for every one (deploy/prometheus/gputop-rules.test.yml: a containerd and a CRI-O container
id, a pod UID, a host process, an unknown id, an id two pods claim, node totals kept whole), each case
shown to fail when its rule records nothing, and the same groups in the Operator's PrometheusRule. The
alert rules are tests/unit/test_deploy_kubernetes.py's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from promserver import promtool, rule_groups
from support import ROOT

PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "gputop-rules.yml"
RULES_TEST = PROM / "gputop-rules.test.yml"

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
