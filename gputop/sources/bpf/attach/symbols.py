"""ELF symbols of mapped objects: which CUDA entry points an object holds, and address -> name.

Symbols come from ``.dynsym`` and ``.symtab`` (a program with the runtime linked in statically
has its CUDA entry points as local symbols in ``.symtab`` only). Tables are cached per object
(device, inode). Names are demangled with binutils' ``c++filt``.
"""

from __future__ import annotations

import bisect
import glob
import os
import re
import resource
import select
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import lru_cache

from gputop import safefiles
from gputop.sources.bpf.attach import regcode, regcode_arm64
from gputop.sources.bpf.attach.catalogue import is_driver_layer, is_runtime_wrapper
from gputop.sources.bpf.common import elfread

# a cheap pre-filter: objects that mention none of these never hold CUDA entry points (nor NCCL's: NCCL built
# against a shared runtime holds none of the runtime's)
_MARKERS = (b"cudaLaunchKernel", b"cuLaunchKernel", b"cudaMemcpy", b"cuMemcpy", b"cudaMalloc", b"cuMemAlloc",
            b"ncclAllReduce")


# names of the CUDA runtime's and driver's own functions (public, internal, static-archive members)
_CUDA_CODE = re.compile(r"^(_{0,2}cuda|cu[A-Z]|cudbg|libcudart_static_|_ZN\d+cudart|_?_?cudart|_ZN\d+cuda)")
#: functions whose first bytes are kept, to tell a thunk from a body (catalogue.INTERNAL_LAUNCH)
_KEEP_CODE = ("__cudaLaunchKernel", "__cudaLaunchKernel_ptsz")
#: bytes kept of each: x86-64's longest thunk (endbr64, a frame made and undone, jmp rel32) is 14 bytes; the
#: aarch64 runtimes' is five instructions (symbols._arm64_jump_target), 20
CODE_HEAD_BYTES = 32


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
    #: (vaddr, offset, filesz) of read-only data PT_LOAD segments (.rodata: registered kernel names)
    rodata: list[tuple[int, int, int]] = field(default_factory=list)
    #: host stub -> its device name's vaddr, from the object's registration code (regcode.py)
    registered: dict[int, int] = field(default_factory=dict)
    #: every function the object exports (.dynsym) has a CUDA name: it is the runtime or the driver
    all_exports_cuda: bool = False
    #: first code bytes of the functions in _KEEP_CODE
    code_heads: dict[str, bytes] = field(default_factory=dict)
    #: the object's ELF machine (e_machine): how its code heads are decoded
    machine: int = elfread.EM_X86_64

    def name_at(self, vaddr: int) -> str | None:
        """The function symbol whose [start, start+size) holds ``vaddr`` (start if size is 0)."""
        i = bisect.bisect_right(self._addrs, vaddr) - 1
        if i < 0:
            return None
        if self._addrs[i] == vaddr or vaddr < self._ends[i]:
            return self._names[i]
        return None

    @property
    def driver_layer(self) -> bool:
        """A driver-level interception layer (catalogue.is_driver_layer)."""
        return is_driver_layer(self.functions)

    def cuda_code_runs(self) -> list[tuple[int, int]]:
        """[start, end) vaddr ranges of the runtime's and driver's code in this object.

        The whole executable text of an object that exports only CUDA functions (libcudart,
        libcuda: their internal code lies outside the exported functions' span). Elsewhere (the
        runtime linked statically into a program or library), maximal runs of consecutive
        functions with CUDA names, so that the program's own code is not included.
        """
        wrapper = is_runtime_wrapper(self.functions)
        if (self.all_exports_cuda or self.driver_layer) and not wrapper:
            # a driver-level layer's calls into the driver are its own, from any of its code (rule 7)
            return [(vaddr, vaddr + size) for vaddr, _off, size in self.segments]
        runs: list[tuple[int, int]] = []
        cur: list[int] | None = None
        for addr, end, name in zip(self._addrs, self._ends, self._names):
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
        return _offset_in(self.segments, vaddr)

    def offset_of_constant(self, vaddr: int) -> int | None:
        """The file offset of ``vaddr`` in a segment whose memory is the file's (read-only data or
        code: a string constant's bytes as loaded); None elsewhere (writable data, not in the file)."""
        at = _offset_in(self.rodata, vaddr)
        return at if at is not None else _offset_in(self.segments, vaddr)

    def jump_target(self, name: str) -> int | None:
        """Where function ``name`` jumps if it is only a jump (a thunk); -1 if it has a body of its
        own; None if its code was not read (see _KEEP_CODE)."""
        vaddr = self.functions.get(name)
        code = self.code_heads.get(name)
        if vaddr is None or code is None:
            return None
        if self.machine == elfread.EM_AARCH64:
            return _arm64_jump_target(vaddr, code)
        if self.machine != elfread.EM_X86_64:
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


