"""Files as root: never follow a path that another user controls.

gputop runs as root on shared hosts, often with another user's environment (``sudo -E``: HOME and
XDG_* point into that user's directories). Every file it reads as a cache or writes (settings,
caches, recordings) goes through this module:

- ``untrusted_reason(path)``: may this directory be trusted? Every component from ``/`` down is
  owned by root or by the effective user and writable by no group or other user; a sticky
  directory such as ``/tmp`` is allowed on the way (no one else can rename what is ours in it),
  never as the directory itself. Checked on descriptors: each component is opened with
  ``O_PATH|O_NOFOLLOW`` relative to the one before and ``fstat``-ed, so a rename cannot swap a
  component between the check and the use.
- symbolic links on the way are followed only where the directory holding them is trusted (so the
  link is root's or ours); the final name of a file is never followed.
- ``read_file``: a cache file, only when it is a regular file of root (or ours) that no one else
  can write, in a trusted directory, and no larger than asked.
- ``write_atomic``: a new file under an ``O_EXCL`` temporary name in the same directory
  descriptor, written, fsync-ed and renamed into place (a link at the final name is replaced,
  never written through).
- ``open_append``: an output file (recordings), ``O_APPEND|O_CREAT|O_NOFOLLOW``, mode 0600; as
  root, a file that is not a regular file of root's with a single link is refused.
- ``cache_home``: ``$XDG_CACHE_HOME``, except as root when another user controls it.

Refusals raise ``UnsafePathError`` (an ``OSError``, so callers' ``except OSError`` cover it) whose
text names the offending path and why.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path

#: where root's caches go when XDG_CACHE_HOME is not set, or not trusted
ROOT_CACHE = Path("/var/cache")
#: symbolic links followed while resolving one path (the kernel's limit)
MAX_LINKS = 40

_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafePathError(OSError):
    """A path gputop will not use: its text says which component and why."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(errno.EPERM, reason, os.fspath(path))

    def __str__(self) -> str:
        return str(self.strerror)


def _ours(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _dir_problem(st: os.stat_result, shown: str, last: bool) -> str | None:
    """Why a directory on the way (``last``: the directory itself) cannot be trusted, or None."""
    if not _ours(st.st_uid):
        return f"{shown} is owned by uid {st.st_uid}"
    if st.st_mode & _GROUP_OTHER_WRITE and (last or not st.st_mode & stat.S_ISVTX):
        return f"{shown} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _link_problem(dir_st: os.stat_result, link_st: os.stat_result, shown: str) -> str | None:
    """Why the symbolic link ``shown`` may not be followed: another user can change it."""
    if not _ours(link_st.st_uid):
        return f"{shown} is a symbolic link owned by uid {link_st.st_uid}"
    if not _ours(dir_st.st_uid) or (dir_st.st_mode & _GROUP_OTHER_WRITE and not dir_st.st_mode & stat.S_ISVTX):
        return f"{shown} is a symbolic link in a directory other users can change"
    return None


class _Walk:
    """Resolving a directory path one component at a time, on descriptors (see ``_resolve``)."""

    def __init__(self, path: str | os.PathLike[str], strict: bool, create: int | None) -> None:
        self.todo = [p for p in os.path.abspath(os.fspath(path)).split("/") if p]
        self.strict = strict
        self.create = create
        self.links = 0
        self.fds: list[int] = []
        self.stats: list[os.stat_result] = []
        self.names: list[str] = []

    @property
    def shown(self) -> str:
        return "/" + "/".join(self.names)

    def push(self, fd: int, st: os.stat_result, name: str | None) -> None:
        self.fds.append(fd)
        self.stats.append(st)
        if name is not None:
            self.names.append(name)
        if self.strict:
            problem = _dir_problem(st, self.shown, last=not self.todo)
            if problem:
                raise UnsafePathError(self.shown, problem)

    def restart(self) -> None:
        """Back to ``/`` (an absolute link's target)."""
        while len(self.fds) > 1:
            self.up()

    def up(self) -> None:
        if len(self.fds) > 1:
            os.close(self.fds.pop())
            self.stats.pop()
            self.names.pop()

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def _open_component(walk: _Walk, name: str) -> tuple[int, os.stat_result]:
    parent = walk.fds[-1]
    try:
        fd = os.open(name, _PATH, dir_fd=parent)
    except FileNotFoundError as e:
        if walk.create is None:
            raise FileNotFoundError(e.errno, e.strerror, os.path.join(walk.shown, name)) from None
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, walk.create, dir_fd=parent)
        fd = os.open(name, _PATH, dir_fd=parent)
    try:
        return fd, os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise


