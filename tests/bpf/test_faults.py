"""Faults the host throws at gputop while it traces real processes (real probes, exact counts):
the traced library deleted or replaced under running processes, a process that execs another
program, a fork after CUDA initialisation, a PID the kernel gives to a new process, and BPF maps
that are full. docs/RELIABILITY.md ("Faults") says what each proves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import support
from support import SCAN_WAIT_S, Workloads, build_native

from gputop import batch
from gputop.feeds.base import Filters
from gputop.feeds.live import Sampler, SamplerConfig
from gputop.sources.bpf import BpfSource, has_privileges
from gputop.ui.widgets.header import HeaderState, header_content
from gputop.view import format as fmt

pytestmark = pytest.mark.skipif(not has_privileges(), reason="BPF tests need root (or the capabilities "
                                "gputop doctor lists)")

LAUNCH = "launch:{n}:4,2,1:64,1,1:0"          # n launches of 8 blocks of 64 threads, kernel fused_step


def start(argv: list[str | Path]) -> tuple[subprocess.Popen[bytes], int]:
    p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE)
    assert p.stdout is not None
    line = p.stdout.readline().decode()
    assert line.startswith("ready"), f"workload did not start: {line!r}"
    return p, int(line.split()[1])


def drive(src: BpfSource, *procs: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Handle gputop's events (exec, mmap, fork, exit) until every process exited with 0."""
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs):
        src.poll(0.02)
        assert time.monotonic() < deadline, "workload timed out"
    src.poll(0.05)
    assert [p.returncode for p in procs] == [0] * len(procs)


def launches(src: BpfSource, pid: int) -> tuple[int, int, int]:
    c = src.read().procs[pid].counters
    return c["launches"], c["grid_sum"], c["block_sum"]


@pytest.mark.attach_modes("links", "perf")
def test_library_deleted_while_processes_use_it(bpf_source: BpfSource, workloads: Workloads, testbed: support.Testbed,
                                                tmp_path: Path) -> None:
    """One process probed before its libcudart was deleted, one that gputop first sees after: both
    exact (the second's library is opened through /proc/PID/map_files: it has no path left)."""
    go = tmp_path / "go"
    libs = [tmp_path / "a" / "libcudart.so.12", tmp_path / "b" / "libcudart.so.12"]
    for lib in libs:
        lib.parent.mkdir()
        shutil.copy(testbed.libcudart, lib)
    early, early_pid = start([workloads.dlopen, "--wait", go, "--cudart", libs[0], LAUNCH.format(n=1234)])
    late, late_pid = start([workloads.dlopen, "--wait", go, "--cudart", libs[1], LAUNCH.format(n=4321)])
    try:
        bpf_source.scan([early_pid], wait_s=SCAN_WAIT_S)
        for lib in libs:
            lib.unlink()
        bpf_source.scan([late_pid], wait_s=SCAN_WAIT_S)
        go.touch()
        drive(bpf_source, early, late)
        assert launches(bpf_source, early_pid) == (1234, 1234 * 8, 1234 * 64)
        assert launches(bpf_source, late_pid) == (4321, 4321 * 8, 4321 * 64)
    finally:
        bpf_source.forget(early_pid, late_pid)


@pytest.mark.attach_modes("links", "perf")
def test_library_replaced_by_rename_while_a_process_uses_it(bpf_source: BpfSource, workloads: Workloads,
                                                            testbed: support.Testbed, tmp_path: Path) -> None:
    """As `pip install -U` does: a new file written beside the old one and renamed over it. The
    running process keeps the old file (still probed), a process started afterwards gets the new one
    (probed as another object): both exact."""
    go = tmp_path / "go"
    lib = tmp_path / "site-packages" / "libcudart.so.12"
    lib.parent.mkdir()
    shutil.copy(testbed.libcudart, lib)
    old, old_pid = start([workloads.dlopen, "--wait", go, "--cudart", lib, LAUNCH.format(n=1111)])
    try:
        bpf_source.scan([old_pid], wait_s=SCAN_WAIT_S)
        old_key = (lib.stat().st_dev, lib.stat().st_ino)
        staged = lib.with_name(".libcudart.so.12.new")
        shutil.copy(testbed.libcudart, staged)
        os.replace(staged, lib)
        new_key = (lib.stat().st_dev, lib.stat().st_ino)
        new, new_pid = start([workloads.dlopen, "--wait", go, "--cudart", lib, LAUNCH.format(n=2222)])
        bpf_source.scan([new_pid], wait_s=SCAN_WAIT_S)
        assert old_key != new_key and {old_key, new_key} <= set(bpf_source.objects)
        go.touch()
        drive(bpf_source, old, new)
        assert launches(bpf_source, old_pid) == (1111, 1111 * 8, 1111 * 64)
        assert launches(bpf_source, new_pid) == (2222, 2222 * 8, 2222 * 64)
    finally:
        bpf_source.forget(old_pid)
        if "new_pid" in locals():
            bpf_source.forget(new_pid)


