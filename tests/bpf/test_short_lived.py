"""Short-lived processes: a process that maps a CUDA object gputop has not probed and exits within
milliseconds is gone before its maps can be read; the object is probed anyway (named by the BPF
side, reached through the same path here), so the next process is counted from its first call."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import SCAN_WAIT_S
from test_hostile_objects_live import _MAPPER  # maps the files named, says so, waits for stdin to close

from gputop.sources.bpf import BpfSource, has_privileges
from gputop.sources.bpf.attach import attaching
from gputop.sources.bpf.common import abi

ROOT = Path(__file__).resolve().parent.parent.parent
LAUNCHES = 7
OP = f"launch:{LAUNCHES}:2,1,1:32,1,1:0"


def _fresh_copy(testbed: Any, tmp_path: Path) -> Path:
    """The real libcudart at a path (and inode) no gputop has probed."""
    d = tmp_path / f"fresh-{time.monotonic_ns()}"
    d.mkdir()
    lib = d / "libcudart.so.12"
    shutil.copy(testbed.libcudart, lib)
    return lib


def _short(workloads: Any, lib: Path) -> int:
    """One process that dlopens ``lib``, makes LAUNCHES launches and exits (in about 5 ms when the
    host is idle); its pid."""
    out = subprocess.run([str(workloads.dlopen), "--cudart", str(lib), OP], capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[1])


@pytest.mark.attach_modes("links", "perf")
def test_the_process_after_a_short_lived_one_is_counted_exactly(bpf_source: BpfSource, workloads, testbed,
                                                                 tmp_path: Path) -> None:
    """The first process lives a few milliseconds, and nobody polls while it runs: its maps are
    never read. Its exec mapping still names the file, which gets probed; the next is exact."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    lib = _fresh_copy(testbed, tmp_path)
    key = (lib.stat().st_dev, lib.stat().st_ino)
    first = _short(workloads, lib)
    assert not os.path.exists(f"/proc/{first}")       # gone before gputop looked at it
    deadline = time.monotonic() + 10
    while key not in bpf_source.objects:
        bpf_source.poll(0.05)
        assert time.monotonic() < deadline, "the file the short-lived process mapped was not probed"
    assert bpf_source.objects[key] == str(lib)
    second = _short(workloads, lib)
    bpf_source.poll(0.05)
    procs = bpf_source.read().procs
    assert first not in procs
    assert procs[second].counters["launches"] == LAUNCHES
    bpf_source.forget(second)


