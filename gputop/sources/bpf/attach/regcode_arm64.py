"""Kernels' device names from an object's own registration code on arm64: regcode.py's scan (read there why it
matters, and how it is bounded) for AAPCS64 code.

nvcc's ``__cudaRegisterFunction(handle, hostFun, deviceFun, deviceName, -1, 0, 0, 0, 0, 0)`` compiles, with gcc
and clang for aarch64, to ``mov w4, #-1`` (the thread limit, ``movn w4, #0``: 0x12800004) among the argument
set-up, the stub's address built in x1 and the name's in x3 each by ``adrp`` + ``add`` (``adrp x3``/``add x3``,
or ``adrp x2``/``add x2`` then ``mov x3, x2`` or the reverse), then ``bl``. Instructions are fixed-width: the
code is read as 32-bit words, and the registers are followed forwards through the words before each call
(``adrp``, ``add`` of an immediate and ``mov`` between registers; any other word whose destination field names a
register makes it unknown, so a load the scanner does not decode is never taken for a constant). The call most
such sites share is the registration function; each site that calls it gives one (stub, name) pair.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

from gputop.sources.bpf.attach.regcode import CHUNK, MAX_CODE_BYTES, two_passes
from gputop.sources.bpf.common import elfread

#: a site's words: the marker this many instructions before the call at most, the arguments followed from
#: this many before it (not past the previous call)
_MARKER_WITHIN = 24
_ARGS_BEFORE = 40
_MARKER = 0x12800004                    # mov w4, #-1 (movn w4, #0)


def _bl_target(word: int, pc: int) -> int | None:
    if word >> 26 != 0b100101:          # bl imm26
        return None
    imm = word & 0x3FFFFFF
    if imm & 0x2000000:
        imm -= 1 << 26
    return pc + 4 * imm


def _sites(words: tuple[int, ...], base: int) -> list[tuple[int, int]]:
    """(call index, call target) of each ``bl`` with the thread-limit marker among the words before it
    (after the previous call), in order."""
    out = []
    last_call = -1
    for i, w in enumerate(words):
        target = _bl_target(w, base + 4 * i)
        if target is None:
            continue
        lo = max(last_call + 1, i - _MARKER_WITHIN)
        if _MARKER in words[lo:i]:
            out.append((i, target))
        last_call = i
    return out


def _follow(words: tuple[int, ...], lo: int, hi: int, base: int) -> dict[int, int]:
    """The registers holding known constants after words[lo:hi] (executed in order from unknown values)."""
    regs: dict[int, int] = {}
    for i in range(lo, hi):
        w = words[i]
        rd = w & 0x1F
        if w & 0x9F000000 == 0x90000000:                               # adrp xd, page
            imm = ((w >> 5) & 0x7FFFF) << 2 | (w >> 29) & 3
            if imm & (1 << 20):
                imm -= 1 << 21
            regs[rd] = ((base + 4 * i) & ~0xFFF) + (imm << 12)
        elif w & 0xFF800000 == 0x91000000 or w & 0xFF800000 == 0x91400000:  # add xd, xn, #imm{, lsl 12}
            rn = (w >> 5) & 0x1F
            imm = ((w >> 10) & 0xFFF) << (12 if w & 0x400000 else 0)
            if rn in regs and rn != 31:
                regs[rd] = regs[rn] + imm
            else:
                regs.pop(rd, None)
        elif w & 0xFFE0FFE0 == 0xAA0003E0:                              # mov xd, xm (orr xd, xzr, xm)
            rm = (w >> 16) & 0x1F
            if rm in regs:
                regs[rd] = regs[rm]
            else:
                regs.pop(rd, None)
        else:
            regs.pop(rd, None)          # written or not: unknown from here (a store's source is kept too)
    return regs


def _pairs(words: tuple[int, ...], base: int, target: int) -> dict[int, int]:
    """host stub -> device name's vaddr, for the sites in ``words`` that call ``target``."""
    out: dict[int, int] = {}
    prev = 0
    for call, tgt in _sites(words, base):
        if tgt != target:
            prev = call + 1
            continue
        regs = _follow(words, max(prev, call - _ARGS_BEFORE), call, base)
        prev = call + 1
        if 1 in regs and 3 in regs:
            out[regs[1]] = regs[3]
    return out


def _chunks(fd: int, segments: list[tuple[int, int, int]], deadline: float) -> Iterator[tuple[int, int, int]]:
    """(vaddr, file offset, size) of the windows the executable segments are read in (4-byte aligned), each
    reaching past the next one's start by a site's words."""
    budget = MAX_CODE_BYTES
    for vaddr, offset, size in segments:
        pos = 0
        while pos < size and budget > 0:
            if time.monotonic() > deadline:
                raise elfread.ElfError("reading the registration code took too long")
            step = min(CHUNK, size - pos, budget) & ~3 or 4
            yield vaddr + pos, offset + pos, min(step + 4 * (_ARGS_BEFORE + 4), size - pos) & ~3
            pos += step
            budget -= step


def _words(fd: int, size: int, offset: int) -> tuple[int, ...]:
    data = elfread.pread_full(fd, size, offset)
    return struct.unpack(f"<{len(data) // 4}I", data[:len(data) & ~3])


def registrations(fd: int, segments: list[tuple[int, int, int]], deadline: float) -> dict[int, int]:
    """Host stub vaddr -> device name vaddr, from the executable ``segments`` ((vaddr, offset, filesz)) of the
    arm64 object open as ``fd``; {} where none is found. Two passes, as regcode.registrations."""
    return two_passes(_chunks(fd, segments, deadline), lambda size, offset: _words(fd, size, offset), _sites,
                      _pairs, deadline)
