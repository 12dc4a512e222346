"""The exporter's metric families from a known snapshot: exact values, absent series for unknowns,
label sanitising, grace period, caps. promtool's lint runs in tests/bpf/test_exporter_prometheus.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputop import latency
from gputop.exporter.families import cumulative, le_bounds
from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.model import CallBytes, Counts, GpuSample, KernelStat, ProcSample, Snapshot, SourceStatus


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _total(launches: int) -> Counts:
    return Counts(
        launches=launches, graph_launches=2, captured_launches=31, grid_blocks_sum=80 * launches,
        block_threads_sum=128 * launches,
        memcpy={"h2d": CallBytes(4, 4000), "d2h": CallBytes(2, 1000), "d2d": CallBytes(0, 0),
                "h2h": CallBytes(0, 0), "unknown": CallBytes(0, 0)},
        alloc_calls=3, alloc_bytes=3 << 20, free_calls=1, live_alloc_bytes=2 << 20, managed_alloc_calls=1,
        managed_alloc_bytes=1 << 20, prefetch={"to_device": CallBytes(1, 4096), "to_host": CallBytes(0, 0)},
        uvm_cpu_faults=7, uvm_gpu_faults=None, uvm_migrated=None, uvm_thrashing=None, sync_calls=3,
        sync_wait_s=0.25)


def proc(pid: int, launches: int = 6000, **kw: object) -> ProcSample:
    base: dict[str, object] = dict(
        pid=pid, comm="wl_dynamic", cmdline="wl_dynamic --token=SECRET", user="root", container=None,
        total=_total(launches), interval=Counts(launches=0),
        grid_blocks_hist={"2^6": launches}, block_threads_hist={"2^7": launches},
        memcpy_size_hist={"h2d": {"2^9": 4}, "d2h": {"2^8": 2}, "d2d": {}, "h2h": {}, "unknown": {}},
        kernels=(KernelStat("fused_step(float*, float*, int)", launches, 80.0, 128.0),),
        gpu_index=0, gpu_mem_bytes=1 << 30, gpu_util_pct=25.0, launch_bound=True)
    base.update(kw)
    return ProcSample(**base)  # type: ignore[arg-type]


def snap(*procs: ProcSample, gpus: tuple[GpuSample, ...] = ()) -> Snapshot:
    return Snapshot(time=1.0, interval_s=1.0, host="node-a", processes=procs, gpus=gpus, sources={
        "bpf": SourceStatus("ok", objects=2, probes=137, dropped=0, overhead_ns_per_s=2e6,
                            probe_hits_per_s=5000.0, probes_failed=0, trap_ns=750.0,
                            cost_ns_per_s=4000 * 750.0 + 2e6),
        "nvml": SourceStatus("ok"), "uvm": SourceStatus("unavailable", "no kprobes")})


def scrape(collector: SnapshotCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    text = generate_latest(reg).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def lbl(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


P1 = {"pid": "41", "comm": "wl_dynamic", "container": ""}


@pytest.fixture
def clock() -> Iterator[Clock]:
    yield Clock()


def test_counters_are_the_snapshot_totals(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(), clock)
    c.update(snap(proc(41)))
    m = scrape(c)
    assert m[("gputop_kernel_launches_total", lbl(**P1))] == 6000
    assert m[("gputop_graph_launches_total", lbl(**P1))] == 2
    assert m[("gputop_captured_launches_total", lbl(**P1))] == 31
    assert m[("gputop_memcpy_bytes_total", lbl(**P1, direction="h2d"))] == 4000
    assert m[("gputop_memcpy_calls_total", lbl(**P1, direction="d2h"))] == 2
    assert m[("gputop_memcpy_calls_total", lbl(**P1, direction="unknown"))] == 0
    assert m[("gputop_prefetch_bytes_total", lbl(**P1, destination="to_device"))] == 4096
    assert m[("gputop_alloc_bytes_total", lbl(**P1))] == 3 << 20
    assert m[("gputop_live_alloc_bytes", lbl(**P1))] == 2 << 20
    assert m[("gputop_managed_alloc_calls_total", lbl(**P1))] == 1
    assert m[("gputop_uvm_cpu_faults_total", lbl(**P1))] == 7
    assert m[("gputop_sync_calls_total", lbl(**P1))] == 3
    assert m[("gputop_sync_wait_seconds_total", lbl(**P1))] == 0.25
    assert m[("gputop_process_gpu_memory_bytes", lbl(**P1, gpu="0"))] == 1 << 30
    assert m[("gputop_process_sm_utilization_ratio", lbl(**P1, gpu="0"))] == 0.25
    assert m[("gputop_process_launch_bound", lbl(**P1, gpu="0"))] == 1
    assert m[("gputop_build_info", lbl(node="node-a", version="0.1.0"))] == 1
    assert m[("gputop_source_up", lbl(source="bpf"))] == 1
    assert m[("gputop_source_up", lbl(source="uvm"))] == 0
    assert m[("gputop_probe_hits_per_second", ())] == 5000
    assert m[("gputop_bpf_run_seconds_per_second", ())] == 0.002
    assert m[("gputop_self_cost_seconds_per_second", ())] == 0.005      # 4000 hits x 750 ns + 2 ms, per second
    assert m[("gputop_uprobe_trap_seconds", ())] == 7.5e-07
    assert m[("gputop_dropped_records_total", ())] == 0
    assert m[("gputop_probes", ())] == 137


def test_tenant_losses_are_a_counter_by_tenant_and_kind(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(), clock)
    s = snap(proc(41))
    lost = {"uid:65534": {"events": 1000, "procs": 12}, "cgroup:9": {"kernels": 110}}
    bpf = dataclasses.replace(s.sources["bpf"], dropped=1122, dropped_by_tenant=lost)
    c.update(dataclasses.replace(s, sources={**s.sources, "bpf": bpf}))
    m = scrape(c)
    assert {k: v for k, v in m.items() if k[0] == "gputop_tenant_dropped_total"} == {
        ("gputop_tenant_dropped_total", lbl(kind="events", tenant="uid:65534")): 1000,
        ("gputop_tenant_dropped_total", lbl(kind="procs", tenant="uid:65534")): 12,
        ("gputop_tenant_dropped_total", lbl(kind="kernels", tenant="cgroup:9")): 110}


def test_unknown_values_are_absent_series_never_zero(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(), clock)
    nvml_only = ProcSample(pid=7, comm="nvml_only", gpu_index=1, gpu_mem_bytes=None, gpu_util_pct=None)
    c.update(snap(proc(41), nvml_only, gpus=(GpuSample(index=0, name="H100", util_pct=None, temp_c=40.0),)))
    m = scrape(c)
    names = {k[0] for k in m}
    assert not {"gputop_uvm_gpu_faults_total", "gputop_uvm_thrashing_total", "gputop_uvm_migrated_bytes_total",
                "gputop_gpu_utilization_ratio"} & names
    assert not [k for k in m if ("pid", "7") in k[1]]        # nothing known about pid 7 but its GPU
    assert m[("gputop_gpu_temperature_celsius", lbl(gpu="0", mig="", uuid="", name="H100"))] == 40
    # the trap cost not yet calibrated: no self-cost series (the programs' run time still is)
    from dataclasses import replace
    s = snap(proc(41))
    c.update(replace(s, sources={**s.sources, "bpf": replace(s.sources["bpf"], cost_ns_per_s=None, trap_ns=None)}))
    names = {k[0] for k in scrape(c)}
    assert "gputop_bpf_run_seconds_per_second" in names
    assert not {"gputop_self_cost_seconds_per_second", "gputop_uprobe_trap_seconds"} & names


def test_histograms_have_exact_count_and_sum_and_cumulative_log2_buckets(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(), clock)
    c.update(snap(proc(41, grid_blocks_hist={"2^0": 1, "2^6": 5999}, block_threads_hist={"2^7": 6000})))
    m = scrape(c)
    assert m[("gputop_kernel_grid_blocks_count", lbl(**P1))] == 6000
    assert m[("gputop_kernel_grid_blocks_sum", lbl(**P1))] == 480000
    assert m[("gputop_kernel_grid_blocks_bucket", lbl(**P1, le="1.0"))] == 1
    assert m[("gputop_kernel_grid_blocks_bucket", lbl(**P1, le="63.0"))] == 1          # 2^6 = 64 is above 63
    assert m[("gputop_kernel_grid_blocks_bucket", lbl(**P1, le="127.0"))] == 6000
    assert m[("gputop_kernel_grid_blocks_bucket", lbl(**P1, le="+Inf"))] == 6000
    assert len([k for k in m if k[0] == "gputop_kernel_grid_blocks_bucket"]) == 32
    assert len([k for k in m if k[0] == "gputop_kernel_block_threads_bucket"]) == 12   # up to 2047, +Inf
    assert m[("gputop_kernel_block_threads_sum", lbl(**P1))] == 768000
    assert m[("gputop_memcpy_size_bytes_count", lbl(**P1, direction="h2d"))] == 4
    assert m[("gputop_memcpy_size_bytes_sum", lbl(**P1, direction="h2d"))] == 4000
    assert m[("gputop_memcpy_size_bytes_bucket", lbl(**P1, direction="h2d", le="1023.0"))] == 4
    assert m[("gputop_memcpy_size_bytes_bucket", lbl(**P1, direction="h2d", le="511.0"))] == 0
    # directions without copies have no histogram
    assert ("gputop_memcpy_size_bytes_count", lbl(**P1, direction="d2d")) not in m


def _syncs(*durations_ns: tuple[str, int, int]) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Raw sync histograms of (api, duration, how many)."""
    out: dict[str, list[int]] = {}
    sums: dict[str, int] = {}
    for api, ns, n in durations_ns:
        out.setdefault(api, [0] * latency.BUCKETS)[latency.bucket_of(ns)] += n
        sums[api] = sums.get(api, 0) + ns * n
    return {api: (sums[api], tuple(b)) for api, b in out.items()}


