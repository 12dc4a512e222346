"""The real `gputop exporter` traced a real workload; a real Prometheus scraped it: exact counts through
Prometheus's HTTP API, promtool's lint, every Grafana panel's query, the exited-process grace period,
and a clean SIGTERM (no probe left in the kernel)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from promserver import GPUTOP, GRAFANA_PROMQL, Exporter, Prometheus, http_get, need_promql, wait_until
from support import NVML_H100, ROOT, Workloads, build_native

DASHBOARD = ROOT / "deploy" / "grafana" / "gputop.json"
GRACE_S = 6.0


def panel_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' panels included."""
    out = []
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop(0)
        stack.extend(panel.get("panels") or ())
        for target in panel.get("targets") or ():
            if target.get("expr"):
                out.append((panel["title"], target["expr"]))
    return out


def instantiate(expr: str) -> str:
    """A dashboard query as Grafana sends it: template variables and the rate interval filled in."""
    expr = expr.replace("$__rate_interval", "5s").replace("$__interval", "5s").replace("$__range", "1m")
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)        # every variable left: all values


def write_nvml_script(path: Path, pid: int | None) -> None:
    """The fake NVML's GPU 0, with ``pid`` on it (re-read by the library when the file changes)."""
    text = NVML_H100
    if pid is not None:
        text += f"proc 0 {pid} 1073741824\nputil 0 {pid} 3 1\n"
    tmp = path.with_suffix(".new")
    tmp.write_text(text)
    tmp.rename(path)


def test_prometheus_gets_exact_counts_and_every_panel_has_data(workloads: Workloads, tmp_path: Path) -> None:
    need_promql(GRAFANA_PROMQL, tmp_path)   # every panel's query (Debian 11's 2.24 lacks some)
    script = tmp_path / "nvml.txt"
    write_nvml_script(script, None)
    env = {"GPUTOP_NVML_LIBRARY": str(build_native("fake_nvml.c", "fake_nvml/libnvidia-ml.so.1", "-shared", "-fPIC")),
           "FAKE_NVML_SCRIPT": str(script)}
    exp = Exporter("-d", "0.5", "--bpf", "--exited-grace", f"{GRACE_S:g}", "--kernel-metrics", "5", env=env)
    prom = wl = None
    try:
        assert exp.healthy()["sources"]["bpf"]["status"] == "ok"
        prom = Prometheus(tmp_path, [f"127.0.0.1:{exp.port}"])
        # a first process maps the runtime, so gputop probes it before the measured one starts: that one's
        # allocations are then all known (live bytes of processes that started first are unknown)
        first = subprocess.Popen([str(workloads.dynamic), "--wait", str(tmp_path / "never"), "sleep:1"],
                                 stdout=subprocess.PIPE)
        time.sleep(1.0)
        first.kill()
        first.wait()
        go = tmp_path / "go"
        wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0",
                               "memcpy:4:1:1000", "memcpy:2:2:500", "sync:3", "launch:1000:1,1,1:1,1,1:1",
                               "sleep:12000"],
                              stdout=subprocess.PIPE)
        assert wl.stdout is not None
        pid = int(wl.stdout.readline().split()[1])
        write_nvml_script(script, pid)
        exp.wait_listed(pid)                        # the exec event attaches gputop to the new process
        go.touch()
        sel = f'pid="{pid}"'
        # scraped while the process sleeps after its last call: exact totals
        prom.wait_value(f"gputop_kernel_launches_total{{{sel}}}", 7000)
        assert prom.value(f'gputop_memcpy_bytes_total{{{sel},direction="h2d"}}') == 4000
        assert prom.value(f'gputop_memcpy_bytes_total{{{sel},direction="d2h"}}') == 1000
        assert prom.value(f'gputop_memcpy_calls_total{{{sel},direction="h2d"}}') == 4
        assert prom.value(f'gputop_memcpy_calls_total{{{sel},direction="d2h"}}') == 2
        assert prom.value(f'gputop_memcpy_size_bytes_count{{{sel},direction="h2d"}}') == 4
        assert prom.value(f'gputop_memcpy_size_bytes_sum{{{sel},direction="h2d"}}') == 4000
        assert prom.value(f"gputop_sync_calls_total{{{sel}}}") == 3
        assert prom.value(f'gputop_process_gpu_memory_bytes{{{sel},gpu="0"}}') == 1 << 30
        assert prom.value(f'gputop_process_sm_utilization_ratio{{{sel},gpu="0"}}') == 0.03
        assert prom.value('gputop_gpu_power_watts{gpu="0"}') == 412.345
        assert prom.value('gputop_gpu_utilization_ratio{gpu="0"}') == 0.87
        # 6000 launches of 40x2x1 blocks of 128 threads, 1000 of 1x1x1 blocks of 1 thread
        assert prom.value(f"gputop_kernel_grid_blocks_count{{{sel}}}") == 7000
        assert prom.value(f"gputop_kernel_grid_blocks_sum{{{sel}}}") == 6000 * 80 + 1000 * 1
        assert prom.value(f"gputop_kernel_block_threads_sum{{{sel}}}") == 6000 * 128 + 1000 * 1
        assert prom.value(f'gputop_kernel_grid_blocks_bucket{{{sel},le="127.0"}}') == 7000
        assert prom.value(f'gputop_kernel_grid_blocks_bucket{{{sel},le="63.0"}}') == 1000
        series = prom.query(f"gputop_kernel_launches_total{{{sel}}}")[0]["metric"]
        assert (series["comm"], series.get("container", "")) == ("wl_dynamic", "")
        assert "cmdline" not in series
        kernels = {r["metric"]["kernel"]: float(r["value"][1])
                   for r in prom.query(f"gputop_kernel_function_launches_total{{{sel}}}")}
        assert kernels == {"fused_step(float*, float*, int)": 6000.0, "unfused_step(float const*, float*, int)":
                           1000.0}

        lint = subprocess.run(["promtool", "check", "metrics"], input=exp.metrics(), capture_output=True, text=True)
        assert (lint.returncode, lint.stdout, lint.stderr) == (0, "", "")

        time.sleep(6)           # rate() over the panels' 5 s windows needs two samples
        empty = []
        for title, expr in panel_queries(json.loads(DASHBOARD.read_text())):
            if not prom.query(instantiate(expr)):
                empty.append(f"{title}: {expr}")
        assert not empty, "panels without data:\n" + "\n".join(empty)

        # exited: the series stay for the grace period, then vanish from the exporter and Prometheus
        wl.wait(timeout=30)
        assert wl.returncode == 0
        exited = time.monotonic()
        write_nvml_script(script, None)         # as the driver does: the process has no context any more
        time.sleep(GRACE_S / 2)
        assert prom.value(f"gputop_kernel_launches_total{{{sel}}}") == 7000
        wait_until("the exited process's series to go", lambda: f'pid="{pid}"' not in exp.metrics(), GRACE_S * 3)
        assert time.monotonic() - exited >= GRACE_S - 1.5     # not before the grace period (one refresh early)
        wait_until("Prometheus to mark them stale",
                   lambda: prom.value(f"gputop_kernel_launches_total{{{sel}}}") is None, 10)
    finally:
        if wl is not None and wl.poll() is None:
            wl.kill()
        if prom is not None:
            prom.stop()
        rc, err = exp.stop()
    assert rc == 0, err
    assert "Traceback" not in err
    leftovers = [ln for ln in Path("/sys/kernel/tracing/uprobe_events").read_text().splitlines()
                 if f"bcc_{exp.proc.pid}" in ln]
    assert not leftovers


