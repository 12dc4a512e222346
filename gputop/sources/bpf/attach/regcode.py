"""Kernels' device names from an object's own registration code (x86-64), for kernels gputop never saw
registered: a process started before gputop, whose ``__cudaRegisterFunction`` calls ran before any probe.

nvcc's registration callback (``__nv_cudaEntityRegisterCallback``, one per translation unit) calls
``__cudaRegisterFunction(handle, hostFun, deviceFun, deviceName, -1, 0, 0, 0, 0, 0)`` once per kernel,
each argument a constant: the host stub's address and the device name's, a string of the object's
read-only data. As the host compiler emits it (gcc and clang, -O0 to -O3, position-independent or not):
``mov r8d, -1`` (the thread limit, ``41 b8 ff ff ff ff``), the stub in rsi (``lea rsi, [rip+d]`` or
``mov esi, imm``), the name in rcx (``lea rcx, [rip+d]``, ``mov ecx, imm``, or ``mov rcx, rdx`` after
``lea rdx``/``mov edx``) and a ``call``, within a few dozen bytes. The call most such sites share is the
registration function (its PLT entry, or the function itself in a program linked with the static
runtime); each site that calls it gives one (stub, name) pair. Only objects whose symbol tables name
``__cudaRegisterFunction`` are scanned (symbols._read): a stripped program linked with the static
runtime is not. Why it matters: an extended lambda's host
stub is named apart from its device function (11,970 of PyTorch 2.15's 24,615 kernels), and a stripped
object has no host stub symbols at all.

Checked against what the process itself registers (tests/torch: all of libtorch_cuda.so's 24,114, one
site's name rejected as not a name). Hostile objects: the code scanned is bounded (MAX_CODE_BYTES, in
CHUNK windows), names are read later, bounded, and taken only when they look like one (``is_name``).
arm64: regcode_arm64.py (the same scan for AAPCS64 code); other architectures: nothing found.
"""

from __future__ import annotations

import itertools
import re
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from gputop.sources.bpf.common import elfread

#: a window's code as an instruction set's decoder takes it (bytes, or arm64's words)
_Code = TypeVar("_Code")

#: code bytes scanned in one object (libtorch_cuda.so has 62 MB) and the window read at a time
MAX_CODE_BYTES = 512 << 20
CHUNK = 16 << 20
#: registrations kept from one object (PyTorch 2.15's libtorch_cuda.so has 24,114): a crafted object's
#: dense sites cost no more memory than these
MAX_REGISTRATIONS = 200_000
#: a call this far after the thread-limit marker is the site's (nvcc's sequences put it 20-30 bytes on)
_CALL_WITHIN = 48
#: the arguments' instructions are looked for this far before the marker, not past the previous site
_ARGS_BEFORE = 48

_MARKER = re.compile(rb"\x41\xb8\xff\xff\xff\xff")             # mov r8d, 0xffffffff
_CALL = re.compile(rb"\xe8", re.S)
# (register, pattern, rip-relative): lea r64, [rip+disp32] or mov r32, imm32
_LOADS = {
    "rsi": ((re.compile(rb"\x48\x8d\x35(....)", re.S), True), (re.compile(rb"\xbe(....)", re.S), False)),
    "rcx": ((re.compile(rb"\x48\x8d\x0d(....)", re.S), True), (re.compile(rb"\xb9(....)", re.S), False)),
    "rdx": ((re.compile(rb"\x48\x8d\x15(....)", re.S), True), (re.compile(rb"\xba(....)", re.S), False)),
}
_RCX_FROM_RDX = b"\x48\x89\xd1"                                 # mov rcx, rdx
_NAME = re.compile(rb"[A-Za-z_$][A-Za-z0-9_$.]*")


def is_name(raw: bytes) -> bool:
    """Whether ``raw`` may be a kernel's device name (a mangled or C identifier), not other data."""
    return _NAME.fullmatch(raw) is not None


def _last_load(code: bytes, lo: int, hi: int, base: int, reg: str, absolute: bool) -> tuple[int, int] | None:
    """(position, value) of the last load of a constant into ``reg`` in code[lo:hi] (vaddr of code[0] is
    ``base``): rip-relative; also an immediate where the object is linked at a fixed address
    (``absolute``: elsewhere a 0xbe byte inside another instruction is not taken for one)."""
    best: tuple[int, int] | None = None
    for pattern, rip in _LOADS[reg]:
        if not rip and not absolute:
            continue
        for m in pattern.finditer(code, lo, hi):
            value = struct.unpack("<i" if rip else "<I", m.group(1))[0]
            if best is None or m.start() > best[0]:
                best = (m.start(), base + m.end() + value if rip else value)
    return best


