"""HostSource on real processes, and the /proc parsers on real-looking inputs."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gputop.sources.host import HostProc, HostSource, cpu_pct, parse_container, parse_nspid

CID = "4f1b2c3d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809"
CID2 = "9e8d7c6b5a49382716f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a090"
POD = "0f5a8c4e-6a0b-4b8c-9d1e-2f3a4b5c6d7e"
POD_ = POD.replace("-", "_")


def _wait_asleep(pid: int) -> None:
    """Until the child sits in nanosleep (past exec and the dynamic loader, so its RSS is settled)."""
    deadline = time.monotonic() + 5
    while "nanosleep" not in Path(f"/proc/{pid}/wchan").read_text() and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen(["sleep", "30"])
    _wait_asleep(p.pid)
    yield p
    p.kill()
    p.wait()


def _start_time(pid: int) -> float:
    """The kernel's start time of ``pid`` in unix seconds: boot time plus field 22 of /proc/PID/stat."""
    btime = next(int(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime"))
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK") + btime


def _cpu_time(pid: int) -> float:
    """User + system CPU seconds of ``pid``: fields 14 and 15 of /proc/PID/stat, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _mem_total() -> int:
    """MemTotal of /proc/meminfo in bytes."""
    line = next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


def _me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


# ------------------------------------------------------------------ real processes


def test_read_child_process(sleeper: subprocess.Popen[bytes]) -> None:
    src = HostSource()
    got = src.read([sleeper.pid])
    rss = psutil.Process(sleeper.pid).memory_info().rss
    cgroup = Path(f"/proc/{sleeper.pid}/cgroup").read_text()
    assert got == {
        sleeper.pid: HostProc(
            pid=sleeper.pid,
            ppid=os.getpid(),
            comm="sleep",
            cmdline="sleep 30",
            user=_me(),
            container=parse_container(cgroup),
            nspid=None,
            cpu_pct=None,  # first sight
            rss_bytes=rss,
            start_time=_start_time(sleeper.pid),
            cpu_time_s=_cpu_time(sleeper.pid),           # TIME+: utime + stime of /proc/PID/stat
            mem_pct=rss / _mem_total() * 100.0,          # %MEM: RSS over MemTotal, as top's
            state="S",                                   # htop's S: asleep in its nanosleep
        )
    }
    # this machine runs the tests on the host (its cgroup names no container)
    assert parse_container(cgroup) is None
    time.sleep(0.05)
    again = src.read([sleeper.pid])[sleeper.pid]
    assert again.cpu_pct == 0.0  # sleep used no CPU time between the reads


def _wait_status(pid: int, want: set[str]) -> str:
    deadline = time.monotonic() + 5
    status = psutil.Process(pid).status()
    while status not in want and time.monotonic() < deadline:
        time.sleep(0.005)
        status = psutil.Process(pid).status()
    return status


def test_stopped_process_is_marked_stopped_until_continued() -> None:
    p = subprocess.Popen(["sleep", "30"])
    try:
        _wait_asleep(p.pid)
        src = HostSource()
        first = src.read([p.pid])[p.pid]
        assert (first.stopped, first.state) == (False, "S")          # htop's S column: sleeping
        os.kill(p.pid, signal.SIGSTOP)
        assert _wait_status(p.pid, {psutil.STATUS_STOPPED}) == psutil.STATUS_STOPPED
        stopped = src.read([p.pid])[p.pid]
        assert (stopped.stopped, stopped.state) == (True, "T")
        os.kill(p.pid, signal.SIGCONT)
        assert _wait_status(p.pid, {psutil.STATUS_SLEEPING, psutil.STATUS_RUNNING}) != psutil.STATUS_STOPPED
        again = src.read([p.pid])[p.pid]
        assert again.stopped is False and again.state in ("S", "R")
    finally:
        p.kill()
        p.wait()


def test_a_busy_process_reads_running() -> None:
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        src = HostSource()
        seen = set()
        deadline = time.monotonic() + 10
        while "R" not in seen and time.monotonic() < deadline:   # on 2 CPUs it may wait its turn (still R)
            seen.add(src.read([p.pid])[p.pid].state)
            time.sleep(0.05)
        assert "R" in seen, seen
    finally:
        p.kill()
        p.wait()


def test_psutil_process_objects_are_cached(sleeper: subprocess.Popen[bytes]) -> None:
    src = HostSource()
    src.read([sleeper.pid])
    first = src._cache[sleeper.pid].proc
    src.read([sleeper.pid, os.getpid()])
    assert src._cache[sleeper.pid].proc is first
    src.read([os.getpid()])  # no longer asked about: forgotten
    assert sleeper.pid not in src._cache


def test_vanished_process_is_omitted() -> None:
    p = subprocess.Popen(["sleep", "30"])
    src = HostSource()
    assert list(src.read([p.pid])) == [p.pid]
    p.kill()
    p.wait()
    assert src.read([p.pid, os.getpid()]).keys() == {os.getpid()}
    assert p.pid not in src._cache


def test_zombie_is_omitted() -> None:
    p = subprocess.Popen(["sleep", "30"])
    src = HostSource()
    assert list(src.read([p.pid])) == [p.pid]
    p.kill()
    deadline = time.monotonic() + 5
    while psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert psutil.Process(p.pid).status() == psutil.STATUS_ZOMBIE
    assert src.read([p.pid]) == {}
    p.wait()


def test_pid_that_never_existed() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert HostSource().read([pid_max + 1]) == {}


def test_access_denied_fields_are_none(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from psutil import _pslinux

    def denied(self: psutil.Process) -> None:
        raise psutil.AccessDenied(self.pid)

    # what /proc refuses for another user's process under hidepid or a restrictive LSM
    monkeypatch.setattr(_pslinux.Process, "cmdline", denied)
    monkeypatch.setattr(_pslinux.Process, "memory_info", denied)
    monkeypatch.setattr(psutil.Process, "username", denied)
    got = HostSource().read([sleeper.pid])[sleeper.pid]
    assert (got.pid, got.ppid, got.comm) == (sleeper.pid, os.getpid(), "sleep")
    assert (got.cmdline, got.user, got.rss_bytes) == (None, None, None)


@pytest.mark.serial     # a busy loop's share of a core: not beside the other tier workers
def test_cpu_of_a_busy_process() -> None:
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        src = HostSource()
        time.sleep(0.2)
        assert src.read([p.pid])[p.pid].cpu_pct is None
        time.sleep(0.5)
        pct = src.read([p.pid])[p.pid].cpu_pct
        # one core, shared with the test runner; CPU times tick every 10 ms (USER_HZ), 2 % of 0.5 s each
        assert pct is not None and 60.0 <= pct <= 105.0
    finally:
        p.kill()
        p.wait()


def test_nspid_in_a_pid_namespace() -> None:
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while not psutil.Process(p.pid).children() and time.monotonic() < deadline:
            time.sleep(0.01)
        child = psutil.Process(p.pid).children()[0].pid
        got = HostSource().read([child, p.pid])
        assert got[child].nspid == 1  # the init of its own PID namespace
        assert got[child].comm == "sleep" and got[child].ppid == p.pid
        assert got[p.pid].nspid is None
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------ parsers


def test_cpu_pct() -> None:
    assert cpu_pct(1.0, 10.0, 1.5, 11.0) == 50.0
    assert cpu_pct(1.0, 10.0, 3.0, 11.0) == 200.0  # two cores
    assert cpu_pct(1.0, 10.0, 1.0, 12.0) == 0.0
    assert cpu_pct(1.0, 10.0, 1.5, 10.0) is None
    assert cpu_pct(2.0, 10.0, 1.0, 11.0) == 0.0  # never negative


def test_parse_nspid() -> None:
    status = "Name:\tsleep\nTgid:\t5151\nNgid:\t0\nPid:\t5151\nPPid:\t5150\nNSpid:\t5151\t2\n"
    assert parse_nspid(status, 5151) == 2
    assert parse_nspid("Pid:\t5146\nNSpid:\t5146\n", 5146) is None
    assert parse_nspid("NSpid:\t9000\t300\t7\n", 9000) == 7  # nested namespaces: the innermost
    assert parse_nspid("Pid:\t12\n", 12) is None  # kernels before 4.1 have no NSpid


V1_DOCKER = f"""\
12:pids:/docker/{CID}
11:hugetlb:/docker/{CID}
10:net_cls,net_prio:/docker/{CID}
9:freezer:/docker/{CID}
8:cpu,cpuacct:/docker/{CID}
7:devices:/docker/{CID}
6:memory:/docker/{CID}
5:blkio:/docker/{CID}
4:cpuset:/docker/{CID}
3:perf_event:/docker/{CID}
2:rdma:/
1:name=systemd:/docker/{CID}
0::/system.slice/containerd.service
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v2, systemd driver
        (f"0::/system.slice/docker-{CID}.scope\n", CID),
        # cgroup v1, cgroupfs driver
        (V1_DOCKER, CID),
        # Kubernetes + containerd, cgroup v2 / systemd
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_}.slice/"
            f"cri-containerd-{CID}.scope\n",
            CID,
        ),
        # Kubernetes + containerd, cgroup v1 / cgroupfs
        (
            f"11:cpuset:/kubepods/besteffort/pod{POD}/{CID}\n9:memory:/kubepods/besteffort/pod{POD}/{CID}\n",
            CID,
        ),
        # Kubernetes + CRI-O
        (f"0::/kubepods.slice/kubepods-pod{POD_}.slice/crio-{CID}.scope\n", CID),
        # CRI-O's monitor runs on the host
        (f"0::/system.slice/crio-conmon-{CID}.scope\n", None),
        # podman, rootful and rootless (v2, the payload sits in a "container" sub-cgroup)
        (f"0::/machine.slice/libpod-{CID}.scope/container\n", CID),
        (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container\n", CID),
        (f"0::/machine.slice/libpod-conmon-{CID}.scope\n", None),
        # podman, cgroup v1
        (f"5:memory:/libpod_parent/libpod-{CID}\n", CID),
        # docker in docker: the innermost
        (f"0::/docker/{CID}/docker/{CID2}\n", CID2),
        # only the pod is known (a pod-level cgroup)
        (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{POD_}.slice\n", POD),
        (f"4:memory:/kubepods/burstable/pod{POD}\n", POD),
        # seen from inside a cgroup namespace
        (f"0::/../../kubepods-besteffort-pod{POD_}.slice/cri-containerd-{CID}.scope\n", CID),
        # the host
        ("0::/user.slice/user-0.slice/session-3.scope\n", None),
        ("0::/\n", None),
        ("0::/system.slice/docker.service\n", None),
        ("0::/init.scope\n", None),
        ("4:memory:/process_api/8c5a9407167a95007b85c2d52fd6e125\n0::/\n", None),  # 32 hex digits: no
        ("", None),
        ("garbage\n", None),
    ],
)
def test_parse_container(text: str, expected: str | None) -> None:
    assert parse_container(text) == expected


