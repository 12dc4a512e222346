"""The host source: what the OS knows about a process (psutil), its container and its namespaced PID.

``HostSource.read(pids)`` keeps one ``psutil.Process`` per PID between reads (so CPU time deltas and
psutil's own caches work, and a reused PID is noticed through its creation time). A process that has
gone, or is a zombie, is left out of the result without an exception; a value the OS refuses to give
(``AccessDenied``) is ``None``. The container id comes from ``/proc/PID/cgroup`` (:func:`parse_container`)
and the innermost PID from the ``NSpid`` line of ``/proc/PID/status``.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import psutil

__all__ = ["HostProc", "HostSource", "cpu_pct", "delegated", "parse_container", "parse_nspid"]

T = TypeVar("T")


@dataclass(frozen=True)
class HostProc:
    pid: int
    ppid: int | None
    comm: str
    cmdline: str | None
    user: str | None
    #: container id (64 hex digits) from the cgroup path, or the Kubernetes pod UID when only the pod
    #: is known, ``?`` before it when unverified (``delegated``); None on the host
    container: str | None
    #: innermost PID (from NSpid in /proc/PID/status) when it differs from ``pid``
    nspid: int | None
    #: like top: % of one core used since the previous read; None the first time the process is seen
    cpu_pct: float | None
    rss_bytes: int | None
    #: stopped by a signal (SIGSTOP, SIGTSTP...) or by a tracer (``T``/``t`` in /proc/PID/stat)
    stopped: bool = False
    #: creation time (unix seconds, psutil's ``create_time``): with ``pid``, the process's identity
    start_time: float | None = None
    #: user + system CPU time since the process started (seconds; top's TIME+); None when refused
    cpu_time_s: float | None = None
    #: ``rss_bytes`` as a % of the host's physical memory (top's %MEM); None when either is unknown
    mem_pct: float | None = None
    #: the kernel's state letter (htop's S: R, S, D, T, t, I, ...; ``STATE_LETTERS``); None when unknown
    state: str | None = None


# ------------------------------------------------------------------ cgroup → container

_HEX64 = r"[0-9a-f]{64}"
#: one cgroup path component naming a container: a bare id (cgroupfs driver: /docker/<id>,
#: /kubepods/<qos>/pod<uid>/<id>) or <runtime>-<id>[.scope] (systemd driver: docker-, cri-containerd-,
#: crio-, libpod-, nerdctl-...)
_CONTAINER_COMPONENT = re.compile(rf"^(?:[a-z0-9_.-]+-)?({_HEX64})(?:\.scope)?$")
#: monitor processes that live beside a container but on the host (cri-o's and podman's conmon)
_NOT_A_CONTAINER = re.compile(r"(?:^|-)conmon-")
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$"
)


def parse_container(cgroup_text: str) -> str | None:
    """The container a process runs in, from the text of its ``/proc/PID/cgroup`` (v1 or v2).

    Returns the 64-hex-digit container id of docker, containerd (``cri-containerd-``), cri-o
    (``crio-``), podman (``libpod-``) and the like — the innermost one when containers nest — or,
    inside a Kubernetes pod cgroup without a container id, the pod UID (with dashes). ``None`` on the
    host.
    """
    pod: str | None = None
    for line in cgroup_text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        components = [c for c in parts[2].split("/") if c]
        for component in reversed(components):
            if _NOT_A_CONTAINER.search(component):
                break
            m = _CONTAINER_COMPONENT.match(component)
            if m:
                return m.group(1)
        if pod is None and "kubepods" in parts[2]:
            for component in reversed(components):
                m = _POD_UID.search(component)
                if m:
                    pod = m.group(1).replace("_", "-")
                    break
    return pod


#: the deepest cgroup path looked at
_MAX_CGROUP_DEPTH = 64


@functools.cache
def cgroup2_root() -> str | None:
    """Where the cgroup2 hierarchy is mounted (``0::/path`` in /proc/PID/cgroup is relative to it):
    /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host; None without one."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f.read(1 << 20).splitlines():
                fields = line.split(" - ", 1)
                if len(fields) == 2 and fields[1].split(" ", 1)[0] == "cgroup2":
                    return fields[0].split(" ")[4].replace("\\040", " ")
    except OSError:
        pass
    return None


