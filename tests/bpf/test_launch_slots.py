"""The launch fast path (bpf/launch.bpf.h, gputop/sources/bpf/read/launchslots.py), with real probes: a
(process, kernel) counts in a slot of a mapped array; buckets a slot has no place for, and launches
of a pair whose slot another pair holds, go to the process record and the kernels table; user
space adds them up exactly, frees a process's slots when it forgets it, and counts the captures a
process left under way, so that launches elsewhere stop looking for captures."""

from __future__ import annotations

import time

from support import SCAN_WAIT_S

from gputop.sources.bpf import load_bcc
from gputop.sources.bpf.common import linux
from gputop.sources.bpf.common.abi import KS_BLOCK, KS_GRID, KS_READY
from gputop.sources.bpf.read.launchslots import slot_of

FUSED = "fused_step(float*, float*, int)"
UNFUSED = "unfused_step(float const*, float*, int)"


def _owners(src) -> list[int]:  # type: ignore[no-untyped-def]
    """Every slot's owner word (the last of struct kslot_t's words)."""
    words = src.slots._map()
    n = src.slots._layout.words
    return words[n - 1::n].tolist()


def _owned_slots(src, pid: int) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for o in _owners(src) if o == pid | KS_READY)


def _slots_in_use() -> bool:
    """Launch slots need BPF cmpxchg of the kernel and of bcc's compiler (Debian 11's LLVM 11 cannot emit
    it: the program is compiled without, as gputop/sources/bpf/program/program.py decides)."""
    return bool(linux.atomic_cmpxchg()) and linux.compiler_cmpxchg(load_bcc()) is not False


def test_more_buckets_than_a_slot_holds_stay_exact(run_workload, workloads, bpf_source) -> None:
    assert (KS_GRID, KS_BLOCK) == (4, 2)
    # one kernel at six grid buckets (2^0 .. 2^5) and three block buckets (2^5, 2^6, 2^7):
    # four grid and two block buckets fit in its slot, the rest go to the process record
    ops = [f"launch:{n}:{g},1,1:{b},1,1:0" for n, g, b in
           ((3, 1, 32), (5, 2, 64), (7, 4, 128), (11, 8, 32), (13, 16, 64), (17, 32, 128))]
    run = run_workload([workloads.dynamic, *ops, "launch:19:3,1,1:256,1,1:1", "sleep:20000"])
    bpf_source.scan([run.pid], wait_s=SCAN_WAIT_S)
    run.go.touch()
    deadline = time.monotonic() + 30
    while (raw := bpf_source.read().procs.get(run.pid)) is None or raw.counters["launches"] < 75:
        bpf_source.poll(0.05)
        assert time.monotonic() < deadline, "the launches were not counted"
    assert raw.counters["launches"] == 3 + 5 + 7 + 11 + 13 + 17 + 19
    assert raw.counters["grid_sum"] == 3 + 5 * 2 + 7 * 4 + 11 * 8 + 13 * 16 + 17 * 32 + 19 * 3
    assert {k.name: (k.launches, k.block_sum) for k in raw.kernels} == {
        FUSED: (56, 3 * 32 + 5 * 64 + 7 * 128 + 11 * 32 + 13 * 64 + 17 * 128), UNFUSED: (19, 19 * 256)}
    assert [(i, n) for i, n in enumerate(raw.grid_hist) if n] == [(0, 3), (1, 5 + 19), (2, 7), (3, 11), (4, 13),
                                                                  (5, 17)]
    assert [(i, n) for i, n in enumerate(raw.block_hist) if n] == [(5, 3 + 11), (6, 5 + 13), (7, 7 + 17), (8, 19)]
    entries = {int(k.addr): int(v.launches) for k, v in bpf_source.table("kernels").items() if k.tgid == run.pid}
    if not _slots_in_use():         # compiled without cmpxchg: every launch in the kernels table, no slot taken
        assert sorted(entries.values()) == [19, 56] and _owned_slots(bpf_source, run.pid) == 0
        run.proc.kill()
        run.proc.wait()
        return
    # counted in slots: each pair's kernels entry (made when it took its slot) holds none of them,
    # unless the pair's slot was another traced pair's on this host (counted the same, in the entry)
    assert len(entries) == 2 and _owned_slots(bpf_source, run.pid) == sum(1 for n in entries.values() if n == 0)
    assert _owned_slots(bpf_source, run.pid) >= 1
    # the slots are where slot_of says (forget() frees them there, without a walk through all)
    owners = _owners(bpf_source)
    assert {i for i, o in enumerate(owners) if o == run.pid | KS_READY} <= {
        slot_of(run.pid, addr, len(owners)) for addr in entries}
    run.proc.kill()
    run.proc.wait()
    while not bpf_source.read().procs[run.pid].exited:
        bpf_source.poll(0.05)
        assert time.monotonic() < deadline + 30, "the exit was not seen"
    bpf_source.forget(run.pid)                      # as the sampler does once it was shown exited
    assert _owned_slots(bpf_source, run.pid) == 0
    assert not [k for k in bpf_source.table("kernels") if k.tgid == run.pid]


def test_a_process_that_exits_capturing_is_forgotten_as_capturing(run_workload, workloads, testbed,
                                                                    bpf_source) -> None:
    counters = bpf_source.table("capture_n")

    def counts() -> tuple[int, int, int]:
        begun, ended, forgotten = (int(counters[counters.Key(i)].value) for i in range(3))
        return begun - ended - forgotten, begun, forgotten

    under_way, begun, forgotten = counts()
    # the shim's capture succeeds; the process exits before ending it
    run = run_workload([workloads.dlopen, "--cudart", workloads.shim_runtime, "g_begin:9:0"],
                       env={"SHIM_LIBCUDA": str(testbed.libcuda)})
    raw = run.go_and_wait()
    assert raw.counters["captured_launches"] == 9 and raw.counters["launches"] == 0
    assert counts()[1] == begun + 1          # begun once (the runtime's and the driver's returns)
    bpf_source.forget(run.pid)               # (its exit may have deleted its records already)
    assert counts() == (under_way, begun + 1, forgotten + 1)
    # launches after it are counted as run, through the fast path
    raw = run_workload([workloads.dynamic, "launch:21:2,1,1:64,1,1:0"]).go_and_wait()
    assert raw.counters["launches"] == 21 and raw.counters["captured_launches"] == 0
