"""Code objects read from a process's memory, as file, function and line: what a Python frame the BPF side
recorded (its code object's address and where it was in it) shows.

Every byte is the traced process's and hostile: each object's type is checked by its type's name, each read
is bounded (strings cut at STR_CHARS characters, line tables at TABLE_MAX bytes), and the line tables are
decoded here (3.9's co_lnotab, 3.10's PEP 626 co_linetable, 3.11's location table) by loops bounded by their
input: anything malformed gives None, never an exception. Text is returned as read; the display sanitises it.
"""

from __future__ import annotations

import bisect
import mmap
import struct
from dataclasses import dataclass

from gputop.sources.bpf.pystacks.cpython import Layout, read_mem

#: characters of a name or file name kept (a longer one is cut, ending in "…"); a length over
#: STR_CLAIM_MAX is no real name's: the object is taken as garbage
STR_CHARS = 1024
STR_CLAIM_MAX = 1 << 20
#: bytes of a line table read; lines past them are unknown
TABLE_MAX = 64 << 10
#: code units of a code object above this are no real one's
CODE_UNITS_MAX = 1 << 26

_OB_TYPE, _OB_SIZE, _TP_NAME = 8, 16, 24       # PyObject.ob_type, PyVarObject.ob_size, PyTypeObject.tp_name
_BYTES_SVAL = 32                                # PyBytesObject.ob_sval
_STR_LENGTH, _STR_STATE = 16, 32                # PyASCIIObject.length, .state
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")

Range = tuple[int, int, "int | None"]


@dataclass(frozen=True)
class CodeInfo:
    """A code object: its file, its function (the qualified name where the version has one, 3.11+), its first
    line, and how its instruction offsets map to lines."""

    filename: str
    name: str
    firstlineno: int
    #: [start, end) byte offsets in the code -> line (None: no line), in order; starts repeats their starts
    ranges: tuple[Range, ...] = ()
    starts: tuple[int, ...] = ()
    code_size: int = 0               # bytes of code
    instr_base: int = 0              # subtracted from an instr that is a byte distance (3.11+: layout.co_code)
    index_unit: int = 0              # 3.9: 1, 3.10: 2 (f_lasti counts bytes, code units); 0: instr is a distance

    def line_of(self, instr: int) -> int | None:
        """The line of the instruction ``instr`` names: f_lasti (3.9/3.10: the raw C int, read as 32 bits), or
        (3.11+) the byte distance from the code object to the frame's instruction pointer. A frame that has
        not started yet (f_lasti -1, 3.11/3.12's prev_instr one unit before the code) is at the first line, as
        CPython says; a place outside the code has none."""
        if self.index_unit:
            lasti = (instr & 0xFFFFFFFF) - ((instr & 0x80000000) << 1)
            if lasti == -1:
                return self.firstlineno
            offset = lasti * self.index_unit
        else:
            offset = ((instr & 0xFFFFFFFFFFFFFFFF) ^ (1 << 63)) - (1 << 63) - self.instr_base
            if offset == -2:
                return self.firstlineno
        if not 0 <= offset < self.code_size:
            return None
        i = bisect.bisect_right(self.starts, offset) - 1
        if i < 0:
            return None
        start, end, line = self.ranges[i]
        return line if start <= offset < end else None


# ----------------------------------------------------------------------------------- line tables


def lnotab_ranges(table: bytes, firstlineno: int, code_size: int) -> list[Range]:
    """3.9's co_lnotab: (address increment, signed line increment) byte pairs; the last line runs to the end
    of the code (Objects/lnotab_notes.txt; PyCode_Addr2Line)."""
    out: list[Range] = []
    addr, line = 0, firstlineno
    for i in range(0, len(table) - 1, 2):
        step, delta = table[i], table[i + 1]
        if step:
            out.append((addr, addr + step, line))
            addr += step
        line += delta - 256 if delta >= 128 else delta
    if addr < code_size:
        out.append((addr, code_size, line))
    return out