#: arm64 instructions a thunk may run before its branch, touching no memory and no control flow: bti c, nop,
#: paciasp; a frame made and undone (stp x29, x30, [sp, #-16]!; mov x29, sp; ldp x29, x30, [sp], #16), as
#: compilers emit it without optimising the frame pointer; and (masks) ``sub sp, sp, #n`` / ``add sp, sp, #n``
#: and ``mov wN, wN`` (the upper half cleared): the aarch64 runtimes' ``__cudaLaunchKernel`` is ``sub sp, sp,
#: #0x20; mov w4, w4; mov w2, w2; add sp, sp, #0x20; b cudaLaunchKernel`` (the dims' z zero-extended)
_ARM64_SKIP = frozenset({0xD503245F, 0xD503201F, 0xD503233F})
_ARM64_FRAME = (0xA9BF7BFD, 0x910003FD, 0xA8C17BFD)
_ARM64_SKIP_MASKED = ((0xFFC003FF, 0xD10003FF), (0xFFC003FF, 0x910003FF))


def _arm64_plain(word: int) -> bool:
    """A thunk's instruction before its branch (see _ARM64_SKIP): no memory, no branch."""
    if word in _ARM64_SKIP or any(word & mask == want for mask, want in _ARM64_SKIP_MASKED):
        return True
    # orr wd, wzr, wm with d == m: mov wN, wN
    return word & 0xFFE0FFE0 == 0x2A0003E0 and (word >> 16) & 0x1F == word & 0x1F


def _arm64_jump_target(vaddr: int, code: bytes) -> int:
    """Where arm64 code starting at ``vaddr`` jumps when it is only a jump (``b imm26`` after at most a few
    instructions that touch neither memory nor the control flow, or a frame made and undone); -1 otherwise."""
    words = [int.from_bytes(code[j:j + 4], "little") for j in range(0, len(code) - 3, 4)]
    i = 0
    while i < len(words):
        if tuple(words[i:i + 3]) == _ARM64_FRAME:
            i += 3
        elif _arm64_plain(words[i]):
            i += 1
        else:
            break
    if i >= len(words) or words[i] >> 26 != 0b000101:                 # b imm26
        return -1
    imm = words[i] & 0x3FFFFFF
    if imm & 0x2000000:
        imm -= 1 << 26
    return vaddr + 4 * i + 4 * imm


def _offset_in(segments: list[tuple[int, int, int]], vaddr: int) -> int | None:
    """The file offset of ``vaddr`` in one of ``segments`` ((vaddr, offset, filesz)); None outside them."""
    for seg_vaddr, off, size in segments:
        if seg_vaddr <= vaddr < seg_vaddr + size:
            return off + (vaddr - seg_vaddr)
    return None


#: runtime-layer names (the rest of _CUDA_CODE is the driver's)
_RUNTIME_NAME = re.compile(r"^(_{0,2}cuda|libcudart_static_|_ZN\d+cudart|_?_?cudart)")
_STT_FUNC, _STT_GNU_IFUNC, _STB_LOCAL = 2, 10, 0


@contextmanager
def _descriptor(obj: int | str) -> Iterator[int]:
    """``obj`` itself when it is a descriptor; else the regular file at that path, opened here."""
    if isinstance(obj, int):
        yield obj
        return
    fd = os.open(obj, elfread.OPEN_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"not a regular file: {obj}")
        yield fd
    finally:
        os.close(fd)