@pytest.mark.parametrize("buckets", ["log2", "log16", "none"])
def test_sync_latency_is_a_histogram_by_api_with_exact_power_of_four_bounds(clock: Clock, buckets: str) -> None:
    raw = _syncs(("stream", 1_060_000, 90), ("stream", 10_080_000, 9), ("stream", 100_100_000, 1),
                 ("device", 900, 2), ("device", 70_000_000_000, 1))
    c = SnapshotCollector(ExportOptions(buckets=buckets), clock)
    c.update(snap(proc(41, sync_latency=latency.sync_latency(raw, None))))
    m = scrape(c)
    s, d = lbl(**P1, api="stream"), lbl(**P1, api="device")
    assert m[("gputop_sync_duration_seconds_count", s)] == 100
    assert m[("gputop_sync_duration_seconds_sum", s)] == pytest.approx((90 * 1.06e6 + 9 * 10.08e6 + 100.1e6) / 1e9)
    assert m[("gputop_sync_duration_seconds_bucket", lbl(**P1, api="stream", le="+Inf"))] == 100
    assert m[("gputop_sync_duration_seconds_count", d)] == 3
    assert ("gputop_sync_duration_seconds_count", lbl(**P1, api="event")) not in m     # never used: no series
    bounds = sorted(float(dict(k[1])["le"]) for k in m if k[0] == "gputop_sync_duration_seconds_bucket"
                    and dict(k[1])["api"] == "stream")
    finite = {"log2": 14, "log16": 7, "none": 0}[buckets]
    assert len(bounds) == finite + 1
    if buckets == "log2":
        assert bounds[:-1] == [4 ** k * 1.024e-6 for k in range(14)]
        at = {b: m[("gputop_sync_duration_seconds_bucket", lbl(**P1, api="stream", le=repr(b)))] for b in bounds[:-1]}
        shown = (0.001048576, 0.004194304, 0.016777216, 0.067108864, 0.268435456)
        assert [at[b] for b in shown] == [0, 90, 99, 99, 100]
        dev = lbl(**P1, api="device", le="1.024e-06")
        assert m[("gputop_sync_duration_seconds_bucket", dev)] == 2          # 900 ns: under the first bound
        # 70 s is past the last finite bound (68.7 s): in +Inf only
        assert m[("gputop_sync_duration_seconds_bucket", lbl(**P1, api="device", le="68.719476736"))] == 2
    if buckets == "log16":
        assert bounds[:-1] == [16 ** k * 4.096e-6 for k in range(7)] and bounds[-2] == 68.719476736