def linetable310_ranges(table: bytes, firstlineno: int) -> list[Range]:
    """3.10's co_linetable (PEP 626): (byte length, signed line delta) pairs, -128: no line; a zero-length
    entry moves the line only."""
    out: list[Range] = []
    end, line = 0, firstlineno
    for i in range(0, len(table) - 1, 2):
        step, delta = table[i], table[i + 1]
        start, end = end, end + step
        here: int | None
        if delta == 0x80:
            here = None
        else:
            line += delta - 256 if delta >= 128 else delta
            here = line
        if step:
            out.append((start, end, here))
    return out


#: the location table's entry codes (Include/cpython/code.h, _PyCodeLocationInfoKind)
_LOC_NONE, _LOC_LONG, _LOC_NO_COLUMNS, _LOC_ONE_LINE0 = 15, 14, 13, 10
#: a varint longer than this (in bits) is no real table's
_VARINT_BITS = 32


def _varint(table: bytes, pos: int) -> tuple[int, int] | None:
    """An unsigned varint (6-bit chunks, low first, 0x40: more follow) at ``pos``: (value, next pos)."""
    value = shift = 0
    while pos < len(table) and shift <= _VARINT_BITS:
        b = table[pos]
        pos += 1
        value |= (b & 63) << shift
        if not b & 64:
            return value, pos
        shift += 6
    return None


def location_ranges(table: bytes, firstlineno: int) -> list[Range]:
    """3.11+'s location table (Objects/locations.md): entries of 1 to 8 code units, each opening with a byte
    with bit 7 set (its kind in bits 3-6, its length less one in bits 0-2); only the line is decoded."""
    out: list[Range] = []
    end, line, pos = 0, firstlineno, 0
    while pos < len(table):
        first = table[pos]
        if not first & 0x80:
            break                                   # not an entry's first byte: malformed
        code = (first >> 3) & 15
        start, end = end, end + ((first & 7) + 1) * 2
        here: int | None = line
        if code == _LOC_NONE:
            here = None
        elif code in (_LOC_LONG, _LOC_NO_COLUMNS):
            got = _varint(table, pos + 1)
            if got is None:
                break
            line += -(got[0] >> 1) if got[0] & 1 else got[0] >> 1
            here = line
        elif code >= _LOC_ONE_LINE0:
            line += code - _LOC_ONE_LINE0
            here = line
        out.append((start, end, here))
        pos += 1
        while pos < len(table) and not table[pos] & 0x80:
            pos += 1
    return out


def ranges_for(version: tuple[int, int], table: bytes, firstlineno: int, code_size: int) -> list[Range]:
    """The line table of ``version`` decoded into ranges."""
    if version < (3, 10):
        return lnotab_ranges(table, firstlineno, code_size)
    if version < (3, 11):
        return linetable310_ranges(table, firstlineno)
    return location_ranges(table, firstlineno)


# ----------------------------------------------------------------------------------- objects


def _unicode_sizes(version: tuple[int, int]) -> tuple[int, int]:
    """Where a compact string's characters start: (ASCII, other), i.e. sizeof PyASCIIObject and
    PyCompactUnicodeObject (3.12 dropped their wstr fields)."""
    return (48, 72) if version < (3, 12) else (40, 56)


