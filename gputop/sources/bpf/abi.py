"""What bpf/gputop.bpf.c and its user space share, defined once: here. ``cflags`` passes every constant
to the compiler as ``-D``; the C side declares none of them (it stops with ``#error`` where one is
missing), and the Python side imports them from this module.
"""

from __future__ import annotations

from gputop import model

#: memcpy directions (the order of ``model.MEMCPY_DIRECTIONS``: D_H2D ... D_UNK index them)
NDIR = len(model.MEMCPY_DIRECTIONS)
#: prefetch destinations (``model.PREFETCH_DIRECTIONS``: to_device, to_host)
NPREFETCH = len(model.PREFETCH_DIRECTIONS)
#: log2 buckets: bucket k holds values in [2^k, 2^(k+1)), 0 in bucket 0, the last one open-ended
NB = model.LOG2_BUCKETS
#: a kernel name captured by the BPF side (name_t), its NUL included: a name of NAME_LEN - 1 may be cut
NAME_LEN = 256
#: a mapped file's path as file_event_t carries it: this many names from the file up to its fs root,
#: each cut at this many bytes
PATH_DEPTH = 16
PATH_NAME = 64
#: a launch slot's bucket places for launch shapes other than its first (launchslots.py), and its owner
#: word's flags above the tgid: counting for (tgid, func), or being set up
KS_GRID = 4
KS_BLOCK = 2
KS_READY = 1 << 32
KS_CLAIMED = 2 << 32
#: ... and where the owning process's generation starts in it (the tgid is the low 32 bits)
KS_GEN_SHIFT = 48
#: a process is (tgid, generation): the generation of a PID (a byte) is bumped when a traced process
#: under it exits; identities pack both as ``tgid | gen << 32`` (the procs and tracked keys, the first
#: 8 bytes of every (process, address) key)
GEN_SHIFT = 32
GEN_MASK = 0xFF
#: capture_n's counters: captures begun and ended (BPF), and those user space forgot (a process that
#: exited capturing)
CAPTURES_BEGUN, CAPTURES_ENDED, CAPTURES_FORGOTTEN = 0, 1, 2
#: the hits array: uprobe program runs at function entry and at return
HIT_ENTRY, HIT_RETURN = 0, 1
#: values of the code trie: the runtime's and driver's code, a driver-level layer's text (rule 7)
CODE_CUDA, CODE_LAYER = 1, 2
#: event_t.type: an exec, an executable mapping (or a thread's exec), an exit with a record to read, an
#: exit without one, a fork, a mapped file gputop could not name (file_event_t)
EV_EXEC, EV_MMAP, EV_EXIT, EV_EXIT_IDLE, EV_FORK, EV_FILE = 1, 2, 3, 4, 5, 6

#: known_files' states: a file user space probed (its mappings still start a rescan: code ranges), and
#: one that is not a CUDA object (its mappings send nothing)
FILE_PROBED, FILE_NOT_CUDA = 1, 2
#: the bits of struct inode's change-time nanoseconds that are nanoseconds (all below 10^9 < 2^30; Linux
#: 6.13 keeps a flag in bit 31)
CTIME_NSEC_MASK = (1 << 30) - 1

#: every constant above, by name: what cflags passes
SHARED: dict[str, int] = {k: v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, int)}


def cflags() -> list[str]:
    """``-DNAME=VALUE`` for every shared constant (unsigned 64-bit where it needs more than 31 bits)."""
    return [f"-D{k}={v}ULL" if v >= 1 << 31 else f"-D{k}={v}" for k, v in SHARED.items()]
