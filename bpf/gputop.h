// What gputop's BPF program (gputop.bpf.c and its *.bpf.h) and its user space (gputop/sources/bpf/)
// share: the layouts of the maps' keys and values and of the ring buffer's events, and the names of
// the constants both sides use. User space reads the maps through the types bcc gives each of them
// (bpf["procs"].Leaf is struct proc_t as compiled), so only constants cross by hand, each with one owner:
// - user space's, defined once in gputop/sources/bpf/common/abi.py and passed as -D (abi.cflags): the map
//   sizes (abi.LIMITS: MAX_*), memcpy directions (D_*), drop kinds (DROP_*), graph content flags
//   (G_*), event types (EV_*) and the rest checked below; this header stops where one is missing;
// - the program's own, never read by user space: the allocation kinds (K_*) and BATCH_MAX, here.
// The ring buffer's events have no bcc type: gputop/sources/bpf/lifecycle/events.py declares event_t and
// file_event_t again (ctypes), held to these as compiled by tests/unit/test_bpf_abi.py.
#ifndef __GPUTOP_H
#define __GPUTOP_H

#if !defined(NDIR) || !defined(D_UNK) || !defined(NPREFETCH) || !defined(NB) || !defined(NAME_LEN) || \
    !defined(PATH_DEPTH) || !defined(PATH_NAME) || !defined(KS_GRID) || !defined(KS_BLOCK) || \
    !defined(KS_CLAIMED) || !defined(KS_GEN_SHIFT) || !defined(GEN_SHIFT) || !defined(GEN_MASK) || \
    !defined(CAPTURES_FORGOTTEN) || !defined(HIT_RETURN) || !defined(CODE_LAYER) || !defined(EV_FILE) || \
    !defined(FILE_NOT_CUDA) || !defined(CTIME_NSEC_MASK) || !defined(G_LOST) || !defined(NDROP) || \
    !defined(DROP_GRAPHS) || !defined(COALESCE_NS) || !defined(EVENT_WINDOW_NS) || !defined(NSHARE) || \
    !defined(SH_GRAPH_NODES) || !defined(SH_SYNC_HISTS) || !defined(DROP_SYNC_HISTS) || !defined(NSLAT) || \
    !defined(SLAT_MIN_LOG2) || !defined(SLAT_MAX_LOG2) || !defined(SLAT_SUB_BITS) || !defined(NSYNC) || \
    !defined(SYNC_DEVICE) || !defined(SYNC_CONTEXT) || !defined(NNCCL) || !defined(NCCL_DTYPES) || \
    !defined(NCCL_DTYPE_LOG2) || !defined(NCCL_ALLREDUCE) || !defined(NCCL_RECV) || !defined(NCCL_SUCCESS) || \
    !defined(NCCL_IN_PROGRESS) || !defined(STACK_DEPTH) || !defined(STACK_SKIP) || !defined(PY_THREADS) || \
    !defined(FRAME_WINDOW) || !defined(NO_OFFSET) || !defined(STACK_PYTHON) || !defined(STACK_NATIVE) || \
    !defined(STACK_TRUNCATED) || !defined(NO_TSTATE) || !defined(NO_TSTATE_RETRY) || !defined(SH_CALL_SITES) || !defined(SH_CALL_STACKS) || !defined(DROP_CALL_SITES) || \
    !defined(SH_JOINS) || !defined(SH_CAPTURE_EVENTS)
#error "compile with gputop/sources/bpf/common/abi.py's cflags(): the constants shared with user space are defined there"
#endif
#if !defined(MAX_PROCS) || !defined(MAX_KERNELS) || !defined(MAX_KSLOTS) || !defined(MAX_NAMES) || \
    !defined(MAX_NAME_PTRS) || !defined(MAX_ALLOCS) || !defined(MAX_CODE) || !defined(MAX_THREADS) || \
    !defined(MAX_GRAPHS) || !defined(MAX_GRAPH_NODES) || !defined(MAX_CAPTURES) || !defined(MAX_JOINED) || \
    !defined(MAX_CAPTURE_EVENTS) || !defined(MAX_MMAPS) || !defined(MAX_FILES) || !defined(EVENT_PAGES) || \
    !defined(MAX_TENANTS) || !defined(TENANT_EVENTS) || !defined(TENANT_SHARE_PCT) || !defined(PID_GEN_WORDS) || \
    !defined(MAX_SYNC_HISTS) || !defined(MAX_STACKS) || !defined(MAX_SITES)