class _Reader:
    """Reads of one code object's parts, its types' names remembered."""

    def __init__(self, mem_fd: int, version: tuple[int, int]) -> None:
        self.fd = mem_fd
        self.version = version
        self.types: dict[int, bytes] = {}

    def is_a(self, header: bytes, name: bytes) -> bool:
        """Whether the object whose header is ``header`` is of the type named ``name`` ("code", "str")."""
        tp = _U64.unpack_from(header, _OB_TYPE)[0]
        known = self.types.get(tp)
        if known is None:
            tp_name = read_mem(self.fd, tp + _TP_NAME, 8) if tp % 8 == 0 else None
            at = _U64.unpack(tp_name)[0] if tp_name is not None else 0
            raw = read_mem(self.fd, at, min(8, mmap.PAGESIZE - at % mmap.PAGESIZE))     # not past its page
            known = raw.split(b"\0", 1)[0] if raw is not None and b"\0" in raw else b""
            self.types[tp] = known
        return known == name

    def text(self, addr: int) -> str | None:
        """The str object at ``addr`` (compact forms only: every name a code object holds)."""
        ascii_size, compact_size = _unicode_sizes(self.version)
        head = read_mem(self.fd, addr, ascii_size) if addr % 8 == 0 else None
        if head is None or not self.is_a(head, b"str"):
            return None
        length = _I64.unpack_from(head, _STR_LENGTH)[0]
        state = struct.unpack_from("<I", head, _STR_STATE)[0]
        kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
        if not 0 <= length <= STR_CLAIM_MAX or not compact or kind not in (1, 2, 4) or (ascii_ and kind != 1):
            return None
        n = min(length, STR_CHARS)
        data = read_mem(self.fd, addr + (ascii_size if ascii_ else compact_size), n * kind) if n else b""
        if data is None:
            return None
        codec = {1: "ascii" if ascii_ else "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
        out = data.decode(codec, "replace")
        return out + "…" if length > n else out

    def bytes_size(self, addr: int) -> int | None:
        """The length of the bytes object at ``addr``."""
        head = read_mem(self.fd, addr, _BYTES_SVAL) if addr % 8 == 0 else None
        if head is None or not self.is_a(head, b"bytes"):
            return None
        size = _I64.unpack_from(head, _OB_SIZE)[0]
        return size if 0 <= size <= CODE_UNITS_MAX * 2 else None

    def bytes(self, addr: int, limit: int) -> bytes | None:
        """The first ``limit`` bytes of the bytes object at ``addr``."""
        size = self.bytes_size(addr)
        if size is None:
            return None
        return read_mem(self.fd, addr + _BYTES_SVAL, min(size, limit)) if size else b""


def read_code(mem_fd: int, addr: int, layout: Layout) -> CodeInfo | None:
    """The code object at ``addr`` of a process's memory (``mem_fd``: its /proc/PID/mem) as ``layout`` lays it
    out; None where there is none, or anything in it is not what a code object holds."""
    try:
        return _read_code(_Reader(mem_fd, layout.version), addr, layout)
    except (ValueError, OverflowError, struct.error, IndexError, KeyError):
        return None


def _read_code(r: _Reader, addr: int, lay: Layout) -> CodeInfo | None:
    fields = (lay.co_filename, lay.co_name, lay.co_qualname, lay.co_linetable, lay.co_firstlineno, lay.co_code)
    modern = lay.version >= (3, 11)
    head = read_mem(r.fd, addr, max(fields) + 8) if addr % 8 == 0 else None
    if head is None or not r.is_a(head, b"code"):
        return None

    def ptr(off: int) -> int:
        return int(_U64.unpack_from(head, off)[0])

    if modern:
        units = _I64.unpack_from(head, _OB_SIZE)[0]           # co_code_adaptive's code units, inline
        code_size = units * 2 if 0 < units <= CODE_UNITS_MAX else None
    else:
        code_size = r.bytes_size(ptr(lay.co_code))
    filename = r.text(ptr(lay.co_filename))
    name = r.text(ptr(lay.co_qualname if lay.co_qualname >= 0 else lay.co_name))
    table = r.bytes(ptr(lay.co_linetable), TABLE_MAX)
    if code_size is None or filename is None or name is None or table is None:
        return None
    firstlineno = _I32.unpack_from(head, lay.co_firstlineno)[0]
    ranges = ranges_for(lay.version, table, firstlineno, code_size)
    return CodeInfo(filename, name, firstlineno, tuple(ranges), tuple(r[0] for r in ranges), code_size,
                    instr_base=lay.co_code if modern else 0,
                    index_unit=0 if modern else 1 if lay.version < (3, 10) else 2)