def test_a_process_that_execs_another_program(bpf_source: BpfSource, workloads: Workloads, testbed: support.Testbed,
                                              tmp_path: Path) -> None:
    """300 launches, exec, 200 more from the new program: one process (same PID and start time),
    500 launches; the new program's kernel is named from the new image."""
    exe = build_native("launch_then_exec.c", "launch_then_exec", "-ldl")
    go = tmp_path / "go"
    p, pid = start([exe, testbed.libcudart, "300", go, workloads.dynamic, "launch:200:40,2,1:128,1,1:0", "sleep:300"])
    try:
        bpf_source.scan([pid], wait_s=SCAN_WAIT_S)
        go.touch()
        drive(bpf_source, p)
        raw = bpf_source.read().procs[pid]
        assert (raw.counters["launches"], raw.counters["grid_sum"], raw.counters["block_sum"]) == (
            500, 300 * 2 + 200 * 80, 300 * 32 + 200 * 128)
        assert sorted(k.launches for k in raw.kernels) == [200, 300]
        after = next(k for k in raw.kernels if k.launches == 200)
        assert after.name == "fused_step(float*, float*, int)"
        # the old program's kernel keeps its name (resolved with the old image at the exec), not
        # its address: before, it read 0x... once the exec replaced the image (the test program's
        # symbol is as it is: c++filt leaves it, its length prefix is not its name's)
        before = next(k for k in raw.kernels if k.launches == 300)
        assert (before.name, before.object) == ("_Z13before_execv", str(exe))
    finally:
        bpf_source.forget(pid)


def test_a_registered_name_survives_the_process(bpf_source: BpfSource, workloads: Workloads, testbed: support.Testbed,
                                                tmp_path: Path) -> None:
    """A kernel registered under its own name launches 50 times, and the process exits before gputop
    reads anything: the name was captured by the BPF side at the kernel's first launch (before, the
    registration was read lazily from the process's memory, gone by then, and the kernel took its
    host stub's ELF symbol instead)."""
    go = tmp_path / "go"
    p, pid = start([workloads.dlopen, "--cudart", testbed.libcudart, "--wait", go,
                    "register:1:my_registered_kernel(int)", "launch:50:1,1,1:1,1,1:1", "register:2:" + "k" * 300,
                    "launch:7:1,1,1:1,1,1:2"])
    try:
        bpf_source.scan([pid], wait_s=SCAN_WAIT_S)
        go.touch()
        drive(bpf_source, p)
        raw = bpf_source.read().procs[pid]
        assert raw.exited
        names = {k.launches: k.name for k in raw.kernels}
        assert names[50] == "my_registered_kernel(int)"
        # a name longer than the BPF buffer may be cut: the host stub's ELF symbol is preferred then
        assert names[7] == "gputop::test::saxpy_kernel(float, float const*, float*)"
    finally:
        bpf_source.forget(pid)