def mentions_cuda(obj: int | str, budget_s: float = elfread.BUDGET_S) -> bool:
    """Whether the names of the object's symbols mention a CUDA entry point: searched in the
    string tables of its symbol tables only (where those names are), by bounded reads. An object
    without section headers has no symbol table to probe by."""
    try:
        with _descriptor(obj) as fd:
            return elfread.ElfReader(fd, budget_s).string_tables_mention(_MARKERS)
    except (OSError, elfread.ElfError):
        return False


def read_symbols(obj: int | str, path: str | None = None, budget_s: float = elfread.BUDGET_S) -> ObjectSymbols | None:
    """Function symbols of the ELF object ``obj`` (a descriptor or a path; ``path`` names it);
    None if it is not a readable ELF object within the reader's bounds (elfread)."""
    try:
        with _descriptor(obj) as fd:
            return _read(elfread.ElfReader(fd, budget_s), path or str(obj))
    except (OSError, elfread.ElfError):
        return None


def _read(elf: elfread.ElfReader, path: str) -> ObjectSymbols:
    out = ObjectSymbols(path, elf.elf_type, segments=elf.segments(), rodata=elf.segments(executable=False),
                        machine=elf.machine)
    entries: dict[int, tuple[int, str]] = {}
    exports: list[str] = []
    kept = 0
    for table in elf.symbol_tables():
        funcs = [(name, info >> 4, value, size) for name, info, shndx, value, size in elf.symbols(table)
                 if info & 0xF in (_STT_FUNC, _STT_GNU_IFUNC) and shndx != 0 and value]
        kept += len(funcs)
        if kept > elfread.MAX_FUNCTIONS:
            raise elfread.ElfError("too many function symbols")
        names = elf.names(table, [f[0] for f in funcs])
        for st_name, bind, value, size in funcs:
            name = names.get(st_name, "").split("@", 1)[0]
            if not name:
                continue
            if table.dynamic and bind != _STB_LOCAL:
                exports.append(name)
            # a global definition wins over a local one of the same name
            if name not in out.functions or bind != _STB_LOCAL:
                out.functions[name] = value
            entries.setdefault(value, (size, name))
    out.all_exports_cuda = bool(exports) and all(_CUDA_CODE.match(n) for n in exports)
    for name in _KEEP_CODE:
        off = out.offset_of_vaddr(out.functions[name]) if name in out.functions else None
        if off is not None:
            out.code_heads[name] = elfread.pread_full(elf.fd, CODE_HEAD_BYTES, off)
    for addr in sorted(entries):
        size, name = entries[addr]
        out._addrs.append(addr)
        out._ends.append(addr + size)
        out._names.append(name)
    # objects that call (or define) the registration function: nvcc's code, not a random call's arguments;
    # the symbols stand without them when the object's time runs out first
    if elf.machine in (elfread.EM_X86_64, elfread.EM_AARCH64) and elf.string_tables_mention(
            (b"__cudaRegisterFunction",)):
        with suppress(elfread.ElfError):
            if elf.machine == elfread.EM_AARCH64:
                out.registered = regcode_arm64.registrations(elf.fd, out.segments, elf.deadline)
            else:
                out.registered = regcode.registrations(elf.fd, out.segments, elf.deadline,
                                                       absolute=elf.elf_type == "ET_EXEC")
    return out


#: a mangled name longer than this is not demangled (it is kept as it is): a registered name's cap
#: (discovery.REGISTERED_NAME_MAX); PyTorch's longest is 2,301 bytes (a CUTLASS GEMM)
DEMANGLE_INPUT_MAX = 4096
#: a demangled name longer than this is cut, ending in "…" (a name's demangled form can double with
#: each level of nesting: 250 bytes demangle to 400 MB)
DEMANGLED_MAX = 4096
#: one c++filt run's wall time (past what starting the program costs on this host: _start_s) and address space
DEMANGLE_TIMEOUT_S = 0.5
#: on a host that runs programs slowly (an emulated one: docs/matrix.md's arm64 guests, where c++filt took most
#: of the 0.5 s before it read its name) a run's limit is DEMANGLE_TIMEOUT_S plus twice what starting the program
#: costs there: the quickest of DEMANGLE_START_RUNS runs on a one-letter name (measured once per program; the
#: quickest, so that a moment of load does not lengthen every run after it), counted up to DEMANGLE_START_MAX_S
DEMANGLE_START_MAX_S = 1.0
DEMANGLE_START_RUNS = 3
#: runs of one name before it is kept as it is (a failed run is not taken as its answer)
DEMANGLE_TRIES = 3
_DEMANGLE_AS_BYTES = 256 << 20


