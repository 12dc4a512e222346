"""Where a process's CPython keeps its threads and frames: the byte offsets the BPF side follows to walk
the launching thread's Python frames (x86-64, LP64, release builds with the GIL, CPython 3.9 to 3.14).

The interpreter is the mapped ELF object that defines ``_PyRuntime`` (Debian's ``/usr/bin/python3.X`` links
libpython in and exports it; conda and pyenv builds map ``libpython3.X.so``). From 3.13 on, ``_PyRuntime``
begins with ``_Py_DebugOffsets`` ("xdebugpy", PY_VERSION_HEX, then the offsets remote debuggers need): every
3.13+ offset is read from there, so a patch release that moves a field is still followed. Before 3.13 the
offsets come from one table (LAYOUTS), by the version the object's ``Py_Version`` (3.11+) or its file name
gives. A free-threaded or debug build, or a version outside 3.9 to 3.14, has no layout here: None.

The process is another user's and hostile: its object is opened as discovery opens any (by device and
inode, never through a path it controls), read with elfread's bounds, and its memory read in bounded
``pread``s of ``/proc/PID/mem``; nothing read is trusted further than a bounds check.
"""

from __future__ import annotations

import os
import platform
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.common import elfread

#: user-space addresses (x86-64: 47 bits; arm64: 48, or 52 with large virtual addresses, which Linux gives a
#: process only when it asks for them by a hint): a pointer read from the process outside this is garbage
ADDR_MAX = 1 << 48 if platform.machine() == "aarch64" else 1 << 47
#: bytes of _Py_DebugOffsets read (3.14's is 736 bytes)
DEBUG_OFFSETS_READ = 1024
#: objects of one process probed for _PyRuntime, and each one's time budget
MAX_CANDIDATES = 8
ELF_BUDGET_S = 2.0
#: frames walk() follows before it stops (the BPF side has a bound of its own)
MAX_FRAMES = 128

_STT_OBJECT = 1
_WANTED = ("_PyRuntime", "Py_Version")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class Layout:
    """Byte offsets the BPF side needs to find the launching thread's frames (all ints; -1 = not in this version)."""

    version: tuple[int, int]    # (3, 11)
    interp_head: int            # offset in _PyRuntime of interpreters.head (PyInterpreterState *)
    threads_head: int           # offset in PyInterpreterState of its first PyThreadState * (tstate_head / threads.head)
    ts_next: int                # PyThreadState.next
    ts_native_tid: int          # PyThreadState.native_thread_id (gettid()); -1 before 3.11: match on ts_thread_id
    ts_frame: int               # 3.9/3.10: PyThreadState.frame; 3.11/3.12: .cframe; 3.13+: .current_frame
    cframe_current: int         # 3.11/3.12: current_frame in _PyCFrame; -1 where ts_frame points at the frame
    fr_previous: int            # f_back (3.9/3.10 PyFrameObject) / previous (_PyInterpreterFrame)
    fr_code: int                # f_code / f_executable
    fr_instr: int               # 3.9/3.10: f_lasti (C int); 3.11/3.12: prev_instr; 3.13+: instr_ptr (pointers)
    instr_is_index: bool        # True where fr_instr is the int f_lasti
    fr_owner: int               # the frame's owner byte (3.11+; -1 before)
    owner_cstack: int           # frames whose owner is this or above are the eval loop's shims: skip (-1: none)
    code_tag_mask: int          # low bits to clear from the fr_code word (3.14's _PyStackRef tags), else 0
    frame_window: int           # bytes from a frame's start covering every fr_* field (a multiple of 8, <= 128)
    # code objects (read by user space only)
    co_filename: int
    co_name: int
    co_qualname: int            # -1 before 3.11
    co_firstlineno: int         # a C int
    co_linetable: int           # co_lnotab (3.9) / co_linetable (3.10+): a bytes object
    co_code: int                # 3.9/3.10: co_code (a bytes object); 3.11+: co_code_adaptive (inline code units)
    free_threaded: bool = False
    #: PyThreadState.thread_id: pthread_self() of the thread, on x86-64 glibc and musl its thread pointer
    #: (the task's fsbase): how 3.9/3.10, which keep no native id, tell their threads apart
    ts_thread_id: int = -1


def _window(*fields: tuple[int, int]) -> int:
    """The bytes from a frame's start that cover each (offset, size), rounded up to 8."""
    end = max(off + size for off, size in fields if off >= 0)
    return (end + 7) // 8 * 8


