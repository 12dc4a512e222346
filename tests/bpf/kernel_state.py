"""What a process holds in the kernel's BPF state, and whether it is still there after the process
ends: program and link ids from /proc/PID/fdinfo, asked back by id (BPF_*_GET_FD_BY_ID), and the
tracefs probe definitions (uprobe_events, kprobe_events) that bcc names after the process."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass
from pathlib import Path

_SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_PROG_GET_FD_BY_ID, _LINK_GET_FD_BY_ID = 13, 30
_libc = ctypes.CDLL(None, use_errno=True)
TRACEFS = Path("/sys/kernel/tracing")


@dataclass(frozen=True)
class Held:
    progs: frozenset[int]
    links: frozenset[int]
    perf_events: int            # perf-event fds (uprobes attached one by one, tracepoints)


def held_by(pid: int) -> Held:
    progs: set[int] = set()
    links: set[int] = set()
    perf = 0
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    for entry in fdinfo.iterdir():
        try:
            text = entry.read_text(errors="replace")     # paths of probed files: any bytes
            target = os.readlink(f"/proc/{pid}/fd/{entry.name}")
        except OSError:
            continue
        fields = dict(ln.split(":", 1) for ln in text.splitlines() if ":" in ln)
        if "link_id" in fields:
            links.add(int(fields["link_id"]))
        elif "prog_id" in fields and target == "anon_inode:bpf-prog":
            progs.add(int(fields["prog_id"]))
        elif target == "anon_inode:[perf_event]":
            perf += 1
    return Held(frozenset(progs), frozenset(links), perf)


def _exists(cmd: int, ident: int) -> bool:
    attr = ctypes.create_string_buffer(struct.pack("I", ident), 16)
    fd = int(_libc.syscall(_SYS_BPF, cmd, attr, 16))
    if fd >= 0:
        os.close(fd)
        return True
    err = ctypes.get_errno()
    assert err == errno.ENOENT, os.strerror(err)
    return False


def still_loaded(held: Held) -> tuple[list[int], list[int]]:
    """The programs and links of ``held`` that the kernel still has."""
    return ([p for p in sorted(held.progs) if _exists(_PROG_GET_FD_BY_ID, p)],
            [k for k in sorted(held.links) if _exists(_LINK_GET_FD_BY_ID, k)])


def probe_events_of(pid: int) -> list[str]:
    """tracefs probe definitions bcc made for ``pid`` (it names them ..._bcc_<pid>)."""
    out = []
    for name in ("uprobe_events", "kprobe_events"):
        path = TRACEFS / name
        if path.exists():
            out += [ln for ln in path.read_text().splitlines() if f"bcc_{pid}" in ln]
    return out