#: nvcc's name for a kernel of internal linkage: a prefix of the file's hash before its mangled name
_NV_STATIC = re.compile(r"__nv_static_\d+__\w+?_(?=_Z)")


class Demangler:
    """C++ names demangled with binutils' ``c++filt`` (as ``abi::__cxa_demangle`` does, what PyTorch's
    profiler shows) and, for a name it leaves as it is, LLVM's ``llvm-cxxfilt`` where the host has it
    (binutils 2.40 cannot demangle 475 of PyTorch's kernel names, its CUTLASS GEMMs among them); one
    bounded run per new name, cached. nvcc's internal-linkage prefix (``__nv_static_…__``) is dropped
    before the mangled name.

    Each run is bounded in time (DEMANGLE_TIMEOUT_S past what starting the program costs here: _start_s; then
    killed), memory (its address space) and output (DEMANGLED_MAX: reading stops there and the run is killed).
    ``deadline`` bounds the runs of one refresh together: a name not demangled by then is demangled at a later one.
    """

    def __init__(self, cache_size: int = 65536) -> None:
        self._done: dict[str, str] = {}
        self._failed: dict[str, int] = {}      # names whose runs failed, and how many times
        self._cache_size = cache_size
        self.deadline: float | None = None

    def without_deadline(self, name: str) -> str:
        """``name`` demangled whatever this refresh's deadline (each run is still bounded)."""
        out = self._done.get(name)
        if out is not None:
            return out
        deadline, self.deadline = self.deadline, None
        try:
            return self(name) or name
        finally:
            self.deadline = deadline

    def settled(self, name: str) -> bool:
        """Whether ``name``'s demangled form is known for good (not C++, demangled, or kept as it is after
        DEMANGLE_TRIES failed runs); False while a failed run is still to be tried again."""
        prefix = _NV_STATIC.match(name)
        if prefix is not None:
            return self.settled(name[prefix.end():])
        return not name.startswith("_Z") or len(name) > DEMANGLE_INPUT_MAX or name in self._done

    def __call__(self, name: str) -> str | None:
        """``name`` demangled (or as it is: not C++, too long, or a run that failed); None when
        this refresh's time for demangling is spent."""
        if not name.startswith("_Z") or len(name) > DEMANGLE_INPUT_MAX:
            prefix = _NV_STATIC.match(name)
            if prefix is None:
                return name
            return self(name[prefix.end():])
        out = self._done.get(name)
        if out is not None:
            return out
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return None
        out = _demangle(name)
        if out is None:
            # a run that failed (killed at its deadline: a busy host, or a name built to be slow) is
            # tried again at later refreshes, DEMANGLE_TRIES in all; then the name stays as it is
            tries = self._failed.get(name, 0) + 1
            if tries < DEMANGLE_TRIES:
                if len(self._failed) >= self._cache_size:
                    self._failed.clear()
                self._failed[name] = tries
                return name
            self._failed.pop(name, None)
            out = name
        if len(self._done) >= self._cache_size:
            self._done.clear()
        self._done[name] = out
        return out


@lru_cache(maxsize=1)
def cxxfilt_path() -> str | None:
    return safefiles.which("c++filt")


#: Debian's versioned LLVM installs (llvm-N): their tools are not on PATH by that name
_LLVM_DIRS = "/usr/lib/llvm-*/bin"