#error "compile with gputop/sources/bpf/common/abi.py's cflags() and PID_GEN_WORDS: the map sizes are defined there"
#endif

// what map operations return (Linux's errno values, fixed for every architecture: asm-generic/errno-base.h,
// which not every kernel's headers bring in here)
#ifndef EEXIST
#define EEXIST 17
#endif
#ifndef ENOSPC
#define ENOSPC 28
#endif

// the byte offsets of a frame's fields within the FRAME_WINDOW bytes read of it, bounded for the verifier
#define FRAME_WINDOW_ALIGN8 ((FRAME_WINDOW - 8) & ~7)
#define FRAME_WINDOW_ALIGN4 ((FRAME_WINDOW - 4) & ~3)
_Static_assert((STACK_DEPTH & (STACK_DEPTH - 1)) == 0 && (FRAME_WINDOW & (FRAME_WINDOW - 1)) == 0,
               "masks need powers of two");

// entries of one batch call (copies, prefetches) counted; the rest are dropped (DROP_BATCH)
#define BATCH_MAX 64

// allocation kinds: what the allocs and ranges maps hold (also how a copy's direction is classified)
enum alloc_kind {
    K_NONE = 0,
    K_DEVICE = 1,
    K_MANAGED = 2,
    K_PINNED = 3,
};

// A process's record (the procs map). Each counter only grows; user space reads them by name
// (gputop/counters.py's rows name the members they read: tests/unit/test_counters.py holds the two
// to each other through this struct as compiled).
struct proc_t {
    u64 launches;               // launches, grid and block sums of kernels the table had no room for
    u64 graph_launches;
    u64 captured_launches;
    u64 graph_kernel_launches;  // kernels run by graph launches whose graph gputop saw built
    u64 graph_unknown_launches; // graph launches whose kernel count is not known
    u64 memcpy_calls[NDIR];
    u64 memcpy_bytes[NDIR];
    u64 alloc_calls;
    u64 alloc_bytes;
    u64 free_calls;
    s64 live_bytes;
    u64 managed_alloc_calls;
    u64 managed_alloc_bytes;
    u64 prefetch_calls[NPREFETCH];  // to_device, to_host
    u64 prefetch_bytes[NPREFETCH];
    u64 uvm_cpu_faults;
    u64 sync_calls;
    u64 sync_ns;
    u64 memset_calls;
    u64 memset_bytes;
    u64 nccl_all_calls;         // NCCL collectives and point-to-point calls (all operations)
    u64 nccl_all_bytes;         // their bytes (calls of a datatype gputop does not know: not in here)
    u64 nccl_untyped_calls;     // calls whose datatype gputop does not know
    u64 nccl_group_calls;       // ncclGroupStart
    u64 nccl_comms;             // communicators created (ncclCommInitRank*, at a successful return)
    u64 nccl_nranks;            // the largest of them: its size and this process's rank in it (levels,
    u64 nccl_rank;              // not sums: retire.py keeps the larger communicator's)
    u64 grid_sum;
    u64 block_sum;
    u64 capturing;              // captures under way in this process (streams that began one)
    u64 exited_ns;              // set when the process's leader exits
    char comm[16];              // of the thread that created the record (short-lived processes)
    u64 grid_hist[NB];
    u64 block_hist[NB];
    u64 copy_hist[NDIR * NB];
    u64 nccl_calls[NNCCL];      // by operation (NCCL_*)
    u64 nccl_bytes[NNCCL];
};

// A CPU's probe runs (the hits per-CPU array, by HIT_*): the entry element also counts the launches this
// CPU counted and holds the launch at which it takes its next call-site sample (sites.bpf.h)
struct hit_t {
    u64 runs;
    u64 launches;
    u64 next;
};