def cgroup_dirs(components: list[str], root: str | None = None) -> list[os.stat_result] | None:
    """The cgroup2 root's directory and each directory below it down ``components`` (a path in
    /proc/PID/cgroup's ``0::/path``, split), as fstat sees them; None when the path cannot be walked
    (gone, no cgroup2, a component the kernel never writes). Each directory is opened below its parent
    without following a link (O_PATH | O_NOFOLLOW): as root, no path a user controls is followed."""
    root = root or cgroup2_root()
    if root is None or any(name in (".", "..") for name in components):
        return None
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        fd = os.open(root, flags)
    except OSError:
        return None
    try:
        out = [os.fstat(fd)]
        for name in components[:_MAX_CGROUP_DEPTH]:
            nxt = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
            out.append(os.fstat(fd))
    except OSError:
        return None
    finally:
        os.close(fd)
    return out


def cgroup_components(cgroup_text: str) -> list[str] | None:
    """The cgroup2 path of ``0::/path`` in /proc/PID/cgroup's text, split; None without that line."""
    line = next((ln for ln in cgroup_text.splitlines() if ln.startswith("0::")), None)
    return None if line is None else [c for c in line[3:].strip().split("/") if c][:_MAX_CGROUP_DEPTH]


def delegated(cgroup_text: str, root: str | None = None) -> bool:
    """Whether the cgroup that names a process's container (``parse_container``) lies in a subtree a user
    controls: a directory from the cgroup2 root down to it not owned by root. systemd delegates a
    subtree by giving its directory to the user (``user@UID.service``, rootless containers), and a
    user may create cgroups of any name there, one named like another pod's container among them
    (issue 40): such an id is shown unverified (``?`` before it). False on cgroup v1 (no delegation),
    or when the path cannot be walked (gone): ``cgroup_dirs``."""
    components = cgroup_components(cgroup_text)
    if components is None:
        return False
    named = parse_container("0::/" + "/".join(components))
    # the directories down to the one that names the container (the shortest prefix that names it)
    names = next((i for i in range(1, len(components) + 1)
                  if parse_container("0::/" + "/".join(components[:i])) == named), None)
    if named is None or names is None:
        return False
    if any(name in (".", "..") for name in components[:names]):
        return True                             # not a path the kernel writes
    dirs = cgroup_dirs(components[:names], root)
    return dirs is not None and any(st.st_uid != 0 for st in dirs)


def parse_nspid(status_text: str, pid: int) -> int | None:
    """The innermost PID from the ``NSpid:`` line of ``/proc/PID/status``, when it differs from ``pid``."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            if not fields:
                return None
            inner = int(fields[-1])
            return inner if inner != pid else None
    return None


def cpu_pct(prev_cpu_s: float, prev_wall_s: float, cpu_s: float, wall_s: float) -> float | None:
    """CPU time used between two readings as a % of one core (top's %CPU); None without elapsed time."""
    elapsed = wall_s - prev_wall_s
    if elapsed <= 0:
        return None
    return max(0.0, cpu_s - prev_cpu_s) / elapsed * 100.0


# ------------------------------------------------------------------ the source


#: psutil's states of a process that does not run until someone resumes it
_STOPPED = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP})
#: psutil's status (read from the third field of /proc/PID/stat) as the kernel's letter, htop's S column
STATE_LETTERS = {psutil.STATUS_RUNNING: "R", psutil.STATUS_SLEEPING: "S", psutil.STATUS_DISK_SLEEP: "D",
                 psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t", psutil.STATUS_IDLE: "I",
                 psutil.STATUS_WAKING: "W", psutil.STATUS_PARKED: "P", psutil.STATUS_DEAD: "X"}


@dataclass(frozen=True)
class _Static:
    """What does not change while a process runs one program: read when it is first seen and again
    when its name changes (an exec), not every refresh."""
    comm: str
    cmdline: str | None
    user: str | None
    container: str | None
    nspid: int | None
    start_time: float | None


@dataclass
class _Cached:
    proc: psutil.Process
    cpu_s: float | None = None
    wall_s: float | None = None
    static: _Static | None = None


def _field(fn: Callable[[], T]) -> T | None:
    """One psutil value; None when the OS refuses it (AccessDenied) or the process is a zombie."""
    try:
        return fn()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _mem_total() -> int | None:
    """The host's physical memory in bytes (MemTotal of /proc/meminfo, through psutil); None if unreadable."""
    try:
        return int(psutil.virtual_memory().total)
    except (OSError, RuntimeError):   # pragma: no cover - /proc/meminfo is always there on Linux
        return None


def _container(cgroup: str | None) -> str | None:
    """The container id of a process, ``?`` before it where a user could have named its cgroup so."""
    container = parse_container(cgroup) if cgroup is not None else None
    if container is not None and cgroup is not None and delegated(cgroup):
        return "?" + container
    return container


