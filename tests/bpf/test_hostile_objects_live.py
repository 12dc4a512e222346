"""Issue 25, live: an unprivileged user (uid 65534) attacks a root gputop through the files its
processes map. A regular file and a FIFO swapped back and forth (renameat2 RENAME_EXCHANGE) while
short-lived children map it hung the collector for good in fifo_open; crafted CUDA-like objects left
probes and descriptors behind after their process exited."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.sources.bpf import BpfSource

ROOT = Path(__file__).resolve().parent.parent.parent
NOBODY = 65534
#: the distro's interpreter, which another user can run (the venv's lives under root's home)
USER_PYTHON = "/usr/bin/python3"
COPIES = 6

#: maps a fresh copy of an ELF program executable in a child that exits at once, while the parent
#: swaps the copy's name with a FIFO's without pause: run as nobody for SECONDS
_SWAPPER = r"""
import ctypes, mmap, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
src, work, seconds = open(sys.argv[1], "rb").read(), sys.argv[2], float(sys.argv[3])
end, i = time.monotonic() + seconds, 0
while time.monotonic() < end:
    d = os.path.join(work, str(i)); os.mkdir(d); i += 1
    lib, fifo = os.path.join(d, "libcudart.so.12"), os.path.join(d, "fifo")
    with open(lib, "wb") as f:
        f.write(src)
    os.mkfifo(fifo)
    fd = os.open(lib, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        mmap.mmap(fd, 0, prot=mmap.PROT_READ | mmap.PROT_EXEC)
        os._exit(0)
    os.close(fd)
    for _ in range(400):
        libc.renameat2(AT_FDCWD, lib.encode(), AT_FDCWD, fifo.encode(), RENAME_EXCHANGE)
    os.waitpid(pid, 0)
print(i)
"""

#: maps each file named on the command line executable, says so, and waits for stdin to close
_MAPPER = r"""
import mmap, os, sys
maps = [mmap.mmap(os.open(p, os.O_RDONLY), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC) for p in sys.argv[1:]]
print("mapped", os.getpid(), flush=True)
sys.stdin.read()
"""


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="gputop-hostile-"))
    os.chmod(d, 0o755)
    os.chown(d, NOBODY, NOBODY)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_fifo_swapped_with_mapped_files_never_stops_the_collector(nobody_dir: Path) -> None:
    """8 s of the review's attack against gputop -b -d 0.5: a refresh keeps coming every interval
    (no gap over 2 s), and SIGTERM stops gputop at once."""
    gt = subprocess.Popen([sys.executable, "-m", "gputop.cli", "-b", "-f", "json", "-d", "0.5", "--no-nvml", "--bpf"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    stamps: list[float] = []

    def read() -> None:
        assert gt.stdout is not None
        for line in gt.stdout:
            json.loads(line)
            stamps.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not stamps:
        assert time.monotonic() < deadline and gt.poll() is None, gt.stderr.read() if gt.stderr else ""
        time.sleep(0.05)
    t0 = time.monotonic()
    attack = subprocess.run([USER_PYTHON, "-c", _SWAPPER, "/usr/bin/true", str(nobody_dir), "8"],
                            preexec_fn=_as_nobody, capture_output=True, text=True, timeout=60, cwd=nobody_dir)
    assert attack.returncode == 0, attack.stderr
    assert int(attack.stdout) > 20                     # files mapped and swapped
    time.sleep(1.5)
    gt.send_signal(signal.SIGTERM)
    try:
        rc = gt.wait(timeout=15)
    except subprocess.TimeoutExpired:
        gt.kill()
        raise AssertionError("gputop ignored SIGTERM: its collector is stuck") from None
    reader.join(5)
    during = [t for t in stamps if t >= t0]
    gaps = [b - a for a, b in itertools.pairwise(stamps) if b >= t0]
    assert rc == 0
    assert len(during) >= 12, f"{len(during)} refreshes in {time.monotonic() - t0:.1f} s of attack"
    assert max(gaps) < 2.0, f"a refresh came {max(gaps):.2f} s after the one before"


def test_objects_no_process_maps_leave_no_probes_or_descriptors(bpf_source: BpfSource, testbed,  # type: ignore[no-untyped-def]
                                                                nobody_dir: Path) -> None:
    """The review's exhaustion: crafted objects holding CUDA entry points stayed probed (and
    their descriptors open) after their process exited. Copies of the real libcudart mapped
    by a nobody process (six here): probed while it runs; detached and forgotten once it is gone, leaving
    the probe count, the objects and the descriptors as they were."""
    src = bpf_source
    assert src.uprobes is not None
    # a perf event per probe attaches slowly (about 15 ms each here): one copy is enough there
    count = COPIES if src.uprobes.mode == "links" else 1
    copies = []
    for i in range(count):
        p = nobody_dir / f"libcudart-{i}.so.12"
        shutil.copyfile(testbed.libcudart, p)
        os.chown(p, NOBODY, NOBODY)
        copies.append(str(p))
    first = _map_and_release(src, copies, nobody_dir)
    again = _map_and_release(src, copies, nobody_dir)
    assert first[0][:2] == (first[1][0] + count, first[1][1] + count * first[2])
    assert first[2] > 100 and again[2] == first[2]
    # after the first round (the BPF programs it loaded stay loaded), a round leaves nothing behind
    assert again[1][:2] == again[3][:2] == first[1][:2] and again[3][2] == first[3][2], (first, again)


def _map_and_release(src: BpfSource, copies: list[str], cwd: Path
                     ) -> tuple[tuple[int, int, int], tuple[int, int, int], int, tuple[int, int, int]]:
    """(objects, probes, descriptors) while a nobody process maps ``copies``, before it did and
    after it is gone and swept; and the probes each copy got."""
    def state() -> tuple[int, int, int]:
        assert src.uprobes is not None
        src.uprobes.wait_detached()
        return len(src.objects), src.probes, len(os.listdir("/proc/self/fd"))

    src.scan()
    src._sweep()
    before = state()
    mapper = subprocess.Popen([USER_PYTHON, "-c", _MAPPER, *copies], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              preexec_fn=_as_nobody, text=True, cwd=cwd)
    try:
        assert mapper.stdout is not None
        pid = int(mapper.stdout.readline().split()[1])
        src.scan([pid])
        during = state()
    finally:
        assert mapper.stdin is not None
        mapper.stdin.close()
        mapper.wait(10)
    for _ in range(2):                     # a listed process is reported exited once, then forgotten
        src.scan()
        src._sweep()
        src.read()
    src.scan()
    src._sweep()
    return during, before, (during[1] - before[1]) // len(copies), state()


def test_the_descriptor_limit_is_raised_at_start(bpf_source: BpfSource) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == hard