def _table(version: tuple[int, int], *, interp_head: int, threads_head: int, ts_native_tid: int, ts_thread_id: int,
           ts_frame: int, cframe_current: int, fr_previous: int, fr_code: int, fr_instr: int, fr_owner: int,
           owner_cstack: int, co_filename: int, co_name: int, co_qualname: int, co_firstlineno: int,
           co_linetable: int, co_code: int) -> Layout:
    index = version < (3, 11)
    window = _window((fr_previous, 8), (fr_code, 8), (fr_instr, 4 if index else 8), (fr_owner, 1))
    return Layout(version, interp_head, threads_head, 8, ts_native_tid, ts_frame, cframe_current, fr_previous, fr_code,
                  fr_instr, index, fr_owner, owner_cstack, 0, window, co_filename, co_name, co_qualname,
                  co_firstlineno, co_linetable, co_code, ts_thread_id=ts_thread_id)


#: 3.9 to 3.12: offsetof() compiled against each version's own headers (Py_BUILD_CORE, x86-64 Linux, release
#: build), then checked by walking a live interpreter of each: 3.9.2 (Debian 11) and 3.9.18, 3.10.13, 3.11.2
#: (Debian 12) and 3.11.7, 3.12.1 (pyenv builds). tests/unit/test_cpython.py walks each one found here.
LAYOUTS: dict[tuple[int, int], Layout] = {
    (3, 9): _table((3, 9), interp_head=32, threads_head=8, ts_native_tid=-1, ts_thread_id=176, ts_frame=24,
                   cframe_current=-1, fr_previous=24, fr_code=32, fr_instr=104, fr_owner=-1, owner_cstack=-1,
                   co_filename=104, co_name=112, co_qualname=-1, co_firstlineno=40, co_linetable=120, co_code=48),
    (3, 10): _table((3, 10), interp_head=32, threads_head=8, ts_native_tid=-1, ts_thread_id=176, ts_frame=24,
                    cframe_current=-1, fr_previous=24, fr_code=32, fr_instr=96, fr_owner=-1, owner_cstack=-1,
                    co_filename=104, co_name=112, co_qualname=-1, co_firstlineno=40, co_linetable=120, co_code=48),
    # 3.11 has entry frames (is_entry) but no shim frames: every frame on the chain is a Python one
    (3, 11): _table((3, 11), interp_head=40, threads_head=16, ts_native_tid=160, ts_thread_id=152, ts_frame=56,
                    cframe_current=8, fr_previous=48, fr_code=32, fr_instr=56, fr_owner=69, owner_cstack=-1,
                    co_filename=112, co_name=120, co_qualname=128, co_firstlineno=72, co_linetable=136, co_code=184),
    # 3.12 pushes a shim frame (owner FRAME_OWNED_BY_CSTACK, code: the interpreter's trampoline) where C enters
    # the eval loop
    (3, 12): _table((3, 12), interp_head=40, threads_head=72, ts_native_tid=144, ts_thread_id=136, ts_frame=56,
                    cframe_current=0, fr_previous=8, fr_code=0, fr_instr=56, fr_owner=70, owner_cstack=3,
                    co_filename=112, co_name=120, co_qualname=128, co_firstlineno=68, co_linetable=136, co_code=192),
}

# ----------------------------------------------------------------------------------- _Py_DebugOffsets
#
# The struct as each version's Include/internal/pycore_runtime.h (3.13) or pycore_debug_offsets.h (3.14)
# declares it: cookie[8], version, free_threaded, then sections of uint64_t offsets, each opening with its
# struct's size. Only the sections up to the code object's are read.

