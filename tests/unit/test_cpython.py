"""Where CPython keeps its threads and frames (pystacks/cpython.py) and code objects as file:line
(pystacks/lines.py), against real interpreters: the offsets against what each version's headers compile to
(tests/data/cpython/offsets.c -> offsetof.json), _Py_DebugOffsets against the bytes of real 3.13 and 3.14
interpreters, the line tables against this Python's own answers and against what 3.9 to 3.14 recorded
(tests/data/cpython/record.py), and live interpreters walked from outside as the BPF side walks them: this
Python, the venv's, and every other CPython found here (Debian's /usr/bin/python3.X, pyenv's; more through
GPUTOP_TEST_PYTHONS, commands separated by ';', e.g. 'chroot /srv/sid python3.14'). Then hostile memory."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import mmap
import os
import random
import re
import select
import shlex
import shutil
import struct
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputop.sources.bpf.attach import discovery
from gputop.sources.bpf.pystacks import cpython, lines

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "cpython"
OFFSETOF: dict[str, dict[str, int]] = json.loads((DATA / "offsetof.json").read_text())
RECORDED = sorted(DATA.glob("py3.*.json"), key=lambda p: [int(x) for x in p.stem[2:].split(".")])
CHILD = (DATA / "child.py").read_text(encoding="utf-8")
THIS = sys.version_info[:2]


def _version(key: str) -> tuple[int, int]:
    major, minor = key.split(".")
    return int(major), int(minor)


def _recorded(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# ----------------------------------------------------------------------------------- offsets


def _expected(key: str) -> cpython.Layout:
    """The Layout offsetof.json (each version's headers, compiled) gives."""
    o = OFFSETOF[key]
    index = o["fr_instr_size"] == 4
    ends = [o["fr_previous"] + 8, o["fr_code"] + 8, o["fr_instr"] + o["fr_instr_size"], o["fr_owner"] + 1]
    return cpython.Layout(
        version=_version(key), interp_head=o["interp_head"], threads_head=o["threads_head"], ts_next=o["ts_next"],
        ts_native_tid=o["ts_native_tid"], ts_frame=o["ts_frame"], cframe_current=o["cframe_current"],
        fr_previous=o["fr_previous"], fr_code=o["fr_code"], fr_instr=o["fr_instr"], instr_is_index=index,
        fr_owner=o["fr_owner"], owner_cstack=o["owner_shim"], code_tag_mask=o["code_tag_mask"],
        frame_window=(max(ends) + 7) // 8 * 8, co_filename=o["co_filename"], co_name=o["co_name"],
        co_qualname=o["co_qualname"], co_firstlineno=o["co_firstlineno"], co_linetable=o["co_linetable"],
        co_code=o["co_code"], ts_thread_id=o["ts_thread_id"])


@pytest.mark.parametrize("key", ["3.9", "3.10", "3.11", "3.12"])
def test_the_table_is_what_each_version_headers_compile_to(key: str) -> None:
    assert cpython.LAYOUTS[_version(key)] == _expected(key)


def test_every_version_is_covered_and_each_frame_window_fits() -> None:
    assert set(OFFSETOF) == {"3.9", "3.10", "3.11", "3.12", "3.13", "3.14"}
    for key in OFFSETOF:
        lay = _expected(key)
        assert lay.frame_window % 8 == 0 and lay.frame_window <= 128
        assert OFFSETOF[key]["hexversion"] >> 16 == 0x300 | int(key.split(".")[1])


def test_strings_and_bytes_lie_where_lines_reads_them() -> None:
    for key, o in OFFSETOF.items():
        assert lines._unicode_sizes(_version(key)) == (o["ascii_size"], o["compact_size"]), key
        assert (o["str_length"], o["str_state"], o["bytes_size"], o["bytes_sval"], o["ob_type"], o["tp_name"]) == (
            lines._STR_LENGTH, lines._STR_STATE, lines._OB_SIZE, lines._BYTES_SVAL, lines._OB_TYPE, lines._TP_NAME)
        assert (o["state_kind"], o["state_compact"], o["state_ascii"]) == (7 << 2, 1 << 5, 1 << 6), key


DEBUG = [p for p in RECORDED if "debug_offsets" in _recorded(p)]


def test_3_13_and_3_14_were_recorded() -> None:
    assert {tuple(_recorded(p)["version"][:2]) for p in DEBUG} >= {(3, 13), (3, 14)}


@pytest.mark.parametrize("path", DEBUG, ids=lambda p: p.stem)
def test_debug_offsets_of_real_interpreters(path: Path) -> None:
    rec = _recorded(path)
    raw = bytes.fromhex(rec["debug_offsets"])
    key = "{}.{}".format(*rec["version"][:2])
    assert cpython.parse_debug_offsets(raw) == _expected(key)


def _patched(raw: bytes, at: int, value: int) -> bytes:
    return raw[:at] + struct.pack("<Q", value) + raw[at + 8:]


def test_debug_offsets_that_are_not_a_known_interpreter_s() -> None:
    raw = bytes.fromhex(_recorded(DEBUG[-1])["debug_offsets"])
    assert cpython.parse_debug_offsets(raw) is not None
    assert cpython.parse_debug_offsets(b"ydebugpy" + raw[8:]) is None
    assert cpython.parse_debug_offsets(_patched(raw, 16, 1)) is None                # free-threaded
    assert cpython.parse_debug_offsets(_patched(raw, 8, 0x030F00A0)) is None        # 3.15: unknown
    assert cpython.parse_debug_offsets(_patched(raw, 8, 0x030C01F0)) is None        # 3.12 has none
    assert cpython.parse_debug_offsets(_patched(raw, 8, 1 << 40 | 0x030E00F0)) is None
    assert cpython.parse_debug_offsets(raw[:100]) is None
    assert cpython.parse_debug_offsets(_patched(raw, 24, 0)) is None                # a section of size 0
    assert cpython.parse_debug_offsets(_patched(raw, 24, 1 << 40)) is None
    assert cpython.parse_debug_offsets(_patched(raw, 40, 1 << 30)) is None          # interpreters_head outside
    for _ in range(200):
        at = random.randrange(0, 512, 8)
        out = cpython.parse_debug_offsets(_patched(raw, at, random.getrandbits(64)))
        assert out is None or isinstance(out, cpython.Layout)


@pytest.mark.parametrize(("name", "version"), [
    ("/usr/bin/python3.9", (3, 9)), ("/opt/conda/lib/libpython3.10.so.1.0", (3, 10)), ("libpython3.12.so", (3, 12)),
    ("/x/python3.11", (3, 11)), ("/usr/bin/python3.13d", None), ("/usr/lib/libpython3.13t.so.1.0", None),
    ("/usr/bin/python3", None), ("/usr/bin/python", None), ("/x/notpython3.11", None), ("/x/python3.11-config", None),
])
def test_version_of_name(name: str, version: tuple[int, int] | None) -> None:
    assert cpython.version_of_name(name) == version


# ----------------------------------------------------------------------------------- line tables


def _units_by_table(ranges: list[lines.Range], size: int) -> list[int | None]:
    """The line of each 2-byte code unit of ``size`` bytes of code, from decoded ranges."""
    out: list[int | None] = [None] * (size // 2)
    for start, end, line in ranges:
        for off in range(start, min(end, size), 2):
            out[off // 2] = line
    return out


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _table(code: types.CodeType) -> bytes:
    return code.co_lnotab if THIS < (3, 10) else code.co_linetable


_ADDR2LINE = ctypes.pythonapi.PyCode_Addr2Line
_ADDR2LINE.argtypes = [ctypes.py_object, ctypes.c_int]
_ADDR2LINE.restype = ctypes.c_int

STDLIB = ("argparse", "typing", "email/_header_value_parser", "asyncio/base_events", "difflib", "tarfile")


def test_line_tables_as_this_python_reads_them() -> None:
    """Every code unit of thousands of functions of the standard library, compiled here: the line decoded
    is the line this interpreter's own PyCode_Addr2Line gives (what f_lineno is), and co_lines()'s."""
    src = Path(os.__file__).parent
    units = 0
    for mod in STDLIB:
        path = src / f"{mod}.py"
        for code in _code_objects(compile(path.read_text(encoding="utf-8"), str(path), "exec")):
            size = len(code.co_code)
            got = _units_by_table(lines.ranges_for(THIS, _table(code), code.co_firstlineno, size), size)
            want = [_ADDR2LINE(code, off) for off in range(0, size, 2)]
            assert got == [None if w == -1 else w for w in want], code.co_name
            if hasattr(code, "co_lines"):
                by_lines: list[int | None] = [None] * (size // 2)
                for start, end, line in code.co_lines():
                    for off in range(start, end, 2):
                        by_lines[off // 2] = line
                assert got == by_lines, code.co_name
            units += size // 2
    assert units > 30000


@pytest.mark.skipif(THIS < (3, 11), reason="co_positions(): 3.11+")
def test_location_table_as_co_positions_reads_it() -> None:
    src = Path(os.__file__).parent / "dataclasses.py"
    for code in _code_objects(compile(src.read_text(encoding="utf-8"), str(src), "exec")):
        got = _units_by_table(lines.ranges_for(THIS, code.co_linetable, code.co_firstlineno, len(code.co_code)),
                              len(code.co_code))
        assert got == [p[0] for p in code.co_positions()], code.co_name


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_line_tables_as_other_interpreters_read_them(path: Path) -> None:
    rec = _recorded(path)
    version = (rec["version"][0], rec["version"][1])
    units = 0
    for c in rec["codes"]:
        size = c["code_size"]
        ranges = lines.ranges_for(version, bytes.fromhex(c["table"]), c["firstlineno"], size)
        want: list[int | None] = [None] * (size // 2)
        for start, end, line in c["lines"]:
            for off in range(start, end, 2):
                want[off // 2] = None if line == -1 else line
        assert _units_by_table(ranges, size) == want, (c["file"], c["name"])
        info = lines.CodeInfo("f", c["name"], c["firstlineno"], tuple(ranges), tuple(r[0] for r in ranges), size,
                              instr_base=208 if version >= (3, 11) else 0,
                              index_unit=0 if version >= (3, 11) else 1 if version < (3, 10) else 2)
        for off in range(0, size, 2):
            instr = off + 208 if version >= (3, 11) else off // (2 if version == (3, 10) else 1)
            assert info.line_of(instr) == want[off // 2]
        units += size // 2
    assert units > 10000
    assert any(c["file"] == "<stress>" and c["firstlineno"] > 70000 for c in rec["codes"])


def test_where_instr_points() -> None:
    """f_lasti: 3.9 counts bytes, 3.10 code units, -1 before the first (the raw C int, as 32 bits);
    3.11+: a distance from the code object, 3.11/3.12's prev_instr one unit before the code until it runs."""
    ranges = ((0, 4, 10), (4, 8, 11), (8, 10, None))
    starts = (0, 4, 8)
    v39 = lines.CodeInfo("f", "n", 9, ranges, starts, 10, index_unit=1)
    v310 = lines.CodeInfo("f", "n", 9, ranges, starts, 10, index_unit=2)
    v311 = lines.CodeInfo("f", "n", 9, ranges, starts, 10, instr_base=184)
    assert [v39.line_of(i) for i in (0, 3, 4, 8, 10, -1, 0xFFFFFFFF, -2, 1 << 40)] == [
        10, 10, 11, None, None, 9, 9, None, 10]
    assert [v310.line_of(i) for i in (0, 1, 2, 3, 4, 5, -1, 0xFFFFFFFF, -3)] == [10, 10, 11, 11, None, None, 9, 9, None]
    assert [v311.line_of(i) for i in (184, 188, 192, 194, 182, 0, -5, 1 << 63)] == [
        10, 11, None, None, 9, None, None, None]


def test_hostile_line_tables_end_quickly_without_exceptions() -> None:
    rnd = random.Random(7)
    tables = [bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 600))) for _ in range(1500)]
    tables += [b"\xf0" + b"\x7f" * (64 << 10), b"\xf7" * (64 << 10), b"\x00" * (64 << 10), b"\xff\x80" * (32 << 10)]
    start = time.monotonic()
    for table in tables:
        for version in ((3, 9), (3, 10), (3, 11)):
            ranges = lines.ranges_for(version, table, rnd.randrange(-5, 1 << 31), 1 << 20)
            assert all(isinstance(s, int) and isinstance(e, int) and s <= e for s, e, _ in ranges)
            assert len(ranges) <= len(table) + 1
    assert time.monotonic() - start < 20


# ----------------------------------------------------------------------------------- live interpreters


def _pyenv_roots() -> list[Path]:
    roots = [Path(os.environ["PYENV_ROOT"])] if os.environ.get("PYENV_ROOT") else []
    return [*roots, Path.home() / ".pyenv", Path("/root/.pyenv")]


def _found_pythons() -> list[tuple[str, tuple[int, int], list[str]]]:
    """(id, version, command) of each CPython on this machine, distinct by the file they run."""
    cands: list[tuple[str, list[str]]] = [("venv", [str(ROOT / ".venv" / "bin" / "python")]),
                                          ("this", [sys.executable])]
    cands += [(os.path.basename(p), [p]) for p in sorted(glob.glob("/usr/bin/python3.*"))
              if re.fullmatch(r"python3\.\d+", os.path.basename(p))]
    for root in _pyenv_roots():
        found = sorted(glob.glob(str(root / "versions" / "*" / "bin" / "python")))
        cands += [(f"pyenv-{Path(p).parents[1].name}", [p]) for p in found]
    out: list[tuple[str, tuple[int, int], list[str]]] = []
    seen: set[str] = set()
    for name, cmd in cands:
        real = os.path.realpath(cmd[0])
        if not os.access(cmd[0], os.X_OK) or real in seen:
            continue
        seen.add(real)
        ver = subprocess.run([*cmd, "-c", "import sys; sys.stdout.write('%d %d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=30)
        if ver.returncode == 0 and len(ver.stdout.split()) == 2:
            major, minor = map(int, ver.stdout.split())
            out.append((name, (major, minor), cmd))
    for i, cmd_text in enumerate(c for c in os.environ.get("GPUTOP_TEST_PYTHONS", "").split(";") if c.strip()):
        out.append((f"extra{i}-{cmd_text.split()[-1]}", (3, 99), shlex.split(cmd_text)))   # version: its report's
    return out


PYTHONS = _found_pythons()
SUPPORTED = [(n, c) for n, v, c in PYTHONS if v >= (3, 9)]
UNSUPPORTED = [(n, c) for n, v, c in PYTHONS if v < (3, 9)]


@contextlib.contextmanager
def _child(cmd: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """tests/data/cpython/child.py running under ``cmd``: its pid and its report."""
    proc = subprocess.Popen([*cmd, "-c", CHILD], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the child did not report"
        yield proc.pid, json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def _mem(pid: int) -> Iterator[int]:
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _stack(fd: int, interp: cpython.Interpreter, tstate: int) -> list[tuple[int, str, str, int | None, int]]:
    """(code address, name, file, line, instr) of each frame, innermost first, as the BPF side would report them."""
    out = []
    for f in cpython.walk(fd, interp, tstate):
        info = lines.read_code(fd, f.code, interp.layout)
        assert info is not None, hex(f.code)
        out.append((f.code, info.name, info.filename, info.line_of(f.instr), f.instr))
    return out


@pytest.mark.skipif(not SUPPORTED, reason="no CPython 3.9+ to run")
@pytest.mark.parametrize("cmd", [c for _, c in SUPPORTED], ids=[n for n, _ in SUPPORTED])
def test_a_live_interpreter_walked_from_outside(cmd: list[str]) -> None:
    """The child's main thread sleeps under sleeper <- 𠀀𠀁 <- naïve <- gen (a generator, entered by next())
    <- middle (entered by map()) <- Stack.outer <- two modules: found by its native thread id (3.11+) and by
    its pthread id (any version), the frames are the child's own code objects with their names, file and
    f_lineno, and each caller's instr is its f_lasti."""
    with _child(cmd) as (pid, rep), _mem(pid) as fd:
        version = (rep["version"][0], rep["version"][1])
        interp = cpython.find_interpreter(pid, discovery.read_maps(pid), fd)
        assert interp is not None
        assert (interp.runtime, interp.layout.version) == (rep["runtime"], version)
        assert os.path.basename(interp.path).startswith(("python3.", "libpython3."))
        lay = interp.layout
        assert rep["fsbase"] == rep["ident"]             # pthread_self() is the thread pointer (glibc, x86-64)
        tstate = cpython.thread_state(fd, interp, pthread_id=rep["ident"])
        assert tstate is not None
        if lay.ts_native_tid >= 0:
            assert cpython.thread_state(fd, interp, native_tid=rep["native_tid"]) == tstate
        want = [(f["code"], f["name"], f["file"], f["line"]) for f in rep["frames"]]
        deadline = time.monotonic() + 10
        while True:                                      # until it is past its report, in time.sleep
            got = _stack(fd, interp, tstate)
            if [g[:4] for g in got] == want or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert [g[:4] for g in got] == want
        for g, f in zip(got[1:], rep["frames"][1:]):
            at = g[4] * (2 if version == (3, 10) else 1) if lay.instr_is_index else g[4] - lay.co_code
            assert at == f["lasti"], f
            assert f["op"].startswith("CALL") or f["op"] == "CACHE"
        names = [g[1] for g in got]
        assert "naïve" in names and "𠀀𠀁" in names and "/nonexistent/файл_child.py" in {g[2] for g in got}
        worker = cpython.thread_state(fd, interp, pthread_id=rep["worker"]["ident"])
        assert worker is not None and worker != tstate
        assert rep["worker"]["code"] in [f.code for f in cpython.walk(fd, interp, worker)]


@pytest.mark.skipif(not UNSUPPORTED, reason="no CPython older than 3.9 here")
@pytest.mark.parametrize("cmd", [c for _, c in UNSUPPORTED], ids=[n for n, _ in UNSUPPORTED])
def test_older_interpreters_have_no_layout(cmd: list[str]) -> None:
    proc = subprocess.Popen([*cmd, "-c", "import sys, time; print(1); sys.stdout.flush(); time.sleep(600)"],
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline()
        with _mem(proc.pid) as fd:
            assert cpython.find_interpreter(proc.pid, discovery.read_maps(proc.pid), fd) is None
    finally:
        proc.kill()
        proc.wait()


def test_a_program_without_python() -> None:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        deadline = time.monotonic() + 10
        while not any("sleep" in m.path for m in discovery.read_maps(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.01)
        with _mem(proc.pid) as fd:
            assert cpython.find_interpreter(proc.pid, discovery.read_maps(proc.pid), fd) is None
    finally:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------------- hostile memory


@pytest.fixture(scope="module")
def me() -> Iterator[tuple[int, cpython.Interpreter]]:
    """This process's own memory and interpreter."""
    with _mem(os.getpid()) as fd:
        interp = cpython.find_interpreter(os.getpid(), discovery.read_maps(os.getpid()), fd)
        assert interp is not None and interp.layout.version == THIS
        yield fd, interp


def _sample() -> int:
    return 1


def test_this_process_s_own_code_objects(me: tuple[int, cpython.Interpreter]) -> None:
    fd, interp = me
    info = lines.read_code(fd, id(_sample.__code__), interp.layout)
    assert info is not None
    assert (info.filename, info.name, info.firstlineno) == (__file__, "_sample", _sample.__code__.co_firstlineno)
    long_name = "é" * 3000 if THIS < (3, 11) else "x"
    long = _sample.__code__.replace(co_name=long_name)
    if THIS >= (3, 11):
        long = long.replace(co_qualname="€" * 5000)
    info = lines.read_code(fd, id(long), interp.layout)
    assert info is not None and len(info.name) == lines.STR_CHARS + 1 and info.name.endswith("…")


class _Buffers:
    """Memory of this process to point a code object's fields at (kept alive while the test runs)."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    def put(self, data: bytes) -> int:
        buf = ctypes.create_string_buffer(data, len(data) + 64)
        self.kept.append(buf)
        addr = ctypes.addressof(buf)
        assert addr % 8 == 0
        return addr


def _unmapped() -> int:
    m = mmap.mmap(-1, mmap.PAGESIZE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    m.close()
    return addr


def _fake_str(bufs: _Buffers, real: str, length: int, state: int | None = None) -> int:
    """A str object copied from ``real`` with its length (and state) replaced."""
    head = bytearray(ctypes.string_at(id(real), 128))
    struct.pack_into("<q", head, lines._STR_LENGTH, length)
    if state is not None:
        struct.pack_into("<I", head, lines._STR_STATE, state)
    return bufs.put(bytes(head))


def test_code_objects_that_lie(me: tuple[int, cpython.Interpreter]) -> None:
    """A real code object copied, each field then pointed at something else: None, never an exception."""
    fd, interp = me
    lay = interp.layout
    code = _sample.__code__
    size = max(lay.co_filename, lay.co_name, lay.co_qualname, lay.co_linetable, lay.co_code) + 8
    head = ctypes.string_at(id(code), size + (len(code.co_code) if THIS >= (3, 11) else 0) + 64)
    bufs = _Buffers()
    assert lines.read_code(fd, bufs.put(head), lay) is not None      # the copy itself reads
    name_at = lay.co_qualname if lay.co_qualname >= 0 else lay.co_name
    hole = _unmapped()
    cases = {
        "filename claims 2**40 characters": (lay.co_filename, _fake_str(bufs, code.co_filename, 1 << 40)),
        "name claims -1 characters": (name_at, _fake_str(bufs, "_sample", -1)),
        "name of kind 3": (name_at, _fake_str(bufs, "_sample", 7, state=(3 << 2) | (1 << 5) | (1 << 7))),
        "name not compact": (name_at, _fake_str(bufs, "_sample", 7, state=(1 << 2) | (1 << 7))),
        "name is an int": (name_at, id(12345)),
        "name unmapped": (name_at, hole),
        "filename at 0": (lay.co_filename, 0),
        "filename not aligned": (lay.co_filename, ctypes.addressof(bufs.kept[0]) + 3),
        "line table unmapped": (lay.co_linetable, hole),
        "line table is a str": (lay.co_linetable, id("abc")),
        "line table kernel space": (lay.co_linetable, 0xFFFF_FFFF_8100_0000),
        "type unmapped": (8, hole),
        "type is str's": (8, id(str)),
    }
    if THIS >= (3, 11):
        cases["2**60 code units"] = (16, 1 << 60)
        cases["no code units"] = (16, 0)
    else:
        cases["code is unmapped"] = (lay.co_code, hole)
    for what, (at, value) in cases.items():
        assert lines.read_code(fd, bufs.put(_patched(head, at, value)), lay) is None, what
    for addr in (0, 1, hole, 0xFFFF_FFFF_FFFF_F000, -8, 1 << 64, id(code) + 4, id(code) + 8, id(12345)):
        assert lines.read_code(fd, addr, lay) is None, addr


def test_garbage_memory_reads_as_nothing_in_bounded_time(me: tuple[int, cpython.Interpreter]) -> None:
    fd, interp = me
    rnd = random.Random(3)
    bufs = _Buffers()
    garbage = bufs.put(rnd.randbytes(1 << 16))
    real = ctypes.string_at(id(_sample.__code__), 512)
    pointers = [0, 1, garbage, id(_sample.__code__), id("x"), id(b"y"), id(str), _unmapped(), 1 << 46, (1 << 64) - 1]
    start = time.monotonic()
    for layout in [*cpython.LAYOUTS.values(), interp.layout]:
        for off in range(0, 1 << 16, 8):
            assert lines.read_code(fd, garbage + off, layout) is None
    for _ in range(3000):
        mutated = bytearray(real)
        for _ in range(rnd.randrange(1, 6)):
            at = rnd.randrange(0, 512 - 8, 8)
            near = rnd.choice(pointers) + rnd.randrange(-64, 64)
            value = rnd.choice([rnd.getrandbits(64), rnd.choice(pointers), near])
            struct.pack_into("<Q", mutated, at, value & (1 << 64) - 1)
        info = lines.read_code(fd, bufs.put(bytes(mutated)), interp.layout)
        if info is not None:
            assert isinstance(info.name, str) and len(info.name) <= lines.STR_CHARS + 1
            info.line_of(rnd.getrandbits(64))
    assert time.monotonic() - start < 30


def test_objects_that_are_no_interpreter(me: tuple[int, cpython.Interpreter], tmp_path: Path) -> None:
    """Maps that name a python: a text file, an ELF object without _PyRuntime, a real libpython mapped
    nowhere near where the maps say."""
    fd, interp = me
    pid = os.getpid()
    text = tmp_path / "python3.11"
    text.write_text("not an ELF object\n" * 100)
    elf = tmp_path / "libpython3.12.so.1.0"
    shutil.copy(shutil.which("true") or "/bin/true", elf)
    maps = []
    for path in (text, elf):
        st = os.stat(path)
        maps.append(discovery.Mapping(0x10000, 0x20000, 0, st.st_dev, st.st_ino, str(path)))
    for m in maps:
        assert cpython.find_interpreter(pid, [m], fd) is None
    real = [m for m in discovery.read_maps(pid) if m.path == interp.path]
    assert real
    moved = [discovery.Mapping(m.start + (1 << 45), m.end + (1 << 45), m.offset, m.dev, m.inode, m.path) for m in real]
    assert cpython.find_interpreter(pid, moved, fd) is None
    assert cpython.find_interpreter(pid, [], fd) is None