def test_a_container_row_adds_its_processes_sync_histograms(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(aggregate="container"), clock)
    one = latency.sync_latency(_syncs(("stream", 1_000_000, 3)), None)
    two = latency.sync_latency(_syncs(("stream", 10_000_000, 2), ("event", 2_000, 1)), None)
    c.update(snap(proc(41, container="abc", sync_latency=one), proc(42, container="abc", sync_latency=two),
                  proc(43, container="abc")))
    m = scrape(c)
    s = lbl(container="abc", api="stream")
    assert m[("gputop_sync_duration_seconds_count", s)] == 5
    assert m[("gputop_sync_duration_seconds_sum", s)] == pytest.approx(0.023)
    assert m[("gputop_sync_duration_seconds_bucket", lbl(container="abc", api="stream", le="0.004194304"))] == 3
    assert m[("gputop_sync_duration_seconds_count", lbl(container="abc", api="event"))] == 1


def test_nccl_series_only_for_a_process_that_called_nccl(clock: Clock) -> None:
    from gputop.model import NCCL_OPS
    none = dict.fromkeys(NCCL_OPS, CallBytes(0, 0))
    quiet = dataclasses.replace(_total(10), nccl=none, nccl_calls=0, nccl_bytes=0, nccl_group_calls=0,
                                nccl_untyped_calls=0, nccl_comms=0)
    ops = {**none, "allreduce": CallBytes(40, 40 << 20), "send": CallBytes(3, 300)}
    busy = dataclasses.replace(_total(10), nccl=ops, nccl_calls=43, nccl_bytes=(40 << 20) + 300, nccl_group_calls=2,
                               nccl_untyped_calls=0, nccl_comms=1)
    c = SnapshotCollector(ExportOptions(), clock)
    c.update(snap(proc(41, total=quiet), proc(42, total=busy, nccl_comm_size=8, nccl_comm_rank=3)))
    m = scrape(c)
    assert not [k for k in m if k[0].startswith("gputop_nccl") and dict(k[1])["pid"] == "41"]
    p2 = {"pid": "42", "comm": "wl_dynamic", "container": ""}
    mine = {k: v for k, v in m.items() if k[0].startswith("gputop_nccl") and dict(k[1])["pid"] == "42"}
    assert mine == {
        **{(f"gputop_nccl_op_{part}_total", lbl(**p2, op=op)): 0 for op in NCCL_OPS for part in ("calls", "bytes")},
        ("gputop_nccl_untyped_calls_total", lbl(**p2)): 0,
        ("gputop_nccl_op_calls_total", lbl(**p2, op="allreduce")): 40,
        ("gputop_nccl_op_bytes_total", lbl(**p2, op="allreduce")): 40 << 20,
        ("gputop_nccl_op_calls_total", lbl(**p2, op="send")): 3,
        ("gputop_nccl_op_bytes_total", lbl(**p2, op="send")): 300,
        ("gputop_nccl_calls_total", lbl(**p2)): 43,
        ("gputop_nccl_bytes_total", lbl(**p2)): (40 << 20) + 300,
        ("gputop_nccl_group_calls_total", lbl(**p2)): 2,
        ("gputop_nccl_communicators_total", lbl(**p2)): 1,
        ("gputop_nccl_comm_size", lbl(**p2)): 8,
        ("gputop_nccl_comm_rank", lbl(**p2)): 3,
    }


