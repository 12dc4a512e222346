"""A bounded reader of 64-bit little-endian ELF objects: headers, segments, symbol tables.

Mapped objects come from other users' processes and are hostile: every size, entry size, count and
offset is checked against the file before it is used; reads are ``pread`` on one descriptor (a file
truncated meanwhile reads short, never SIGBUS); names are cut at NAME_MAX_BYTES; memory is bounded by
the function symbols kept (at most MAX_FUNCTIONS) and one window of READ_CHUNK bytes; and a
deadline is checked in every loop. (pyelftools trusts a table's entry size and reads each name
until its NUL: a crafted object cost it 31 s of CPU, or 800 MB for a 4 MB file.)
"""

from __future__ import annotations

import os
import platform
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

#: the longest symbol name kept whole; a longer one is kept cut, ending in "…"
NAME_MAX_BYTES = 4096
#: function symbols read from one object (both tables); an object with more is refused
MAX_FUNCTIONS = 2_000_000
#: symbols walked in one table; string-table bytes searched for markers in one object
MAX_TABLE_SYMBOLS = 8_000_000
MAX_SCAN_BYTES = 1 << 30
READ_CHUNK = 1 << 20
#: seconds one object may take to read
BUDGET_S = 20.0
#: how a mapped object is opened for reading: never blocking (a FIFO put in its place), no controlling tty
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SYM = struct.Struct("<IBBHQQ")
SHT_SYMTAB, SHT_STRTAB, SHT_DYNSYM = 2, 3, 11
_MAX_SECTIONS = 1 << 16
EM_X86_64 = 62
EM_AARCH64 = 183
#: this machine's own ELF machine (objects of another one are not its processes' code); None elsewhere
HOST_MACHINE = {"x86_64": EM_X86_64, "aarch64": EM_AARCH64}.get(platform.machine())
_ET = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}


class ElfError(Exception):
    """The object is not an ELF object this reader accepts (or it took too long)."""


