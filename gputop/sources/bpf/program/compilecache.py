"""Reusing the compiled BPF program across runs: start-up without the full compile.

bcc compiles ``bpf/gputop.bpf.c`` with clang and LLVM at every start (2-3 s on 2 cores, most of
gputop's start-up). The bytecode of each function depends only on what went into that compile:
the program text (with every header of bpf/ written in: ``ctext.py``, so a header's change is a
change of text), the compiler flags (limits, BTF offsets), bcc and its libbcc, the kernel headers
and the formats of the tracepoints the program reads. So after a full compile gputop stores each
function's instructions, with the maps each instruction refers to, under a key made of all of
those; the next start with the same key compiles only the program's *declarations* (its types and
maps: bcc creates the maps and serves them to Python as before) and loads the stored instructions
into the kernel, whose verifier checks them as it checks a fresh compile's. Anything that does
not match (another key, a damaged or foreign file, an instruction bcc's loader would not relocate)
means the full compile, as before.

The cache is a directory only root (the effective user) can write: what it holds is loaded into
the kernel. A file is read only when it is a regular file of root's (or this user's) that no one
else can write, in a directory whose every component is root's (or this user's) and writable by no
one else (``gputop.safefiles``, on descriptors); as root, an XDG_CACHE_HOME that another user
controls is passed over. Files are written through an ``O_EXCL`` temporary name renamed into place.
``GPUTOP_BPF_CACHE=off`` turns it off.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import hashlib
import inspect
import json
import os
import platform
import re
import struct
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from gputop import safefiles

FORMAT = 1                   # of the cache file (part of the key)
KEEP = 16                    # cache files kept of each kind (other limits, kernels, headers, gputop versions)
MAX_BYTES = 64 << 20         # a cache file larger than this is not read (the program's is about 250 KB)
_LD_IMM64 = 0x18             # BPF_LD | BPF_DW | BPF_IMM
_PSEUDO_MAP_FD = 1
_TP = re.compile(rb"^TRACEPOINT_PROBE\((\w+),\s*(\w+)\)", re.M)
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def cache_dir() -> Path:
    return safefiles.cache_home()[0] / "gputop" / "bpf"


def enabled() -> bool:
    return os.environ.get("GPUTOP_BPF_CACHE", "").lower() not in ("0", "off", "no", "false")


# ------------------------------------------------------------------ the declarations


def _skip(text: str, i: int) -> int:
    """The index after a comment or literal starting at ``i`` (``i`` itself if none starts there)."""
    if text.startswith("//", i):
        e = text.find("\n", i)
        return len(text) if e < 0 else e + 1
    if text.startswith("/*", i):
        e = text.find("*/", i + 2)
        return len(text) if e < 0 else e + 2
    if text[i] in "\"'":
        j = i + 1
        while j < len(text) and text[j] != text[i]:
            j += 2 if text[j] == "\\" else 1
        return j + 1
    return i


def _closing(text: str, i: int) -> int:
    """The index of the brace that closes the one at ``i``."""
    depth = 0
    while i < len(text):
        j = _skip(text, i)
        if j != i:
            i = j
            continue
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced braces in the BPF program")


def declarations_only(text: str) -> str:
    """``text`` without its function definitions: preprocessor lines, types, map declarations.

    Compiling this creates the same maps with the same key and value types as the whole program
    (bcc keeps them in declaration order) in a fraction of the time."""
    out: list[str] = []
    chunk = i = 0           # start of the current top-level declaration, and the scan position
    while i < len(text):
        j = _skip(text, i)
        if j != i:
            i = j
            continue
        c = text[i]
        if c == "#" and not _COMMENTS.sub("", text[chunk:i]).strip():   # a preprocessor line (and continuations)
            e = i
            while True:
                e = text.find("\n", e)
                if e < 0 or text[e - 1] != "\\":
                    break
                e += 1
            e = len(text) if e < 0 else e + 1
            out.append(text[chunk:e])
            i = chunk = e
        elif c == ";":
            out.append(text[chunk:i + 1])
            i = chunk = i + 1
        elif c == "{":
            end = _closing(text, i)
            head = _COMMENTS.sub("", text[chunk:i]).rstrip()
            if head.endswith(")"):                            # a function's body: dropped with it
                out.append("\n" * text.count("\n", chunk, end + 1))
                chunk = end + 1
            i = end + 1
        else:
            i += 1
    out.append(text[chunk:])
    return "".join(out)


# ------------------------------------------------------------------ the key


def _stat(path: str | Path) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:missing"
    return f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _libbcc_path() -> str:
    """The libbcc.so this process loaded (bcc's Python module is loaded before the key is made)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libbcc.so" in line:
                    return line.split(None, 5)[5].strip()
    except OSError:
        pass
    return "libbcc:unknown"


def key(bcc: ModuleType, text: bytes, cflags: Iterable[str], headers: Path | None, tracefs: str | Path) -> str:
    """Everything the compiled bytecode depends on, hashed."""
    h = hashlib.sha256()
    parts = [f"format {FORMAT}", f"bcc {getattr(bcc, '__version__', '?')}", _stat(_libbcc_path()),
             f"kernel {platform.release()} {platform.version()} {platform.machine()}",
             f"headers {headers}", *(_stat(Path(headers) / p) for p in ("Makefile", "include/generated/autoconf.h",
                                                                        "include/generated/uapi/linux/version.h")
                                     if headers is not None),
             f"cflags {' '.join(cflags)}",
             f"env {os.environ.get('BCC_KERNEL_SOURCE', '')} {os.environ.get('ARCH', '')}"]
    for part in parts:
        h.update(part.encode() + b"\0")
    h.update(hashlib.sha256(text).digest())
    for cat, ev in sorted(set(_TP.findall(text))):        # bcc lays the tracepoints' args out from these
        fmt = Path(tracefs) / "events" / cat.decode() / ev.decode() / "format"
        try:
            h.update(fmt.read_bytes())
        except OSError:
            h.update(b"missing " + bytes(fmt))
    return "bpf-" + h.hexdigest()


# ------------------------------------------------------------------ storing and reading


def _lib(bcc: ModuleType) -> Any:
    lib = bcc.lib
    lib.bpf_num_tables.restype = ctypes.c_size_t
    lib.bpf_num_tables.argtypes = [ctypes.c_void_p]
    lib.bpf_table_name.restype = ctypes.c_char_p
    lib.bpf_table_name.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.bpf_table_fd_id.restype = ctypes.c_int
    lib.bpf_table_fd_id.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return lib


def func_load_takes_attach_type(lib: Any) -> bool:
    """Whether libbcc's ``bcc_func_load`` takes the attach type last (bcc 0.21+): bcc's own binding
    (``bcc.libbcc``) declares 11 arguments before it, 12 from it."""
    argtypes = getattr(lib.bcc_func_load, "argtypes", None)
    return argtypes is None or len(argtypes) >= 12


def extract(bcc: ModuleType, bpf: Any) -> dict[str, Any] | None:
    """Every function of a compiled ``bcc.BPF`` with its map references by name; None when one
    refers to something other than a map this module owns (then nothing is stored)."""
    lib = _lib(bcc)
    module = bpf.module
    fds = {lib.bpf_table_fd_id(module, i): lib.bpf_table_name(module, i).decode()
           for i in range(lib.bpf_num_tables(module))}
    funcs: dict[str, Any] = {}
    for i in range(lib.bpf_num_functions(module)):
        name = lib.bpf_function_name(module, i)
        code = ctypes.string_at(lib.bpf_function_start(module, name), lib.bpf_function_size(module, name))
        if len(code) % 8:
            return None
        relocs = []
        raw = bytearray(code)
        at = 0
        while at < len(raw):
            if raw[at] == _LD_IMM64:
                src = raw[at + 1] >> 4
                if src == _PSEUDO_MAP_FD:
                    fd = struct.unpack_from("<i", raw, at + 4)[0]
                    if fd not in fds:
                        return None
                    relocs.append([at // 8, fds[fd]])
                    struct.pack_into("<i", raw, at + 4, 0)
                elif src != 0:
                    return None                 # map values, BTF ids...: not relocated here
                at += 16
            else:
                at += 8
        funcs[name.decode()] = {"code": base64.b64encode(bytes(raw)).decode(), "maps": relocs}
    return {"license": lib.bpf_module_license(module).decode(), "funcs": funcs}


def file_offsets(compute: Callable[[], dict[str, int] | None], vmlinux: Path,
             directory: Path | None = None, names: Collection[str] = ()) -> dict[str, int] | None:
    """``compute()`` (btf.file_offsets: parsing the kernel's BTF takes 0.2 s), kept in the cache
    per kernel build and BTF blob; a stored answer without each of ``names`` (a gputop that read
    fewer members) is computed again."""
    if not enabled():
        return compute()
    h = hashlib.sha256(f"btf {FORMAT} {platform.release()} {platform.version()} {_stat(vmlinux)}".encode())
    k = "btf-" + h.hexdigest()
    data = read(k, directory)
    if data is not None and isinstance(data.get("funcs"), dict):
        offsets = data["funcs"].get("offsets")
        if offsets is None or (isinstance(offsets, dict) and all(isinstance(v, int) for v in offsets.values())
                               and set(names) <= set(offsets)):
            return offsets
    offsets = compute()
    write(k, {"funcs": {"offsets": offsets}}, directory)
    return offsets


def read(k: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The entry stored under ``k``; None when missing, damaged, or not trusted (see the module's
    docstring)."""
    path = (directory or cache_dir()) / f"{k}.json"
    try:
        data = json.loads(safefiles.read_file(path, max_bytes=MAX_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != k or not isinstance(data.get("funcs"), dict):
        return None
    return data


def write(k: str, data: dict[str, Any], directory: Path | None = None) -> None:
    """Store ``data`` under ``k`` (atomically), keeping the newest KEEP files. Failing is harmless."""
    try:
        d = safefiles.open_dir(directory or cache_dir(), create=True, mode=0o700)
    except OSError:
        return
    try:
        safefiles.write_atomic_at(d, f"{k}.json", json.dumps({**data, "key": k}).encode())
        _prune(d, "btf-" if k.startswith("btf-") else "bpf-")
    except (OSError, ValueError):
        pass
    finally:
        os.close(d)


def _prune(dir_fd: int, kind: str) -> None:
    """Keep the newest KEEP files of ``kind`` in the cache directory."""
    names = [n for n in os.listdir(dir_fd) if n.startswith(kind) and n.endswith(".json")]
    mtimes = {n: os.stat(n, dir_fd=dir_fd, follow_symlinks=False).st_mtime for n in names}
    for name in sorted(names, key=mtimes.__getitem__, reverse=True)[KEEP:]:
        os.unlink(name, dir_fd=dir_fd)


# ------------------------------------------------------------------ loading


def cached_bpf(bcc: ModuleType, text: bytes, cflags: list[str], data: dict[str, Any],
               on_refused: Callable[[], None] = lambda: None) -> Any:
    """A ``bcc.BPF`` of the program's declarations whose functions load the stored bytecode.

    Raises what ``bcc.BPF`` raises; KeyError when a stored function names a map the
    declarations did not create. ``on_refused`` runs when the kernel refuses a stored function
    (the next start then compiles in full: a fresh compile's load also carries BTF)."""
    lib = _lib(bcc)
    base = bcc.BPF
    funcs: dict[bytes, Any] = {n.encode(): v for n, v in data["funcs"].items()}

    class CachedBPF(base):  # type: ignore[misc,valid-type]
        """bcc's BPF object; functions come from the cache instead of the module."""

        def _trace_autoload(self) -> None:      # the declarations have no functions: see below
            pass

        def load_func(self, func_name: Any, prog_type: int, device: Any = None, attach_type: int = -1) -> Any:
            func_name = func_name if isinstance(func_name, bytes) else func_name.encode()
            # a bcc before 0.21 has no attach type (this method shows bcc's own signature: below)
            extra = () if attach_type == -1 else (attach_type,)
            if func_name in self.funcs or func_name not in funcs:
                return super().load_func(func_name, prog_type, device, *extra)
            if func_load_takes_attach_type(lib):
                extra = (attach_type,)
            elif extra:
                raise TypeError("this bcc loads no program for an attach type (bcc_func_load has no attach_type)")
            entry = funcs[func_name]
            code = bytearray(base64.b64decode(entry["code"]))
            for index, table in entry["maps"]:
                fd = lib.bpf_table_fd(self.module, table.encode())
                if fd < 0:
                    raise KeyError(table)
                struct.pack_into("<i", code, index * 8 + 4, fd)
            buf = (ctypes.c_ubyte * len(code)).from_buffer(code)
            fd = lib.bcc_func_load(self.module, prog_type, func_name, buf, len(code),
                                   data["license"].encode(), lib.bpf_module_kern_version(self.module),
                                   0, None, 0, device, *extra)
            if fd < 0:
                on_refused()
                raise Exception(f"Failed to load BPF program {func_name.decode()}: "
                                f"{os.strerror(ctypes.get_errno())}")
            fn = self.Function(self, func_name, fd)
            self.funcs[func_name] = fn
            return fn

    # what uprobes.UprobeAttacher asks (links need an attach type): this bcc's answer, not the override's
    CachedBPF.load_func.__signature__ = inspect.signature(base.load_func)  # type: ignore[attr-defined]
    decls = data.get("decls")
    bpf = CachedBPF(text=(decls if isinstance(decls, str) else declarations_only(text.decode())).encode(),
                    cflags=cflags)
    try:
        for name in funcs:                      # what bcc's _trace_autoload does for a full compile
            if name.startswith(b"tracepoint__"):
                fn = bpf.load_func(name, base.TRACEPOINT)
                bpf.attach_tracepoint(tp=name[len(b"tracepoint__"):].replace(b"__", b":"), fn_name=fn.name)
    except BaseException:
        bpf.cleanup()
        raise
    return bpf


_AUTOLOADED = ("kprobe__", "kretprobe__", "raw_tracepoint__", "kfunc__", "kretfunc__", "lsm__")


def compile_program(bcc: ModuleType, text: bytes, cflags: list[str], headers: Path | None, tracefs: str | Path,
                    directory: Path | None = None,
                    before_full: Callable[[list[str]], list[str]] | None = None) -> tuple[Any, str]:
    """The program as a ``bcc.BPF`` object, and how it was made: "cached" (declarations compiled,
    functions from the cache), "compiled" (a full compile, now stored) or "uncached" (a full
    compile; the cache is off or the program cannot be stored). ``before_full(flags)``: the flags
    a full compile takes instead (without what this compiler cannot do), asked only when no cached
    program was compiled with ``cflags``; a program cached with those is used as well."""
    if not enabled():
        return bcc.BPF(text=text, cflags=before_full(cflags) if before_full else cflags), "uncached"
    tries = [cflags]
    flags = cflags
    while tries:
        flags = tries.pop()
        k = key(bcc, text, flags, headers, tracefs)
        data = read(k, directory)
        if data is not None:
            entry = (directory or cache_dir()) / f"{k}.json"
            try:
                return cached_bpf(bcc, text, flags, data, functools.partial(entry.unlink, missing_ok=True)), "cached"
            except Exception:       # damaged or stale in a way the key missed: compile for real
                pass
        if before_full is not None and flags is cflags and (other := before_full(cflags)) != cflags:
            tries.append(other)
    bpf = bcc.BPF(text=text, cflags=flags)
    data = extract(bcc, bpf)
    if data is None or any(n.startswith(_AUTOLOADED) for n in data["funcs"]):
        return bpf, "uncached"
    write(k, {**data, "decls": declarations_only(text.decode())}, directory)
    return bpf, "compiled"