def test_log2_bucket_bounds() -> None:
    assert le_bounds(3) == ("1.0", "3.0", "7.0", "+Inf")
    assert cumulative({"2^1": 2, "2^31": 1}, 3) == [("1.0", 0.0), ("3.0", 2.0), ("7.0", 2.0), ("+Inf", 3.0)]
    assert cumulative(None, 3) is None


def test_labels_are_sanitised_and_the_command_line_only_on_request(clock: Clock) -> None:
    evil = "\x1b[2J\x1b[31mEVIL\a\udc9b"
    c = SnapshotCollector(ExportOptions(), clock)
    c.update(snap(proc(41, comm=evil, container="ctr\u202e" + "x" * 500)))
    m = scrape(c)
    labels = dict(next(k for k in m if k[0] == "gputop_kernel_launches_total")[1])
    assert labels["comm"] == "\\x1b[2J\\x1b[31mEVIL\\x07\\x9b"
    assert labels["container"].startswith("ctr\\u{202e}xxx") and len(labels["container"]) == 128
    assert "cmdline" not in labels
    c = SnapshotCollector(ExportOptions(cmdline_label=True), clock)
    c.update(snap(proc(41)))
    labels = dict(next(k for k in scrape(c) if k[0] == "gputop_kernel_launches_total")[1])
    assert labels["cmdline"] == "wl_dynamic --token=SECRET"
    assert "user" not in labels
    # --user-label (issue 40: two tenants' processes told apart); a forged name escaped like any other
    c = SnapshotCollector(ExportOptions(user_label=True), clock)
    c.update(snap(proc(41, user="alice"), proc(42, user="bob\x1b[0m")))
    users = {dict(k[1])["pid"]: dict(k[1])["user"] for k in scrape(c) if k[0] == "gputop_kernel_launches_total"}
    assert users == {"41": "alice", "42": "bob\\x1b[0m"}