// Where a process's CPython keeps its threads and frames (py_procs: written by user space,
// gputop/sources/bpf/pystacks/): _PyRuntime's address and the byte offsets of its version
// (NO_OFFSET: not in that version)
struct pyproc_t {
    u64 runtime;                // &_PyRuntime
    u64 code_tag_mask;          // low bits of a frame's code word that are tags (3.14's stack references)
    u64 pidns_dev;              // the process's PID namespace, when not the host's: its threads' ids
    u64 pidns_ino;              // as the process sees them (0: the host's)
    u32 interp_head;            // _PyRuntime.interpreters.head
    u32 threads_head;           // PyInterpreterState's first PyThreadState
    u32 ts_next;
    u32 ts_native_tid;
    u32 ts_thread_id;           // PyThreadState.thread_id: the thread's pthread_self()
    u32 ts_frame;               // the thread's current frame (3.11, 3.12: its _PyCFrame)
    u32 cframe_current;         // _PyCFrame.current_frame (3.11, 3.12), else NO_OFFSET
    u32 fr_previous;            // a frame's caller, code, instruction (f_lasti, or a pointer) and owner
    u32 fr_code;
    u32 fr_instr;
    u32 fr_owner;
    u32 owner_cstack;           // the owner of C-stack shim frames (skipped), and those above it
    u32 instr_is_index;         // fr_instr is an int (f_lasti), not a pointer
    u32 frame_window;           // the bytes from a frame's start its fields above lie in (<= FRAME_WINDOW)
    u32 pad;
    u64 unrecorded;             // samples of the process no table had room for (the BPF side counts them)
};

// one frame of a sampled stack: its code object and instruction (f_lasti; or the instruction pointer's
// distance from the code object), or a native caller's return address (instr 0)
struct pyframe_t {
    u64 code;
    u64 instr;
};
struct pystack_t {              // py_stacks: a process's sampled stack, innermost frame first
    u32 depth;
    u32 flags;                  // STACK_PYTHON, STACK_NATIVE, STACK_TRUNCATED
    struct pyframe_t frames[STACK_DEPTH];
};
struct stack_scratch_t {        // a walk's stack and its window on the frame being read
    struct pystack_t st;
    u64 busy;                   // a walk is under way on this CPU (a preempted one)
    u64 func;                   // the sampled launch's kernel and entry stack pointer (site_handoff)
    u64 sp;
    u8 window[FRAME_WINDOW];
};
struct site_key_t {             // py_sites: (process, stack, kernel) -> samples
    u32 tgid;
    u32 gen;
    u64 stack;
    u64 func;
};

struct tkey_t {                 // (process, address) keys: the process is (tgid, gen), see gen_of
    u32 tgid;
    u32 gen;
    u64 addr;
};

// A process's synchronisations of one API (the sync_hist map, keyed (process, SYNC_*): sync.bpf.h): how
// many returned, their durations' sum and their log-linear buckets (gputop/latency.py)
struct slat_t {
    u64 count;
    u64 sum_ns;
    u64 bucket[NSLAT];
};

struct kstat_t {
    u64 launches;
    u64 grid_sum;
    u64 block_sum;
};

// A launch slot (the kslots array: launch.bpf.h). owner: the process (tgid | gen << KS_GEN_SHIFT) |
// KS_READY once func and the counters are set, | KS_CLAIMED while they are being set; 0: free
struct kslot_t {
    u64 func;
    u64 grid0;                  // the shape of the pair's first launch: grid and block sizes
    u64 block0;
    u64 launches0;              // launches of exactly that shape
    u64 launches;               // launches of other shapes, and their grid and block sums
    u64 grid_sum;
    u64 block_sum;
    u64 grid_bucket[KS_GRID];   // bucket + 1 (0: free)
    u64 grid_count[KS_GRID];
    u64 block_bucket[KS_BLOCK];
    u64 block_count[KS_BLOCK];
    u64 owner;                  // last: user space frees a slot by zeroing it front to back
};

struct name_t {
    char name[NAME_LEN];
};

struct name_ptr_t {             // a registered kernel's name: where the program keeps it, and since when
    u64 ptr;
    u64 boot_ns;
};

