"""Crafted ELF objects and names for the hostile-tenant tests (issue 25): what an unprivileged user
can map, or register, to make a root gputop hang, crash, bloat or stall."""

from __future__ import annotations

import struct

SYM = struct.Struct("<IBBHQQ")
SHDR = struct.Struct("<IIQQQQIIQQ")
EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
STT_FUNC_GLOBAL = (1 << 4) | 2


_NAMES = {2: b".symtab", 3: b".strtab", 11: b".dynsym"}


def elf(sections: list[tuple[int, int, int, int, int]], size: int, body: dict[int, bytes] | None = None) -> bytes:
    """A 64-bit ELF object of ``size`` bytes whose section headers are ``sections`` — (type,
    offset, size, link, entsize) each, after the null section — with ``body`` bytes placed at
    their offsets. The section headers sit right after the ELF header, the section names
    (``.symtab``, ``.strtab``, ``.dynsym`` by type, as any ELF reader looks them up) after them."""
    shoff = EHDR.size
    shnum = len(sections) + 2                       # the null section and .shstrtab
    names = b"\0.shstrtab\0" + b"".join(_NAMES.get(t, b".x") + b"\0" for t, *_ in sections)
    name_at, at = [], 11
    for t, *_ in sections:
        name_at.append(at)
        at += len(_NAMES.get(t, b".x")) + 1
    names_off = shoff + shnum * SHDR.size
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    head = EHDR.pack(ident, 3, 62, 1, 0, 0, shoff, 0, EHDR.size, 56, 0, SHDR.size, shnum, shnum - 1)
    shdrs = SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + b"".join(
        SHDR.pack(n, t, 0, 0, off, sz, link, 0, 8, ent) for n, (t, off, sz, link, ent) in zip(name_at, sections))
    shdrs += SHDR.pack(1, 3, 0, 0, names_off, len(names), 0, 0, 1, 0)
    out = bytearray(size)
    out[:len(head)] = head
    out[shoff:shoff + len(shdrs)] = shdrs
    out[names_off:names_off + len(names)] = names
    for off, data in (body or {}).items():
        out[off:off + len(data)] = data
    return bytes(out)


def symbols_sharing_one_name(count: int, name_bytes: int) -> bytes:
    """``count`` function symbols whose names all start at one unterminated ``name_bytes``-long
    string (issue 25's memory amplification: 300 symbols, 1 MiB)."""
    symtab_off = 4096
    syms = SYM.pack(0, 0, 0, 0, 0, 0) + b"".join(SYM.pack(1, STT_FUNC_GLOBAL, 0, 1, 0x1000 + 16 * i, 16)
                                                 for i in range(count))
    strtab_off = symtab_off + len(syms)
    strtab = b"\0" + b"cudaLaunchKernel" * (name_bytes // 16)
    return elf([(2, symtab_off, len(syms), 2, SYM.size), (3, strtab_off, len(strtab), 0, 0)],
               strtab_off + len(strtab), {symtab_off: syms, strtab_off: strtab})


def entsize_one(size: int) -> bytes:
    """A .symtab of entry size 1 over ``size`` bytes (issue 25's CPU stall: 31 s for 2 MiB)."""
    strtab = b"\0cudaLaunchKernel\0"
    return elf([(2, 4096, size - 8192, 2, 1), (3, size - 4096, len(strtab), 0, 0)], size,
               {size - 4096: strtab})


def huge_string_table(size: int) -> tuple[bytes, int]:
    """The head of a ``size``-byte object (the rest is a hole) whose symbol table names a string
    table spanning the whole file, with a CUDA name only in its last bytes; returns (head, where
    that name goes)."""
    marker_at = size - 64
    head = elf([(11, 4096, SYM.size, 2, SYM.size), (3, 8192, size - 8192, 0, 0)], 8192)
    return head, marker_at


_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _substitution(i: int) -> str:
    if i == 0:
        return "S_"
    n, s = i - 1, ""
    while True:
        s, n = _DIGITS[n % 36] + s, n // 36
        if n == 0:
            return f"S{s}_"


def demangling_bomb(levels: int) -> str:
    """A mangled name f(A<int>, A<A<int>,A<int>>, …) whose demangled form doubles with each level
    (each parameter names the previous one twice by substitution): 249 bytes at 24 levels
    demangle to 400 MB."""
    return "_Z1f1AIiE" + "".join(f"S_I{_substitution(k + 1) * 2}E" for k in range(levels))
