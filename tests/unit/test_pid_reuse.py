"""A PID the kernel gives to a new process: the sampler keys processes by PID and start time, so the
new process's counts start from zero and an old process's last row keeps its own name and start time.
(The same with real processes and real probes: tests/bpf/test_faults.py.)"""

from __future__ import annotations

from dataclasses import dataclass

from test_sampler import Clock, FakeBpf, FakeNvml, raw

from gputop.feeds.base import Filters
from gputop.feeds.live import Sampler, SamplerConfig
from gputop.model import snapshot_from_json, snapshot_to_json
from gputop.sources.host import HostProc


@dataclass
class Host:
    """The processes alive now: pid -> (comm, start time)."""
    procs: dict[int, tuple[str, float]]

    def read(self, pids: list[int], execed: object = ()) -> dict[int, HostProc]:
        return {p: HostProc(p, 1, self.procs[p][0], None, "alice", None, None, None, None,
                            start_time=self.procs[p][1]) for p in pids if p in self.procs}


def sampler(bpf: FakeBpf, host: Host) -> tuple[Sampler, Clock]:
    clock = Clock()
    s = Sampler(SamplerConfig(interval_s=1.0, filters=Filters()), bpf=bpf, nvml=FakeNvml(None, {}),  # type: ignore[arg-type]
                host=host, clock=clock)  # type: ignore[arg-type]
    s.open_bpf()
    return s, clock


def test_a_new_process_under_an_old_pid_starts_from_zero() -> None:
    host = Host({7: ("trainer", 1000.25)})
    bpf = FakeBpf([{7: raw(7, 500)}, {7: raw(7, 600)}, {7: raw(7, 30)}, {7: raw(7, 45)}])
    s, clock = sampler(bpf, host)
    rows = []
    for step in range(4):
        if step == 2:               # the trainer went and a new program got PID 7 between two reads
            host.procs[7] = ("server", 2000.5)
        clock.t += 1.0
        rows.append(s.collect().process(7))
    assert [(r.comm, r.start_time, r.interval.launches, r.total.launches, r.rates.launches_per_s)
            for r in rows if r and r.interval and r.total and r.rates] == [
        ("trainer", 1000.25, 500, 500, 500.0), ("trainer", 1000.25, 100, 600, 100.0),
        ("server", 2000.5, 30, 30, 30.0), ("server", 2000.5, 15, 45, 15.0)]
    assert bpf.forgotten == []


def test_the_old_process_last_row_keeps_its_identity_and_the_new_one_follows() -> None:
    host = Host({7: ("trainer", 1000.25)})
    bpf = FakeBpf([{7: raw(7, 500)}, {7: raw(7, 640, exited=True)}, {7: raw(7, 12)}])
    s, clock = sampler(bpf, host)
    clock.t += 1.0
    s.collect()
    host.procs[7] = ("server", 2000.5)      # exited and reused before gputop's next read
    clock.t += 1.0
    last = s.collect()
    clock.t += 1.0
    new = s.collect()
    old_row, new_row = last.process(7), new.process(7)
    assert old_row is not None and old_row.interval is not None and old_row.total is not None
    assert (old_row.comm, old_row.start_time, old_row.state, old_row.interval.launches, old_row.total.launches) == (
        "trainer", 1000.25, "exited", 140, 640)
    assert new_row is not None and new_row.interval is not None and new_row.total is not None
    assert (new_row.comm, new_row.start_time, new_row.state, new_row.interval.launches, new_row.total.launches) == (
        "server", 2000.5, "running", 12, 12)
    assert bpf.forgotten == [7]
    # start_time is part of schema gputop/1: written and read back
    again = snapshot_from_json(snapshot_to_json(new)).process(7)
    assert again is not None and again.start_time == 2000.5