def test_exited_processes_stay_for_the_grace_period_then_go(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(exited_grace_s=300), clock)
    c.update(snap(proc(41), proc(42, launches=10)))
    clock.t += 1
    c.update(snap(proc(41, state="exited"), proc(42, launches=12)))
    clock.t += 1
    c.update(snap(proc(42, launches=14)))          # 41 is gone from the snapshots
    clock.t += 299
    c.update(snap(proc(42, launches=16)))
    m = scrape(c)
    assert m[("gputop_kernel_launches_total", lbl(**P1))] == 6000        # 299 s after its exit: kept
    clock.t += 2
    m = scrape(c)                                                          # 301 s: gone, even between refreshes
    assert ("gputop_kernel_launches_total", lbl(**P1)) not in m
    assert m[("gputop_kernel_launches_total", lbl(pid="42", comm="wl_dynamic", container=""))] == 16


def test_max_processes_keeps_the_busiest_and_sums_the_rest_per_container(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(max_processes=2), clock)
    c.update(snap(proc(1, launches=5), proc(2, launches=50), proc(3, launches=500), proc(4, launches=7)))
    m = scrape(c)
    launches = {dict(k[1])["pid"]: v for k, v in m.items() if k[0] == "gputop_kernel_launches_total"}
    assert launches == {"2": 50, "3": 500, "": 12}          # pid "": the others of the container, summed
    assert m[("gputop_exporter_processes", ())] == 2
    assert m[("gputop_exporter_processes_omitted", ())] == 2
    # sticky: a process without series never gets its own (its sum would go down), even when busiest
    c.update(snap(proc(1, launches=9000), proc(2, launches=60), proc(3, launches=600), proc(4, launches=8)))
    launches = {dict(k[1])["pid"]: v for k, v in scrape(c).items() if k[0] == "gputop_kernel_launches_total"}
    assert launches == {"2": 60, "3": 600, "": 9008}