def test_a_file_already_classified_sends_no_named_event(bpf_source: BpfSource, workloads, testbed,
                                                        tmp_path: Path) -> None:
    """Once probed, a file's mappings start a plain rescan again (code ranges): the named event
    is sent only while user space does not know the file."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    lib = _fresh_copy(testbed, tmp_path)
    _short(workloads, lib)
    deadline = time.monotonic() + 10
    while (lib.stat().st_dev, lib.stat().st_ino) not in bpf_source.objects:
        bpf_source.poll(0.05)
        assert time.monotonic() < deadline
    bpf_source.poll(0.05)       # whatever else the host sent meanwhile
    pid = _short(workloads, lib)
    bpf_source.bpf.ring_buffer_poll(200)
    assert (lib.stat().st_dev, lib.stat().st_ino) not in bpf_source._unknown_files
    bpf_source.poll(0.05)
    assert bpf_source.read().procs[pid].counters["launches"] == LAUNCHES
    bpf_source.forget(pid)


def _rejected(src: BpfSource, key: tuple[int, int]) -> None:
    """Poll until the file ``key`` (mapped by a process) is looked at and rejected."""
    deadline = time.monotonic() + 10
    while key not in src.rejected:
        src.poll(0.05)
        assert time.monotonic() < deadline, "the mapped file was not looked at"


@pytest.fixture
def reusing_fs(tmp_path: Path) -> Iterator[Path]:
    """A fresh ext2 filesystem (loop-mounted): a deleted file's inode number is the next file's at
    once (ext4 waits a while before it hands one out again, then does the same). 256-byte inodes, whose
    timestamps have nanoseconds: Debian 11's e2fsprogs (1.46.2) gives a filesystem this small
    128-byte ones, with whole seconds (docs/collector.md: what the change time cannot tell apart)."""
    img, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with img.open("wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext2", "-q", "-F", "-I", "256", str(img)], check=True)
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_file_given_a_rejected_files_inode_number_is_probed(bpf_source: BpfSource, workloads, testbed,
                                                               reusing_fs: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """CI's flake: a file that is not a CUDA object is mapped and rejected (the BPF side told to send
    nothing for its mappings), then deleted; a copy of libcudart gets its inode number. Keyed by
    (device, inode) alone, the new file was taken for the old one: a short-lived process's mapping sent
    nothing, the runtime was never probed and the next process was lost. The BPF side keeps each
    file's change time too: the new file is named, probed, and the next process is exact."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    other = reusing_fs / "libother.so"
    shutil.copyfile(Path("/bin/true").resolve(), other)
    old = (other.stat().st_dev, other.stat().st_ino)
    mapper = subprocess.Popen([sys.executable, "-c", _MAPPER, str(other)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert mapper.stdout is not None and mapper.stdout.readline().startswith("mapped")
        _rejected(bpf_source, old)
        known = bpf_source.attacher._known_file(old)
        assert known is not None and known[0][known[1]].state == abi.FILE_NOT_CUDA
    finally:
        assert mapper.stdin is not None
        mapper.stdin.close()
        mapper.wait(10)
    other.unlink()
    lib = reusing_fs / "libcudart.so.12"
    shutil.copyfile(testbed.libcudart, lib)
    assert (lib.stat().st_dev, lib.stat().st_ino) == old        # the number is the new file's
    assert _probed_by_a_short_one(bpf_source, workloads, lib) == old
    pid = _short(workloads, lib)
    bpf_source.poll(0.05)
    assert bpf_source.read().procs[pid].counters["launches"] == LAUNCHES
    bpf_source.forget(pid)
    known = bpf_source.attacher._known_file(old)
    assert known is not None
    assert (known[0][known[1]].state, known[0][known[1]].ctime) == (abi.FILE_PROBED, lib.stat().st_ctime_ns)
    monkeypatch.setattr(attaching, "KEEP_UNMAPPED_S", 0.0)
    bpf_source.scan()
    bpf_source._sweep()                       # released: its probes hold the filesystem
    assert old not in bpf_source.objects
    assert bpf_source.uprobes is not None
    bpf_source.uprobes.wait_detached()


def test_a_probed_file_whose_metadata_changed_is_classified_again(bpf_source: BpfSource, workloads, testbed,
                                                                   tmp_path: Path) -> None:
    """chmod changes a probed library's change time: its next mapping is named again, found probed
    (its probes hold the inode: the same file), and classified under the new time; the process is
    exact, and the one after it sends no named event."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    lib = _fresh_copy(testbed, tmp_path)
    key = _probed_by_a_short_one(bpf_source, workloads, lib)
    bpf_source.poll(0.05)
    lib.chmod(0o700)
    pid = _short(workloads, lib)
    bpf_source.bpf.ring_buffer_poll(200)
    assert key in bpf_source._unknown_files
    bpf_source.poll(0.05)
    assert bpf_source.read().procs[pid].counters["launches"] == LAUNCHES
    bpf_source.forget(pid)
    known = bpf_source.attacher._known_file(key)
    assert known is not None and known[0][known[1]].ctime == lib.stat().st_ctime_ns
    pid = _short(workloads, lib)
    bpf_source.bpf.ring_buffer_poll(200)
    assert key not in bpf_source._unknown_files
    bpf_source.poll(0.05)
    assert bpf_source.read().procs[pid].counters["launches"] == LAUNCHES
    bpf_source.forget(pid)


def test_a_rejected_file_pushed_out_of_the_table_is_told_again(bpf_source: BpfSource, tmp_path: Path) -> None:
    """known_files is a least-recently-used table: once full, a rejected file's entry goes, and its
    next mapping is named again. gputop knows it (same change time) and tells the BPF side again, so
    the mapping after that sends nothing (left out, every mapping of a library all processes map would
    have sent an event)."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    other = tmp_path / "libother.so"
    shutil.copyfile(Path("/bin/true").resolve(), other)
    key = (other.stat().st_dev, other.stat().st_ino)

    def mapped_once() -> None:
        subprocess.run([sys.executable, "-c", _MAPPER, str(other)], input="", capture_output=True, check=True)
        bpf_source.bpf.ring_buffer_poll(200)

    mapped_once()
    _rejected(bpf_source, key)
    table, k = bpf_source.attacher._known_file(key) or (None, None)
    assert table is not None and table[k].state == abi.FILE_NOT_CUDA
    # other files' entries push it out (keys no file has: device 0)
    junk = []
    try:
        for i in range(1, 4 * 16384):
            junk.append(table.Key(0, i))
            table[junk[-1]] = table.Leaf(1, abi.FILE_NOT_CUDA)
            if k not in table:
                break
        assert k not in table
        mapped_once()
        assert key in bpf_source._unknown_files                 # named again
        bpf_source.poll(0.05)
        assert (table[k].state, table[k].ctime) == (abi.FILE_NOT_CUDA, other.stat().st_ctime_ns)
        mapped_once()
        assert key not in bpf_source._unknown_files             # and silent again
    finally:
        for j in junk:
            table.pop(j, None)
    bpf_source.poll(0.05)


def _probed_by_a_short_one(src: BpfSource, workloads: Any, lib: Path) -> tuple[int, int]:
    """A short-lived process maps ``lib``, gone before its maps are read: the object is probed
    anyway (the BPF side names the file); its key."""
    key = (lib.stat().st_dev, lib.stat().st_ino)
    _short(workloads, lib)
    deadline = time.monotonic() + SCAN_WAIT_S   # perf events one by one, on a host loaded by the other tiers
    while key not in src.objects:
        src.poll(0.05)
        assert time.monotonic() < deadline, "the file the short-lived process mapped was not probed"
    return key


def test_an_object_stays_probed_a_while_after_its_last_process_exits(bpf_source: BpfSource, workloads, testbed,
                                                                      tmp_path: Path) -> None:
    """The matrix's flake: every process mapping the runtime had exited when a full rescan swept,
    the runtime was detached, and a 50 ms process started right after lost its 7 launches (shown
    exited, with 0). An object no process maps is kept KEEP_UNMAPPED_S: the sweep keeps it, and
    the next short-lived process is exact."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    key = _probed_by_a_short_one(bpf_source, workloads, _fresh_copy(testbed, tmp_path))
    bpf_source.scan()
    bpf_source._sweep()                   # nobody maps it now
    assert key in bpf_source.objects
    pid = _short(workloads, Path(bpf_source.objects[key]))
    bpf_source.poll(0.05)
    assert bpf_source.read().procs[pid].counters["launches"] == LAUNCHES
    bpf_source.forget(pid)


@pytest.mark.attach_modes("links", "perf")
def test_a_released_object_is_named_again_by_its_next_mapping(bpf_source: BpfSource, workloads, testbed,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """Once released (kept no longer), the object's next mapping is named to user space again, as a
    file never seen: a short-lived process gets it probed, and the one after it is exact. (The BPF
    side had kept it as known: its mappings asked for a rescan of a process already gone, and no
    short-lived process was counted again.)"""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    lib = _fresh_copy(testbed, tmp_path)
    key = _probed_by_a_short_one(bpf_source, workloads, lib)
    monkeypatch.setattr(attaching, "KEEP_UNMAPPED_S", 0.0)
    bpf_source.scan()
    bpf_source._sweep()
    assert key not in bpf_source.objects
    assert bpf_source.uprobes is not None
    bpf_source.uprobes.wait_detached()    # a perf event each: their tracefs entries go first (~12 s here)
    monkeypatch.undo()
    assert _probed_by_a_short_one(bpf_source, workloads, lib) == key
    pid = _short(workloads, lib)
    bpf_source.poll(0.05)
    assert bpf_source.read().procs[pid].counters["launches"] == LAUNCHES
    bpf_source.forget(pid)


def test_at_most_keep_unmapped_max_objects_are_kept(bpf_source: BpfSource, workloads, testbed, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects no process maps are kept KEEP_UNMAPPED_MAX at most, the latest unmapped: three
    copies probed and unmapped one after another with room for two keep the last two."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    monkeypatch.setattr(attaching, "KEEP_UNMAPPED_MAX", 2)
    assert bpf_source.uprobes is not None
    keys = []
    for _ in range(3):
        keys.append(_probed_by_a_short_one(bpf_source, workloads, _fresh_copy(testbed, tmp_path)))
        bpf_source.scan()
        bpf_source._sweep()               # earlier tests' objects too: the cap holds for all
        bpf_source.uprobes.wait_detached()
    assert [k in bpf_source.objects for k in keys] == [False, True, True]
    monkeypatch.setattr(attaching, "KEEP_UNMAPPED_S", 0.0)
    bpf_source._sweep()
    assert not any(k in bpf_source.objects for k in keys)


@pytest.mark.serial   # wall-clock ratios: run alone (./test.sh), not beside the QEMU guests
@pytest.mark.attach_modes("perf")   # links close together in ~0.1 s
def test_an_object_mapped_during_a_release_is_probed_without_waiting_for_it(
        bpf_source: BpfSource, workloads, testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With perf events the kernel removes a released object's probes one at a time, each holding
    the mutex every perf-event attach needs while it waits for grace periods (~12 s for a
    libcudart here). An object mapped meanwhile is probed at once: the release's closes wait for
    the attach (it used to be probed only after all of them, and short-lived processes were lost)."""
    if not bpf_source.file_offsets:
        pytest.skip("the kernel has no BTF (/sys/kernel/btf/vmlinux): mapped files are not named")
    assert bpf_source.uprobes is not None and bpf_source.uprobes.mode == "perf"
    old = _probed_by_a_short_one(bpf_source, workloads, _fresh_copy(testbed, tmp_path))
    monkeypatch.setattr(attaching, "KEEP_UNMAPPED_S", 0.0)
    bpf_source.scan()
    bpf_source._sweep()
    assert old not in bpf_source.objects
    monkeypatch.undo()
    t0 = time.monotonic()
    _probed_by_a_short_one(bpf_source, workloads, _fresh_copy(testbed, tmp_path))
    attach_s = time.monotonic() - t0
    t1 = time.monotonic()
    bpf_source.uprobes.wait_detached()
    release_left_s = time.monotonic() - t1
    assert attach_s * 4 < release_left_s, (attach_s, release_left_s)


@pytest.mark.skipif(not has_privileges(), reason="BPF tests need root (or CAP_BPF + CAP_PERFMON)")
def test_a_stream_of_3ms_processes_with_gputop_running(workloads, testbed, tmp_path: Path) -> None:
    """The real `gputop -b`: ten processes of a few milliseconds each, through a libcudart at a new
    path. The first comes and goes before gputop can read its maps; every later one is exact."""
    lib = _fresh_copy(testbed, tmp_path)
    gt = subprocess.Popen([sys.executable, "-m", "gputop.cli", "-b", "-f", "json", "-d", "0.5", "--no-nvml", "--bpf"],
                          stdout=subprocess.PIPE, text=True, cwd=ROOT,
                          env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")})
    snaps: list[dict[str, Any]] = []

    def read() -> None:
        assert gt.stdout is not None
        for line in gt.stdout:
            snaps.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not snaps:
            assert gt.poll() is None and time.monotonic() < deadline, "gputop did not start"
            time.sleep(0.05)
        assert snaps[0]["sources"]["bpf"]["status"] == "ok"
        runs = [_short(workloads, lib)]
        time.sleep(1.0)                     # gputop probes what the first one mapped
        for _ in range(9):
            runs.append(_short(workloads, lib))
            time.sleep(0.1)
        seen_until = len(snaps) + 4         # each exited process is shown in the next refresh
        while len(snaps) < seen_until:
            assert gt.poll() is None and time.monotonic() < deadline + 30
            time.sleep(0.05)
    finally:
        gt.send_signal(signal.SIGINT)
        try:
            gt.wait(timeout=30)
        except subprocess.TimeoutExpired:
            gt.kill()
            gt.wait()
        reader.join(timeout=5)
    totals: dict[int, int] = {}
    for snap in snaps:
        for p in snap["processes"]:
            totals[p["pid"]] = p["total"]["launches"]
    assert [totals.get(pid) for pid in runs[1:]] == [LAUNCHES] * 9