def pread_full(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset`` (fewer at the end of the file)."""
    out = b""
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), offset + len(out))
        if not chunk:
            break
        out += chunk
    return out


@dataclass(frozen=True)
class Section:
    index: int
    type: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass(frozen=True)
class SymbolTable:
    dynamic: bool           # .dynsym (exports) rather than .symtab
    offset: int
    count: int
    strtab_offset: int
    strtab_size: int


class ElfReader:
    """One object open for reading: ``fd`` stays the caller's."""

    def __init__(self, fd: int, budget_s: float = BUDGET_S) -> None:
        self.fd = fd
        self.deadline = time.monotonic() + budget_s
        self.size = os.fstat(fd).st_size
        head = pread_full(fd, _EHDR.size, 0)
        if len(head) < _EHDR.size or head[:6] != b"\x7fELF\x02\x01":
            raise ElfError("not a 64-bit little-endian ELF object")
        (_ident, e_type, self.machine, _version, _entry, self._phoff, self._shoff, _flags, _ehsize,
         self._phentsize, self._phnum, self._shentsize, self._shnum, _shstrndx) = _EHDR.unpack(head)
        self.elf_type = _ET.get(e_type, f"0x{e_type:x}")

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise ElfError("over its time budget")

    def _table(self, offset: int, entsize: int, want: int, count: int, what: str) -> bytes:
        if count == 0:
            return b""
        if entsize != want or offset + count * entsize > self.size:
            raise ElfError(f"bad {what} table")
        data = pread_full(self.fd, count * entsize, offset)
        if len(data) != count * entsize:
            raise ElfError(f"{what} table cut short")
        return data

    def segments(self, *, executable: bool = True) -> list[tuple[int, int, int]]:
        """(vaddr, offset, filesz) of the executable PT_LOAD segments; with ``executable=False``, of the
        read-only data ones (neither executable nor writable: their memory is the file's)."""
        data = self._table(self._phoff, self._phentsize, _PHDR.size, self._phnum, "program header")
        return [(vaddr, off, filesz) for p_type, flags, off, vaddr, _pa, filesz, _msz, _al in _PHDR.iter_unpack(data)
                if p_type == 1 and (flags & 1 if executable else not flags & 3)]

    def sections(self) -> list[Section]:
        if not self._shoff:
            return []
        count = self._shnum
        if count == 0:                   # extended numbering: the count is section 0's size
            first = self._table(self._shoff, self._shentsize, _SHDR.size, 1, "section header")
            count = _SHDR.unpack(first)[5]
        if count > _MAX_SECTIONS:
            raise ElfError("too many sections")
        data = self._table(self._shoff, self._shentsize, _SHDR.size, count, "section header")
        return [Section(i, t, off, size, link, ent)
                for i, (_n, t, _f, _a, off, size, link, _info, _al, ent) in enumerate(_SHDR.iter_unpack(data))]

    def symbol_tables(self) -> list[SymbolTable]:
        """.dynsym first, then .symtab; a table whose layout does not fit the file is refused."""
        secs = self.sections()
        out = []
        for s in sorted((s for s in secs if s.type in (SHT_SYMTAB, SHT_DYNSYM)), key=lambda s: s.type != SHT_DYNSYM):
            if s.entsize != _SYM.size or s.offset + s.size > self.size or not 0 < s.link < len(secs):
                raise ElfError("bad symbol table")
            strtab = secs[s.link]
            if strtab.type != SHT_STRTAB or strtab.offset + strtab.size > self.size:
                raise ElfError("bad string table")
            count = s.size // _SYM.size
            if count > MAX_TABLE_SYMBOLS:
                raise ElfError("too many symbols")
            out.append(SymbolTable(s.type == SHT_DYNSYM, s.offset, count, strtab.offset, strtab.size))
        return out

    def symbols(self, table: SymbolTable) -> Iterator[tuple[int, int, int, int, int]]:
        """(st_name, st_info, st_shndx, st_value, st_size) of every symbol, read in chunks."""
        per = READ_CHUNK // _SYM.size
        for first in range(0, table.count, per):
            self.check_time()
            n = min(per, table.count - first)
            data = pread_full(self.fd, n * _SYM.size, table.offset + first * _SYM.size)
            for name, info, _other, shndx, value, size in _SYM.iter_unpack(data[:len(data) // _SYM.size * _SYM.size]):
                yield name, info, shndx, value, size

    def names(self, table: SymbolTable, offsets: list[int]) -> dict[int, str]:
        """The names at ``offsets`` of ``table``'s string table, read in windows in offset order;
        a name without a NUL within NAME_MAX_BYTES is cut and ends in "…"."""
        out: dict[int, str] = {}
        base, window = -1, b""
        for off in sorted(set(offsets)):
            if off >= table.strtab_size:
                continue
            end = min(off + NAME_MAX_BYTES + 1, table.strtab_size)
            if not (base <= off and end <= base + len(window)):
                self.check_time()
                base = off
                window = pread_full(self.fd, min(max(READ_CHUNK, end - off), table.strtab_size - off),
                                    table.strtab_offset + off)
            raw = window[off - base:end - base]
            nul = raw.find(b"\0")
            cut = nul < 0 and len(raw) > NAME_MAX_BYTES
            text = raw[:nul if nul >= 0 else NAME_MAX_BYTES].decode("utf-8", "surrogateescape")
            out[off] = text + "…" if cut else text
        return out

    def string_tables_mention(self, markers: tuple[bytes, ...]) -> bool:
        """Whether the string tables the symbol tables name hold any of ``markers``."""
        budget = MAX_SCAN_BYTES
        overlap = max(map(len, markers)) - 1
        for t in self.symbol_tables():
            pos, end = t.strtab_offset, t.strtab_offset + t.strtab_size
            while pos < end and budget > 0:
                self.check_time()
                chunk = pread_full(self.fd, min(READ_CHUNK, end - pos, budget), pos)
                if not chunk:
                    break
                if any(m in chunk for m in markers):
                    return True
                if pos + len(chunk) >= end:
                    break
                step = max(1, len(chunk) - overlap)
                pos += step
                budget -= step
        return False