def _sites(code: bytes, base: int) -> list[tuple[int, int, int]]:
    """(marker position, call position, call target) of each call within reach after a thread-limit
    marker, in order."""
    out = []
    for m in _MARKER.finditer(code):
        for c in _CALL.finditer(code, m.end(), min(len(code), m.end() + _CALL_WITHIN)):
            if c.start() + 5 <= len(code):
                rel = struct.unpack_from("<i", code, c.start() + 1)[0]
                out.append((m.start(), c.start(), base + c.start() + 5 + rel))
    return out


def _pairs(code: bytes, base: int, target: int, absolute: bool) -> dict[int, int]:
    """host stub -> device name's vaddr, for the sites in ``code`` that call ``target`` (each marker's
    first such call)."""
    out: dict[int, int] = {}
    prev = 0
    for at, call, tgt in _sites(code, base):
        if tgt != target or at < prev:
            continue
        lo = max(prev, at - _ARGS_BEFORE)
        prev = call + 5
        stub = _last_load(code, lo, call, base, "rsi", absolute)
        name = _last_load(code, lo, call, base, "rcx", absolute)
        if name is None and _RCX_FROM_RDX in code[lo:call]:
            name = _last_load(code, lo, call, base, "rdx", absolute)
        if stub is not None and name is not None:
            out[stub[1]] = name[1]
    return out


def _chunks(fd: int, segments: list[tuple[int, int, int]], deadline: float) -> Iterator[tuple[int, int, int]]:
    """(vaddr, file offset, size) of the windows the executable segments are read in, each reaching past
    the next one's start by a site's length (a site across the boundary is whole in one of them)."""
    budget = MAX_CODE_BYTES
    for vaddr, offset, size in segments:
        pos = 0
        while pos < size and budget > 0:
            if time.monotonic() > deadline:
                raise elfread.ElfError("reading the registration code took too long")
            step = min(CHUNK, size - pos, budget)
            yield vaddr + pos, offset + pos, min(step + _ARGS_BEFORE + _CALL_WITHIN + 16, size - pos)
            pos += step
            budget -= step


def registrations(fd: int, segments: list[tuple[int, int, int]], deadline: float, *,
                  absolute: bool = False) -> dict[int, int]:
    """Host stub vaddr -> device name vaddr, from the executable ``segments`` ((vaddr, offset, filesz)) of
    the object open as ``fd`` (``absolute``: linked at a fixed address, ET_EXEC); {} where none is found.
    Two passes over the code (the registration function is the call most sites share), holding one
    window at a time; ElfError past the deadline."""
    return two_passes(_chunks(fd, segments, deadline), lambda size, offset: elfread.pread_full(fd, size, offset),
                      _sites, lambda code, vaddr, target: _pairs(code, vaddr, target, absolute), deadline)


def two_passes(windows: Iterable[tuple[int, int, int]], read: Callable[[int, int], _Code],
               sites: Callable[[_Code, int], Sequence[tuple[int, ...]]],
               pairs: Callable[[_Code, int, int], dict[int, int]], deadline: float) -> dict[int, int]:
    """The two passes of ``registrations`` for any instruction set: ``sites`` of each window (``read`` as
    (size, offset)), each ending with the call's target; the target most sites share is the registration
    function, and ``pairs`` gives each window's (stub, name) pairs for it."""
    targets: Counter[int] = Counter()
    with_sites = []
    for vaddr, offset, size in windows:
        found = sites(read(size, offset), vaddr)
        if found:
            targets.update(site[-1] for site in found)
            with_sites.append((vaddr, offset, size))
    if not targets:
        return {}
    target = targets.most_common(1)[0][0]
    out: dict[int, int] = {}
    for vaddr, offset, size in with_sites:
        if time.monotonic() > deadline:
            raise elfread.ElfError("reading the registration code took too long")
        out.update(pairs(read(size, offset), vaddr, target))
        if len(out) >= MAX_REGISTRATIONS:
            return dict(itertools.islice(out.items(), MAX_REGISTRATIONS))
    return out
