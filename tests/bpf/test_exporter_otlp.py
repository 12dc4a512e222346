"""The real `gputop exporter --bpf --otlp-endpoint` traced a real workload and pushed it to a real OTLP receiver
(VictoriaMetrics from Debian, tests/otlpreceiver.py): the receiver holds the exact counts, and every series of
the process equals /metrics' at the same refresh, histograms included."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from otlpreceiver import RESOURCE_LABELS, Receiver
from prometheus_client.parser import text_string_to_metric_families
from promserver import Exporter, wait_until
from support import Workloads

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.metric_exporter",
                    reason="the extra gputop-ebpf[otlp] is not installed (scripts/setup.sh --test installs it)")

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _key(name: str, labels: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    kept = {k: (repr(float(v)) if k == "le" else v) for k, v in labels.items() if v != "" and k not in RESOURCE_LABELS}
    return name, tuple(sorted(kept.items()))


def _scraped(text: str, pid: int) -> Series:
    return {_key(s.name, s.labels): s.value for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.labels.get("pid") == str(pid)}


def test_the_receiver_holds_the_exact_counts_of_metrics(workloads: Workloads, tmp_path: Path) -> None:
    rx = Receiver(tmp_path)
    exp = Exporter("-d", "0.5", "--bpf", "--no-nvml", "--kernel-metrics", "5", "--node", "otlp-bpf",
                   "--otlp-endpoint", rx.otlp_url)
    wl = None
    try:
        assert exp.healthy()["sources"]["bpf"]["status"] == "ok"
        go = tmp_path / "go"
        wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0",
                               "memcpy:4:1:1000", "memcpy:2:2:500", "sync:3", "launch:1000:1,1,1:1,1,1:1",
                               "sleep:15000"], stdout=subprocess.PIPE)
        assert wl.stdout is not None
        pid = int(wl.stdout.readline().split()[1])
        exp.wait_listed(pid)                        # the exec event attaches gputop to the new process
        go.touch()
        sel = f'pid="{pid}",service_instance_id="otlp-bpf"'
        wait_until("the pushed launches", lambda: rx.value(f"gputop_kernel_launches_total{{{sel}}}") == 7000, 60)
        time.sleep(1.5)                             # three more refreshes pushed while the process sleeps
        want = _scraped(exp.metrics(), pid)
        got: Series = {}
        for r in rx.query(f'{{__name__=~"gputop_.*",{sel}}}', len(want)):
            labels = dict(r["metric"])
            got[_key(labels.pop("__name__"), labels)] = float(r["value"][1])
        assert got == want and len(want) > 80      # counters, gauges, the histograms' buckets, kernels
        assert got[_key("gputop_memcpy_bytes_total", {"pid": str(pid), "comm": "wl_dynamic", "direction": "h2d"})] \
            == 4000
        assert got[_key("gputop_kernel_grid_blocks_sum", {"pid": str(pid), "comm": "wl_dynamic"})] == 6000 * 80 + 1000
        assert got[_key("gputop_kernel_grid_blocks_bucket", {"pid": str(pid), "comm": "wl_dynamic", "le": "63"})] \
            == 1000
        assert got[_key("gputop_sync_calls_total", {"pid": str(pid), "comm": "wl_dynamic"})] == 3
        code, err = exp.stop()
        assert code == 0 and "Traceback" not in err and "failed" not in err, err
    finally:
        if wl is not None and wl.poll() is None:
            wl.kill()
            wl.wait()
        exp.stop()
        rx.stop()