def test_cmdline_read_again_after_an_exec() -> None:
    """The command line is read once per process and again when its name changes (an exec)."""
    p = subprocess.Popen(["sh", "-c", "read line; exec sleep 30"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 5
        while psutil.Process(p.pid).cmdline()[:1] != ["sh"] and time.monotonic() < deadline:
            time.sleep(0.01)                    # Popen returns before the child's exec is done
        src = HostSource()
        before = src.read([p.pid])[p.pid]
        assert before.comm == "sh" and before.cmdline == "sh -c read line; exec sleep 30"
        assert src.read([p.pid])[p.pid].cmdline == before.cmdline
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
        deadline = time.monotonic() + 5
        while psutil.Process(p.pid).name() != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)
        after = src.read([p.pid])[p.pid]
        assert after.comm == "sleep" and after.cmdline == "sleep 30"
        assert after.start_time == before.start_time and after.cpu_pct is not None
    finally:
        p.kill()
        p.wait()


def test_an_exec_keeping_the_name_is_read_again_when_told() -> None:
    """`python launcher.py` exec'ing `python train.py` keeps its name; the BPF source's exec events
    (``execed``) make the host source read the new command line."""
    code = ("import os, sys; sys.stdin.readline(); "
            "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', 'second'])")
    p = subprocess.Popen([sys.executable, "-c", code, "first"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 5
        while "first" not in psutil.Process(p.pid).cmdline() and time.monotonic() < deadline:
            time.sleep(0.01)
        src = HostSource()
        before = src.read([p.pid])[p.pid]
        assert before.cmdline is not None and before.cmdline.endswith(" first")
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
        deadline = time.monotonic() + 5
        while "second" not in psutil.Process(p.pid).cmdline() and time.monotonic() < deadline:
            time.sleep(0.01)
        same = src.read([p.pid])[p.pid]
        assert (same.comm, same.cmdline) == (before.comm, before.cmdline)    # not told: read once
        after = src.read([p.pid], execed=[p.pid])[p.pid]
        assert after.comm == before.comm and after.cmdline is not None and after.cmdline.endswith(" second")
        assert after.start_time == before.start_time
    finally:
        p.kill()
        p.wait()


def test_a_container_id_from_a_cgroup_a_user_made_is_shown_unverified() -> None:
    """Issue 40: where cgroups are delegated (systemd's user@UID.service, rootless containers), a tenant
    moved its process into a cgroup it named like another pod's container, and its row showed that
    container's id. On the host's real cgroup2 hierarchy: a cgroup given to uid 65534, in it one it made
    named cri-containerd-<id>.scope, a process moved there: its container is ?<id>. The same name made
    by root reads <id>."""
    from gputop.sources.host import HostSource, cgroup2_root

    root = cgroup2_root()
    assert root is not None, "no cgroup2 hierarchy mounted"
    cid = "ab" * 32
    base = Path(root) / f"gputop-test-{os.getpid()}"
    made: list[Path] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for owner in ("tenant", "root"):
            d = base / owner
            d.mkdir(parents=True)
            made.append(d)
            if owner == "tenant":
                os.chown(d, 65534, 65534)               # delegated: the user may make cgroups in it
                subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "mkdir",
                                str(d / f"cri-containerd-{cid}.scope")], check=True)
            else:
                (d / f"cri-containerd-{cid}.scope").mkdir()
            made.append(d / f"cri-containerd-{cid}.scope")
            p = subprocess.Popen(["sleep", "30"])
            procs.append(p)
            (d / f"cri-containerd-{cid}.scope" / "cgroup.procs").write_text(str(p.pid))
        rows = HostSource().read([p.pid for p in procs])
        assert [rows[p.pid].container for p in procs] == ["?" + cid, cid]
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            base.rmdir()


def test_a_process_tenant_is_read_as_the_bpf_side_takes_it() -> None:
    """shares.tenant_of_pid: a uid other than 0 is the tenant; for uid 0, its cgroup2 directory's inode
    (bpf_get_current_cgroup_id's kernfs id); a process gone has none."""
    from gputop.sources.bpf.lifecycle.shares import tenant_of_pid
    from gputop.sources.host import cgroup2_root

    line = next(ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::"))
    root = cgroup2_root()
    assert root is not None
    me = tenant_of_pid(os.getpid())
    assert me == ((0, os.stat(root + line[3:].rstrip("/")).st_ino) if os.getuid() == 0 else (os.getuid(), 0))
    p = subprocess.Popen(["sleep", "30"], preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
    try:
        deadline = time.monotonic() + 5
        while tenant_of_pid(p.pid) != (65534, 0):
            assert time.monotonic() < deadline, tenant_of_pid(p.pid)
            time.sleep(0.01)
    finally:
        p.kill()
        p.wait()
    assert tenant_of_pid(p.pid) is None
