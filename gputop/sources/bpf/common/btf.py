"""Offsets of kernel struct members from the running kernel's BTF (``/sys/kernel/btf/vmlinux``).

bcc compiles against whatever kernel headers exist, which may be another kernel's (see kheaders):
fine for uprobes and tracepoints, wrong for kernel structs. The few struct members the BPF side
reads (to name the file a process maps) are located here instead, from the running kernel's own
type information, and handed to the compiler as constants.
"""

from __future__ import annotations

import platform
import struct
from functools import cache
from pathlib import Path

VMLINUX = Path("/sys/kernel/btf/vmlinux")

_STRUCT, _UNION = 4, 5
#: bytes that follow a type record, by kind: fixed, and per vlen entry
_EXTRA = {1: (4, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 13: (0, 8), 14: (4, 0), 15: (0, 12),
          17: (4, 0), 19: (0, 12)}
_QUALIFIERS = {8, 9, 10, 11, 18}    # typedef, volatile, const, restrict, type tag: see through them

Member = tuple[str, int, int]       # name, type id, bit offset


class Btf:
    """The struct and union types of one BTF blob, enough to locate members."""

    def __init__(self, data: bytes) -> None:
        magic, _ver, _flags, hdr_len, type_off, type_len, str_off, _str_len = struct.unpack_from("<HBBIIIII", data)
        if magic != 0xEB9F:
            raise ValueError("not BTF (or not little-endian)")
        types = data[hdr_len + type_off:hdr_len + type_off + type_len]
        self._strs = data[hdr_len + str_off:]
        self._kind: list[int] = [0]
        self._ref: list[int] = [0]
        self._members: dict[int, list[Member]] = {}
        self._by_name: dict[str, int] = {}
        at = 0
        while at < len(types):
            name_off, info, size_or_type = struct.unpack_from("<III", types, at)
            kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            tid = len(self._kind)
            self._kind.append(kind)
            self._ref.append(size_or_type)
            at += 12
            if kind in (_STRUCT, _UNION):
                members = []
                for i in range(vlen):
                    m_name, m_type, m_off = struct.unpack_from("<III", types, at + 12 * i)
                    members.append((self._str(m_name), m_type, m_off & 0xFFFFFF if kflag else m_off))
                self._members[tid] = members
                name = self._str(name_off)
                if name and kind == _STRUCT:
                    self._by_name.setdefault(name, tid)
            fixed, per = _EXTRA.get(kind, (0, 0))
            at += fixed + per * vlen

    def _str(self, off: int) -> str:
        end = self._strs.index(b"\0", off)
        return self._strs[off:end].decode()

    def _resolve(self, tid: int) -> int:
        while self._kind[tid] in _QUALIFIERS:
            tid = self._ref[tid]
        return tid

    def _find(self, tid: int, name: str) -> tuple[int, int] | None:
        """(type id, bit offset) of member ``name`` of struct/union ``tid``, looking into anonymous ones."""
        for m_name, m_type, m_off in self._members.get(self._resolve(tid), ()):
            if m_name == name:
                return m_type, m_off
            if not m_name:
                inner = self._find(m_type, name)
                if inner is not None:
                    return inner[0], m_off + inner[1]
        return None

    def offset(self, struct_name: str, path: str) -> int | None:
        """Byte offset of ``path`` (``a.b.c``, members of embedded structs) in ``struct struct_name``."""
        tid = self._by_name.get(struct_name)
        if tid is None:
            return None
        bits = 0
        for part in path.split("."):
            found = self._find(tid, part)
            if found is None:
                return None
            tid, off = found
            bits += off
        return None if bits % 8 else bits // 8


#: the members the BPF side reads to name a mapped file (macro -> struct, member path)
FILE_MEMBERS = {
    "OFF_TASK_FILES": ("task_struct", "files"),
    "OFF_FILES_FDT": ("files_struct", "fdt"),
    "OFF_FDT_FD": ("fdtable", "fd"),
    "OFF_FILE_INODE": ("file", "f_inode"),
    "OFF_FILE_DENTRY": ("file", "f_path.dentry"),
    "OFF_INODE_SB": ("inode", "i_sb"),
    "OFF_INODE_INO": ("inode", "i_ino"),
    "OFF_SB_DEV": ("super_block", "s_dev"),
    "OFF_DENTRY_PARENT": ("dentry", "d_parent"),
    "OFF_DENTRY_NAME": ("dentry", "d_name.name"),
}
#: where the kernel keeps a task's thread pointer (its TLS base: on x86-64 glibc's and musl's pthread_self()),
#: which CPython keeps as PyThreadState.thread_id: the BPF side finds the launching thread's state by it (call
#: sites). Not on arm64: its TLS layout puts the thread pointer after glibc's struct pthread (pthread_self() is
#: the thread pointer less that struct's size, which differs by glibc release), so the BPF side finds the
#: thread's state by its native thread id there (CPython 3.11+; 3.9 and 3.10 keep none: their launches' call
#: sites are their native callers on arm64)
THREAD_POINTER = {"x86_64": ("task_struct", "thread.fsbase")}
if platform.machine() in THREAD_POINTER:
    FILE_MEMBERS["OFF_TASK_THREAD_POINTER"] = THREAD_POINTER[platform.machine()]
#: struct inode's change time as each kernel spells it, (seconds, nanoseconds), newest first: split
#: since 6.11 (the nanoseconds' top bits hold flags since 6.13: the BPF side keeps CTIME_NSEC_MASK),
#: ``__i_ctime`` in 6.6 to 6.10, ``i_ctime`` before. The BPF side reads it to tell a file from a newer
#: one given the same inode number (known_files)
CTIME_MEMBERS = (("i_ctime_sec", "i_ctime_nsec"), ("__i_ctime.tv_sec", "__i_ctime.tv_nsec"),
                 ("i_ctime.tv_sec", "i_ctime.tv_nsec"))
#: every offset file_offsets gives
OFFSET_NAMES = (*FILE_MEMBERS, "OFF_INODE_CTIME_SEC", "OFF_INODE_CTIME_NSEC")


@cache
def file_offsets(path: Path = VMLINUX) -> dict[str, int] | None:
    """OFFSET_NAMES' byte offsets in the running kernel; None without BTF or with any missing."""
    try:
        btf = Btf(path.read_bytes())
    except (OSError, ValueError, struct.error, IndexError):
        return None
    out: dict[str, int] = {}
    for macro, (name, member) in FILE_MEMBERS.items():
        off = btf.offset(name, member)
        if off is None:
            return None
        out[macro] = off
    ctime = ctime_offsets(btf)
    if ctime is None:
        return None
    out["OFF_INODE_CTIME_SEC"], out["OFF_INODE_CTIME_NSEC"] = ctime
    return out


def ctime_offsets(btf: Btf) -> tuple[int, int] | None:
    """Where struct inode keeps its change time's seconds and nanoseconds (CTIME_MEMBERS), or None."""
    for sec, nsec in CTIME_MEMBERS:
        sec_at, nsec_at = btf.offset("inode", sec), btf.offset("inode", nsec)
        if sec_at is not None and nsec_at is not None:
            return sec_at, nsec_at
    return None