def test_a_registered_name_on_a_page_not_yet_present_is_named(bpf_source: BpfSource, workloads: Workloads,
                                                              testbed: support.Testbed, tmp_path: Path) -> None:
    """Issue 34's bare addresses (a fresh `import torch`: most of libtorch_cuda.so's registered names on
    pages the process had not touched): a kernel registered under a constant of a library that is on
    a page never touched, launched 40 times with gputop running. The BPF side cannot copy it (no name
    entry: an empty copy is never a name); the kernel is named exactly, from the process's memory while
    it runs, and from the library's file once it has exited (its record kept at exit)."""
    lib = build_native("untouched_names.c", "libuntouched_names.so", "-shared", "-fPIC")
    want = "gputop::test::untouched_name(float*)"      # stub 1's own symbol is unfused_step's
    go, scanned = tmp_path / "go", tmp_path / "scanned"
    # the one that exits is scanned (as a periodic rescan would) once it mapped the library, then launches
    running, gone = (start([workloads.dlopen, "--cudart", testbed.libcudart, "--wait", go, f"register_in:1:{lib}",
                            *middle, "launch:40:1,1,1:1,1,1:1", *tail])
                     for middle, tail in (([], ["sleep:60000"]), ([f"await:0:{scanned}"], [])))
    try:
        for _p, pid in (running, gone):
            bpf_source.scan([pid], wait_s=SCAN_WAIT_S)
        go.touch()
        deadline = time.monotonic() + 30
        while not any(k.tgid == gone[1] for k in bpf_source.table("name_ptrs")):
            time.sleep(0.02)
            assert time.monotonic() < deadline, "the registration never showed"
        bpf_source.scan([gone[1]], wait_s=SCAN_WAIT_S)
        scanned.touch()
        drive(bpf_source, gone[0])
        while bpf_source.read().procs.get(running[1]) is None or not any(
                k.launches == 40 for k in bpf_source.read().procs[running[1]].kernels):
            bpf_source.poll(0.05)
            assert time.monotonic() < deadline, "the running process's launches never showed"
        assert not [k for k in bpf_source.table("names") if k.tgid in (running[1], gone[1])]   # never copied
        for pid, exited in ((running[1], False), (gone[1], True)):
            raw = bpf_source.read().procs[pid]
            assert raw.exited is exited
            assert [(k.launches, k.name) for k in raw.kernels] == [(40, want)], pid
    finally:
        running[0].kill()
        running[0].wait()
        for _p, pid in (running, gone):
            bpf_source.forget(pid)