def _follow(walk: _Walk, fd: int, st: os.stat_result, name: str) -> None:
    """Queue the target of the link ``name`` (open as ``fd``) when its directory is trusted."""
    shown = os.path.join(walk.shown, name)
    try:
        problem = _link_problem(walk.stats[-1], st, shown)
        if problem:
            raise UnsafePathError(shown, problem)
        walk.links += 1
        if walk.links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
        target = os.readlink(name, dir_fd=walk.fds[-1])
    finally:
        os.close(fd)
    if target.startswith("/"):
        walk.restart()
    walk.todo[:0] = [p for p in target.split("/") if p]


def _resolve(walk: _Walk) -> int:
    """The ``O_PATH`` descriptor of the walk's directory; raises OSError (UnsafePathError)."""
    try:
        root = os.open("/", _PATH | os.O_DIRECTORY)
        walk.push(root, os.fstat(root), None)
        while walk.todo:
            name = walk.todo.pop(0)
            if name == ".":
                continue
            if name == "..":
                walk.up()
                continue
            fd, st = _open_component(walk, name)
            if stat.S_ISLNK(st.st_mode):
                _follow(walk, fd, st, name)
            elif stat.S_ISDIR(st.st_mode):
                walk.push(fd, st, name)
            else:
                os.close(fd)
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.path.join(walk.shown, name))
        return walk.fds.pop()
    finally:
        walk.close()


def open_dir(path: str | os.PathLike[str], *, strict: bool = True, create: bool = False,
             mode: int = 0o700) -> int:
    """A descriptor of the directory ``path`` (readable, ``O_PATH`` where it cannot be read).

    ``strict``: every component must pass the trust check (see the module's docstring); else only
    the links on the way must lie in trusted directories. ``create``: missing directories are made
    with ``mode``. Raises OSError; UnsafePathError for a refusal."""
    fd = _resolve(_Walk(path, strict, mode if create else None))
    try:
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    except PermissionError:
        return os.dup(fd)
    finally:
        os.close(fd)


def untrusted_reason(path: str | os.PathLike[str], *, missing_ok: bool = False) -> str | None:
    """None when the directory ``path`` may be trusted by this user, else why not (one clause).

    ``missing_ok``: a path whose existing part is trusted is trusted (what is missing will be made
    by this user)."""
    try:
        os.close(_resolve(_Walk(path, True, None)))
    except UnsafePathError as e:
        return str(e)
    except FileNotFoundError as e:
        if missing_ok:
            return None
        return f"{e.filename or path} does not exist"
    except OSError as e:
        return f"{e.filename or path}: {e.strerror or e}"
    return None


def untrusted_program(path: str | os.PathLike[str]) -> str | None:
    """None when the program at the absolute ``path`` may be run by this user, else why not: the
    directory holding the name, the file it resolves to and that file's directory are each root's
    or ours and writable by no other user (``untrusted_reason``). The name itself may be a link
    (a virtual environment's ``bin/python3``): run it by this name, not the resolved one."""
    name = Path(path)
    if not name.is_absolute():
        return f"{name} is not an absolute path"
    hop = name
    for _ in range(MAX_LINKS + 1):      # every link on the way sits in a directory no one else can change
        reason = untrusted_reason(hop.parent)
        if reason:
            return reason
        if not hop.is_symlink():
            break
        # the target from where the kernel resolves it: the link's directory as it really is (a ".."
        # in the target leaves that directory, not the text of the path it was reached by)
        hop = Path(os.path.normpath(Path(os.path.realpath(hop.parent)) / os.readlink(hop)))
    else:
        return f"{name}: more than {MAX_LINKS} symbolic links"
    try:
        st = os.stat(hop)
    except OSError as e:
        return f"{hop}: {e.strerror or e}"
    return _file_problem(st, str(hop), max_bytes=1 << 62)        # a program's size is no concern here


def which(name: str) -> str | None:
    """``shutil.which(name)``, passing over every match another user could change (``untrusted_program``):
    as root with another user's PATH (``sudo -E``, a shell that read their profile), a program planted
    in their directory would run as root."""
    for d in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        if not d:
            continue
        cand = os.path.join(os.path.abspath(d), name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK) and untrusted_program(cand) is None:
            return cand
    return None


def trusted_path() -> str:
    """$PATH without the directories another user could change (``untrusted_reason``): what programs
    gputop runs as root get, so that what they look up in turn (gcc's assembler and linker, a
    compiler PyTorch's Triton asks for) cannot be planted either."""
    dirs = [d for d in (os.environ.get("PATH") or os.defpath).split(os.pathsep)
            if d and os.path.isabs(d) and untrusted_reason(d) is None]
    return os.pathsep.join(dict.fromkeys(dirs))