def test_a_newcomer_takes_the_slot_of_the_process_that_exited_first(clock: Clock) -> None:
    c = SnapshotCollector(ExportOptions(max_processes=2), clock)
    c.update(snap(proc(1, launches=5), proc(2, launches=50)))
    clock.t += 1
    c.update(snap(proc(1, launches=5, state="exited"), proc(2, launches=50)))
    clock.t += 1
    c.update(snap(proc(2, launches=50), proc(3, launches=1)))     # 1 is kept (grace) until 3 needs its slot
    launches = {dict(k[1])["pid"]: v for k, v in scrape(c).items() if k[0] == "gputop_kernel_launches_total"}
    assert launches == {"2": 50, "3": 1}
    clock.t += 1
    c.update(snap(proc(2, launches=50, state="exited"), proc(3, launches=2)))
    c.update(snap(proc(3, launches=3), proc(4, launches=70), proc(5, launches=4)))
    launches = {dict(k[1])["pid"]: v for k, v in scrape(c).items() if k[0] == "gputop_kernel_launches_total"}
    assert launches == {"3": 3, "4": 70, "": 4}            # 2's slot to the busier newcomer; 5 summed


def test_a_churn_of_100_processes_a_second_keeps_series_and_memory_bounded(clock: Clock) -> None:
    """Issue 40's review: 100 short CUDA processes a second for 90 s, each kept 300 s after exit with no
    cap, made 675,405 series, a 58.6 MB /metrics and a 649 MB exporter. Here, with the defaults: 300
    long-running processes (more than the cap) and 100 short ones a second for 90 s, in ten
    containers, each short one listed running once and exited once. The series stay under the cap's
    (256 processes, about 150 series each, and a sum per container) from the first seconds on, the
    memory the collector holds under 32 MiB, every container's sum only grows, and every launch is
    in a series."""
    import tracemalloc

    from gputop.exporter.admission import MAX_PROCESSES

    c = SnapshotCollector(ExportOptions(), clock)
    tmpl = proc(0, launches=10)
    steady = [dataclasses.replace(tmpl, pid=10 + i, container=f"pod-{i % 10}") for i in range(300)]
    sums: dict[str, float] = {}
    try:
        last: list[ProcSample] = []
        for second in range(90):
            if second == 60:            # traced from here (tracing the whole run is slow): what is
                tracemalloc.start()     # allocated meanwhile and kept, the samples of 3,000 processes among it
            clock.t = float(second)
            new = [dataclasses.replace(tmpl, pid=1000 + 100 * second + i, container=f"pod-{i % 10}")
                   for i in range(100)]
            c.update(snap(*steady, *new, *(dataclasses.replace(p, state="exited") for p in last)))
            last = new
            if second in (30, 70, 89):
                if second == 89:
                    reg = CollectorRegistry(auto_describe=False)
                    reg.register(c)
                    tracemalloc.reset_peak()
                    text = generate_latest(reg)             # the rendering: the exporter's peak
                    peak = tracemalloc.get_traced_memory()[1]
                    most_series = sum(1 for line in text.splitlines() if line and line[:1] != b"#")
                    most_bytes = len(text)
                    text = b""
                launches = {(s.labels["pid"], s.labels["container"]): s.value for m in c.collect()
                            if m.name == "gputop_kernel_launches" for s in m.samples}
                for (pid, container), v in launches.items():
                    if pid == "":
                        assert v >= sums.get(container, 0), (container, v, sums)
                        sums[container] = v
                # the steady ones and the short ones running or exited within the grace period, each once
                assert sum(launches.values()) == 10 * (300 + 100 * (second + 1)), second
        held = tracemalloc.get_traced_memory()[0]       # what the collector keeps between scrapes
    finally:
        tracemalloc.stop()
    print(f"\nchurn: {most_series} series, {most_bytes / 1e6:.1f} MB at the end; Python memory held "
          f"{held / 2**20:.1f} MiB, at most {peak / 2**20:.1f} MiB while rendering")
    assert len(sums) == 10
    assert most_series < (MAX_PROCESSES + 10) * 160 and most_bytes < 8_000_000, (most_series, most_bytes)
    assert held < 32 * 2**20 and peak < 96 * 2**20, (held, peak)
