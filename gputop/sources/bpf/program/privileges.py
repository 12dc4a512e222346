"""Whether this process may trace, and what it lacks: capabilities, tracefs, the uprobe PMU.

Where uprobes attach as perf events (no uprobe_multi links: Linux before 6.6, a bcc before 0.21, or
``GPUTOP_UPROBE_LINKS=off``), each is a perf event of the kernel's uprobe PMU, which Linux opens only
for CAP_SYS_ADMIN: CAP_PERFMON is not enough there (measured: ``bench/uprobe_pmu_open.py``; docs/deploy.md,
"Hosts whose uprobes attach as perf events"). Whether this process may open one is asked of the kernel
(``uprobe_pmu_allowed``), never decided by a version.
"""

from __future__ import annotations

import errno
import functools
import os
from pathlib import Path

from gputop.sources.bpf.common.linux import TRACEFS, open_uprobe

#: capability numbers (linux/capability.h)
CAP_NUMBERS = {"CAP_DAC_READ_SEARCH": 2, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38,
               "CAP_BPF": 39, "CAP_CHECKPOINT_RESTORE": 40}

#: the least capability set that traces every process fully where uprobes attach through uprobe_multi
#: links, and what each one is for; measured with setpriv as uid 65534 in tests/bpf/test_privileges.py
#: (root has them all). Other users' /proc/PID/maps need only CAP_PERFMON. Where uprobes attach as
#: perf events, CAP_SYS_ADMIN too (PERF_ADMIN_WHY).
TRACING_CAPS: dict[str, str] = {
    "CAP_BPF": "load the BPF program and its maps",
    "CAP_PERFMON": "attach uprobes and tracepoints",
    "CAP_DAC_READ_SEARCH": "read tracefs (/sys/kernel/tracing is root's only) for the tracepoints",
    "CAP_SYS_PTRACE": "open other users' libraries through /proc/PID/root: those that exist only in a container",
    "CAP_CHECKPOINT_RESTORE": "open /proc/PID/map_files (with CAP_SYS_PTRACE): libraries deleted or replaced "
                              "since a process loaded them",
}
#: what CAP_SYS_ADMIN is needed for, where it is
PERF_ADMIN_WHY = "open uprobes as perf events (the kernel's uprobe PMU is CAP_SYS_ADMIN's only)"
#: without these, nothing is traced (the others only narrow what is)
_REQUIRED = ("CAP_BPF", "CAP_PERFMON", "CAP_DAC_READ_SEARCH")
#: what CAP_SYS_ADMIN also grants (older kernels know only it)
_ADMIN_COVERS = ("CAP_BPF", "CAP_PERFMON", "CAP_CHECKPOINT_RESTORE")
ENABLE_HINT = ("run gputop as root (sudo gputop), or grant it " + ",".join(TRACING_CAPS)
               + " (setcap, systemd AmbientCapabilities=, or a container's capabilities)")
#: the hint where the perf-event path lacks CAP_SYS_ADMIN
PERF_ADMIN_HINT = ("run gputop as root (sudo gputop), or grant it CAP_SYS_ADMIN as well (systemd: the drop-in "
                   "deploy/systemd/perf-event-uprobes.conf; Kubernetes: SYS_ADMIN in the container's "
                   "capabilities; docs/deploy.md)")



def effective_caps() -> int:
    """The effective capability set of this process as a bit mask (0 when unreadable)."""
    try:
        text = Path("/proc/self/status").read_text()
        return int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("CapEff:")), 16)
    except (OSError, StopIteration, ValueError):
        return 0


def _has(eff: int, name: str) -> bool:
    return bool(eff & (1 << CAP_NUMBERS[name]))


def missing_caps(eff: int | None = None) -> list[str]:
    """The capabilities of TRACING_CAPS this process lacks, in that order."""
    eff = effective_caps() if eff is None else eff
    admin = _has(eff, "CAP_SYS_ADMIN")
    return [c for c in TRACING_CAPS if not _has(eff, c) and not (admin and c in _ADMIN_COVERS)]


