"""ELF symbols of mapped objects: which CUDA entry points an object holds, and address -> name.

Symbols come from ``.dynsym`` and ``.symtab`` (a program with the runtime linked in statically
has its CUDA entry points as local symbols in ``.symtab`` only). Tables are cached per object
(device, inode). Names are demangled with binutils' ``c++filt``.
"""

from __future__ import annotations

import bisect
import mmap
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache

from elftools.common.utils import parse_cstring_from_stream
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Symbol, SymbolTableSection

from gputop.sources.catalogue import is_runtime_wrapper

# a cheap pre-filter: objects that mention none of these never hold CUDA entry points
_MARKERS = (b"cudaLaunchKernel", b"cuLaunchKernel", b"cudaMemcpy", b"cuMemcpy", b"cudaMalloc", b"cuMemAlloc")


# names of the CUDA runtime's and driver's own functions (public, internal, static-archive members)
_CUDA_CODE = re.compile(r"^(_{0,2}cuda|cu[A-Z]|cudbg|libcudart_static_|_ZN\d+cudart|_?_?cudart|_ZN\d+cuda)")
#: functions whose first bytes are kept, to tell a thunk from a body (catalogue.INTERNAL_LAUNCH)
_KEEP_CODE = ("__cudaLaunchKernel", "__cudaLaunchKernel_ptsz")


@dataclass
class ObjectSymbols:
    """Function symbols of one ELF object: name -> st_value, and a sorted address index."""

    path: str
    elf_type: str = "ET_DYN"
    functions: dict[str, int] = field(default_factory=dict)
    _addrs: list[int] = field(default_factory=list)
    _ends: list[int] = field(default_factory=list)
    _names: list[str] = field(default_factory=list)
    #: (vaddr, offset, filesz) of executable PT_LOAD segments, to map file offsets to vaddrs
    segments: list[tuple[int, int, int]] = field(default_factory=list)
    #: every function the object exports (.dynsym) has a CUDA name: it is the runtime or the driver
    all_exports_cuda: bool = False
    #: first code bytes of the functions in _KEEP_CODE
    code_heads: dict[str, bytes] = field(default_factory=dict)

    def name_at(self, vaddr: int) -> str | None:
        """The function symbol whose [start, start+size) holds ``vaddr`` (start if size is 0)."""
        i = bisect.bisect_right(self._addrs, vaddr) - 1
        if i < 0:
            return None
        if self._addrs[i] == vaddr or vaddr < self._ends[i]:
            return self._names[i]
        return None

    def cuda_code_runs(self) -> list[tuple[int, int]]:
        """[start, end) vaddr ranges of the runtime's and driver's code in this object.

        The whole executable text of an object that exports only CUDA functions (libcudart,
        libcuda: their internal code lies outside the exported functions' span). Elsewhere (the
        runtime linked statically into a program or library), maximal runs of consecutive
        functions with CUDA names, so that the program's own code is not included.
        """
        wrapper = is_runtime_wrapper(self.functions)
        if self.all_exports_cuda and not wrapper:
            return [(vaddr, vaddr + size) for vaddr, _off, size in self.segments]
        runs: list[tuple[int, int]] = []
        cur: list[int] | None = None
        for addr, end, name in zip(self._addrs, self._ends, self._names, strict=False):
            # a runtime wrapper's runtime-named functions are the application's code (see
            # is_runtime_wrapper); its driver-named ones wrap the driver like any driver layer
            if _CUDA_CODE.match(name) and not (wrapper and _RUNTIME_NAME.match(name)):
                if cur is None:
                    cur = [addr, max(end, addr + 1)]
                else:
                    cur[1] = max(cur[1], end, addr + 1)
            elif cur is not None:
                runs.append((cur[0], cur[1]))
                cur = None
        if cur is not None:
            runs.append((cur[0], cur[1]))
        return runs

    def offset_of_vaddr(self, vaddr: int) -> int | None:
        for seg_vaddr, off, size in self.segments:
            if seg_vaddr <= vaddr < seg_vaddr + size:
                return off + (vaddr - seg_vaddr)
        return None

    def jump_target(self, name: str) -> int | None:
        """Where function ``name`` jumps if it is only a jump (a thunk); -1 if it has a body of its
        own; None if its code was not read (see _KEEP_CODE)."""
        vaddr = self.functions.get(name)
        code = self.code_heads.get(name)
        if vaddr is None or code is None:
            return None
        i = 4 if code.startswith(b"\xf3\x0f\x1e\xfa") else 0          # endbr64
        if code[i:i + 5] == b"\x55\x48\x89\xe5\x5d":                   # push rbp; mov rbp,rsp; pop rbp
            i += 5
        if code[i:i + 1] != b"\xe9":                                     # jmp rel32
            return -1
        rel = int.from_bytes(code[i + 1:i + 5], "little", signed=True)
        return vaddr + i + 5 + rel

    def vaddr_of_offset(self, file_offset: int) -> int | None:
        for vaddr, off, size in self.segments:
            if off <= file_offset < off + size:
                return vaddr + (file_offset - off)
        return None