def _file_problem(st: os.stat_result, shown: str, max_bytes: int) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return f"{shown} is not a regular file"
    if not _ours(st.st_uid):
        return f"{shown} is owned by uid {st.st_uid}"
    if st.st_mode & _GROUP_OTHER_WRITE:
        return f"{shown} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_size > max_bytes:
        return f"{shown} is larger than {max_bytes} bytes"
    return None


def _open_nofollow(name: str, flags: int, dir_fd: int, shown: str, mode: int = 0o600) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePathError(shown, f"{shown} is a symbolic link (not followed)") from None
        raise


def read_at(dir_fd: int, name: str, *, max_bytes: int, shown: str | None = None) -> bytes:
    """The bytes of the regular file ``name`` in ``dir_fd``: owned by root or this user, writable by
    no one else, at most ``max_bytes``; never through a link or from a FIFO or device."""
    shown = shown or name
    fd = _open_nofollow(name, os.O_RDONLY | os.O_NONBLOCK, dir_fd, shown)
    try:
        problem = _file_problem(os.fstat(fd), shown, max_bytes)
        if problem:
            raise UnsafePathError(shown, problem)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise UnsafePathError(shown, f"{shown} is larger than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file(path: str | os.PathLike[str], *, max_bytes: int, strict: bool = True) -> bytes:
    """``read_at`` of ``path`` in its directory, which must be trusted (``strict``)."""
    p = Path(path)
    d = open_dir(p.parent, strict=strict)
    try:
        return read_at(d, p.name, max_bytes=max_bytes, shown=str(p))
    finally:
        os.close(d)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def create_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """A new file ``name`` holding ``data`` (``O_EXCL``: FileExistsError when anything, a link
    included, has that name), written and fsync-ed."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)         # exactly ``mode``, whatever the umask
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    os.close(fd)


def write_atomic_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``name`` in ``dir_fd`` with a file holding ``data``: an ``O_EXCL`` temporary name,
    written, fsync-ed, renamed into place. A link at ``name`` is replaced, never written through."""
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    create_at(dir_fd, tmp, data, mode)
    try:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    with contextlib.suppress(OSError):      # the rename itself, durable (an O_PATH descriptor cannot)
        os.fsync(dir_fd)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600, strict: bool = True,
                 create_dirs: bool = False) -> None:
    """``write_atomic_at`` of ``path`` (its directory: see ``open_dir``)."""
    p = Path(path)
    d = open_dir(p.parent, strict=strict, create=create_dirs)
    try:
        write_atomic_at(d, p.name, data, mode)
    finally:
        os.close(d)


def open_append(path: str | os.PathLike[str], mode: int = 0o600, *, readable: bool = False) -> int:
    """A descriptor to append to ``path`` (``readable``: and to read it), created with ``mode`` when
    missing. Never through a link (the file's own name, or one on the way in a directory another
    user can change); as root, only a regular file of root's with one link (never another user's
    file, or a second name of one)."""
    p = Path(path)
    d = open_dir(p.parent, strict=False)
    access = os.O_RDWR if readable else os.O_WRONLY
    try:
        fd = _open_nofollow(p.name, access | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, d, str(p), mode)
    finally:
        os.close(d)
    try:
        problem = _output_problem(os.fstat(fd), str(p))
        if problem:
            raise UnsafePathError(p, problem)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _output_problem(st: os.stat_result, shown: str) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return f"{shown} is not a regular file"
    if os.geteuid() != 0:
        return None
    if st.st_uid != 0:
        return f"{shown} is owned by uid {st.st_uid}"
    if st.st_nlink > 1:
        return f"{shown} has {st.st_nlink} hard links"
    return None


def trusted_env_dir(var: str, fallback: Path) -> tuple[Path, str | None]:
    """The absolute directory in ``$var``, else ``fallback``. As root, a directory another user
    controls (see ``untrusted_reason``) is not used: ``fallback``, and why (one sentence)."""
    value = os.environ.get(var) or ""
    if not value or not os.path.isabs(value):
        return fallback, None
    if os.geteuid() == 0:
        reason = untrusted_reason(value, missing_ok=True)
        if reason:
            return fallback, f"{var}={value} is not used as root: {reason}"
    return Path(value), None


def cache_home() -> tuple[Path, str | None]:
    """``$XDG_CACHE_HOME`` (``~/.cache``; as root ``/var/cache``), and why an XDG_CACHE_HOME that
    another user controls was passed over (None when it was not)."""
    fallback = ROOT_CACHE if os.geteuid() == 0 else Path("~/.cache").expanduser()
    return trusted_env_dir("XDG_CACHE_HOME", fallback)
