"""Helpers of the BPF source's start-up: reading the mapped ELF objects while the program
compiles, timing each step, and handing the compiler's heap back afterwards."""

from __future__ import annotations

import ctypes
import os
import re
import threading
import time

from gputop.sources.bpf.attach import discovery, symbols
from gputop.sources.bpf.common import elfread

ObjectKey = tuple[int, int]
#: objects the start-up prefetch reads (a library of CUDA's is far smaller); the seconds it may
#: still take once the compile is over
PREFETCH_MAX_BYTES = 64 << 20
GRACE_S = 1.0


def read_object(fd: int, path: str) -> symbols.ObjectSymbols | None:
    """The function symbols of the mapped object open as ``fd``, or None when it holds no CUDA
    entry points (the cheap search of its symbol names first: most objects a host maps are not
    CUDA's). Both reads share one time budget (elfread.BUDGET_S)."""
    t0 = time.monotonic()
    if not symbols.mentions_cuda(fd):
        return None
    return symbols.read_symbols(fd, path, budget_s=max(0.0, elfread.BUDGET_S - (time.monotonic() - t0)))


class Prefetch:
    """Reads every object mapped by a process now, on a thread of its own: what the first scan
    would read after the compile, read during it instead. Results are keyed by (dev, inode), as
    the scan keys objects; the scan still decides everything else (and rereads nothing)."""

    def __init__(self) -> None:
        self._out: dict[ObjectKey, symbols.ObjectSymbols | None] = {}
        self._stop = threading.Event()
        self.elapsed_s = 0.0
        self._thread = threading.Thread(target=self._run, name="gputop-elf", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            for ref in discovery.scan():
                if self._stop.is_set():
                    break
                fd = ref.open()
                if fd is None:
                    continue            # its process is gone: the scan handles it
                try:
                    if os.fstat(fd).st_size <= PREFETCH_MAX_BYTES:      # larger: the scan's workers
                        self._out[ref.key] = read_object(fd, ref.open_path)
                finally:
                    os.close(fd)
        except Exception:       # a prefetch that fails leaves the scan to read as before
            pass
        self.elapsed_s = time.perf_counter() - t0

    def result(self) -> dict[ObjectKey, symbols.ObjectSymbols | None]:
        """The reads done by now (the compile is over): the one under way gets GRACE_S to end,
        the objects not read yet are left to the scan (and its bounded wait)."""
        self._stop.set()
        self._thread.join(GRACE_S)
        return dict(self._out)


class Steps:
    """Records the seconds since the previous call under each name, and the resident memory then."""

    def __init__(self, out: dict[str, float], rss_out: dict[str, int] | None = None) -> None:
        self._out = out
        self._rss = rss_out
        self._t = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self._out[name] = now - self._t
        self._t = now
        if self._rss is not None:
            self._rss[name] = rss_bytes()


def rss_bytes() -> int:
    """This process's resident memory (0 where /proc cannot say)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_heap() -> bool:
    """Give the heap the compiler freed back to the system (glibc keeps freed memory in its arenas:
    clang and LLVM leave tens of megabytes there). False where there is no malloc_trim."""
    try:
        trim = ctypes.CDLL(None).malloc_trim          # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True


#: the compiler's libraries: bcc links clang and LLVM in, and only the compile runs their code
COMPILER_LIBS = re.compile(r"/lib(LLVM|clang)[^/]*\.so[^/]*$")
_MADV_DONTNEED = 4


def release_compiler_pages(smaps: str = "/proc/self/smaps") -> int:
    """Drop from this process the pages of clang's and LLVM's code and read-only data that the
    compile touched (60-80 MB of resident memory, file pages shared with the page cache). Only
    mappings that are not writable and hold no private copy of a page (``Anonymous: 0``) are
    dropped: their every page comes back from the file unchanged if it is ever touched again.
    Returns the bytes that were resident in them."""
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    released = 0
    for start, end, rss_kb in _clean_mappings(smaps):
        if madvise(start, end - start, _MADV_DONTNEED) == 0:
            released += rss_kb * 1024
    return released


def _clean_mappings(smaps: str) -> list[tuple[int, int, int]]:
    """(start, end, resident kB) of the compiler libraries' read-only mappings with no anonymous page."""
    out: list[tuple[int, int, int]] = []
    current: list[int] | None = None            # start, end, rss kB, anonymous kB
    try:
        with open(smaps) as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in [*lines, "end"]:
        head = line.split(None, 5)
        if line == "end" or (head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":")):
            if current is not None and current[3] == 0 and current[2] > 0:
                out.append((current[0], current[1], current[2]))
            current = None
            if line != "end" and len(head) == 6 and "w" not in head[1] and COMPILER_LIBS.search(head[5]):
                lo, hi = head[0].split("-")
                current = [int(lo, 16), int(hi, 16), 0, -1]
        elif current is not None and head:
            if head[0] == "Rss:":
                current[2] = int(head[1])
            elif head[0] == "Anonymous:":
                current[3] = int(head[1])
    return out
