"""What the BPF program (bpf/) and its user space share, defined once: here. ``cflags`` passes every
constant and map size to the compiler as ``-D``; bpf/gputop.h names them, defines none (it stops
with ``#error`` where one is missing) and holds the maps' types, which user space reads as bcc
compiled them (``table.Leaf``); the Python side imports the constants from this module.
"""

from __future__ import annotations

from collections.abc import Mapping

from gputop import latency, model

#: memcpy directions: D_H2D ... D_UNK index the per-direction arrays in the order of
#: ``model.MEMCPY_DIRECTIONS`` (D_UNK the last: the C side counts a direction out of range as unknown)
NDIR = len(model.MEMCPY_DIRECTIONS)
D_H2D, D_D2H, D_D2D, D_H2H, D_UNK = (model.MEMCPY_DIRECTIONS.index(d) for d in ("h2d", "d2h", "d2d", "h2h", "unknown"))
#: prefetch destinations (``model.PREFETCH_DIRECTIONS``: to_device, to_host)
NPREFETCH = len(model.PREFETCH_DIRECTIONS)
#: log2 buckets: bucket k holds values in [2^k, 2^(k+1)), 0 in bucket 0, the last one open-ended
NB = model.LOG2_BUCKETS
#: NCCL operations (NCCL_<OP>: model.NCCL_OPS' indices), ncclDataType_t values with a known size, and their
#: sizes as a table of log2 sizes, 2 bits per value (bytes = count << ((NCCL_DTYPE_LOG2 >> 2 * dtype) & 3))
NNCCL = len(model.NCCL_OPS)
NCCL_DTYPES = len(model.NCCL_DTYPE_BYTES)
NCCL_DTYPE_LOG2 = sum((size.bit_length() - 1) << 2 * i for i, size in enumerate(model.NCCL_DTYPE_BYTES))
#: ncclCommInitRank*'s results that create a communicator: ncclSuccess, ncclInProgress (non-blocking)
NCCL_SUCCESS, NCCL_IN_PROGRESS = 0, 7
#: sync latency buckets (gputop/latency.py: log-linear nanoseconds) and the synchronisation APIs timed apart
#: (SYNC_<API>: latency.APIS' indices)
NSLAT = latency.BUCKETS
SLAT_MIN_LOG2 = latency.MIN_LOG2
SLAT_MAX_LOG2 = latency.MAX_LOG2
SLAT_SUB_BITS = latency.SUB_BITS
NSYNC = len(latency.APIS)
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

#: fair share of the events (bpf/life.bpf.h): a rescan asked or a file named is not asked again for
#: COALESCE_NS unless user space took it; each tenant's events are counted over EVENT_WINDOW_NS windows
COALESCE_NS = 1_000_000_000
EVENT_WINDOW_NS = 1_000_000_000

#: known_files' states: a file user space probed (its mappings still start a rescan: code ranges), and
#: one that is not a CUDA object (its mappings send nothing)
FILE_PROBED, FILE_NOT_CUDA = 1, 2
#: the bits of struct inode's change-time nanoseconds that are nanoseconds (all below 10^9 < 2^30; Linux
#: 6.13 keeps a flag in bit 31)
CTIME_NSEC_MASK = (1 << 30) - 1
#: a graph content's flags (gid_t.flags): its kernel count is not known (a conditional node, a part
#: gputop did not see built: never launched as known); a node or part could not be stored (its count is
#: exact, its kernels by function are not)
G_UNKNOWN, G_LOST = 1, 2

#: call sites (bpf/sites.bpf.h): a sampled stack's frames (innermost first; a power of two), the frames
#: skipped beyond them at most (C-stack shims), the thread states looked through for the launching thread
#: (the main thread is the list's last),
#: the bytes read of each frame (a power of two), an offset a CPython version does not have, a stack's
#: flags (Python frames, a native caller, cut), a thread known to have no thread state (py_threads) and the
#: samples of such a thread of which one looks for it again
STACK_DEPTH, STACK_SKIP, PY_THREADS, FRAME_WINDOW, NO_OFFSET = 32, 16, 128, 128, 0xFFFF
STACK_PYTHON, STACK_NATIVE, STACK_TRUNCATED = 1, 2, 4
NO_TSTATE, NO_TSTATE_RETRY = 1, 16

#: what the ``dropped`` array counts, by index: records (procs), kernels, names, allocations, ranges,
#: captures, ring-buffer events, batch entries past BATCH_MAX, copies to or from CUDA arrays (their bytes
#: are not known), graph records, sync latency histograms (a process's syncs of one API: their calls and
#: time are still counted), call-site samples (their launches are still counted). The C side names index i
#: DROP_<KIND> (DROP_PROCS ... DROP_CALL_SITES).
DROP_KINDS = ("procs", "kernels", "names", "allocs", "ranges", "captures", "events", "batch", "array", "graphs",
              "sync_hists", "call_sites")