def test_exporter_errors_are_one_line_with_a_hint() -> None:
    first = Exporter("--no-bpf", "--no-nvml")
    try:
        first.healthy()
        busy = subprocess.run([*GPUTOP, "exporter", "--listen", f"127.0.0.1:{first.port}", "--no-bpf"],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert busy.returncode == 1
        lines = busy.stderr.splitlines()
        assert lines == [f"gputop: error: cannot listen on 127.0.0.1:{first.port}: Address already in use",
                         f"hint: another program serves port {first.port} (ss -ltnp 'sport = :{first.port}'); "
                         "choose one with --listen"]
        assert http_get(first.url + "/nothing")[0] == 404
    finally:
        rc, _ = first.stop()
    assert rc == 0
    listen = "argument --listen/--web.listen-address: expected HOST:PORT"     # (exporter-toolkit's name too)
    for argv, msg in ((["--listen", "nohost"], listen), (["--web.listen-address", "127.0.0.1:70000"], listen),
                      (["--exited-grace", "nan"], "argument --exited-grace: must be between"),
                      (["--kernel-metrics", "21"], "--kernel-metrics 21: gputop keeps the top 20")):
        res = subprocess.run([*GPUTOP, "exporter", *argv], capture_output=True, text=True, timeout=60,
                             cwd=ROOT)
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith(f"gputop: error: {msg}") and res.stderr.splitlines()[1].startswith("hint: ")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGHUP"])
def test_other_stop_signals_exit_cleanly(sig: str) -> None:
    import signal

    exp = Exporter("--no-nvml", "--bpf")
    exp.healthy()
    exp.proc.send_signal(getattr(signal, sig))
    rc, err = exp.stop()
    assert rc == 0, err
    assert "Traceback" not in err


def test_bpf_required_without_privileges_exits_77() -> None:
    res = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-all", *GPUTOP, "exporter", "--bpf",
                          "--no-nvml"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 77
    lines = res.stderr.splitlines()
    assert lines[0] == ("gputop: error: tracing needs CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH (root has them): "
                        "missing CAP_BPF, CAP_PERFMON")
    assert lines[1].startswith("hint: run the exporter as root, or with the capabilities of")