_SECTIONS_313: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("runtime_state", ("size", "finalizing", "interpreters_head")),
    ("interpreter_state", ("size", "id", "next", "threads_head", "gc", "imports_modules", "sysdict", "builtins",
                           "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled", "gil_runtime_state_locked",
                           "gil_runtime_state_holder")),
    ("thread_state", ("size", "prev", "next", "interp", "current_frame", "thread_id", "native_thread_id",
                      "datastack_chunk", "status")),
    ("interpreter_frame", ("size", "previous", "executable", "instr_ptr", "localsplus", "owner")),
    ("code_object", ("size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount",
                     "localsplusnames", "localspluskinds", "co_code_adaptive")),
)
_SECTIONS_314: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("runtime_state", ("size", "finalizing", "interpreters_head")),
    ("interpreter_state", ("size", "id", "next", "threads_head", "threads_main", "gc", "imports_modules", "sysdict",
                           "builtins", "ceval_gil", "gil_runtime_state", "gil_runtime_state_enabled",
                           "gil_runtime_state_locked", "gil_runtime_state_holder", "code_object_generation",
                           "tlbc_generation")),
    ("thread_state", ("size", "prev", "next", "interp", "current_frame", "thread_id", "native_thread_id",
                      "datastack_chunk", "status")),
    ("interpreter_frame", ("size", "previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer",
                           "tlbc_index")),
    ("code_object", ("size", "filename", "name", "qualname", "linetable", "firstlineno", "argcount",
                     "localsplusnames", "localspluskinds", "co_code_adaptive", "co_tlbc")),
)
#: per version: the sections, the owner of the frame the eval loop pushes where C calls into it (3.13:
#: FRAME_OWNED_BY_CSTACK, 3; 3.14 inserts FRAME_OWNED_BY_INTERPRETER at 3, CSTACK moving to 4, and its
#: entry frames are the INTERPRETER's: still 3, and 3 and above are no Python frames), and the tag bits of a
#: _PyStackRef with the GIL (3.14's pycore_stackref.h: Py_TAG_BITS)
_DEBUG_LAYOUTS = {(3, 13): (_SECTIONS_313, 3, 0), (3, 14): (_SECTIONS_314, 3, 3)}
COOKIE = b"xdebugpy"
#: a struct's size above this, in any section, is not a real interpreter's
_SECTION_SIZE_MAX = 1 << 20


def version_of_hex(hexversion: int) -> tuple[int, int]:
    """(major, minor) of a PY_VERSION_HEX."""
    return (hexversion >> 24) & 0xFF, (hexversion >> 16) & 0xFF


def parse_debug_offsets(raw: bytes) -> Layout | None:
    """The layout _Py_DebugOffsets (the first bytes of _PyRuntime) gives; None when it is not one, not of 3.13
    or 3.14, a free-threaded build's, or any offset lies outside its own struct."""
    if len(raw) < 24 or raw[:8] != COOKIE:
        return None
    hexversion, free_threaded = struct.unpack_from("<QQ", raw, 8)
    version = version_of_hex(hexversion)
    known = _DEBUG_LAYOUTS.get(version)
    if known is None or hexversion >> 32 or free_threaded:
        return None
    sections, owner_cstack, tag_mask = known
    values: dict[str, int] = {}
    pos = 24
    for section, names in sections:
        if pos + 8 * len(names) > len(raw):
            return None
        fields = struct.unpack_from(f"<{len(names)}Q", raw, pos)
        pos += 8 * len(names)
        size = fields[0]
        if not 0 < size <= _SECTION_SIZE_MAX:
            return None
        for name, value in zip(names[1:], fields[1:]):
            values[f"{section}.{name}"] = value
        if any(v >= size for n, v in zip(names[1:], fields[1:]) if n in _CHECKED):
            return None
    frame = [values[f"interpreter_frame.{n}"] for n in ("previous", "executable", "instr_ptr", "owner")]
    window = _window((frame[0], 8), (frame[1], 8), (frame[2], 8), (frame[3], 1))
    if window > 128:
        return None
    return Layout(
        version=version,
        interp_head=values["runtime_state.interpreters_head"],
        threads_head=values["interpreter_state.threads_head"],
        ts_next=values["thread_state.next"],
        ts_native_tid=values["thread_state.native_thread_id"],
        ts_frame=values["thread_state.current_frame"],
        cframe_current=-1,
        fr_previous=frame[0], fr_code=frame[1], fr_instr=frame[2], instr_is_index=False, fr_owner=frame[3],
        owner_cstack=owner_cstack, code_tag_mask=tag_mask, frame_window=window,
        co_filename=values["code_object.filename"],
        co_name=values["code_object.name"],
        co_qualname=values["code_object.qualname"],
        co_firstlineno=values["code_object.firstlineno"],
        co_linetable=values["code_object.linetable"],
        co_code=values["code_object.co_code_adaptive"],
        ts_thread_id=values["thread_state.thread_id"],
    )


