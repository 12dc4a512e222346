"""Finding every ELF object mapped executable by any process, keyed by (device, inode).

Objects are opened through ``/proc/PID/map_files/`` (or ``/proc/PID/root/``) so that processes in
other mount namespaces (containers) work: a path that exists only inside the container is still
reachable from the host through the process that maps it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gputop.sources.bpf.common import elfread

PROC = Path("/proc")


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    offset: int
    dev: int
    inode: int
    path: str


@dataclass(frozen=True)
class ObjectRef:
    """One distinct ELF object and a path to open it from gputop's own mount namespace."""

    dev: int
    inode: int
    path: str           # as the process sees it
    open_path: str      # openable from here (map_files or /proc/PID/root)
    pid: int            # a process that maps it

    @property
    def key(self) -> tuple[int, int]:
        return (self.dev, self.inode)

    def open(self) -> int | None:
        """A descriptor for reading this very file (see open_object), or None."""
        return open_object(self.open_path, self.dev, self.inode)


def _dev(text: str) -> int:
    major, minor = text.split(":")
    return os.makedev(int(major, 16), int(minor, 16))


def read_maps(pid: int, *, executable_only: bool = True) -> list[Mapping]:
    """File-backed mappings of ``pid`` (only executable ones by default); [] if it vanished."""
    out: list[Mapping] = []
    try:
        with open(f"{PROC}/{pid}/maps", "rb") as f:     # (a rescan reads every process's: no pathlib)
            data = f.read()
    except OSError:
        return out
    # file names are bytes: keep undecodable ones round-trippable instead of failing
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        # a line kept names a file ("/...") and, executable, has an "x": most lines have neither
        if "/" not in line or (executable_only and "x" not in line):
            continue
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        addrs, perms, offset, dev, inode, path = parts
        if executable_only and "x" not in perms:
            continue
        ino = int(inode)
        if ino == 0:
            continue
        start, end = (int(a, 16) for a in addrs.split("-"))
        out.append(Mapping(start, end, int(offset, 16), _dev(dev), ino, path.removesuffix(" (deleted)")))
    return out


def open_path(pid: int, m: Mapping) -> str | None:
    """A path to the mapped file that works from this mount namespace, checked by inode (the
    check is repeated on the descriptor whenever it is opened: see open_object)."""
    # map_files needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE); the plain path works on the host
    for cand in (f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}", f"/proc/{pid}/root{m.path}", m.path):
        try:
            st = os.stat(cand)
        except OSError:
            continue
        if st.st_ino == m.inode and st.st_dev == m.dev and stat.S_ISREG(st.st_mode):
            return cand
    return None


_MAP_FILES = re.compile(r"^/proc/\d+/map_files/[0-9a-f]+-[0-9a-f]+$")


def open_object(path: str, dev: int, inode: int) -> int | None:
    """A descriptor for reading the regular file (``dev``, ``inode``) at ``path``, or None.

    The path is another user's to change at any moment (a FIFO or a device swapped in, a symlink
    planted): it is resolved once with O_PATH, which opens nothing (no FIFO wait, no device's
    open), without following a symlink at its end (a map_files entry is the kernel's own link to
    the mapped file and is followed); the file is checked on that descriptor, and only then opened
    for reading through it, never through the path again."""
    follow = bool(_MAP_FILES.match(path))
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except OSError:
        return None
    try:
        if not _is(os.fstat(pfd), dev, inode):
            return None
        fd = os.open(f"/proc/self/fd/{pfd}", elfread.OPEN_FLAGS)
    except OSError:
        return None
    finally:
        os.close(pfd)
    try:
        if _is(os.fstat(fd), dev, inode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _is(st: os.stat_result, dev: int, inode: int) -> bool:
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (dev, inode)


def same_file(m: Mapping | ObjectRef) -> str | None:
    """The mapping's path as seen from here, if it is the very same file (after the process exited)."""
    try:
        st = os.stat(m.path)
    except OSError:
        return None
    return m.path if (st.st_dev, st.st_ino) == (m.dev, m.inode) else None


#: the longest kernel name read from a process's memory
REGISTERED_NAME_MAX = 4096
_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def start_boot_ns(pid: int) -> int | None:
    """When ``pid`` started, in ns since boot (CLOCK_BOOTTIME, the clock's tick as resolution)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[19]) * _TICK_NS if len(fields) > 19 else None


def read_registered_name(pid: int, ptr: int, boot_ns: int) -> bytes | None:
    """The NUL-terminated name at ``ptr`` in ``pid``'s memory, registered at ``boot_ns`` (since
    boot). None when the process is gone or unreadable, or when the registration is older than the
    process now holding that PID (it was another process's)."""
    start = start_boot_ns(pid)
    if start is None or boot_ns < start:
        return None
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        out, _failed = _string_at(fd, ptr)     # what was read before a page that cannot be (cut there)
    finally:
        os.close(fd)
    return out or None


def _string_at(fd: int, at: int) -> tuple[bytes, bool]:
    """The NUL-terminated string at ``at`` of ``fd`` (a process's memory, a file), at most
    REGISTERED_NAME_MAX bytes, read page by page (it may end before a page that cannot be read), without
    its NUL; and whether a read failed."""
    out = b""
    try:
        while len(out) < REGISTERED_NAME_MAX:
            pos = at + len(out)
            chunk = os.pread(fd, min(REGISTERED_NAME_MAX - len(out), mmap.PAGESIZE - pos % mmap.PAGESIZE), pos)
            if not chunk:
                break
            out += chunk
            if b"\0" in chunk:
                break
    except OSError:
        return out.split(b"\0", 1)[0], True
    return out.split(b"\0", 1)[0], False


def read_string_in_file(pid: int, m: Mapping, offset: int) -> bytes | None:
    """The NUL-terminated string at ``offset`` of the file ``m`` maps (a kernel name registered from a
    constant of that object, read after its process is gone or while its page is not present), at
    most REGISTERED_NAME_MAX bytes, through a descriptor checked to be that file (open_object); None
    when it cannot be opened, or nothing is there."""
    path = open_path(pid, m)
    fd = open_object(path, m.dev, m.inode) if path else None
    if fd is None:
        return None
    try:
        out, failed = _string_at(fd, offset)
    finally:
        os.close(fd)
    return None if failed else out or None


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir(PROC) if name.isdigit()]


