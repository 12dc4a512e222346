"""CUDA processes found by what they map, for a gputop that cannot trace (BPF unavailable: a user
without the privileges, a kernel without BPF; not ``--no-bpf``, which asks for NVML's view alone): the
processes whose executable mappings include a CUDA runtime or driver library, as `gputop doctor` lists
them, so that such a user sees which processes use CUDA (their counts unknown: N/A) instead of an
empty table.

Only what ``/proc/PID/maps`` this user may read is seen (its own processes; every one with
CAP_SYS_PTRACE or root). A library is known by its file name (``libcudart.so*``, ``libcuda.so*``): no
object is opened or read here, so a program with the runtime linked in statically is not listed (the
BPF source finds those by their symbols).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from gputop.sources.bpf.attach import discovery

#: an executable mapping of the CUDA runtime or driver (versioned or not, as the toolkit, the wheels and
#: the distributions name them), as a line of /proc/PID/maps: ``start-end perms offset dev inode path``
_CUDA_MAPPING = re.compile(rb"^[0-9a-f]+-[0-9a-f]+ ..x. \S+ \S+ [1-9]\d* +/(?:.*/)?lib(?:cudart|cuda)\.so(?:\.\d+)*"
                           rb"(?: \(deleted\))?$", re.MULTILINE)
#: read at most this much of a process's maps: its own text (a hostile process may map 65,530 areas of
#: long names); 65,530 lines of a typical 100 bytes fit, and a longer one is read this far
MAPS_MAX_BYTES = 8 << 20
#: a walk of every process's maps at most this often (a refresh may come every 0.1 s)
RESCAN_S = 1.0


def maps_cuda(pid: int) -> bool:
    """Whether ``pid`` maps a CUDA runtime or driver library executable (False: no, or not readable).
    One bounded read of its maps (a bounded reader of our own: the text is the process's, a Path's
    read_bytes would take all of it) and a search in C (``in``, the pattern) instead of a parse per line:
    a root gputop without BPF walks every process of the host each ``RESCAN_S``."""
    try:
        with open(discovery.PROC / str(pid) / "maps", "rb", buffering=0) as f:
            chunks: list[bytes] = []
            left = MAPS_MAX_BYTES
            while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
    except OSError:
        return False
    text = b"".join(chunks)
    return b"/libcud" in text and _CUDA_MAPPING.search(text) is not None


class MappedProcesses:
    """The processes mapping a CUDA library, walked at most every ``RESCAN_S`` (one owner: the sampler)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._at: float | None = None
        self._pids: frozenset[int] = frozenset()

    def pids(self) -> frozenset[int]:
        now = self._clock()
        if self._at is None or now - self._at >= RESCAN_S:
            me = os.getpid()
            self._pids = frozenset(pid for pid in discovery.all_pids() if pid != me and maps_cuda(pid))
            self._at = now
        return self._pids