#: the fields Layout takes: each must lie inside its struct
_CHECKED = frozenset({"interpreters_head", "threads_head", "next", "current_frame", "thread_id", "native_thread_id",
                      "previous", "executable", "instr_ptr", "owner", "filename", "name", "qualname", "linetable",
                      "firstlineno", "co_code_adaptive"})

# ----------------------------------------------------------------------------------- the process


@dataclass(frozen=True)
class Interpreter:
    runtime: int          # address of _PyRuntime in the process
    layout: Layout
    path: str             # the object that holds it, as the process sees it (python3.X or libpython3.X.so)


def read_mem(mem_fd: int, addr: int, size: int) -> bytes | None:
    """``size`` bytes at ``addr`` of a process's memory (an open /proc/PID/mem); None where any of it is not
    mapped, the address is not a user-space one, or the process is gone."""
    if not 0 < addr < ADDR_MAX or not 0 < size <= ADDR_MAX - addr:
        return None
    try:
        data = os.pread(mem_fd, size, addr)
    except (OSError, OverflowError, ValueError):
        return None
    return data if len(data) == size else None


def read_ptr(mem_fd: int, addr: int) -> int | None:
    data = read_mem(mem_fd, addr, 8)
    return None if data is None else int(_U64.unpack(data)[0])


#: python3.X / libpython3.X.so.1.0 / libpython3.Xd.so (ABI flags: d = debug, t = free-threaded)
_NAME = re.compile(r"^(?:lib)?python(\d+)\.(\d+)([a-z]*)(?:\.so(?:\.[\d.]+)?)?$")


def version_of_name(path: str) -> tuple[int, int] | None:
    """The version a python3.X or libpython3.X.so file name gives; None for other names, debug and
    free-threaded builds (whose layouts differ)."""
    m = _NAME.match(os.path.basename(path))
    if m is None or set(m.group(3)) & {"d", "t"}:
        return None
    return int(m.group(1)), int(m.group(2))


_PYTHON_FILE = re.compile(r"^(?:lib)?python\d")


@dataclass(frozen=True)
class _Symbols:
    path: str
    runtime: int                 # address in the process
    runtime_size: int
    py_version: int | None       # address of Py_Version in the process


def find_interpreter(pid: int, maps: list[discovery.Mapping], mem_fd: int) -> Interpreter | None:
    """The CPython interpreter of process ``pid`` (its executable mappings ``maps``, its memory ``mem_fd``) and
    its layout; None where it has none, or none this module knows."""
    for found in _candidates(pid, maps):
        interp = _identify(found, mem_fd)
        if interp is not None:
            return interp
    return None


def _candidates(pid: int, maps: list[discovery.Mapping]) -> Iterable[_Symbols]:
    """Objects of ``maps`` that define _PyRuntime: those named python* or libpython* first (extension modules,
    ``*.cpython-311-x86_64-linux-gnu.so``, are not), then the program itself."""
    first: dict[tuple[int, int], discovery.Mapping] = {}
    for m in maps:
        first.setdefault((m.dev, m.inode), m)
    try:
        st = os.stat(f"/proc/{pid}/exe")
        exe: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        exe = None
    named = [m for m in first.values() if _PYTHON_FILE.match(os.path.basename(m.path))]
    order = named + [m for k, m in first.items() if k == exe and m not in named]
    for m in order[:MAX_CANDIDATES]:
        found = _symbols(pid, m)
        if found is not None:
            yield found


def _symbols(pid: int, m: discovery.Mapping) -> _Symbols | None:
    path = discovery.open_path(pid, m)
    fd = discovery.open_object(path, m.dev, m.inode) if path else None
    if fd is None:
        return None
    try:
        elf = elfread.ElfReader(fd, ELF_BUDGET_S)
        if elf.machine != elfread.HOST_MACHINE:
            return None
        bias = _load_bias(elf, m)
        syms = _object_symbols(elf) if bias is not None else {}
    except (OSError, elfread.ElfError):
        return None
    finally:
        os.close(fd)
    runtime = syms.get("_PyRuntime")
    if bias is None or runtime is None:
        return None
    version = syms.get("Py_Version")
    return _Symbols(m.path, runtime[0] + bias, runtime[1], None if version is None else version[0] + bias)