#: runtime-layer names (the rest of _CUDA_CODE is the driver's)
_RUNTIME_NAME = re.compile(r"^(_{0,2}cuda|libcudart_static_|_ZN\d+cudart|_?_?cudart)")
def mentions_cuda(path: str) -> bool:
    """Whether the names of the object's symbols mention a CUDA entry point: searched in the
    string tables of its symbol tables only (where those names are), or in the whole file when
    its section headers cannot be read (a 100 MB library: 20 ms instead of 0.3 s)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            ranges = _symbol_strings(mm) or [(0, len(mm))]
            return any(mm.find(m, lo, hi) >= 0 for lo, hi in ranges for m in _MARKERS)
    except (OSError, ValueError):
        return False


def _symbol_strings(mm: mmap.mmap) -> list[tuple[int, int]] | None:
    """File ranges of the string tables that ``.symtab`` and ``.dynsym`` name their symbols from
    (64-bit little-endian ELF); None when the section headers are absent or odd."""
    if len(mm) < 64 or mm[:6] != b"\x7fELF\x02\x01":
        return None
    shoff, = struct.unpack_from("<Q", mm, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", mm, 0x3A)
    if not shoff or not shnum or shentsize < 64 or shoff + shnum * shentsize > len(mm):
        return None
    headers = [struct.unpack_from("<IIQQQQII", mm, shoff + i * shentsize) for i in range(shnum)]
    out = []
    for _name, sh_type, _fl, _addr, _off, _size, link, _info in headers:
        if sh_type in (2, 11) and link < shnum:         # SHT_SYMTAB, SHT_DYNSYM
            off, size = headers[link][4], headers[link][5]
            if off + size > len(mm):
                return None
            out.append((off, off + size))
    return out


def _name(sec: SymbolTableSection, sym: Symbol) -> str:
    """The symbol's name; bytes that are not UTF-8 are kept as ``surrogateescape`` (shown as
    ``\\xNN``), not pyelftools' U+FFFD."""
    if "\ufffd" not in sym.name:
        return str(sym.name)
    strtab = sec.stringtable
    raw = parse_cstring_from_stream(strtab.stream, strtab["sh_offset"] + sym["st_name"]) or b""
    return raw.decode("utf-8", "surrogateescape")


def read_symbols(path: str) -> ObjectSymbols | None:
    """Function symbols of the ELF object at ``path``; None if it is not a readable ELF."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            out = ObjectSymbols(path, elf.header["e_type"])
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1:
                    out.segments.append((seg["p_vaddr"], seg["p_offset"], seg["p_filesz"]))
            entries: dict[int, tuple[int, str]] = {}
            exports: list[str] = []
            for secname in (".dynsym", ".symtab"):
                sec = elf.get_section_by_name(secname)
                if not isinstance(sec, SymbolTableSection):
                    continue
                for sym in sec.iter_symbols():
                    if sym["st_info"]["type"] not in ("STT_FUNC", "STT_GNU_IFUNC"):
                        continue
                    if sym["st_shndx"] == "SHN_UNDEF" or not sym["st_value"]:
                        continue
                    name = _name(sec, sym).split("@", 1)[0]
                    if not name:
                        continue
                    if secname == ".dynsym" and sym["st_info"]["bind"] != "STB_LOCAL":
                        exports.append(name)
                    # a global definition wins over a local one of the same name
                    if name not in out.functions or sym["st_info"]["bind"] != "STB_LOCAL":
                        out.functions[name] = sym["st_value"]
                    entries.setdefault(sym["st_value"], (sym["st_size"], name))
            out.all_exports_cuda = bool(exports) and all(_CUDA_CODE.match(n) for n in exports)
            for name in _KEEP_CODE:
                off = out.offset_of_vaddr(out.functions[name]) if name in out.functions else None
                if off is not None:
                    f.seek(off)
                    out.code_heads[name] = f.read(16)
    except Exception:  # any malformed ELF: not a CUDA object we can use
        return None
    for addr in sorted(entries):
        size, name = entries[addr]
        out._addrs.append(addr)
        out._ends.append(addr + size)
        out._names.append(name)
    return out


@lru_cache(maxsize=65536)
def _demangle_one(name: str) -> str:
    return demangle([name])[0]


def demangle(names: list[str]) -> list[str]:
    """Demangle C++ names with c++filt (one process for the batch); others pass through."""
    todo = [n for n in names if n.startswith("_Z")]
    if not todo:
        return list(names)
    exe = shutil.which("c++filt")
    if exe is None:
        return list(names)
    try:
        res = subprocess.run([exe], input="\n".join(todo) + "\n", capture_output=True, encoding="utf-8",
                             errors="surrogateescape", timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return list(names)
    out_lines = res.stdout.splitlines()
    if len(out_lines) != len(todo):
        return list(names)
    table = dict(zip(todo, out_lines, strict=False))
    return [table.get(n, n) for n in names]


def demangle_cached(name: str) -> str:
    return _demangle_one(name) if name.startswith("_Z") else name