NDROP = len(DROP_KINDS)

#: the classes of table entries a tenant has a share of (bpf/share.bpf.h), by index: process owners,
#: records, (process, kernel) pairs, names and aliases, registrations, allocations, their address
#: ranges, captures under way, graph contents with graphs, execs and parts, graph nodes, sync latency
#: histograms (a process's, per API), sampled call stacks, and their sample counts by kernel (call sites),
#: streams that joined a capture and events recorded into one. The C side names index i SH_<KIND>.
SHARE_KINDS = ("owners", "procs", "kernels", "names", "name_ptrs", "allocs", "ranges", "captures", "graphs",
               "graph_nodes", "sync_hists", "call_stacks", "call_sites", "joins", "capture_events")
NSHARE = len(SHARE_KINDS)
#: the class each table's entries are charged as (the tables user space deletes entries of)
SHARE_OF = {"procs": "procs", "owners": "owners", "kernels": "kernels", "names": "names", "aliases": "names",
            "name_ptrs": "name_ptrs", "allocs": "allocs", "ranges": "ranges", "capturing": "captures",
            "gids": "graphs", "graphs": "graphs", "execs": "graphs", "gparts": "graphs", "gnodes": "graph_nodes",
            "sync_hist": "sync_hists", "py_stacks": "call_stacks", "py_sites": "call_sites", "joined": "joins",
            "capture_events": "capture_events"}

#: every constant above, by name: what cflags passes
SHARED: dict[str, int] = {k: v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, int)}
SHARED.update({f"DROP_{kind.upper()}": i for i, kind in enumerate(DROP_KINDS)})
SHARED.update({f"SH_{kind.upper()}": i for i, kind in enumerate(SHARE_KINDS)})
SHARED.update({f"SYNC_{api.upper()}": i for i, api in enumerate(latency.APIS)})
SHARED.update({f"NCCL_{op.upper()}": i for i, op in enumerate(model.NCCL_OPS)})

#: the maps' sizes (entries), each map's in one place; a test may pass smaller ones (``cflags(limits)``).
#: ``tracked`` holds MAX_PROCS x 4 and ``ranges`` MAX_ALLOCS x 8 (bpf/gputop.bpf.c)
LIMITS: dict[str, int] = {
    "MAX_PROCS": 4096,              # procs (process records)
    "MAX_KERNELS": 16384,           # kernels: (process, kernel) pairs
    "MAX_ALLOCS": 65536,            # allocs: live allocations
    "MAX_NAMES": 16384,             # names captured, aliases
    "MAX_THREADS": 16384,           # each per-thread table (pend_*, via_layer)
    "MAX_CODE": 262144,             # code: blocks of CUDA code ranges
    "MAX_KSLOTS": 16384,            # kslots: launch slots (a power of two)
    "MAX_NAME_PTRS": 1048576,       # name_ptrs: registered kernels
    "MAX_GRAPHS": 16384,            # gids, graphs, execs, gparts: graph contents, graphs, execs, parts
    "MAX_GRAPH_NODES": 131072,      # gnodes: (graph content, kernel) pairs
    "MAX_SYNC_HISTS": 16384,        # sync_hist: (process, sync API) latency histograms
    "MAX_STACKS": 16384,            # py_stacks: (process, sampled stack)
    "MAX_SITES": 65536,             # py_sites: (process, sampled stack, kernel) sample counts
    "MAX_CAPTURES": 1024,           # capturing: streams that began a capture under way
    "MAX_JOINED": 8192,             # joined: streams that joined a capture
    "MAX_CAPTURE_EVENTS": 4096,     # capture_events: events recorded into a capture
    "MAX_MMAPS": 1024,              # exec_mmap: threads inside an executable mmap (LRU)
    "MAX_FILES": 16384,             # known_files: files user space classified (LRU)
    "EVENT_PAGES": 64,              # events: the ring buffer's pages (a power of two)
    "MAX_TENANTS": 4096,            # tenant_events: tenants' shares of the events (LRU)
    "TENANT_EVENTS": 2048,          # events a tenant may emit in EVENT_WINDOW_NS (the rest: its drops)
    "TENANT_SHARE_PCT": 50,         # the part of each table (share class) one tenant may hold, percent
}


def cflags(limits: Mapping[str, int] | None = None) -> list[str]:
    """``-DNAME=VALUE`` for every map size (``limits`` for those it names) and shared constant (unsigned
    64-bit where it needs more than 31 bits)."""
    unknown = set(limits or ()) - set(LIMITS)
    if unknown:
        raise ValueError(f"no such map size: {', '.join(sorted(unknown))}")
    values = {**LIMITS, **(limits or {}), **SHARED}
    return [f"-D{k}={v}ULL" if v >= 1 << 31 else f"-D{k}={v}" for k, v in values.items()]