def _load_bias(elf: elfread.ElfReader, m: discovery.Mapping) -> int | None:
    """What the process added to the object's virtual addresses, from the executable segment ``m`` maps."""
    for vaddr, off, size in elf.segments():
        if off <= m.offset < off + max(size, 1):
            return m.start - m.offset - vaddr + off
    return None


def _object_symbols(elf: elfread.ElfReader) -> dict[str, tuple[int, int]]:
    """(value, size) of the data symbols _WANTED: from .dynsym, else .symtab."""
    out: dict[str, tuple[int, int]] = {}
    for table in elf.symbol_tables():
        objects = [(name, value, size) for name, info, shndx, value, size in elf.symbols(table)
                   if info & 0xF == _STT_OBJECT and shndx != 0 and value]
        names = elf.names(table, [o[0] for o in objects])
        for st_name, value, size in objects:
            name = names.get(st_name, "").split("@", 1)[0]
            if name in _WANTED:
                out.setdefault(name, (value, size))
        if "_PyRuntime" in out:
            break
    return out


def _identify(found: _Symbols, mem_fd: int) -> Interpreter | None:
    head = read_mem(mem_fd, found.runtime, DEBUG_OFFSETS_READ)
    if head is None:
        head = read_mem(mem_fd, found.runtime, 24)         # at the end of its mapping
    if head is None:
        return None
    declared = None
    if found.py_version is not None:
        word = read_ptr(mem_fd, found.py_version)
        declared = None if word is None else version_of_hex(word)
    if head[:8] == COOKIE:
        layout = parse_debug_offsets(head)
        if layout is None or (declared is not None and declared != layout.version):
            return None
    else:
        version = declared or version_of_name(found.path)
        layout = LAYOUTS.get(version) if version is not None else None
        if layout is None:
            return None
    if found.runtime_size and layout.interp_head + 8 > found.runtime_size:
        return None
    return Interpreter(found.runtime, layout, found.path)


# ----------------------------------------------------------------------------------- the walk, in user space


@dataclass(frozen=True)
class Frame:
    """One Python frame as the BPF side records it: its code object's address and ``instr`` (lines.CodeInfo.line_of)."""

    code: int
    instr: int


def thread_state(mem_fd: int, interp: Interpreter, *, native_tid: int | None = None,
                 pthread_id: int | None = None, max_threads: int = 4096) -> int | None:
    """The PyThreadState of the main interpreter's thread ``native_tid`` (3.11+) or ``pthread_id`` (any
    version: pthread_self(), the thread's fsbase on x86-64); None where it has none."""
    lay = interp.layout
    head = read_ptr(mem_fd, interp.runtime + lay.interp_head)
    ts = read_ptr(mem_fd, head + lay.threads_head) if head else None
    for _ in range(max_threads):
        if not ts:
            return None
        if native_tid is not None and lay.ts_native_tid >= 0:
            data = read_mem(mem_fd, ts + lay.ts_native_tid, 8)
            if data is not None and _U64.unpack(data)[0] == native_tid:
                return ts
        elif pthread_id is not None and read_ptr(mem_fd, ts + lay.ts_thread_id) == pthread_id:
            return ts
        ts = read_ptr(mem_fd, ts + lay.ts_next)
    return None


def walk(mem_fd: int, interp: Interpreter, tstate: int, max_frames: int = MAX_FRAMES) -> list[Frame]:
    """The frames of thread state ``tstate``, innermost first, followed as the BPF side follows them: the
    user-space twin its tests compare against (shim frames skipped, tags cleared, at most ``max_frames``)."""
    lay = interp.layout
    frame = read_ptr(mem_fd, tstate + lay.ts_frame)
    if frame and lay.cframe_current >= 0:
        frame = read_ptr(mem_fd, frame + lay.cframe_current)
    out: list[Frame] = []
    for _ in range(max_frames):
        if not frame:
            break
        raw = read_mem(mem_fd, frame, lay.frame_window)
        if raw is None:
            break
        code = _U64.unpack_from(raw, lay.fr_code)[0] & ~lay.code_tag_mask
        if lay.instr_is_index:
            instr = struct.unpack_from("<i", raw, lay.fr_instr)[0]
        else:
            instr = _U64.unpack_from(raw, lay.fr_instr)[0] - code
        if lay.owner_cstack < 0 or raw[lay.fr_owner] < lay.owner_cstack:
            out.append(Frame(code, instr))
        frame = _U64.unpack_from(raw, lay.fr_previous)[0]
    return out