@lru_cache(maxsize=1)
def llvm_cxxfilt_path() -> str | None:
    """LLVM's demangler: ``llvm-cxxfilt`` on PATH, else the newest versioned one (``llvm-cxxfilt-N`` on
    PATH, ``/usr/lib/llvm-N/bin``), each only where no other user can change it (safefiles)."""
    found = safefiles.which("llvm-cxxfilt")
    if found is not None:
        return found
    cands: list[tuple[int, str]] = []
    for d in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        with suppress(OSError):
            for entry in os.listdir(d) if d else ():
                m = re.fullmatch(r"llvm-cxxfilt-(\d+)", entry)
                if m:
                    cands.append((int(m[1]), os.path.join(os.path.abspath(d), entry)))
    for path in glob.glob(os.path.join(_LLVM_DIRS, "llvm-cxxfilt")):
        m = re.search(r"/llvm-(\d+)/bin/", path)
        if m:
            cands.append((int(m[1]), path))
    for _v, path in sorted(cands, reverse=True):
        if os.access(path, os.X_OK) and safefiles.untrusted_program(path) is None:
            return path
    return None


def _demangle(name: str) -> str | None:
    """``name`` as c++filt demangles it, else as llvm-cxxfilt does; as it is when neither can; None
    when a run failed (tried again later: Demangler)."""
    gnu = _cxxfilt(name)
    if gnu is not None and gnu != name:
        return gnu
    if llvm_cxxfilt_path() is None:
        return gnu
    llvm = _run(llvm_cxxfilt_path(), name)
    if llvm is not None and llvm != name:
        return llvm
    failed = llvm is None or (gnu is None and cxxfilt_path() is not None)
    return None if failed else name


def _cxxfilt(name: str) -> str | None:
    return _run(cxxfilt_path(), name)


@lru_cache(maxsize=4)
def _start_s(exe: str) -> float:
    """What a run of ``exe`` costs on this host before its input matters: the quickest of DEMANGLE_START_RUNS
    runs on a one-letter name, at most DEMANGLE_START_MAX_S (a run that did not end by then counts as that)."""
    quickest = DEMANGLE_START_MAX_S
    for _ in range(DEMANGLE_START_RUNS):
        t0 = time.monotonic()
        _run_for(exe, "_Z1fv", DEMANGLE_START_MAX_S)
        quickest = min(quickest, time.monotonic() - t0)
    return quickest


def _run(exe: str | None, name: str) -> str | None:
    """One bounded run of a demangler that reads names on its input (c++filt, llvm-cxxfilt); None when it
    failed, was killed, or printed nothing."""
    if exe is None:
        return None
    return _run_for(exe, name, DEMANGLE_TIMEOUT_S + 2 * _start_s(exe))


def _run_for(exe: str, name: str, limit_s: float) -> str | None:
    try:
        proc = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    try:
        # limits before it reads its input (no preexec_fn: the collector is not the only thread)
        with suppress(OSError, ValueError):
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (_DEMANGLE_AS_BYTES, _DEMANGLE_AS_BYTES))
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(name.encode("utf-8", "surrogateescape") + b"\n")
        proc.stdin.close()
        raw = _read_bounded(proc.stdout.fileno(), DEMANGLED_MAX * 4 + 2, time.monotonic() + limit_s)
    except OSError:
        raw = None
    finally:
        proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                with suppress(OSError):
                    f.close()
    if not raw:
        return None
    text = raw.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
    if len(text) > DEMANGLED_MAX or b"\n" not in raw:
        return text[:DEMANGLED_MAX] + "…"
    return text


def _read_bounded(fd: int, limit: int, deadline: float) -> bytes | None:
    """What ``fd`` gives until EOF, ``limit`` bytes or ``deadline``; None at the deadline."""
    out = b""
    poller = select.poll()              # not select(): gputop holds more than 1,024 descriptors with many probes
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while len(out) < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None
        chunk = os.read(fd, limit - len(out))
        if not chunk:
            break
        out += chunk
    return out


#: the collector's demangler (kernelnames sets its deadline per refresh)
DEMANGLER = Demangler()


def demangle_cached(name: str) -> str:
    """``name`` demangled, without a deadline (doctor, tests): a refresh's spent budget does not apply."""
    return DEMANGLER.without_deadline(name)