def test_kernels_registered_before_gputop_started_get_their_device_names(workloads: Workloads,
                                                                        testbed: support.Testbed,
                                                                        tmp_path: Path) -> None:
    """Issue 34 item 3: a process that registered its kernels before gputop started (the usual case on a
    GPU host), the library's host stubs named apart from their device functions (as an extended lambda's
    are): gputop, started afterwards, names each launched kernel by the device name the library's
    registration code gives it (regcode.py), not by its stub's symbol (host_side_stub, second_stub)."""
    lib = build_native("registered_kernels.c", "libregistered_kernels.so", "-O2", "-shared", "-fPIC",
                       f"-L{testbed.libcudart.parent}", "-l:libcudart.so.12")
    go = tmp_path / "go"
    p = subprocess.Popen([str(workloads.dlopen), "--cudart", str(testbed.libcudart), f"lib_register:0:{lib}",
                          f"await:0:{go}", "lib_launch:30:0", "lib_launch:20:1", "sleep:60000"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().startswith("ready")
    pid = p.pid
    src = BpfSource()
    try:
        assert p.stdout.readline().strip() == "registered"
        src.start()                             # after the registrations: none of them seen
        src.scan([pid], wait_s=SCAN_WAIT_S)
        go.touch()
        deadline = time.monotonic() + 30
        while True:
            src.poll(0.05)
            raw = src.read().procs.get(pid)
            names = {k.launches: (k.name, k.object) for k in raw.kernels} if raw else {}
            if names.get(30, (None,))[0] and names.get(20, (None,))[0]:
                break
            assert time.monotonic() < deadline, names
        assert names == {30: ("void gputop::test::device_lambda<main::{lambda(float)#1}>(main::{lambda(float)#1})",
                              str(lib)),
                         20: ("second_kernel", str(lib))}
        assert not [k for k in src.table("name_ptrs") if k.tgid == pid]        # nothing was seen registered
    finally:
        p.kill()
        p.wait()
        src.close()


def test_fork_after_cuda_initialisation(bpf_source: BpfSource, workloads: Workloads, tmp_path: Path) -> None:
    """The parent launches 100 times, then forks a worker that launches 250 times: two records,
    exactly 100 and 250 (the child inherits the parent's mappings, not its counts)."""
    go = tmp_path / "go"
    p, pid = start([workloads.dynamic, "--wait", go, LAUNCH.format(n=100), "fork:250"])
    child = 0
    try:
        bpf_source.scan([pid], wait_s=SCAN_WAIT_S)
        go.touch()
        assert p.stdout is not None
        child = int(p.stdout.readline().split()[1])
        drive(bpf_source, p)
        reading = bpf_source.read()
        assert (reading.procs[pid].counters["launches"], reading.procs[child].counters["launches"]) == (100, 250)
        assert reading.procs[pid].counters["grid_sum"] == 800 and reading.procs[child].counters["grid_sum"] == 250
    finally:
        bpf_source.forget(pid, *([child] if child else []))


def test_a_reused_pid_is_a_new_process_from_zero(workloads: Workloads, tmp_path: Path) -> None:
    """Process A (700 launches) exits; before gputop's next refresh a new process B gets A's PID
    (clone3 with set_tid) and launches 300 times. The refresh shows A's last row (exited, 700, A's
    start time: B's launches did not land in A's record), the next one B from zero (300, its own
    start time)."""
    spawn = build_native("spawn_at_pid.c", "spawn_at_pid")
    sampler = Sampler(SamplerConfig(interval_s=0.2, use_nvml=False))
    sampler.open_bpf()
    assert sampler.bpf_error is None
    try:
        go_a, go_b = tmp_path / "a", tmp_path / "b"
        a, pid = start([workloads.dynamic, "--wait", go_a, "launch:700:40,2,1:128,1,1:0"])
        sampler.config.filters = Filters(frozenset({pid}))
        sampler.wait(0.3)                               # the exec event: probes attached, A listed
        first = sampler.collect().process(pid)
        assert first is not None and first.total is not None and first.total.launches == 0
        go_a.touch()
        assert a.wait(timeout=30) == 0
        sampler.wait(0.3)                               # A's exit seen (between two refreshes)
        # B launches at once, before the next refresh has shown A's last row
        b = subprocess.Popen([str(spawn), str(pid), str(workloads.dynamic), "--wait", str(go_b),
                              "launch:300:3,1,1:96,1,1:1", "sleep:1500"], stdout=subprocess.PIPE)
        assert b.stdout is not None and b.stdout.readline().split()[1] == str(pid).encode()
        go_b.touch()
        sampler.wait(0.5)
        last_a = sampler.collect().process(pid)
        sampler.wait(0.3)
        row_b = sampler.collect().process(pid)         # while B sleeps after its launches
        assert b.wait(timeout=30) == 0
    finally:
        sampler.close()
    assert last_a is not None and last_a.total is not None and row_b is not None and row_b.total is not None
    assert (last_a.state, last_a.total.launches, last_a.total.grid_blocks_sum, last_a.start_time) == (
        "exited", 700, 700 * 80, first.start_time)
    assert (row_b.total.launches, row_b.total.grid_blocks_sum, row_b.cmdline) == (
        300, 900, f"{workloads.dynamic} --wait {go_b} launch:300:3,1,1:96,1,1:1 sleep:1500")
    assert row_b.start_time is not None and first.start_time is not None and row_b.start_time > first.start_time


@pytest.mark.parametrize("same_addresses", [False, True], ids=["aslr", "same-addresses"])
def test_a_pid_taken_before_gputop_sees_the_exit_is_a_new_process(workloads: Workloads, tmp_path: Path,
                                                                 same_addresses: bool) -> None:
    """Issue 20 item 2, at any speed: process A (700 launches, 5 copies, a kernel name) exits and a
    new process B takes its PID and launches 300 times, copies 7 times and allocates, all before
    gputop has handled A's exit (no event is polled in between). A's last row is A's alone (exited,
    700, its copies, its kernel's name), then B from its first call (300, its own copies and
    allocation). With address randomisation off (setarch -R) B's kernel has A's address: the same
    launch slot, the same (pid, address) keys. Two busy loops keep the host's CPUs loaded throughout."""
    spawn = build_native("spawn_at_pid.c", "spawn_at_pid")
    fixed = [str(shutil.which("setarch")), os.uname().machine, "-R"] if same_addresses else []
    sampler = Sampler(SamplerConfig(interval_s=0.2, use_nvml=False))
    sampler.open_bpf()
    assert sampler.bpf_error is None
    b = None
    keeper, _ = start([workloads.dynamic, "--wait", tmp_path / "never"])    # the runtime probed before A starts
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]   # a busy host
    try:
        sampler.wait(0.3)
        go_a, go_b = tmp_path / "a", tmp_path / "b"
        a, pid = start([*fixed, workloads.dynamic, "--wait", go_a, "launch:700:40,2,1:128,1,1:0",
                        "memcpy:5:1:4096", "sleep:1000"])
        sampler.config.filters = Filters(frozenset({pid}))
        sampler.wait(0.3)                               # the exec event: A listed
        first = sampler.collect().process(pid)
        assert first is not None and first.total is not None and first.total.launches == 0
        go_a.touch()
        deadline = time.monotonic() + 5                 # A's kernel named while A runs (its program read)
        while not ((row := sampler.collect().process(pid)) and row.kernels and row.kernels[0].address is None):
            assert time.monotonic() < deadline and a.poll() is None, row
            time.sleep(0.05)
        assert a.wait(timeout=30) == 0                  # A is gone: no event polled from here ...
        b = subprocess.Popen([str(spawn), str(pid), *fixed, str(workloads.dynamic), "--wait", str(go_b),
                              "launch:300:3,1,1:96,1,1:0", "memcpy:7:2:1024", "malloc:2:65536", "sleep:3000"],
                             stdout=subprocess.PIPE)
        assert b.stdout is not None and b.stdout.readline().split()[1] == str(pid).encode()
        go_b.touch()
        time.sleep(0.5)                                 # ... until B made its calls
        sampler.wait(0.3)
        last_a = sampler.collect().process(pid)
        sampler.wait(0.3)
        row_b = sampler.collect().process(pid)
        assert b.wait(timeout=30) == 0
    finally:
        for p in (keeper, b, *load):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        sampler.close()
    assert last_a is not None and last_a.total is not None and row_b is not None and row_b.total is not None
    assert (last_a.state, last_a.total.launches, last_a.total.grid_blocks_sum, last_a.start_time) == (
        "exited", 700, 700 * 80, first.start_time)
    assert (last_a.total.memcpy["h2d"].calls, last_a.total.memcpy["h2d"].bytes) == (5, 5 * 4096)
    assert last_a.total.memcpy["d2h"].calls == 0 and last_a.total.alloc_calls == 0
    assert [(k.name, k.launches) for k in last_a.kernels] == [("fused_step(float*, float*, int)", 700)]
    assert (row_b.state, row_b.total.launches, row_b.total.grid_blocks_sum) == ("running", 300, 900)
    assert (row_b.total.memcpy["d2h"].calls, row_b.total.memcpy["d2h"].bytes) == (7, 7 * 1024)
    assert row_b.total.memcpy["h2d"].calls == 0 and row_b.total.alloc_calls == 2
    assert [(k.name, k.launches) for k in row_b.kernels] == [("fused_step(float*, float*, int)", 300)]
    assert row_b.start_time is not None and first.start_time is not None and row_b.start_time > first.start_time


def test_full_process_table_drops_and_says_so(workloads: Workloads, tmp_path: Path) -> None:
    """Room for two process records: the two processes that got one stay exact, the third's calls
    are counted as dropped, its counts are unknown (null, never 0), and the header and batch mode
    show the dropped count. (Exact on a host where no other CUDA process takes the two places.)"""
    src = BpfSource(limits={"MAX_PROCS": 2, "TENANT_SHARE_PCT": 100})
    sampler = Sampler(SamplerConfig(interval_s=0.2, use_nvml=False), bpf=src)
    sampler.open_bpf()
    assert sampler.bpf_error is None
    alive = []
    try:
        pids = []
        # one after the other; the first two stay (an exited process's record is read out and its
        # place given back at its exit event), so the third finds the table full
        for n in (100, 200, 300):
            go = tmp_path / f"go{n}"
            stay = ["sleep:60000"] if n < 300 else []
            p, pid = start([workloads.dynamic, "--wait", go, LAUNCH.format(n=n), "memcpy:5:1:4096", *stay])
            pids.append(pid)
            sampler.wait(0.3)
            go.touch()
            if stay:
                alive.append(p)
                deadline = time.monotonic() + 30
                while pid not in src.read().procs or src.read().procs[pid].counters["launches"] < n:
                    sampler.wait(0.1)
                    assert time.monotonic() < deadline, f"process {pid} did not launch"
            else:
                assert p.wait(timeout=30) == 0
        sampler.config.filters = Filters(frozenset(pids))
        foreign = sorted(set(src.read().procs) - set(pids))
        snap = sampler.collect()
        dropped = src.dropped()
    finally:
        for p in alive:
            p.kill()
            p.wait()
        sampler.close()
    if foreign:
        pytest.skip(f"other CUDA processes of this host ({foreign}) took the two records meanwhile")
    rows = {p.pid: p for p in snap.processes}
    assert set(rows) == set(pids), (pids, snap.processes)
    assert [(rows[p].total.launches, rows[p].total.memcpy["h2d"].bytes) if rows[p].total else None
            for p in pids] == [(100, 5 * 4096), (200, 5 * 4096), None]
    assert dropped["procs"] == 305          # every call of the third process (300 launches, 5 copies)
    total = snap.sources["bpf"].dropped     # all kinds (other CUDA processes of a busy host fill the small tables too)
    assert total is not None and total == sum(dropped.values()) and total >= 305
    shown = f"dropped {fmt.si(total)}"
    assert f" {shown}" in header_content(HeaderState(snap)).plain      # the dashboard's header
    assert f"  {shown}" in batch.table(snap).splitlines()[0]           # batch mode's summary line