struct pending_t {              // entry state of calls with a return probe (alloc, sync, names)
    u64 sp;                     // stack pointer at the outermost entry
    u64 ip;                     // the outermost entry's probed address
    u64 out;                    // out-pointer
    u64 size;
    u64 ts;
    u64 name;                   // user pointer to a name, or a kernel handle
    u32 kind;
    u32 depth;
};

struct alloc_t {
    u64 size;
    u32 kind;
    u32 pad;
};

struct range_key_t {            // LPM key: tgid, gen and address, big-endian
    u32 prefixlen;
    u8 data[16];
};

// a capture: the stream that began it, and when
struct cap_t {
    u64 origin;
    u64 seq;
    u64 gid;                    // the graph content it records into (0: unknown)
};

struct pend_cap_t {             // a cudaStreamBeginCapture(ToGraph) under way
    u64 stream;
    u64 graph;                  // ToGraph: the graph captured into, else 0
};

struct via_t {                  // a thread's last entry into a driver-level layer
    u64 sp;
    u64 ra;
};

// graph contents (graph.bpf.h): a content's kernel count, launches and flags (G_UNKNOWN, G_LOST)
struct gid_t {
    u64 kernels;
    u64 launches;
    u32 flags;
    u32 pad;
};
struct graph_t {
    u64 gid;
    u64 frozen;
};
struct gkey_t {                 // (process, content, item): a function (gnodes) or a part's gid (gparts)
    u32 tgid;
    u32 gen;
    u64 gid;
    u64 item;
};

struct event_t {
    u64 ts;                     // bpf_ktime_get_ns (CLOCK_MONOTONIC)
    u32 tgid;
    u16 type;                   // EV_EXEC, EV_MMAP (an executable mapping), EV_EXIT, EV_EXIT_IDLE (no record),
                                // EV_FORK, EV_FILE (an executable mapping of a file user space has not
                                // classified: a file_event_t)
    u16 gen;                    // the process's generation (gen_of) when the event was emitted
};

// Who emits an event (life.bpf.h): a uid, and for uid 0 the cgroup (0 for other uids). Its share of the
// events: how many it emitted in the window that began at window_ns, and how many it lost, ever.
struct tenant_t {
    u32 uid;
    u32 pad;
    u64 cgroup;
};
struct share_t {
    u64 window_ns;
    u64 used;
    u64 dropped;
};
// A tenant's share of the tables, by class (SH_*: abi.SHARE_KINDS): the entries the BPF side made and
// deleted (held, its own), the entries it could not make over the tenant's share (lost); and the
// entries user space deleted (released, user space's own). The tenant holds held - released.
struct held_t {
    s64 held[NSHARE];
    u64 lost[NSHARE];
};
struct credit_t {
    s64 released[NSHARE];
};

#ifdef FILE_KEYS
// Which file a process maps, read from the kernel's structs at offsets user space took from the
// running kernel's BTF (OFF_*: bcc's headers may be another kernel's). With the file's name, up
// to its filesystem's root, user space can still reach a file whose process is gone.
struct file_key_t {
    u64 dev;                    // the kernel's dev_t (major << 20 | minor) of the file's filesystem
    u64 ino;
};
// What user space knows of a file: FILE_PROBED or FILE_NOT_CUDA, for the inode whose change time
// (ns) is ctime. A deleted file's inode number is a new file's soon after (ext4 hands out the lowest
// free one), and the new file has its own change time, which no user can set: its mappings are named
// again instead of being taken for the old file's.
struct known_file_t {
    u64 ctime;
    u64 state;
};
// When a file was last named to user space (life.bpf.h: once per COALESCE_NS), under which change time.
struct named_t {
    u64 ns;
    u64 ctime;
};
struct file_event_t {
    struct event_t h;           // type EV_FILE
    struct file_key_t key;
    u64 ctime;                  // the inode's change time (ns), as fstat gives it
    u32 depth;                  // names[0] is the file's, names[depth - 1] its filesystem root's
    u32 complete;               // 1 when the walk reached that root
    char names[PATH_DEPTH][PATH_NAME];
};
#endif

#endif /* __GPUTOP_H */
