"""The sampler on scripted source readings: deltas, rates, exited-once, NVML join, launch-bound."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import pytest

from gputop.counters import BPF_MEMBERS
from gputop.derive import LaunchBoundRule
from gputop.feeds.base import Filters
from gputop.feeds.live import Sampler, SamplerConfig
from gputop.model import MEMCPY_DIRECTIONS, CallBytes, GpuSample, SourceStatus, snapshot_from_json, snapshot_to_json
from gputop.sources.bpf import BpfReading, IdleProc, RawKernel, RawProc
from gputop.sources.host import HostProc
from gputop.sources.nvml import NvmlProc, NvmlReading

NB = 32


def raw(pid: int, launches: int, *, grid: int = 0, block: int = 0, h2d: tuple[int, int] = (0, 0),
        sync_ns: int = 0, exited: bool = False, kernels: tuple[RawKernel, ...] = ()) -> RawProc:
    counters = dict.fromkeys(BPF_MEMBERS, 0)      # every member the BPF reader reads (gputop/counters.py)
    counters.update(launches=launches, grid_sum=grid, block_sum=block, sync_ns=sync_ns)
    hist = tuple([launches] + [0] * (NB - 1))
    return RawProc(pid, counters, (h2d[0], 0, 0, 0, 0), (h2d[1], 0, 0, 0, 0), (0, 0), (0, 0), hist, hist,
                   tuple(tuple([0] * NB) for _ in range(5)), exited, kernels, comm="bpfcomm")


@dataclass
class FakeBpf:
    readings: list[dict[int, RawProc]]
    forgotten: list[int] = field(default_factory=list)
    #: processes without a record, per reading (none when the list runs out)
    idle: list[dict[int, IdleProc]] = field(default_factory=list)
    procs_dropped: int = 0
    uvm_cpu_faults: bool = False
    #: the records as they stand when attaching is over (Sampler.open_bpf's baseline)
    base: dict[int, RawProc] = field(default_factory=dict)

    def start(self) -> None: ...

    def baseline(self) -> dict[int, RawProc]:
        return self.base

    def poll(self, timeout_s: float) -> bool:
        return False

    def idle_s(self) -> float:
        return 0.2

    def wake(self) -> None: ...

    def refresh_in(self, seconds: float) -> None: ...

    def read(self) -> BpfReading:
        st = SourceStatus("ok", objects=1, probes=10, dropped=0)
        return BpfReading(st, self.readings.pop(0), uvm_cpu_faults=self.uvm_cpu_faults, overhead_ns_per_s=2e5,
                          probe_hits_per_s=1500.0, idle=self.idle.pop(0) if self.idle else {},
                          procs_dropped=self.procs_dropped)

    def forget(self, *pids: int) -> None:
        self.forgotten.extend(pids)

    def close(self) -> None: ...


class FakeNvml:
    def __init__(self, util: float | None, procs: dict[int, NvmlProc]) -> None:
        self.util = util
        self.procs = procs

    def read(self) -> NvmlReading:
        return NvmlReading(SourceStatus("ok"), (GpuSample(0, util_pct=self.util),), self.procs)

    def close(self) -> None: ...


class FakeHost:
    def __init__(self, alive: set[int], stopped: set[int] | None = None) -> None:
        self.alive = alive
        self.stopped = stopped if stopped is not None else set()

    def read(self, pids: list[int], execed: object = ()) -> dict[int, HostProc]:
        return {p: HostProc(p, 1, f"proc{p}", f"proc{p} --x", "alice", None, None, 12.5, 1 << 20,
                            stopped=p in self.stopped)
                for p in pids if p in self.alive}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make(readings: list[dict[int, RawProc]], alive: set[int], nvml: FakeNvml | None = None,
         filters: Filters | None = None, base: dict[int, RawProc] | None = None) -> tuple[Sampler, Clock, FakeBpf]:
    clock = Clock()
    bpf = FakeBpf(readings, base=base or {})
    cfg = SamplerConfig(interval_s=1.0, filters=filters or Filters(), launch_bound=LaunchBoundRule(1000, 50))
    s = Sampler(cfg, bpf=bpf, nvml=nvml or FakeNvml(None, {}), host=FakeHost(alive), clock=clock)  # type: ignore[arg-type]
    s.open_bpf()
    return s, clock, bpf


def test_the_first_interval_starts_when_attaching_is_over() -> None:
    """Launches counted while the probes were attaching are in the total, not in the first interval."""
    k0 = RawKernel(0x1000, 40, 320, 5120, "fused_step(float*, float*, int)", "/bin/app")
    k1 = RawKernel(0x1000, 140, 1120, 17920, "fused_step(float*, float*, int)", "/bin/app")
    s, clock, _ = make([{7: raw(7, 140, kernels=(k1,))}], {7}, base={7: raw(7, 40, kernels=(k0,))})
    clock.t += 1.0
    p = s.collect().process(7)
    assert p is not None and p.interval is not None and p.total is not None and p.rates is not None
    assert (p.interval.launches, p.total.launches, p.rates.launches_per_s) == (100, 140, 100.0)
    assert p.kernels[0].interval_launches == 100 and p.kernels[0].launches == 140


def test_interval_and_total_counts_and_rates() -> None:
    k1 = RawKernel(0x1000, 100, 800, 12800, "fused_step(float*, float*, int)", "/bin/app")
    k2 = RawKernel(0x1000, 3100, 24800, 396800, "fused_step(float*, float*, int)", "/bin/app")
    s, clock, _ = make([{7: raw(7, 100, grid=800, block=12800, h2d=(2, 2048), kernels=(k1,))},
                        {7: raw(7, 3100, grid=24800, block=396800, h2d=(5, 8192), sync_ns=500_000_000,
                                kernels=(k2,))}], {7})
    clock.t += 1.0
    a = s.collect().process(7)
    clock.t += 2.0
    b = s.collect().process(7)
    assert a is not None and b is not None
    assert a.interval is not None and a.interval.launches == 100 and a.rates is not None
    assert a.rates.launches_per_s == 100.0
    assert b.interval is not None and b.total is not None and b.rates is not None
    assert (b.interval.launches, b.total.launches) == (3000, 3100)
    assert b.rates.launches_per_s == 1500.0                      # 3000 launches over 2 s
    assert b.interval.memcpy is not None and b.interval.memcpy["h2d"].calls == 3
    assert b.interval.memcpy["h2d"].bytes == 6144 and b.rates.memcpy_bytes_per_s == {
        "h2d": 3072.0, "d2h": 0.0, "d2d": 0.0, "h2h": 0.0, "unknown": 0.0}
    assert b.rates.sync_wait_pct == 25.0                         # 0.5 s blocked in 2 s
    assert (b.grid_blocks_avg, b.block_threads_avg) == (8.0, 128.0)
    assert (b.interval.grid_blocks_sum, b.interval.block_threads_sum) == (24000, 384000)
    assert (b.total.grid_blocks_sum, b.total.block_threads_sum) == (24800, 396800)
    assert b.kernels[0].interval_launches == 3000 and b.kernels[0].launches_per_s == 1500.0
    assert b.interval.uvm_cpu_faults is None and b.interval.uvm_gpu_faults is None
    assert (b.comm, b.user, b.cpu_pct) == ("proc7", "alice", 12.5)


def test_exited_process_shown_once_then_forgotten() -> None:
    s, clock, bpf = make([{9: raw(9, 5)}, {9: raw(9, 8, exited=True)}, {}], {9})
    clock.t += 1
    assert s.collect().process(9).state == "running"  # type: ignore[union-attr]
    s._host.alive.clear()  # type: ignore[attr-defined]
    clock.t += 1
    p = s.collect().process(9)
    assert p is not None and p.state == "exited" and p.interval is not None and p.interval.launches == 3
    assert p.comm == "proc9"                                     # remembered from when it ran
    assert bpf.forgotten == [9]
    clock.t += 1
    assert s.collect().process(9) is None


def test_short_lived_process_named_from_bpf_comm() -> None:
    s, clock, _ = make([{11: raw(11, 4, exited=True)}], set())
    clock.t += 1
    p = s.collect().process(11)
    assert p is not None and p.comm == "bpfcomm" and p.state == "exited"


def test_nvml_join_launch_bound_and_nvml_only_processes() -> None:
    nv = FakeNvml(20.0, {5: NvmlProc(5, 0, 1 << 30, 15.0), 6: NvmlProc(6, 0, 2 << 30, 80.0)})
    s, clock, _ = make([{5: raw(5, 3000)}], {5, 6}, nvml=nv)
    clock.t += 1
    snap = s.collect()
    p5, p6 = snap.process(5), snap.process(6)
    assert p5 is not None and p6 is not None
    assert (p5.gpu_index, p5.gpu_mem_bytes, p5.gpu_util_pct, p5.launch_bound) == (0, 1 << 30, 15.0, True)
    assert p6.interval is None and p6.rates is None and p6.launch_bound is None   # NVML-only: launch fields null
    assert p6.gpu_mem_bytes == 2 << 30
    assert snap.gpus[0].util_pct == 20.0


def test_vanished_nvml_only_process_has_no_name_not_a_made_up_one() -> None:
    nv = FakeNvml(20.0, {8: NvmlProc(8, 0, 1 << 30, 15.0)})
    s, clock, _ = make([{}], set(), nvml=nv)       # NVML lists it, /proc no longer has it
    clock.t += 1
    snap = s.collect()
    p = snap.process(8)
    assert p is not None and p.comm is None and p.user is None
    again = snapshot_from_json(snapshot_to_json(snap)).process(8)
    assert again is not None and again.comm is None


def test_filters_and_json_round_trip() -> None:
    s, clock, _ = make([{1: raw(1, 1), 2: raw(2, 2)}], {1, 2}, filters=Filters(frozenset({2})))
    clock.t += 1
    snap = s.collect()
    assert [p.pid for p in snap.processes] == [2]
    assert snapshot_from_json(snapshot_to_json(snap)) == snap


class SlowToDetach(FakeBpf):
    probes = 137

    def poll(self, timeout_s: float) -> bool:
        time.sleep(min(timeout_s, 0.01))
        return False

    def close(self) -> None:
        time.sleep(1.3)


def test_stopping_slowly_is_announced_and_waited_for() -> None:
    bpf = SlowToDetach([{}] * 100)
    s = Sampler(SamplerConfig(interval_s=0.05), bpf=bpf, nvml=FakeNvml(None, {}), host=FakeHost(set()))  # type: ignore[arg-type]
    notices: list[str] = []
    s.notice = notices.append
    s.start(lambda snap: None)
    time.sleep(0.2)
    s.stop()
    assert notices == ["detaching 137 probes…"]
    assert s._thread is not None and not s._thread.is_alive()


def test_stopping_quickly_says_nothing() -> None:
    s = Sampler(SamplerConfig(interval_s=0.05), bpf=FakeBpf([{}] * 100), nvml=FakeNvml(None, {}),  # type: ignore[arg-type]
                host=FakeHost(set()))  # type: ignore[arg-type]
    notices: list[str] = []
    s.notice = notices.append
    s.start(lambda snap: None)
    time.sleep(0.2)
    s.stop()
    assert notices == []


class BrokenHost(FakeHost):
    def read(self, pids: list[int], execed: object = ()) -> dict[int, HostProc]:
        raise RuntimeError("a bug")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_running_says_whether_the_collector_thread_lives() -> None:
    """The exporter exits when a bug ends the collector thread (a supervisor then restarts it)."""
    s = Sampler(SamplerConfig(interval_s=0.05), bpf=FakeBpf([{}] * 100), nvml=FakeNvml(None, {}),  # type: ignore[arg-type]
                host=FakeHost(set()))  # type: ignore[arg-type]
    assert not s.running
    s.start(lambda snap: None)
    time.sleep(0.2)
    assert s.running
    s.stop()
    assert not s.running
    broken = Sampler(SamplerConfig(interval_s=0.05), bpf=FakeBpf([{}] * 100), nvml=FakeNvml(None, {}),  # type: ignore[arg-type]
                     host=BrokenHost(set()))  # type: ignore[arg-type]
    broken.start(lambda snap: None)
    deadline = time.monotonic() + 5
    while broken.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not broken.running


# ------------------------------------------------------------------ processes without a record

#: no process has this PID: PIDs stay below pid_max, which is at most 2^22
NO_SUCH_PID = 1 << 22
ZERO = CallBytes(0, 0)


def test_idle_cuda_process_listed_with_zero_counts_then_counted_from_its_first_call() -> None:
    s, clock, bpf = make([{}, {}, {4: raw(4, 7, grid=14, block=224)}], {4, 5})
    bpf.idle = [{4: IdleProc(4), 5: IdleProc(5, complete=False)}, {4: IdleProc(4), 5: IdleProc(5, complete=False)},
                {5: IdleProc(5, complete=False)}]
    bpf.uvm_cpu_faults = True
    clock.t += 1
    first = s.collect()
    assert [p.pid for p in first.processes] == [4, 5]
    p4, p5 = first.process(4), first.process(5)
    assert p4 is not None and p5 is not None
    assert (p4.state, p4.comm, p4.user) == ("running", "proc4", "alice")
    assert p4.interval is not None and p4.total is not None and p4.rates is not None
    for c in (p4.interval, p4.total):
        assert (c.launches, c.graph_launches, c.captured_launches, c.grid_blocks_sum, c.block_threads_sum) == (
            0, 0, 0, 0, 0)
        assert c.memcpy == dict.fromkeys(MEMCPY_DIRECTIONS, ZERO)
        assert c.prefetch == {"to_device": ZERO, "to_host": ZERO}
        assert (c.alloc_calls, c.alloc_bytes, c.free_calls, c.live_alloc_bytes) == (0, 0, 0, 0)
        assert (c.managed_alloc_calls, c.managed_alloc_bytes, c.sync_calls, c.sync_wait_s) == (0, 0, 0, 0.0)
        assert c.uvm_cpu_faults == 0                     # traced here (uvm_cpu_faults on)
        assert (c.uvm_gpu_faults, c.uvm_migrated, c.uvm_thrashing) == (None, None, None)
    assert (p4.rates.launches_per_s, p4.rates.uvm_faults_per_s, p4.rates.sync_wait_pct) == (0.0, 0.0, 0.0)
    assert p4.rates.memcpy_bytes_per_s == dict.fromkeys(MEMCPY_DIRECTIONS, 0.0)
    assert (p4.grid_blocks_avg, p4.block_threads_avg, p4.kernels) == (None, None, ())
    assert (p4.grid_blocks_hist, p4.block_threads_hist) == ({}, {})
    # it ran CUDA before gputop attached: what it allocated then is not known
    assert p5.total is not None and p5.total.launches == 0 and p5.total.live_alloc_bytes is None
    assert snapshot_from_json(snapshot_to_json(first)) == first
    clock.t += 1
    again = s.collect().process(4)                       # idle for a while: still listed
    assert again is not None and again.total is not None and again.total.launches == 0
    clock.t += 2
    third = s.collect()
    after = third.process(4)                             # its first calls: the record starts at 0
    assert after is not None and after.interval is not None and after.total is not None and after.rates is not None
    assert (after.interval.launches, after.total.launches, after.rates.launches_per_s) == (7, 7, 3.5)
    assert (after.grid_blocks_avg, after.block_threads_avg) == (2.0, 32.0)
    p5 = third.process(5)
    assert p5 is not None and p5.total is not None and p5.total.launches == 0
    assert bpf.forgotten == []


def test_idle_process_counts_unknown_once_process_records_were_dropped() -> None:
    s, clock, bpf = make([{3: raw(3, 9)}], {3, 4})
    bpf.idle = [{4: IdleProc(4)}]
    bpf.procs_dropped = 1                # its record may be the one that could not be stored
    clock.t += 1
    snap = s.collect()
    p = snap.process(4)
    assert p is not None and p.state == "running" and p.comm == "proc4"
    assert (p.interval, p.total, p.rates, p.grid_blocks_hist) == (None, None, None, None)
    recorded = snap.process(3)           # a process with a record is counted as before
    assert recorded is not None and recorded.total is not None and recorded.total.launches == 9


def test_idle_process_that_exits_is_shown_once_then_forgotten() -> None:
    # 6: its exit seen by the BPF source; NO_SUCH_PID: gone without an event (found dead here)
    s, clock, bpf = make([{}, {}, {}], {6, NO_SUCH_PID})
    bpf.idle = [{6: IdleProc(6), NO_SUCH_PID: IdleProc(NO_SUCH_PID)},
                {6: IdleProc(6, exited=True), NO_SUCH_PID: IdleProc(NO_SUCH_PID)}, {}]
    clock.t += 1
    first = s.collect()
    assert [(p.pid, p.state) for p in first.processes] == [(6, "running"), (NO_SUCH_PID, "running")]
    s._host.alive.clear()  # type: ignore[attr-defined]
    clock.t += 1
    gone = s.collect()
    assert [(p.pid, p.state, p.comm) for p in gone.processes] == [(6, "exited", "proc6"),
                                                                   (NO_SUCH_PID, "exited", f"proc{NO_SUCH_PID}")]
    assert all(p.total is not None and p.total.launches == 0 for p in gone.processes)
    assert bpf.forgotten == [6, NO_SUCH_PID]
    clock.t += 1
    assert s.collect().processes == ()


def test_stopped_process_is_not_shown_running() -> None:
    s, clock, bpf = make([{7: raw(7, 2)}, {7: raw(7, 2)}, {7: raw(7, 5, exited=True)}], {7, 8})
    bpf.idle = [{8: IdleProc(8)}] * 3
    s._host.stopped = {7, 8}  # type: ignore[attr-defined]
    clock.t += 1
    snap = s.collect()
    assert [(p.pid, p.state) for p in snap.processes] == [(7, "stopped"), (8, "stopped")]
    assert snapshot_from_json(snapshot_to_json(snap)) == snap
    s._host.stopped = set()  # type: ignore[attr-defined]
    clock.t += 1
    assert [(p.pid, p.state) for p in s.collect().processes] == [(7, "running"), (8, "running")]
    s._host.stopped = {7}  # type: ignore[attr-defined]  # read stopped, then its exit was recorded
    clock.t += 1
    p = s.collect().process(7)
    assert p is not None and p.state == "exited" and p.interval is not None and p.interval.launches == 3


def test_a_process_that_started_within_the_interval_is_rated_over_its_life() -> None:
    """Issue 35 item 7: a process started halfway through a refresh read half its rate at its first one."""
    s, clock, _ = make([{}, {9: raw(9, 5000)}], {9})
    started = time.time() - 0.5
    host = s._host
    original = host.read

    def with_start(pids: list[int], execed: object = ()) -> dict[int, HostProc]:
        return {p: dataclasses.replace(h, start_time=started) for p, h in original(pids, execed).items()}

    host.read = with_start          # type: ignore[method-assign]
    clock.t += 1.0
    s.collect()
    clock.t += 1.0
    p = s.collect().process(9)
    assert p is not None and p.rates is not None and p.rates.launches_per_s is not None
    assert 9000 < p.rates.launches_per_s <= 10_000          # 5,000 launches in its ~0.5 s, not over 1 s
