"""`gputop exporter --aggregate container` and `--buckets`: per-container totals that never go down
(processes exiting, PIDs reused, a container emptied and refilled), unknowns that stay unknown, GPU use
summed per GPU, coarser histogram bounds; and the series counts docs/metrics.md gives for each mode."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from support import ROOT
from test_exporter_metrics import Clock, lbl, proc, scrape, snap

from gputop.exporter.families import bucket_ends, cumulative, le_bounds
from gputop.exporter.metrics import ExportOptions, LivenessCollector, SnapshotCollector
from gputop.feeds.live import RefreshTiming
from gputop.feeds.live_counts import zero_counts
from gputop.model import MEMCPY_DIRECTIONS, PREFETCH_DIRECTIONS, CallBytes, Counts, GpuSample, KernelStat, ProcSample

C1, C2 = "a" * 64, "b" * 64


def agg(clock: Clock, **kw: object) -> SnapshotCollector:
    return SnapshotCollector(ExportOptions(aggregate="container", **kw), clock)  # type: ignore[arg-type]


def series(m: dict, name: str) -> dict[str, float]:
    return {dict(k[1])["container"]: v for k, v in m.items() if k[0] == name}


def test_a_container_is_the_sum_of_its_processes_and_the_host_one_row() -> None:
    clock = Clock()
    c = agg(clock)
    c.update(snap(proc(41, container=C1), proc(42, 100, container=C1), proc(43, 7, container=None),
                  proc(44, 5, container=None), proc(45, 9, container=C2, state="stopped")))
    m = scrape(c)
    assert series(m, "gputop_kernel_launches_total") == {C1: 6100, "": 12, C2: 9}
    assert series(m, "gputop_container_processes") == {C1: 2, "": 2, C2: 1}
    assert m[("gputop_memcpy_bytes_total", lbl(container=C1, direction="h2d"))] == 8000
    assert m[("gputop_memcpy_calls_total", lbl(container=C1, direction="d2h"))] == 4
    assert m[("gputop_live_alloc_bytes", lbl(container=C1))] == 2 * (2 << 20)
    assert m[("gputop_sync_wait_seconds_total", lbl(container=C1))] == 0.5
    assert m[("gputop_kernel_grid_blocks_count", lbl(container=C1))] == 6100
    assert m[("gputop_kernel_grid_blocks_sum", lbl(container=C1))] == 80 * 6100
    assert m[("gputop_memcpy_size_bytes_bucket", lbl(container=C1, direction="h2d", le="1023.0"))] == 8
    # one GPU, two processes: memory and SM share added; launch-bound if any is
    assert m[("gputop_process_gpu_memory_bytes", lbl(container=C1, gpu="0"))] == 2 << 30
    assert m[("gputop_process_sm_utilization_ratio", lbl(container=C1, gpu="0"))] == 0.5
    assert m[("gputop_process_launch_bound", lbl(container=C1, gpu="0"))] == 1
    # no per-process labels and no per-process state in this mode
    assert all(set(dict(k[1])) <= {"container", "direction", "destination", "le", "gpu", "kernel", "source",
                                   "phase", "version", "node", "mig", "uuid", "name"} for k in m)
    assert not [k for k in m if k[0].startswith(("gputop_process_exited", "gputop_process_start_time"))]
    assert m[("gputop_exporter_processes", ())] == 5


def test_gpu_use_is_summed_per_gpu_and_unknown_when_one_is_unknown() -> None:
    clock = Clock()
    c = agg(clock)
    c.update(snap(proc(41, container=C1), proc(42, container=C1, gpu_index=1, gpu_util_pct=None,
                                               launch_bound=False),
                  ProcSample(pid=50, comm="nvml_only", container=C1, gpu_index=1, gpu_mem_bytes=3 << 20)))
    m = scrape(c)
    assert m[("gputop_process_gpu_memory_bytes", lbl(container=C1, gpu="0"))] == 1 << 30
    assert m[("gputop_process_gpu_memory_bytes", lbl(container=C1, gpu="1"))] == (1 << 30) + (3 << 20)
    assert ("gputop_process_sm_utilization_ratio", lbl(container=C1, gpu="1")) not in m
    assert ("gputop_process_launch_bound", lbl(container=C1, gpu="1")) not in m    # one False, one unknown
    assert series(m, "gputop_container_processes") == {C1: 3}
    assert series(m, "gputop_kernel_launches_total") == {C1: 12000}               # pid 50: untraced, no counts


def test_exited_and_reused_pids_never_lower_the_containers_counters() -> None:
    clock = Clock()
    c = agg(clock, exited_grace_s=300)
    c.update(snap(proc(41, 300, container=C1, start_time=1.0), proc(42, 10, container=C1, start_time=2.0)))
    clock.t += 1
    c.update(snap(proc(41, 300, container=C1, start_time=1.0, state="exited"),
                  proc(42, 20, container=C1, start_time=2.0)))
    assert series(scrape(c), "gputop_kernel_launches_total") == {C1: 320}
    clock.t += 301                                          # 41 past the grace period: its 300 stay
    c.update(snap(proc(42, 30, container=C1, start_time=2.0)))
    m = scrape(c)
    assert series(m, "gputop_kernel_launches_total") == {C1: 330}
    assert m[("gputop_live_alloc_bytes", lbl(container=C1))] == 2 << 20     # the running one's only
    clock.t += 1                                            # PID 42 taken by a new process in one refresh
    c.update(snap(proc(42, 5, container=C1, start_time=9.0)))
    assert series(scrape(c), "gputop_kernel_launches_total") == {C1: 335}
    clock.t += 1                                            # an exited PID taken by a new traced process
    c.update(snap(proc(42, 6, container=C1, start_time=9.0, state="exited")))
    clock.t += 1
    c.update(snap(proc(42, 1, container=C2, start_time=12.0)))
    m = scrape(c)
    assert series(m, "gputop_kernel_launches_total") == {C1: 336, C2: 1}
    assert series(m, "gputop_container_processes") == {C1: 0, C2: 1}
    clock.t += 301                                          # C1 empty for the grace period: forgotten
    c.update(snap(proc(42, 2, container=C2, start_time=12.0)))
    assert series(scrape(c), "gputop_kernel_launches_total") == {C2: 2}


def test_an_unknown_count_of_one_process_is_unknown_for_its_container_even_after_it_went() -> None:
    clock = Clock()
    c = agg(clock, exited_grace_s=10)
    def known(p: ProcSample) -> ProcSample:
        assert p.total is not None
        return replace(p, total=replace(p.total, graph_kernel_launches=0))

    blind = proc(41, container=C1)          # proc()'s graph_kernel_launches is unknown
    c.update(snap(blind, known(proc(42, container=C1)), known(proc(43, container=C2))))
    m = scrape(c)
    assert series(m, "gputop_graph_kernel_launches_total") == {C2: 0}
    assert series(m, "gputop_kernel_launches_total") == {C1: 12000, C2: 6000}
    clock.t += 11
    c.update(snap(known(proc(42, container=C1)), known(proc(43, container=C2))))   # 41 gone, never "exited"
    m = scrape(c)
    assert series(m, "gputop_graph_kernel_launches_total") == {C2: 0}
    assert series(m, "gputop_kernel_launches_total") == {C1: 12000, C2: 6000}


def test_counters_never_go_down_under_random_churn() -> None:
    """Processes start, count, exit and vanish, PIDs are reused (often within one refresh), at random:
    every container counter of every scrape is at least the one before, and equals the launches of the
    processes the snapshots showed in it (each process's last count)."""
    rnd = random.Random(7)
    clock = Clock()
    c = agg(clock, exited_grace_s=5)
    live: dict[int, list] = {}                # pid -> [container, start, launches, exited]
    shown: dict[tuple[int, float], tuple[str, int]] = {}     # (pid, start) -> (container, launches shown)
    listed: dict[str, float] = {}         # container -> when a process of it was last listed
    forgotten = 0
    last: dict[str, float] = {}
    start = 0.0
    for _ in range(300):
        clock.t += 1
        for pid, p in list(live.items()):
            if p[3]:
                if rnd.random() < 0.5:
                    del live[pid]             # the sampler stops listing it
                continue
            p[2] += rnd.randrange(0, 50)
            p[3] = rnd.random() < 0.1
        for _ in range(rnd.randrange(0, 3)):
            pid = rnd.randrange(1, 12)        # few PIDs: reuse is frequent
            start += 1
            live[pid] = [rnd.choice((C1, C2, "")), start, rnd.randrange(0, 5), False]
        procs = [proc(pid, p[2], container=p[0] or None, start_time=p[1], state="exited" if p[3] else "running")
                 for pid, p in live.items()]
        shown.update({(pid, p[1]): (p[0], p[2]) for pid, p in live.items()})
        listed.update((p[0], clock.t) for p in live.values())
        c.update(snap(*procs))
        now = series(scrape(c), "gputop_kernel_launches_total")
        for ctr in set(last) - set(now):      # forgotten: no process listed for the grace period at least
            assert clock.t - listed[ctr] > 5
            forgotten += 1
            shown = {k: v for k, v in shown.items() if v[0] != ctr}
        expected: dict[str, int] = {}
        for ctr, n in shown.values():
            expected[ctr] = expected.get(ctr, 0) + n
        assert now == expected
        assert all(v >= last.get(ctr, 0) for ctr, v in now.items())
        last = now
    # each step's counters were exact (above); containers came and went (forgotten a grace after their last listing)
    assert len(shown) > 100 and len(last) >= 2 and set(last) <= {C1, C2, ""} and forgotten > 0


def test_kernels_per_container_top_n() -> None:
    clock = Clock()
    c = agg(clock, kernel_metrics=2)
    c.update(snap(proc(41, container=C1, kernels=(KernelStat("a", 5, 1.0, 1.0), KernelStat("b", 9, 1.0, 1.0))),
                  proc(42, container=C1, kernels=(KernelStat("a", 6, 1.0, 1.0), KernelStat("c", 1, 1.0, 1.0)))))
    got = {dict(k[1])["kernel"]: v for k, v in scrape(c).items() if k[0] == "gputop_kernel_function_launches_total"}
    assert got == {"a": 11, "b": 9}


def test_coarse_buckets_and_no_histograms() -> None:
    assert bucket_ends(31, 4) == (3, 7, 11, 15, 19, 23, 27, 30)
    assert bucket_ends(11, 4) == (3, 7, 10)
    assert le_bounds(11, 4) == ("15.0", "255.0", "2047.0", "+Inf")
    assert cumulative({"2^0": 1, "2^4": 2, "2^10": 3, "2^31": 4}, 11, 4) == [
        ("15.0", 1.0), ("255.0", 3.0), ("2047.0", 6.0), ("+Inf", 10.0)]
    clock = Clock()
    c = SnapshotCollector(ExportOptions(buckets="log16"), clock)
    c.update(snap(proc(41, grid_blocks_hist={"2^0": 1, "2^6": 5999})))
    m = scrape(c)
    p1 = {"pid": "41", "comm": "wl_dynamic", "container": ""}
    assert [k[1] for k in m if k[0] == "gputop_kernel_grid_blocks_bucket"] == [
        lbl(**p1, le=le) for le in ("15.0", "255.0", "4095.0", "65535.0", "1.048575e+06", "1.6777215e+07",
                                    "2.68435455e+08", "2.147483647e+09", "+Inf")]
    assert m[("gputop_kernel_grid_blocks_bucket", lbl(**p1, le="15.0"))] == 1
    assert m[("gputop_kernel_grid_blocks_bucket", lbl(**p1, le="255.0"))] == 6000
    assert m[("gputop_kernel_grid_blocks_count", lbl(**p1))] == 6000
    c = SnapshotCollector(ExportOptions(buckets="none"), clock)
    c.update(snap(proc(41)))
    m = scrape(c)
    assert [k for k in m if k[0].endswith("_bucket")] == [
        ("gputop_kernel_grid_blocks_bucket", lbl(**p1, le="+Inf")),
        ("gputop_kernel_block_threads_bucket", lbl(**p1, le="+Inf")),
        ("gputop_memcpy_size_bytes_bucket", lbl(**p1, direction="h2d", le="+Inf")),
        ("gputop_memcpy_size_bytes_bucket", lbl(**p1, direction="d2h", le="+Inf"))]
    assert m[("gputop_kernel_grid_blocks_sum", lbl(**p1))] == 480000       # averages stay: _sum / _count
    assert m[("gputop_memcpy_size_bytes_count", lbl(**p1, direction="h2d"))] == 4


# --- the series counts of docs/metrics.md ("Cardinality")

def _idle() -> ProcSample:
    """A traced process that made no call since gputop saw it, on a GPU NVML reports."""
    return ProcSample(pid=41, comm="idle", container=C1, total=zero_counts(True, True), grid_blocks_hist={},
                      block_threads_hist={}, memcpy_size_hist={d: {} for d in MEMCPY_DIRECTIONS}, gpu_index=0,
                      gpu_mem_bytes=1 << 20, gpu_util_pct=0.0, launch_bound=False, start_time=1.0)


def _busy() -> ProcSample:
    """A process copying in every direction, prefetching both ways, launching 20 kernels."""
    every = {d: CallBytes(3, 3000) for d in MEMCPY_DIRECTIONS}
    total = replace(zero_counts(True, True), launches=600, memcpy=every,
                    prefetch={d: CallBytes(1, 4096) for d in PREFETCH_DIRECTIONS})
    assert isinstance(total, Counts)
    return replace(_idle(), pid=42, comm="busy", total=total, grid_blocks_hist={"2^4": 600},
                   block_threads_hist={"2^8": 600}, memcpy_size_hist={d: {"2^9": 3} for d in MEMCPY_DIRECTIONS},
                   kernels=tuple(KernelStat(f"k{i}", 30, 16.0, 256.0) for i in range(20)))


def count_series(options: ExportOptions, *procs: ProcSample, gpus: int = 0) -> int:
    """Series on /metrics as the exporter serves them: the snapshot's, its liveness (a refresh of four
    phases, as with BPF and NVML) and the exporter's own process."""
    c = SnapshotCollector(replace(options, interval_s=15.0), Clock())
    reg = CollectorRegistry(auto_describe=False)
    for collector in (c, LivenessCollector(c), ProcessCollector(registry=None)):
        reg.register(collector)
    timing = RefreshTiming(0.5, (("bpf", 0.1), ("nvml", 0.1), ("host", 0.1), ("build", 0.1)))
    c.update(snap(*procs, gpus=tuple(GpuSample(index=i, uuid=f"GPU-{i}", name="H100", util_pct=1.0,
                                               mem_util_pct=1.0, mem_used_bytes=1, mem_total_bytes=2, temp_c=3.0,
                                               power_w=4.0, power_limit_w=5.0, sm_clock_mhz=6,
                                               pcie_tx_bytes_per_s=7.0, pcie_rx_bytes_per_s=8.0, xid_errors=0,
                                               ecc_volatile_errors=0) for i in range(gpus))), timing)
    text = generate_latest(reg).decode()
    return sum(len(f.samples) for f in text_string_to_metric_families(text))


def measured_table() -> dict[tuple[str, str], tuple[int, int, int]]:
    """(aggregate, buckets) -> series of (an idle process, a busy one, the busy one with --kernel-metrics 20);
    per container: one container holding that process."""
    out = {}
    for aggregate in ("process", "container"):
        for buckets in ("log2", "log16", "none"):
            o = ExportOptions(aggregate=aggregate, buckets=buckets)
            base = count_series(o)
            out[(aggregate, buckets)] = (count_series(o, _idle()) - base, count_series(o, _busy()) - base,
                                         count_series(replace(o, kernel_metrics=20), _busy()) - base)
    return out


def test_the_docs_give_the_series_of_each_mode_as_measured() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `--aggregate (\w+) --buckets (\w+)` \| (\d+) \| (\d+) \| (\d+) \|$", text, re.M)
    assert {(a, b): (int(x), int(y), int(z)) for a, b, x, y, z in rows} == measured_table()
    node = re.search(r"a node with no process\s+has (\d+) series, plus (\d+) per GPU", text)
    assert node is not None
    o = ExportOptions()
    assert (int(node[1]), int(node[2])) == (count_series(o), count_series(o, gpus=1) - count_series(o))


def test_max_processes_and_cmdline_are_refused_with_container_rows() -> None:
    for flag in (["--max-processes", "5"], ["--cmdline-label"]):
        r = subprocess.run([sys.executable, "-m", "gputop.cli", "exporter", "--aggregate", "container", *flag],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.splitlines()
        assert lines[0] == f"gputop: error: {flag[0]} applies to per-process series, not to --aggregate container"
        assert lines[1].startswith("hint: ") and len(lines) == 2


@pytest.mark.parametrize("flag", ["--aggregate", "--buckets"])
def test_a_bad_choice_is_a_usage_error(flag: str) -> None:
    r = subprocess.run([sys.executable, "-m", "gputop.cli", "exporter", flag, "pod"], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.startswith("gputop: error: ") and "hint:" in r.stderr


def test_an_exited_process_leaves_its_totals_and_nothing_else_is_held() -> None:
    """Under --aggregate container an exit is retired into its container at once: the exited sample is not
    held for --exited-grace (a churn of 100 processes a second held 30,000 of them), its totals stay in the
    counter, and gputop_exporter_processes counts it until the grace period ends."""
    import gc
    import weakref

    clock = Clock()
    c = agg(clock, exited_grace_s=10)
    c.update(snap(proc(41, 100, container=C1, start_time=5.0), proc(42, 7, container=C1, start_time=6.0)))
    clock.t += 1
    ended = [proc(41, 150, container=C1, start_time=5.0, state="exited")]
    ref = weakref.ref(ended[0])
    c.update(snap(proc(42, 9, container=C1, start_time=6.0), *ended))
    del ended
    m = scrape(c)
    assert series(m, "gputop_kernel_launches_total") == {C1: 159}      # its final 150, and 42's 9
    assert m[("gputop_exporter_processes", ())] == 2                  # 42 running, 41 within the grace
    clock.t += 1
    # the exit shown again (a dashboard keeps an exited row a while): retired once
    c.update(snap(proc(42, 12, container=C1, start_time=6.0), proc(41, 150, container=C1, start_time=5.0,
                                                                      state="exited")))
    gc.collect()
    assert ref() is None                    # once the snapshot it came in is no longer served, nothing holds it
    assert series(scrape(c), "gputop_kernel_launches_total") == {C1: 162}
    clock.t += 11
    c.update(snap(proc(42, 20, container=C1, start_time=6.0)))
    m = scrape(c)
    assert series(m, "gputop_kernel_launches_total") == {C1: 170}
    assert m[("gputop_exporter_processes", ())] == 1                  # past the grace period: 42 alone
    # a new process under 41's PID is new: its counts add to the retired ones
    c.update(snap(proc(42, 20, container=C1, start_time=6.0), proc(41, 3, container=C1, start_time=30.0)))
    assert series(scrape(c), "gputop_kernel_launches_total") == {C1: 173}