def _read_text(path: str) -> str | None:
    """A /proc file, or None when it is gone or refused."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


class HostSource:
    """psutil process info for the PIDs the sampler asks about. Not thread-safe (one collector thread).

    ``clock`` is the wall clock CPU percentages are measured against (monotonic seconds).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cache: dict[int, _Cached] = {}
        #: the host's physical memory (bytes), read once: %MEM's denominator, as top's (MemTotal)
        self._mem_total: int | None = _mem_total()

    def read(self, pids: Iterable[int], execed: Iterable[int] = ()) -> dict[int, HostProc]:
        """Host data of ``pids``; ``execed``: processes known to have exec'd since the last read (the
        BPF source's exec events), whose command line, user and container are read again even when
        the new program has the old one's name (`python` exec'ing `python train.py`)."""
        for pid in execed:
            cached = self._cache.get(pid)
            if cached is not None:
                cached.static = None
        wanted = set(pids)
        for pid in list(self._cache):  # forget processes nobody asks about any more
            if pid not in wanted:
                del self._cache[pid]
        out: dict[int, HostProc] = {}
        for pid in sorted(wanted):
            proc = self._read_one(pid)
            if proc is None and pid in self._cache:   # gone, or its PID is a new process's now
                del self._cache[pid]
                proc = self._read_one(pid)
            if proc is None:
                self._cache.pop(pid, None)
            else:
                out[pid] = proc
        return out

    def _process(self, pid: int) -> _Cached | None:
        cached = self._cache.get(pid)
        if cached is not None:      # its identity is checked by ppid() (psutil: pid and creation time)
            return cached
        try:
            cached = _Cached(psutil.Process(pid))
        except (psutil.NoSuchProcess, ValueError):
            return None
        except psutil.AccessDenied:  # pragma: no cover - creating a Process reads little
            return None
        self._cache[pid] = cached
        return cached

    def _read_one(self, pid: int) -> HostProc | None:
        """Per refresh /proc/PID/stat (twice: psutil's identity check in ppid(), then the oneshot)
        and statm; the rest (cmdline, status, cgroup) once per (PID, creation time) and after an
        exec. None when it is gone, or a process it had read before is (its PID reused)."""
        cached = self._process(pid)
        if cached is None:
            return None
        p = cached.proc
        try:
            with p.oneshot():
                ppid = _field(p.ppid)           # first: raises NoSuchProcess if the PID is another's now
                status = p.status()
                if status == psutil.STATUS_ZOMBIE:
                    return None
                comm = p.name()
                times = _field(p.cpu_times)
                wall = self._clock()
                mem = _field(p.memory_info)
                static = cached.static
                # read again after an exec, and while the command line is empty (none yet: read
                # in the instant of an exec, between the new name and the new arguments)
                if static is None or static.comm != comm or static.cmdline is None:
                    static = self._static(p, comm)
                    if static is None:
                        return None
                    cached.static = static
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone (or a zombie), or status/name refused
            return None

        pct: float | None = None
        cpu_s = times.user + times.system if times is not None else None
        if cpu_s is not None and cached.cpu_s is not None and cached.wall_s is not None:
            pct = cpu_pct(cached.cpu_s, cached.wall_s, cpu_s, wall)
        cached.cpu_s, cached.wall_s = cpu_s, wall

        rss = int(mem.rss) if mem is not None else None
        return HostProc(
            pid=pid,
            ppid=ppid,
            comm=comm,
            cmdline=static.cmdline,
            user=static.user,
            container=static.container,
            nspid=static.nspid,
            cpu_pct=pct,
            rss_bytes=rss,
            stopped=status in _STOPPED,
            state=STATE_LETTERS.get(status),
            start_time=static.start_time,
            cpu_time_s=cpu_s,
            mem_pct=rss / self._mem_total * 100.0 if rss is not None and self._mem_total else None,
        )

    @staticmethod
    def _static(p: psutil.Process, comm: str) -> _Static | None:
        """The facts of ``p`` that only an exec changes; None when it went away while being read."""
        cmd = _field(p.cmdline)
        user = _field(p.username)
        cgroup = _read_text(f"/proc/{p.pid}/cgroup")
        status_text = _read_text(f"/proc/{p.pid}/status")
        if cgroup is None and status_text is None and not p.is_running():
            return None
        return _Static(
            comm=comm,
            cmdline=" ".join(cmd) if cmd else None,
            user=user,
            container=_container(cgroup),
            nspid=parse_nspid(status_text, p.pid) if status_text is not None else None,
            start_time=_field(p.create_time),
        )