def tgid_of(pid: int) -> int | None:
    """The process (thread group) a task id belongs to; None if it is gone."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def scan(pids: list[int] | None = None, skip: set[tuple[int, int]] | None = None,
         maps_out: dict[int, list[Mapping]] | None = None) -> list[ObjectRef]:
    """Every distinct executable ELF object mapped by ``pids`` (default: every process).

    Objects whose key is in ``skip`` (already known) are not returned. The executable mappings
    read on the way are stored in ``maps_out`` by pid, for naming kernels after a process exits.
    """
    seen: set[tuple[int, int]] = set(skip or ())
    found: list[ObjectRef] = []
    me = os.getpid()
    for pid in pids if pids is not None else all_pids():
        if pid == me:
            continue
        maps = read_maps(pid)
        if maps_out is not None and maps:
            maps_out[pid] = maps
        for m in maps:
            key = (m.dev, m.inode)
            if key in seen:
                continue
            path = open_path(pid, m)
            if path is None:
                continue
            seen.add(key)
            found.append(ObjectRef(m.dev, m.inode, m.path, path, pid))
    return found


def pids_mapping(keys: set[tuple[int, int]]) -> dict[int, list[str]]:
    """Processes that map any of the objects ``keys``: pid -> paths (for `gputop doctor`)."""
    out: dict[int, list[str]] = {}
    for pid in all_pids():
        paths = sorted({m.path for m in read_maps(pid) if (m.dev, m.inode) in keys})
        if paths:
            out[pid] = paths
    return out


# ------------------------------------------------------------------ files whose process is gone
#
# A process that maps a CUDA object and exits within milliseconds is gone before its maps can be
# read. The BPF side then names the file instead (its device, inode and the names from it up to
# its filesystem's root); the file is probed if it can still be reached from here with the same
# device and inode, so that the next process mapping it is counted from its first call.

_MOUNT_ESCAPE = re.compile(r"\\([0-7]{3})")


def kernel_dev(dev: int) -> int:
    """A device number as the kernel holds it (major << 20 | minor), from st_dev's encoding."""
    return (os.major(dev) << 20) | os.minor(dev)


def user_dev(kdev: int) -> int:
    """st_dev's encoding of a kernel dev_t."""
    return os.makedev(kdev >> 20, kdev & 0xFFFFF)


def _unescape(field: str) -> str:
    return _MOUNT_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def mounts_of(dev: int, mountinfo: str | None = None) -> list[tuple[str, str]]:
    """(root within the filesystem, mount point) of every mount of device ``dev`` in gputop's
    own mount namespace (from /proc/self/mountinfo, or the text given)."""
    if mountinfo is None:
        try:
            mountinfo = (PROC / "self" / "mountinfo").read_bytes().decode("utf-8", "surrogateescape")
        except OSError:
            return []
    want = f"{os.major(dev)}:{os.minor(dev)}"
    out: list[tuple[str, str]] = []
    for line in mountinfo.splitlines():
        parts = line.split(" ", 5)
        if len(parts) >= 5 and parts[2] == want:
            out.append((_unescape(parts[3]), _unescape(parts[4])))
    return out


def paths_here(dev: int, names: Sequence[bytes], mountinfo: str | None = None) -> list[str]:
    """Where a file of device ``dev`` could be from here: ``names`` run from the file's own name
    up to its filesystem's root (a dentry walk); each mount of that filesystem whose root holds
    the file gives one path."""
    if len(names) < 2 or any(not n or b"/" in n for n in names[:-1]):
        return []
    rel = "/" + "/".join(os.fsdecode(n) for n in reversed(names[:-1]))
    out: list[str] = []
    for root, mount_point in mounts_of(dev, mountinfo):
        root = root.rstrip("/")
        if rel == root or rel.startswith(root + "/"):
            out.append(mount_point.rstrip("/") + rel[len(root):] or "/")
    return out


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def mapped_key(fd: int) -> tuple[int, int] | None:
    """(device, inode) that /proc/PID/maps shows for a mapping of ``fd``: on a stacked filesystem
    (overlayfs) it is the file underneath, which is what uprobes attach to, not what fstat says."""
    addr = _libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        return None
    try:
        for m in read_maps(os.getpid(), executable_only=False):
            if m.start == addr:
                return m.dev, m.inode
        return None
    finally:
        _libc.munmap(addr, mmap.PAGESIZE)


def reach(dev: int, inode: int, names: Sequence[bytes], pid: int) -> ObjectRef | None:
    """The file (``dev``, ``inode``) that process ``pid`` mapped, reached through a path in gputop's
    own mount namespace that leads to the same device and inode; None if there is none. The
    reference carries the key its mappings have (see mapped_key)."""
    for path in paths_here(dev, names):
        fd = open_object(path, dev, inode)
        if fd is None:
            continue
        try:
            key = mapped_key(fd) or (dev, inode)
        finally:
            os.close(fd)
        return ObjectRef(key[0], key[1], path, path, pid)
    return None