def _tracefs_readable() -> bool:
    try:
        return os.access(TRACEFS, os.R_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids)
    except OSError:
        return False


def tracing_blockers(eff: int | None = None) -> list[str]:
    """The missing capabilities of TRACING_CAPS without which nothing can be traced ([]: none).
    CAP_DAC_READ_SEARCH counts only where tracefs is not readable without it."""
    missing = missing_caps(eff)
    return [c for c in _REQUIRED if c in missing and (c != "CAP_DAC_READ_SEARCH" or not _tracefs_readable())]


@functools.lru_cache(maxsize=1)
def uprobe_pmu_allowed() -> bool | None:
    """Whether this process may open a uprobe as a perf event: asked of the kernel with a probe on a
    memfd of this process's own (nothing maps it, so the probe is never hit), opened and closed at once.
    Refused (EACCES, EPERM): False. Any other outcome means the permission checks passed: True. None:
    the kernel has no uprobe PMU (gputop doctor says so) or no memfd could be made."""
    try:
        mem = os.memfd_create("gputop-uprobe-pmu", os.MFD_CLOEXEC)
    except (OSError, AttributeError):
        return None
    try:
        os.ftruncate(mem, 8192)
        fd = open_uprobe(f"/proc/self/fd/{mem}", 0)
    except (OSError, ValueError, IndexError):
        return None         # no uprobe PMU
    finally:
        os.close(mem)
    if fd >= 0:
        os.close(fd)
        return True
    return -fd not in (errno.EACCES, errno.EPERM)


def why_perf(links: bool | None = None) -> str | None:
    """Why gputop's uprobes attach as perf events here (None: through uprobe_multi links). Asks the
    kernel (an empty program loaded for links) and bcc (whether it can load programs for them)."""
    from gputop.sources.bpf.attach.uprobes import bcc_loads_for_links, links_supported, links_wanted
    from gputop.sources.bpf.program.program import BpfUnavailable, load_bcc

    if not (links_wanted() if links is None else links):
        return "uprobe_multi links are turned off: GPUTOP_UPROBE_LINKS=off"
    if not links_supported():
        return "the kernel has no uprobe_multi links: Linux 6.6+ has them"
    try:
        bcc = load_bcc()
    except BpfUnavailable:
        return None     # no bcc: the load says so, not the privileges
    if not bcc_loads_for_links(bcc.BPF, bcc.lib):
        return "this bcc cannot load programs for uprobe_multi links: bcc 0.21+ can"
    return None


def perf_admin_refusal(links: bool | None = None) -> str | None:
    """Why tracing cannot start where uprobes attach as perf events and this process may not open one
    (it lacks CAP_SYS_ADMIN); None when they attach otherwise or it may. Cheap where it may: one
    perf_event_open."""
    if uprobe_pmu_allowed() is not False:
        return None
    perf = why_perf(links)
    if perf is None:
        return None
    return (f"uprobes attach here as perf events ({perf}), which the kernel opens only with CAP_SYS_ADMIN: "
            "missing CAP_SYS_ADMIN")


def privileges_error(links: bool | None = None) -> tuple[str, str] | None:
    """(why, hint) when this process lacks the privileges to trace, naming each missing capability;
    None when it can. ``links``: whether uprobe_multi links may be used (None: unless
    GPUTOP_UPROBE_LINKS=off)."""
    blockers = tracing_blockers()
    if blockers:
        return (f"tracing needs CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH (root has them): missing "
                f"{', '.join(blockers)}", ENABLE_HINT)
    perf = perf_admin_refusal(links)
    return None if perf is None else (perf, PERF_ADMIN_HINT)


def coverage_gaps() -> list[str]:
    """The missing capabilities that leave some processes untraced while tracing works."""
    return [c for c in missing_caps() if c not in _REQUIRED]


def has_privileges() -> bool:
    """Whether tracing can start: CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) in the effective set,
    tracefs readable (root, or CAP_DAC_READ_SEARCH), and, where uprobes attach as perf events,
    CAP_SYS_ADMIN."""
    return privileges_error() is None
