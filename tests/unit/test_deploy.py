"""deploy/: the systemd units pass `systemd-analyze verify`, the DaemonSet passes kubernetes-validate, the
Containerfile passes hadolint, the scrape configs pass promtool, and the Grafana dashboard is what its
generator writes. The capability set is proven in tests/bpf/test_deploy_caps.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from promserver import promtool
from support import ROOT

DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def unit_caps(unit: Path, key: str) -> list[str]:
    line = next(ln for ln in unit.read_text().splitlines() if ln.startswith(f"{key}="))
    return line.split("=", 1)[1].split()


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_unit_verifies_clean(unit: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    # the unit names /opt/gputop's venv; verify it against this checkout's (the executable must exist)
    local = tmp_path / unit.name
    local.write_text(unit.read_text().replace("/opt/gputop/.venv/bin/", f"{ROOT}/.venv/bin/"))
    res = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")


def test_exporter_unit_runs_unprivileged_with_exactly_the_tracing_capabilities() -> None:
    unit = DEPLOY / "systemd" / "gputop-exporter.service"
    caps = ["CAP_BPF", "CAP_PERFMON", "CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE", "CAP_CHECKPOINT_RESTORE"]
    assert unit_caps(unit, "AmbientCapabilities") == caps
    assert unit_caps(unit, "CapabilityBoundingSet") == caps
    assert "DynamicUser=yes" in unit.read_text().splitlines()


def test_daemonset_validates_and_adds_the_units_capabilities_and_its_drop_ins() -> None:
    manifest = DEPLOY / "kubernetes" / "gputop-exporter.yaml"
    res = subprocess.run([str(VENV_BIN / "kubernetes-validate"), "--strict", "--quiet", str(manifest)],
                         capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    ds = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    sc = spec["containers"][0]["securityContext"]
    assert sc["privileged"] is False and sc["capabilities"]["drop"] == ["ALL"]
    # the unit's capabilities and its perf-event drop-in's: a DaemonSet spans nodes before and after Linux 6.6
    unit, drop_in = DEPLOY / "systemd" / "gputop-exporter.service", DEPLOY / "systemd" / "perf-event-uprobes.conf"
    assert ["CAP_" + c for c in sc["capabilities"]["add"]] == (unit_caps(unit, "AmbientCapabilities")
                                                               + unit_caps(drop_in, "AmbientCapabilities"))
    assert ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9464"


def test_containerfile_passes_hadolint_and_names_the_daemonsets_entry_point() -> None:
    containerfile = DEPLOY / "Containerfile"
    res = subprocess.run([str(VENV_BIN / "hadolint"), "--no-color", str(containerfile)], capture_output=True,
                         text=True, timeout=120)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    text = containerfile.read_text()
    assert 'ENTRYPOINT ["/opt/gputop/.venv/bin/gputop", "exporter"]' in text
    assert "EXPOSE 9464" in text



def test_static_scrape_config_passespromtool() -> None:
    res = subprocess.run([promtool(), "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_kubernetes_scrape_config_finds_the_daemonsets_pods() -> None:
    """promtool checks it where it has Kubernetes service discovery (Debian builds Prometheus without
    it); the rules are checked against the DaemonSet's annotations either way."""
    config = DEPLOY / "prometheus" / "prometheus-kubernetes.yml"
    res = subprocess.run([promtool(), "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    if "field kubernetes_sd_configs not found" not in res.stdout + res.stderr:
        assert res.returncode == 0, res.stdout + res.stderr
    job = yaml.safe_load(config.read_text())["scrape_configs"][0]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["gputop"]}}]
    manifest = DEPLOY / "kubernetes" / "gputop-exporter.yaml"
    ds = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "DaemonSet")
    meta = {"__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v
            for k, v in ds["spec"]["template"]["metadata"]["annotations"].items()}
    labels = {**meta, "__meta_kubernetes_pod_ip": "10.0.0.7", "__address__": "10.0.0.7",
              "__meta_kubernetes_pod_node_name": "gpu-node-1", "__metrics_path__": "/nothing"}
    for rule in job["relabel_configs"]:            # Prometheus's relabelling, for these rules' actions
        value = ";".join(labels.get(name, "") for name in rule["source_labels"])
        m = re.fullmatch(rule.get("regex", "(.*)"), value)
        if rule.get("action") == "keep":
            assert m is not None, f"the DaemonSet's pods are dropped by {rule}"
        elif m is not None:
            labels[rule["target_label"]] = m.expand(rule.get("replacement", "$1").replace("$", "\\"))
    assert (labels["__address__"], labels["__metrics_path__"], labels["kubernetes_node"]) == (
        "10.0.0.7:9464", "/metrics", "gpu-node-1")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="grafana-foundation-sdk, the generator's SDK, needs Python "
                    "3.11+ (pyproject.toml installs it only there): the JSON is checked where it installs")
def test_grafana_dashboard_is_the_generators_output() -> None:
    res = subprocess.run([sys.executable, str(DEPLOY / "grafana" / "generate.py")], capture_output=True, text=True,
                         timeout=120, check=True)
    assert res.stdout == (DEPLOY / "grafana" / "gputop.json").read_text(), (
        "deploy/grafana/gputop.json is stale: run .venv/bin/python deploy/grafana/generate.py > "
        "deploy/grafana/gputop.json")
