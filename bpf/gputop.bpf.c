// gputop's BPF program (bcc). Entry uprobes on the CUDA runtime and driver entry points,
// aggregated in the kernel into fixed-size per-process records; user space reads the maps
// once per refresh and computes deltas (counters are monotonic, never cleared).
//
// Compile-time parameters (set by gputop/sources/bpf.py): MAX_PROCS, MAX_KERNELS, MAX_ALLOCS,
// MAX_NAMES, MAX_THREADS, MAX_CODE (MAX_GRAPHS, MAX_GRAPH_NODES have defaults here); and the constants
// user space shares with this program, defined once in gputop/sources/bpf/abi.py: NDIR, NPREFETCH, NB,
// NAME_LEN, PATH_DEPTH, PATH_NAME, KS_*, CAPTURES_*, HIT_*, CODE_*, EV_*, FILE_*, CTIME_NSEC_MASK.
#include <uapi/linux/ptrace.h>
#ifndef EEXIST
#define EEXIST 17
#endif
#if !defined(NDIR) || !defined(NPREFETCH) || !defined(NB) || !defined(PATH_DEPTH) || !defined(PATH_NAME) || \
    !defined(KS_GRID) || !defined(KS_BLOCK) || !defined(KS_CLAIMED) || !defined(CAPTURES_FORGOTTEN) || !defined(HIT_RETURN) || \
    !defined(CODE_LAYER) || !defined(EV_FILE) || !defined(NAME_LEN) || !defined(FILE_NOT_CUDA) || !defined(CTIME_NSEC_MASK)
#error "compile with gputop/sources/bpf/abi.py's cflags(): the constants shared with user space are defined there"
#endif

// memcpy directions, in the order of gputop.model.MEMCPY_DIRECTIONS (NDIR of them)
#define D_H2D 0
#define D_D2H 1
#define D_D2D 2
#define D_H2H 3
#define D_UNK 4
#ifndef MAX_GRAPHS      // graph contents, graphs, executable graphs, parts (each map)
#define MAX_GRAPHS 16384
#endif
#ifndef MAX_GRAPH_NODES // (graph content, kernel) pairs
#define MAX_GRAPH_NODES 131072
#endif
#ifndef BATCH_MAX      // entries of one batch call (copies, prefetches) counted; the rest are dropped
#define BATCH_MAX 64
#endif

// allocation kinds (also used for memcpy classification)
#define K_NONE 0
#define K_DEVICE 1
#define K_MANAGED 2
#define K_PINNED 3

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
    u64 grid_sum;
    u64 block_sum;
    u64 capturing;              // captures under way in this process (streams that began one)
    u64 exited_ns;              // set when the process's leader exits
    char comm[16];              // of the thread that created the record (short-lived processes)
    u64 grid_hist[NB];
    u64 block_hist[NB];
    u64 copy_hist[NDIR * NB];
};

struct tkey_t {                 // (process, address) keys: the process is (tgid, gen), see gen_of
    u32 tgid;
    u32 gen;
    u64 addr;
};

struct kstat_t {
    u64 launches;
    u64 grid_sum;
    u64 block_sum;
};

struct name_t {
    char name[NAME_LEN];
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

struct event_t {
    u64 ts;                     // bpf_ktime_get_ns (CLOCK_MONOTONIC)
    u32 tgid;
    u16 type;                   // EV_EXEC, EV_MMAP (an executable mapping), EV_EXIT, EV_EXIT_IDLE (no record),
                                // EV_FORK, EV_FILE (an executable mapping of a file user space has not
                                // classified: a file_event_t)
    u16 gen;                    // the process's generation (gen_of) when the event was emitted
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
struct file_event_t {
    struct event_t h;           // type EV_FILE
    struct file_key_t key;
    u64 ctime;                  // the inode's change time (ns), as fstat gives it
    u32 depth;                  // names[0] is the file's, names[depth - 1] its filesystem root's
    u32 complete;               // 1 when the walk reached that root
    char names[PATH_DEPTH][PATH_NAME];
};
#endif

BPF_HASH(procs, u64, struct proc_t, MAX_PROCS);         // key: pkey(tgid)
// processes with names or code ranges but maybe no record: their exit must still be reported
BPF_HASH(tracked, u64, u8, MAX_PROCS * 4);              // key: pkey(tgid)
BPF_HASH(kernels, struct tkey_t, struct kstat_t, MAX_KERNELS);
// The launch fast path. A hash lookup costs a call into the kernel here (~50 ns with its `ret` thunks,
// more than all the rest of the handler), an array lookup is a few inlined instructions. So a
// (process, kernel) counts its launches in a slot of a direct-mapped array, at a hash of the
// pair; its `kernels` entry (made first: the table's capacity and drops are unchanged) keeps the
// launches made while the slot belonged to another pair. A slot keeps the shape (grid and block
// sizes) of the pair's first launch and counts the launches of exactly that shape with one atomic
// add (user space derives their sums and buckets); other shapes add to their own counters, sums
// and log2 buckets (KS_GRID and KS_BLOCK places: a kernel's shapes rarely vary more; the rest go
// to the process record's histograms). Every counter only grows, so every figure user space adds
// up from them does too. User space maps the array (mmap, no system call per read), adds slot and
// entry, and frees a process's slots when it forgets it.
#ifndef MAX_KSLOTS
#define MAX_KSLOTS 16384        // a power of two
#endif
// owner: the process (tgid | gen << KS_GEN_SHIFT) | KS_READY once func and the counters are set,
// | KS_CLAIMED while they are being set; 0: free
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
BPF_F_TABLE("array", u32, struct kslot_t, kslots, MAX_KSLOTS, BPF_F_MMAPABLE);
// Captures under way on the host: begun (0) and ended (1) counted here, (2) the captures of
// processes that exited capturing, counted by user space when it deletes their entries (each
// counter has one writer). Launches look for a capture only while begun - ended - forgotten > 0.
BPF_ARRAY(capture_n, u64, 3);           // [CAPTURES_BEGUN], [CAPTURES_ENDED], [CAPTURES_FORGOTTEN]
BPF_HASH(names, struct tkey_t, struct name_t, MAX_NAMES);
// __cudaRegisterFunction's names stay where the program keeps them (static data): per registration
// only the pointer and when it was made (boot-time ns: user space rejects an entry older than the
// process now holding that PID). Entries are allocated as they come: `import torch` registers
// ~100,000 kernels in every process, which a table of 256-byte names could never hold.
#ifndef MAX_NAME_PTRS
#define MAX_NAME_PTRS 1048576
#endif
struct name_ptr_t {
    u64 ptr;
    u64 boot_ns;
};
BPF_F_TABLE("hash", struct tkey_t, struct name_ptr_t, name_ptrs, MAX_NAME_PTRS, BPF_F_NO_PREALLOC);
BPF_HASH(allocs, struct tkey_t, struct alloc_t, MAX_ALLOCS);
// a capture: the stream that began it, and when
struct cap_t {
    u64 origin;
    u64 seq;
    u64 gid;                    // the graph content it records into (0: unknown)
};
// streams that began a capture under way (deleted at its end)
BPF_HASH(capturing, struct tkey_t, struct cap_t, 1024);
// streams that joined a capture through an event recorded in it: an entry goes stale when its
// capture ends (checked on use; the LRU makes room by evicting the oldest)
BPF_TABLE("lru_hash", struct tkey_t, struct cap_t, joined, 8192);
// events recorded into a capturing stream: waiting on one joins the capture
BPF_TABLE("lru_hash", struct tkey_t, struct cap_t, capture_events, 4096);
BPF_F_TABLE("lpm_trie", struct range_key_t, u32, ranges, MAX_ALLOCS * 8, BPF_F_NO_PREALLOC);
// code of the CUDA runtime and driver in each process (filled by user space from /proc/PID/maps):
// CODE_CUDA, or CODE_LAYER for a driver-level interception layer's text (rule 7); both -D from
// gputop/sources/bpf.py (CODE_KINDS)
BPF_F_TABLE("lpm_trie", struct range_key_t, u32, code, MAX_CODE, BPF_F_NO_PREALLOC);
// [0]: 1 once user space has probed a driver-level layer (rule 7), anywhere on the host
BPF_ARRAY(layers, u32, 1);
struct via_t {                  // a thread's last entry into a driver-level layer
    u64 sp;
    u64 ra;
};
BPF_TABLE("lru_hash", u32, struct via_t, via_layer, MAX_THREADS);
BPF_TABLE("lru_hash", u64, struct pending_t, pend_alloc, MAX_THREADS);
BPF_TABLE("lru_hash", u64, struct pending_t, pend_sync, MAX_THREADS);
BPF_TABLE("lru_hash", u64, struct pending_t, pend_name, MAX_THREADS);
struct pend_cap_t {             // a cudaStreamBeginCapture(ToGraph) under way
    u64 stream;
    u64 graph;                  // ToGraph: the graph captured into, else 0
};
BPF_TABLE("lru_hash", u64, struct pend_cap_t, pend_capture, MAX_THREADS);
BPF_TABLE("lru_hash", u64, u64, exec_mmap, 1024);  // thread -> the struct file being mapped (or 1)
#ifdef FILE_KEYS
// files user space has classified (struct known_file_t): FILE_PROBED (its mappings still start a
// rescan: code ranges), FILE_NOT_CUDA (no event at all); least recently used ones make room
BPF_TABLE("lru_hash", struct file_key_t, struct known_file_t, known_files, 16384);
#endif
// driver or kernel handle -> the host stub or kernel it stands for (names resolved through it)
BPF_HASH(aliases, struct tkey_t, u64, MAX_NAMES);
BPF_PERCPU_ARRAY(zero_proc, struct proc_t, 1);
BPF_PERCPU_ARRAY(name_scratch, struct name_t, 1);
// 0 procs, 1 kernels, 2 names, 3 allocs, 4 ranges, 5 captures, 6 events, 7 batch entries past BATCH_MAX,
// 8 copies to or from CUDA arrays (their bytes are not known), 9 graph records
BPF_ARRAY(dropped, u64, 16);
BPF_RINGBUF_OUTPUT(events, 64);

// A PID is one process only until that process exits, and the kernel may give it to a new process
// before user space has read the old one's last counts (a busy host, a refresh seconds long). So a
// process is (tgid, gen): every PID has a generation, bumped when a process gputop traces under it
// exits, and every key of a process's state holds both (procs, tracked: pkey; tkey_t, gkey_t, the
// tries' keys, a launch slot's owner), so a new process's calls never reach the old one's counts.
// Generations are bytes, eight to a word, indexed by PID (an inlined array lookup on the launch path);
// PID_GEN_WORDS covers the host's pid_max at load (-D from user space; a PID above it is gen 0).
#ifndef PID_GEN_WORDS
#define PID_GEN_WORDS 524288    // pid_max's largest value, 2^22, over 8
#endif
BPF_F_TABLE("array", u32, u64, pid_gen, PID_GEN_WORDS, BPF_F_MMAPABLE);   // user space maps it (procid.PidGens)

static __always_inline u32 gen_of(u32 tgid) {
    u32 i = tgid >> 3;
    u64 *w = pid_gen.lookup(&i);
    return w ? (*(volatile u64 *)w >> ((tgid & 7) * 8)) & 0xff : 0;
}

static __always_inline u64 pkey_gen(u32 tgid, u32 gen) {
    return tgid | (u64)gen << 32;
}

static __always_inline u64 pkey(u32 tgid) {
    return pkey_gen(tgid, gen_of(tgid));
}

// at the exit of a traced process: its PID's next process is a new one (each byte wraps on its own:
// a wrap adds nothing to its neighbour; only this PID's exit writes its byte)
static __always_inline void gen_bump(u32 tgid) {
    u32 i = tgid >> 3;
    u64 *w = pid_gen.lookup(&i);
    if (!w)
        return;
    u32 sh = (tgid & 7) * 8;
    u64 lane = (*(volatile u64 *)w >> sh) & 0xff;
    __sync_fetch_and_add(w, lane == 0xff ? -(0xffULL << sh) : 1ULL << sh);
}

static __always_inline void drop(u32 what) {
    u64 *d = dropped.lookup(&what);
    if (d)
        __sync_fetch_and_add(d, 1);
}

// the process's record, made if it has none; 0 when the table is full (not counted as dropped:
// the caller that gives the call up counts it, once)
static __always_inline struct proc_t *proc_make(u32 tgid) {
    u64 pk = pkey(tgid);
    struct proc_t *p = procs.lookup(&pk);
    if (p)
        return p;
    u32 z = 0;
    struct proc_t *zero = zero_proc.lookup(&z);
    if (!zero)
        return 0;
    // insert, not update: a record another CPU just created must not be replaced under it
    int created = procs.insert(&pk, zero) == 0;
    p = procs.lookup(&pk);
    if (p && created)
        bpf_get_current_comm(p->comm, sizeof(p->comm));
    return p;
}

// the process's record, or 0 when it has none
static __always_inline struct proc_t *proc_of(u32 tgid) {
    u64 pk = pkey(tgid);
    return procs.lookup(&pk);
}

static __always_inline struct proc_t *proc_get(u32 tgid) {
    struct proc_t *p = proc_make(tgid);
    if (!p)
        drop(0);
    return p;
}

// ------------------------------------------------------------------ kernel names (captured)

static __always_inline void track(u32 tgid) {
    u8 one = 1;
    u64 pk = pkey(tgid);
    tracked.update(&pk, &one);
}

static __always_inline void put_name(u32 tgid, u64 addr, u64 user_str) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = addr};
    track(tgid);
    u32 z = 0;
    // a name is 256 bytes: build it in a per-CPU scratch slot, not on the 512-byte stack
    struct name_t *n = name_scratch.lookup(&z);
    if (!n)
        return;
    __builtin_memset(n, 0, sizeof(*n));
    bpf_probe_read_user_str(n->name, NAME_LEN, (void *)user_str);
    if (names.update(&k, n) != 0)
        drop(2);
}

// A registered kernel's name, read at the pair's first launch while the process's memory holds it
// (user space reads registrations lazily: a process that execs or exits first would lose them).
// Names only for kernels that launch; the first launch of a pair is the slow path anyway.
static __always_inline void name_at_launch(u32 tgid, u64 func) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = func};
    if (names.lookup(&k))
        return;
    struct name_ptr_t *np = name_ptrs.lookup(&k);
    if (np)
        put_name(tgid, func, np->ptr);
}

// floor(log2(v)) clamped to NB - 1 (NB is 32), without a branch: each step's (x + 2^k - 1) >> k is 1
// when x (< 2^(2k)) is non-zero. Branches here would multiply the paths the verifier walks in the
// batch loops (copy_batch) by 64 per entry.
static __always_inline u32 log2_bucket(u64 v) {
    u64 r, s;
    r = (((v >> 32) + 0xffffffffULL) >> 32) << 5; v >>= r;
    s = (((v >> 16) + 0xffffULL) >> 16) << 4; v >>= s; r |= s;
    s = (((v >> 8) + 0xffULL) >> 8) << 3; v >>= s; r |= s;
    s = (((v >> 4) + 0xfULL) >> 4) << 2; v >>= s; r |= s;
    s = (((v >> 2) + 0x3ULL) >> 2) << 1; v >>= s; r |= s;
    r |= v >> 1;
    return (r - (r >> 5) * (r - (NB - 1))) & (NB - 1);    // the mask tells the verifier r < NB
}

// Indices into a map value's arrays (the log2 histograms, the per-direction counters), bounded on the
// very register the access uses. The empty asm hides the value's origin from LLVM, so it cannot drop
// the bound as redundant or move it to another register; each verifier then sees it just before the
// access. Without them Debian's kernels refused programs (docs/matrix.md, defects 2 and 4): Linux
// 6.12 loses a log2 bucket's bounds where the bucket and bucket + 1 (kslot_bucket) are linked
// registers (LLVM 19), and LLVM 14 drops the copy histogram's `i < NDIR * NB` as proven and writes
// dir * NB + bucket as (dir << 5) | bucket, whose bounds 6.1's verifier loses at the `|`. Both
// helpers take and return 64-bit unsigned values.
// i & mask, for an array of mask + 1 (a power of two) elements
static __always_inline u64 idx_mask(u64 i, u64 mask) {
    asm volatile("" : "+r"(i));
    return i & mask;
}
// i, or n - 1 when i >= n (never taken where the caller's value is in range already)
static __always_inline u64 idx_below(u64 i, u64 n) {
    asm volatile("" : "+r"(i));
    if (i >= n)
        i = n - 1;
    return i;
}
_Static_assert(D_UNK == NDIR - 1, "a direction out of range counts as unknown: D_UNK is the last");
_Static_assert((NB & (NB - 1)) == 0 && (NPREFETCH & (NPREFETCH - 1)) == 0, "masks need powers of two");

static __always_inline u64 read_u64(u64 addr) {
    u64 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline u32 read_u32(u64 addr) {
    u32 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline void range_key(struct range_key_t *k, u32 tgid, u64 addr, u32 bits) {
    u32 gen = gen_of(tgid);
    k->prefixlen = 64 + bits;
    k->data[0] = tgid >> 24; k->data[1] = tgid >> 16; k->data[2] = tgid >> 8; k->data[3] = tgid;
    k->data[4] = 0; k->data[5] = 0; k->data[6] = 0; k->data[7] = gen;
    k->data[8] = addr >> 56; k->data[9] = addr >> 48; k->data[10] = addr >> 40;
    k->data[11] = addr >> 32; k->data[12] = addr >> 24; k->data[13] = addr >> 16;
    k->data[14] = addr >> 8; k->data[15] = addr;
}

// Each call is counted once, whichever layers it passes through: an entry point whose caller
// (the return address at [sp]) is code of the CUDA runtime or driver is the runtime calling the
// driver (or the driver calling itself), already counted where the application called in.
// Only driver-layer probes ask: the driver never calls the runtime.
static __always_inline u32 code_kind(u32 tgid, u64 addr) {
    struct range_key_t k = {};
    range_key(&k, tgid, addr, 64);
    u32 *kind = code.lookup(&k);
    return kind ? *kind : 0;
}

// Rule 7 (docs/collector.md): a driver-level interception layer (GPU-sharing layers preloaded in
// front of libcuda) counts where the application called it; its whole text is CUDA code (CODE_LAYER),
// so the driver's entry behind it sees a CUDA caller. A layer that forwards by a tail call (a jump)
// leaves the application's return address at [sp] instead: the driver's entry then has the same sp
// and return address as the layer's. So, once a layer is probed, each entry into a layer records
// (sp, return address) per thread; a driver entry with both equal is that call passing through and
// consumes the record. A record left by a layer that forwarded by a call is dropped at that call.
static __always_inline int through_layer(struct pt_regs *ctx, u32 tgid, u64 sp, u64 ra) {
    u32 zero = 0;
    u32 *on = layers.lookup(&zero);
    if (!on || !*on)
        return 0;
    u32 tid = bpf_get_current_pid_tgid();
    if (code_kind(tgid, PT_REGS_IP(ctx)) == CODE_LAYER) {     // an entry point of the layer itself
        struct via_t v = {.sp = sp, .ra = ra};
        via_layer.update(&tid, &v);
        return 0;
    }
    struct via_t *v = via_layer.lookup(&tid);
    if (!v || v->sp != sp || v->ra != ra)
        return 0;
    via_layer.delete(&tid);
    return 1;
}

// Calls with a return probe nest by depth. A deeper entry (sp below the outermost entry's) is
// the runtime calling the driver; an entry at or above it means the earlier call's return was
// missed (thread killed), so the slot starts over. Returns the thread's slot when nested.
// An entry at the same sp into another function is a tail call from the outermost one (a driver-level
// layer jumping to the driver, rule 7): nested too.
static __always_inline struct pending_t *enter_nested(struct pending_t *ps, struct pt_regs *ctx) {
    u64 sp = PT_REGS_SP(ctx);
    if (ps && ps->depth > 0 && (sp < ps->sp || (sp == ps->sp && PT_REGS_IP(ctx) != ps->ip))) {
        ps->depth++;
        return ps;
    }
    return 0;
}

// the return of a call tracked by depth: true at the return of the outermost call
static __always_inline int leave_outermost(struct pending_t *ps) {
    if (!ps || ps->depth == 0)
        return 0;
    return --ps->depth == 0;
}

// the entry state of an outermost call
static __always_inline void pending_init(struct pending_t *n, struct pt_regs *ctx) {
    n->depth = 1;
    n->sp = PT_REGS_SP(ctx);
    n->ip = PT_REGS_IP(ctx);
}

// Probe hits, exact and cheap: every uprobe program counts its run here (a per-CPU add), so user space
// has the hits of each refresh interval; their cost is sampled (gputop/sources/selfcost.py).
BPF_PERCPU_ARRAY(hits, u64, 2);         // [HIT_ENTRY], [HIT_RETURN]
static __always_inline void count_hit(u32 kind) {
    u64 *n = hits.lookup(&kind);
    if (n)
        (*n)++;
}

// ------------------------------------------------------------------ kernels inside graphs
//
// A graph replay is one cudaGraphLaunch; its kernels pass no entry point. So gputop follows how each
// graph is built and counts, per graph launch, the kernels of the graph it replays. A graph's
// content has an id (gid): `graphs` maps a graph handle to the content it is building, `execs` an
// executable graph to the content it was instantiated from. Per content: its kernel count, its
// launches and flags (`gids`); its kernel nodes by function (`gnodes`: captured launches, kernel
// nodes) and the other contents it holds (`gparts`: child graphs, graphs launched into a capture,
// the content a modified graph started from), with their multiplicity. A content that an exec, a
// clone or a parent refers to is frozen: modifying its graph afterwards starts a new content that
// holds the frozen one as a part, so an exec keeps what it was instantiated from. User space
// multiplies each content's launches by its kernels, per function (gputop/sources/graphs.py).
#define G_UNKNOWN 1             // its kernel count is not known (a conditional node, a part gputop did not see)
#define G_LOST 2                // a node or part could not be stored: the count is exact, per kernel not

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
BPF_F_TABLE("hash", struct tkey_t, struct gid_t, gids, MAX_GRAPHS, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct tkey_t, struct graph_t, graphs, MAX_GRAPHS, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct tkey_t, u64, execs, MAX_GRAPHS, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct gkey_t, u64, gnodes, MAX_GRAPH_NODES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct gkey_t, u64, gparts, MAX_GRAPHS, BPF_F_NO_PREALLOC);
// graph calls whose result is read at return (out-pointers, success), tracked by depth
BPF_TABLE("lru_hash", u64, struct pending_t, pend_graph, MAX_THREADS);

static __always_inline struct gid_t *gid_get(u32 tgid, u64 gid) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = gid};
    return gids.lookup(&k);
}

// a new content holding `kernels` kernels: its id, or 0 when the table is full
static __always_inline u64 gid_new(u32 tgid, u64 kernels, u32 flags) {
    struct gid_t g = {.kernels = kernels, .flags = flags};
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = bpf_ktime_get_ns()};
    if (gids.insert(&k, &g) != 0) {
        k.addr++;                       // the same nanosecond on another CPU
        if (gids.insert(&k, &g) != 0) {
            drop(9);
            return 0;
        }
    }
    return k.addr;
}

// one more `item` in (tgid, gid) of gnodes / gparts; -1 when the table is full
static __always_inline int gnode_add(u32 tgid, u64 gid, u64 item) {
    struct gkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .gid = gid, .item = item};
    u64 *c = gnodes.lookup(&k);
    if (!c) {
        u64 z = 0;
        gnodes.insert(&k, &z);          // (or another CPU just did)
        c = gnodes.lookup(&k);
    }
    if (!c) {
        drop(9);
        return -1;
    }
    __sync_fetch_and_add(c, 1);
    return 0;
}
static __always_inline int gpart_add(u32 tgid, u64 gid, u64 item) {
    struct gkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .gid = gid, .item = item};
    u64 *c = gparts.lookup(&k);
    if (!c) {
        u64 z = 0;
        gparts.insert(&k, &z);
        c = gparts.lookup(&k);
    }
    if (!c) {
        drop(9);
        return -1;
    }
    __sync_fetch_and_add(c, 1);
    return 0;
}

// a kernel (host stub, CUfunction or handle) recorded into content gid
static __always_inline void content_add_kernel(u32 tgid, u64 gid, u64 func) {
    struct gid_t *g = gid_get(tgid, gid);
    if (!g)
        return;
    __sync_fetch_and_add(&g->kernels, 1);
    if (gnode_add(tgid, gid, func))
        g->flags |= G_LOST;
}

// content `part` (frozen) added to content gid: a child graph, a graph launched into a capture;
// part 0 (a graph gputop did not see built) makes gid's count unknown
static __always_inline void content_add_part(u32 tgid, u64 gid, u64 part) {
    struct gid_t *g = gid_get(tgid, gid);
    if (!g)
        return;
    struct gid_t *c = part ? gid_get(tgid, part) : 0;
    if (!c) {
        g->flags |= G_UNKNOWN;
        return;
    }
    __sync_fetch_and_add(&g->kernels, c->kernels);
    g->flags |= c->flags;
    if (gpart_add(tgid, gid, part))
        g->flags |= G_LOST;
}

// the content graph `handle` builds, frozen from now on (an exec, a clone or a parent holds it);
// 0 when gputop did not see the graph built
static __always_inline u64 graph_freeze(u32 tgid, u64 handle) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    struct graph_t *gr = graphs.lookup(&k);
    if (!gr)
        return 0;
    gr->frozen = 1;
    return gr->gid;
}

// the content graph `handle` builds, ready to be modified: a frozen one is continued in a new
// content that holds it as a part; 0 when gputop did not see the graph built
static __always_inline u64 graph_writable(u32 tgid, u64 handle) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    struct graph_t *gr = graphs.lookup(&k);
    if (!gr)
        return 0;
    if (!gr->frozen)
        return gr->gid;
    u64 old = gr->gid;
    struct gid_t *o = gid_get(tgid, old);
    if (!o)
        return 0;
    u64 gid = gid_new(tgid, o->kernels, o->flags);
    if (!gid)
        return 0;
    if (gpart_add(tgid, gid, old)) {
        struct gid_t *g = gid_get(tgid, gid);
        if (g)
            g->flags |= G_LOST;
    }
    gr->gid = gid;
    gr->frozen = 0;
    return gid;
}

// graph or exec `handle` now stands for content gid (0: unknown, the entry goes)
static __always_inline void graph_put(u32 tgid, u64 handle, u64 gid, u64 frozen) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    struct graph_t gr = {.gid = gid, .frozen = frozen};
    if (!gid) {
        graphs.delete(&k);
        return;
    }
    if (graphs.update(&k, &gr) != 0)
        drop(9);
}
static __always_inline void exec_put(u32 tgid, u64 handle, u64 gid) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    if (!gid) {
        execs.delete(&k);
        return;
    }
    if (execs.update(&k, &gid) != 0)
        drop(9);
}

// ------------------------------------------------------------------ launches

// the origin's entry of capture (origin, seq) while it is under way, else 0
static __always_inline struct cap_t *live_capture(u32 tgid, u64 origin, u64 seq) {
    struct tkey_t ok = {.tgid = tgid, .gen = gen_of(tgid), .addr = origin};
    struct cap_t *o = capturing.lookup(&ok);
    return (o && o->seq == seq) ? o : 0;
}

// the capture ``stream`` belongs to, if it is under way (a stale joined entry is dropped)
static __always_inline struct cap_t *capture_of(u32 tgid, u64 stream) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = stream};
    struct cap_t *c = capturing.lookup(&k);
    if (c)
        return c;
    c = joined.lookup(&k);
    if (!c)
        return 0;
    struct cap_t *o = live_capture(tgid, c->origin, c->seq);
    if (!o)
        joined.delete(&k);
    return o;
}

// true while some stream of the process captures (the event probes' fast exit)
static __always_inline int any_capture(u32 tgid) {
    struct proc_t *p = proc_of(tgid);
    return p && p->capturing;
}

// A stream as captures know it. The per-thread default stream (cudaStreamPerThread and
// CU_STREAM_PER_THREAD are 0x2; stream 0 in a _ptsz entry point, as code built with
// --default-stream per-thread calls) is a different stream in each thread: it is keyed by the
// thread. Handlers of _ptsz entry points pass ptsz = 1 (a constant: no cost on the hot path).
#define PER_THREAD_STREAM (1ULL << 63)
static __always_inline u64 stream_id(u64 stream, int ptsz) {
    if (stream == 2 || (ptsz && stream == 0))
        return PER_THREAD_STREAM | (u32)bpf_get_current_pid_tgid();
    return stream;
}

// launches into a stream in capture mode are recorded into a graph, not run: the capture, or 0
static __always_inline struct cap_t *captured_by(u32 tgid, struct proc_t *p, u64 stream_addr, int ptsz) {
    if (!p->capturing)
        return 0;
    return capture_of(tgid, stream_id(read_u64(stream_addr), ptsz));
}

// true when some capture on the host may be under way. The counters are read ended and forgotten
// first: every capture they count began before, so a capture under way when this launch was made
// is in begun as read after them (x86 keeps loads in order; volatile keeps the compiler from
// reordering them).
static __always_inline int captures_under_way(void) {
    u32 i0 = CAPTURES_BEGUN, i1 = CAPTURES_ENDED, i2 = CAPTURES_FORGOTTEN;
    u64 *ended = capture_n.lookup(&i1), *forgotten = capture_n.lookup(&i2), *begun = capture_n.lookup(&i0);
    if (!ended || !forgotten || !begun)
        return 1;
    u64 done = *(volatile u64 *)ended + *(volatile u64 *)forgotten;
    return *(volatile u64 *)begun != done;
}

// the pair's launch slot, claimed if free (after its `kernels` entry exists); 0: count in the entry
static __always_inline struct kslot_t *kslot_of(u32 tgid, u32 gen, u64 func, u64 grid, u64 block) {
    u32 i = (u32)(((func ^ ((u64)tgid << 40)) * 0x9E3779B97F4A7C15ULL) >> 32) & (MAX_KSLOTS - 1);
    struct kslot_t *s = kslots.lookup(&i);
    if (!s)
        return 0;
    u64 who = tgid | (u64)gen << KS_GEN_SHIFT;
    u64 mine = who | KS_READY;
    if (s->owner == mine && s->func == func)
        return s;
    if (s->owner != 0 || !proc_make(tgid))  // a new pair: its process's record first (its name); the
                                            // slow path counts a full table's drop
        return 0;
    struct tkey_t k = {.tgid = tgid, .gen = gen, .addr = func};
    if (!kernels.lookup(&k)) {
        struct kstat_t zero = {};
        kernels.insert(&k, &zero);
        if (!kernels.lookup(&k))
            return 0;                   // no room: the slow path drops it
        name_at_launch(tgid, func);     // the pair's first launch
    }
    if (__sync_val_compare_and_swap(&s->owner, 0, who | KS_CLAIMED) != 0)
        return 0;
    s->func = func;
    s->grid0 = grid;
    s->block0 = block;
    s->launches0 = s->launches = s->grid_sum = s->block_sum = 0;
#pragma unroll
    for (int j = 0; j < KS_GRID; j++)
        s->grid_bucket[j] = s->grid_count[j] = 0;
#pragma unroll
    for (int j = 0; j < KS_BLOCK; j++)
        s->block_bucket[j] = s->block_count[j] = 0;
    s->owner = mine;                    // after the stores above (x86 keeps stores in order)
    return s;
}

// one launch in bucket b (+ 1) of a slot's buckets: its own or a free one; 0 when none is left
static __always_inline int kslot_bucket(u64 *bucket, u64 *count, int n, u64 b) {
#pragma unroll
    for (int j = 0; j < KS_GRID; j++) {
        if (j >= n)
            break;
        u64 have = bucket[j];
        if (have == 0)
            have = __sync_val_compare_and_swap(&bucket[j], 0, b) ?: b;
        if (have == b) {
            __sync_fetch_and_add(&count[j], 1);
            return 1;
        }
    }
    return 0;
}

// The hot path: inlined array lookups and one atomic add (a pair's usual shape), no stack reads
// (the stream is read only while the process captures a graph), no hash lookup once the pair has
// its slot.
static __always_inline int count_launch(u32 tgid, u64 func, u64 gx, u64 gy, u64 gz, u64 bx, u64 by, u64 bz,
                                        u64 stream_addr, int ptsz) {
    struct proc_t *p = 0;
    if (captures_under_way()) {
        p = proc_of(tgid);
        struct cap_t *cap = p ? captured_by(tgid, p, stream_addr, ptsz) : 0;
        if (cap) {
            __sync_fetch_and_add(&p->captured_launches, 1);
            content_add_kernel(tgid, cap->gid, func);
            return 0;
        }
    }
    u64 grid = gx * gy * gz;
    u64 block = bx * by * bz;
    u32 gen = gen_of(tgid);
    struct kslot_t *s = kslot_of(tgid, gen, func, grid, block);
    if (s && s->grid0 == grid && s->block0 == block) {
        __sync_fetch_and_add(&s->launches0, 1);
        return 0;
    }
    u32 gb = log2_bucket(grid);
    u32 bb = log2_bucket(block);
    if (s) {
        __sync_fetch_and_add(&s->launches, 1);
        __sync_fetch_and_add(&s->grid_sum, grid);
        __sync_fetch_and_add(&s->block_sum, block);
        int g = kslot_bucket(s->grid_bucket, s->grid_count, KS_GRID, gb + 1);
        int b = kslot_bucket(s->block_bucket, s->block_count, KS_BLOCK, bb + 1);
        if (g && b)
            return 0;
        p = proc_get(tgid);
        if (!p)
            return 0;
        if (!g)
            __sync_fetch_and_add(&p->grid_hist[idx_mask(gb, NB - 1)], 1);
        if (!b)
            __sync_fetch_and_add(&p->block_hist[idx_mask(bb, NB - 1)], 1);
        return 0;
    }
    p = proc_get(tgid);
    if (!p)
        return 0;
    __sync_fetch_and_add(&p->grid_hist[idx_mask(gb, NB - 1)], 1);
    __sync_fetch_and_add(&p->block_hist[idx_mask(bb, NB - 1)], 1);
    // a process's launches and grid/block sums are those of its kernels (user space adds them
    // up) plus the record's own counters, which take only launches whose kernel had no room
    struct tkey_t k = {.tgid = tgid, .gen = gen, .addr = func};
    struct kstat_t *ks = kernels.lookup(&k);
    if (!ks) {
        struct kstat_t zero = {};
        kernels.insert(&k, &zero);
        ks = kernels.lookup(&k);
        if (!ks) {
            drop(1);
            __sync_fetch_and_add(&p->launches, 1);
            __sync_fetch_and_add(&p->grid_sum, grid);
            __sync_fetch_and_add(&p->block_sum, block);
            return 0;
        }
        name_at_launch(tgid, func);     // the pair's first launch
    }
    __sync_fetch_and_add(&ks->launches, 1);
    __sync_fetch_and_add(&ks->grid_sum, grid);
    __sync_fetch_and_add(&ks->block_sum, block);
    return 0;
}

static __always_inline u32 current_tgid(void) {
    return bpf_get_current_pid_tgid() >> 32;
}

// driver-layer probes: true when called from CUDA code (see code_kind), or passed on by a
// driver-level layer's tail call (see through_layer)
static __always_inline int nested_at(struct pt_regs *ctx, u32 tgid, u64 sp, u64 ra) {
    u32 kind = code_kind(tgid, ra);
    if (kind == CODE_LAYER) {       // a layer forwarding by a call: its entry's record is spent
        u32 tid = bpf_get_current_pid_tgid();
        via_layer.delete(&tid);
    }
    if (kind)
        return 1;
    return through_layer(ctx, tgid, sp, ra);
}
static __always_inline int nested(struct pt_regs *ctx, u32 tgid) {
    u64 sp = PT_REGS_SP(ctx);
    return nested_at(ctx, tgid, sp, read_u64(sp));
}

// cudaLaunchKernel(func, dim3 grid (rsi: x|y<<32, rdx: z), dim3 block (rcx, r8), args, smem, stream)
static __always_inline int rt_launch_regs(struct pt_regs *ctx, int ptsz) {
    u64 g = PT_REGS_PARM2(ctx), b = PT_REGS_PARM4(ctx);
    return count_launch(current_tgid(), PT_REGS_PARM1(ctx), g & 0xffffffff, g >> 32,
                        PT_REGS_PARM3(ctx) & 0xffffffff, b & 0xffffffff, b >> 32,
                        PT_REGS_PARM5(ctx) & 0xffffffff, PT_REGS_SP(ctx) + 16, ptsz);
}
int rt_launch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return rt_launch_regs(ctx, 0); }
int rt_launch_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return rt_launch_regs(ctx, 1); }

// cudaLaunchKernel in a runtime whose __cudaLaunchKernel is not a plain jump to it: skip the
// calls that come from the runtime's own code (see catalogue.INTERNAL_LAUNCH)
int rt_launch_checked(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    if (nested(ctx, current_tgid()))
        return 0;
    return rt_launch_regs(ctx, 0);
}
int rt_launch_checked_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    if (nested(ctx, current_tgid()))
        return 0;
    return rt_launch_regs(ctx, 1);
}

// config layout shared by cudaLaunchConfig_t and CUlaunchConfig: grid/block u32 @0..20, stream @32
static __always_inline int launch_config(u32 tgid, u64 cfg, u64 func, int ptsz) {
    u32 d[6] = {};
    bpf_probe_read_user(d, sizeof(d), (void *)cfg);
    return count_launch(tgid, func, d[0], d[1], d[2], d[3], d[4], d[5], cfg + 32, ptsz);
}

// cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
int rt_launch_exc(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return launch_config(current_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0);
}
int rt_launch_exc_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return launch_config(current_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 1);
}

// cuLaunchKernel(f, gx, gy, gz, bx, by, [sp+8] bz, [sp+16] smem, [sp+24] stream, ...)
static __always_inline int drv_launch_regs(struct pt_regs *ctx, int ptsz) {
    u64 sp = PT_REGS_SP(ctx);
    u64 st[2] = {};                     // return address and block z in one read
    bpf_probe_read_user(st, sizeof(st), (void *)sp);
    u32 tgid = current_tgid();
    if (nested_at(ctx, tgid, sp, st[0]))
        return 0;
    return count_launch(tgid, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx) & 0xffffffff,
                        PT_REGS_PARM3(ctx) & 0xffffffff, PT_REGS_PARM4(ctx) & 0xffffffff,
                        PT_REGS_PARM5(ctx) & 0xffffffff, PT_REGS_PARM6(ctx) & 0xffffffff,
                        st[1] & 0xffffffff, sp + 24, ptsz);
}
int drv_launch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return drv_launch_regs(ctx, 0); }
int drv_launch_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return drv_launch_regs(ctx, 1); }

// cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, ...)
static __always_inline int drv_launch_ex_regs(struct pt_regs *ctx, int ptsz) {
    u32 tgid = current_tgid();
    if (nested(ctx, tgid))
        return 0;
    return launch_config(tgid, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), ptsz);
}
int drv_launch_ex(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return drv_launch_ex_regs(ctx, 0); }
int drv_launch_ex_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return drv_launch_ex_regs(ctx, 1); }

// cudaGraphLaunch(exec, stream) / cuGraphLaunch(hGraphExec, hStream): the exec's kernels run (their
// count added to the process's, the launch to its content's, whose kernels user space names); an
// exec gputop did not see instantiated from a graph it saw built counts as a launch of unknown
// kernels. Launched into a capturing stream, the graph is captured (a child graph), not run.
static __always_inline int graph_launch(u32 tgid, u64 exec, u64 stream, int ptsz) {
    struct proc_t *p = proc_get(tgid);
    if (!p)
        return 0;
    struct tkey_t ek = {.tgid = tgid, .gen = gen_of(tgid), .addr = exec};
    u64 *gidp = execs.lookup(&ek);
    u64 gid = gidp ? *gidp : 0;
    if (p->capturing) {
        struct cap_t *c = capture_of(tgid, stream_id(stream, ptsz));
        if (c) {
            content_add_part(tgid, c->gid, gid);
            return 0;
        }
    }
    __sync_fetch_and_add(&p->graph_launches, 1);
    struct gid_t *g = gid ? gid_get(tgid, gid) : 0;
    if (!g || (g->flags & G_UNKNOWN)) {
        __sync_fetch_and_add(&p->graph_unknown_launches, 1);
        return 0;
    }
    __sync_fetch_and_add(&p->graph_kernel_launches, g->kernels);
    __sync_fetch_and_add(&g->launches, 1);
    return 0;
}
int rt_graph_launch(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_launch(current_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0);
}
int rt_graph_launch_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_launch(current_tgid(), PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 1);
}
int drv_graph_launch(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = current_tgid();
    return nested(ctx, tgid) ? 0 : graph_launch(tgid, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0);
}
int drv_graph_launch_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = current_tgid();
    return nested(ctx, tgid) ? 0 : graph_launch(tgid, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 1);
}

// cudaStreamBeginCapture(stream, mode) / cuStreamBeginCapture(_v2)(stream, mode), and the ToGraph
// forms (stream, graph, ...): the stream captures only if the call succeeds, so it is marked at return
static __always_inline int begin_capture_at(struct pt_regs *ctx, int ptsz, u64 graph) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pend_cap_t pc = {.stream = stream_id(PT_REGS_PARM1(ctx), ptsz), .graph = graph};
    pend_capture.update(&tid, &pc);
    return 0;
}
int begin_capture(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return begin_capture_at(ctx, 0, 0); }
int begin_capture_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return begin_capture_at(ctx, 1, 0); }
int begin_capture_graph(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return begin_capture_at(ctx, 0, PT_REGS_PARM2(ctx)); }
int begin_capture_graph_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return begin_capture_at(ctx, 1, PT_REGS_PARM2(ctx)); }

int begin_capture_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pend_cap_t *pc = pend_capture.lookup(&tid);
    if (!pc)
        return 0;
    u32 tgid = tid >> 32;
    u64 graph = pc->graph;
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = pc->stream};
    pend_capture.delete(&tid);
    // the runtime's return comes after the driver's: the capture is marked once
    if (PT_REGS_RC(ctx) != 0 || capturing.lookup(&k))
        return 0;
    // what it records goes into a new content, or (ToGraph) the graph's own: unknown (0) when
    // gputop did not see that graph built
    u64 gid = graph ? graph_writable(tgid, graph) : gid_new(tgid, 0, 0);
    struct cap_t cap = {.origin = k.addr, .seq = bpf_ktime_get_ns(), .gid = gid};
    int rc = capturing.insert(&k, &cap);
    if (rc != 0) {
        if (rc != -EEXIST)              // another thread's return marked it (the driver's twin)
            drop(5);
        return 0;
    }
    u32 begun = CAPTURES_BEGUN;
    u64 *n = capture_n.lookup(&begun);
    if (n)
        __sync_fetch_and_add(n, 1);
    struct proc_t *p = proc_get(tgid);
    if (p)
        __sync_fetch_and_add(&p->capturing, 1);
    return 0;
}

// What graph calls do to graphs, read at their return (graph_return): op, out-pointer, two arguments
#define OP_CREATE 1             // cudaGraphCreate(graph*, flags): a new, empty graph
#define OP_END 2                // end of a capture: *out is the graph of its content (a)
#define OP_CLONE 3              // cudaGraphClone(clone*, a): the clone holds a's content
#define OP_INSTANTIATE 4        // cudaGraphInstantiate*(exec*, a): the exec replays a's content
#define OP_KERNEL 5             // a kernel node of function b added to graph a
#define OP_CHILD 6              // a child graph node: graph b's content added to graph a
#define OP_COND 7               // a conditional node added to graph a: its kernel count is unknown
#define OP_UPDATE 8             // cudaGraphExecUpdate(exec a, graph b): exec a now replays b's content

static __always_inline int graph_call(struct pt_regs *ctx, u32 op, u64 out, u64 a, u64 b) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pg = pend_graph.lookup(&tid);
    if (enter_nested(pg, ctx))          // the runtime calling the driver's twin
        return 0;
    struct pending_t n = {};
    n.out = out;
    n.name = a;
    n.size = b;
    n.kind = op;
    pending_init(&n, ctx);
    pend_graph.update(&tid, &n);
    return 0;
}

// cudaStreamEndCapture(stream, graph*) / cuStreamEndCapture(stream, graph*): the streams that
// joined the capture leave it too (their entries are now stale); at return *graph holds its content
static __always_inline int end_capture_at(struct pt_regs *ctx, int ptsz) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 stream = stream_id(PT_REGS_PARM1(ctx), ptsz);
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = stream};
    struct cap_t *c = capturing.lookup(&k);
    u64 gid = c ? c->gid : 0;
    graph_call(ctx, OP_END, PT_REGS_PARM2(ctx), gid, 0);
    if (!c || capturing.delete(&k) != 0)
        return 0;
    u32 ended = CAPTURES_ENDED;
    u64 *n = capture_n.lookup(&ended);
    if (n)
        __sync_fetch_and_add(n, 1);
    struct proc_t *p = proc_of(tgid);
    if (p)
        __sync_fetch_and_add(&p->capturing, (u64)-1);
    return 0;
}
int end_capture(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return end_capture_at(ctx, 0); }
int end_capture_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return end_capture_at(ctx, 1); }

// cudaEventRecord(event, stream) / cuEventRecord(hEvent, hStream) and their WithFlags and _ptsz
// forms: an event recorded into a capturing stream is a node of that capture
static __always_inline int record_event_at(struct pt_regs *ctx, int ptsz) {
    u32 tgid = current_tgid();
    if (!any_capture(tgid))
        return 0;
    struct tkey_t ek = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM1(ctx)};
    struct cap_t *c = capture_of(tgid, stream_id(PT_REGS_PARM2(ctx), ptsz));
    if (!c) {
        capture_events.delete(&ek);     // recorded outside a capture: joins nothing
        return 0;
    }
    struct cap_t cap = *c;
    if (capture_events.update(&ek, &cap) != 0)
        drop(5);
    return 0;
}
int record_event(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return record_event_at(ctx, 0); }
int record_event_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return record_event_at(ctx, 1); }

// cudaStreamWaitEvent(stream, event, flags) / cuStreamWaitEvent(hStream, hEvent, flags): a
// stream that waits on an event of a capture joins that capture (fork); the origin waiting on
// an event of a joined stream (the join back) changes nothing
static __always_inline int wait_event_at(struct pt_regs *ctx, int ptsz) {
    u32 tgid = current_tgid();
    if (!any_capture(tgid))
        return 0;
    struct tkey_t ek = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM2(ctx)};
    struct cap_t *e = capture_events.lookup(&ek);
    if (!e)
        return 0;
    struct cap_t cap = *e;
    u64 stream = stream_id(PT_REGS_PARM1(ctx), ptsz);
    if (!live_capture(tgid, cap.origin, cap.seq)) {
        capture_events.delete(&ek);     // that capture has ended
        return 0;
    }
    if (stream == cap.origin || capture_of(tgid, stream))
        return 0;
    struct tkey_t sk = {.tgid = tgid, .gen = gen_of(tgid), .addr = stream};
    joined.update(&sk, &cap);
    return 0;
}
int wait_event(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return wait_event_at(ctx, 0); }
int wait_event_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return wait_event_at(ctx, 1); }

// cudaGraphCreate(graph*, flags), cuGraphCreate
int graph_create(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return graph_call(ctx, OP_CREATE, PT_REGS_PARM1(ctx), 0, 0); }
// cudaGraphClone(clone*, original), cuGraphClone
int graph_clone(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return graph_call(ctx, OP_CLONE, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0); }
// cudaGraphInstantiate(exec*, graph, ...) and WithFlags, WithParams; cuGraphInstantiate(_v2), ...
int graph_instantiate(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_INSTANTIATE, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0);
}
// cudaGraphAddKernelNode(node*, graph, deps, n, const cudaKernelNodeParams *p), cuGraphAddKernelNode:
// the function is p->func (@0)
int graph_add_kernel(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_KERNEL, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), read_u64(PT_REGS_PARM5(ctx)));
}
// cuGraphAddKernelNode_v2(..., const CUDA_KERNEL_NODE_PARAMS_v2 *p): p->func, or p->kern (@56) without one
static __always_inline u64 kernel_of(u64 params) {
    u64 f = read_u64(params);
    return f ? f : read_u64(params + 56);
}
int graph_add_kernel_v2(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_KERNEL, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), kernel_of(PT_REGS_PARM5(ctx)));
}
// cudaGraphAddChildGraphNode(node*, graph, deps, n, child), cuGraphAddChildGraphNode: the child's
// content is copied into the node
int graph_add_child(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_CHILD, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM5(ctx));
}
// cudaGraphAddNode / cuGraphAddNode (node*, graph, deps, [edgeData,] n, params): params->type @0, the
// union @16: a kernel's function (runtime: func; driver: func, or kern @56), a child graph's graph.
// Type 0 kernel, 4 child graph, 13 conditional; other nodes run no kernel.
static __always_inline int add_node(struct pt_regs *ctx, u64 params) {
    u32 type = read_u32(params);
    u32 op = type == 0 ? OP_KERNEL : type == 4 ? OP_CHILD : type == 13 ? OP_COND : 0;
    u64 b = type == 0 ? kernel_of(params + 16) : type == 4 ? read_u64(params + 16) : 0;
    return graph_call(ctx, op, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), b);
}
// CUDA 12.2+ cudaGraphAddNode and cuGraphAddNode: params 5th; cudaGraphAddNode_v2, cuGraphAddNode_v2 and
// CUDA 13's cudaGraphAddNode (edge data before the count): 6th
int graph_add_node5(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return add_node(ctx, PT_REGS_PARM5(ctx)); }
int graph_add_node6(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return add_node(ctx, PT_REGS_PARM6(ctx)); }
// cudaGraphExecUpdate(exec, graph, ...), cuGraphExecUpdate(_v2)
int graph_exec_update(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_UPDATE, 0, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx));
}

int graph_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pg = pend_graph.lookup(&tid);
    if (!leave_outermost(pg))
        return 0;
    if (PT_REGS_RC(ctx) & 0xffffffff)   // cudaSuccess == CUDA_SUCCESS == 0: nothing changed
        return 0;
    u32 tgid = tid >> 32;
    u32 op = pg->kind;
    u64 a = pg->name, b = pg->size, out = pg->out;
    u64 gid;
    switch (op) {
    case OP_CREATE:
        graph_put(tgid, read_u64(out), gid_new(tgid, 0, 0), 0);
        break;
    case OP_END:
        graph_put(tgid, read_u64(out), a, 0);
        break;
    case OP_CLONE:
        graph_put(tgid, read_u64(out), graph_freeze(tgid, a), 1);
        break;
    case OP_INSTANTIATE:
        exec_put(tgid, read_u64(out), graph_freeze(tgid, a));
        break;
    case OP_KERNEL:
        gid = graph_writable(tgid, a);
        if (gid)
            content_add_kernel(tgid, gid, b);
        break;
    case OP_CHILD:
        gid = graph_writable(tgid, a);
        if (gid)
            content_add_part(tgid, gid, graph_freeze(tgid, b));
        break;
    case OP_COND:
        gid = graph_writable(tgid, a);
        if (gid)
            content_add_part(tgid, gid, 0);
        break;
    case OP_UPDATE:
        exec_put(tgid, a, graph_freeze(tgid, b));
        break;
    }
    return 0;
}

// cudaGraphDestroy(graph), cuGraphDestroy: a content no exec, clone or parent holds goes with it
int graph_destroy(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = current_tgid();
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM1(ctx)};
    struct graph_t *gr = graphs.lookup(&k);
    if (!gr)
        return 0;
    if (!gr->frozen) {
        struct tkey_t gk = {.tgid = tgid, .gen = gen_of(tgid), .addr = gr->gid};
        gids.delete(&gk);               // its gnodes and gparts entries: user space sweeps them
    }
    graphs.delete(&k);
    return 0;
}
// cudaGraphExecDestroy(exec), cuGraphExecDestroy: the content stays (its launches are counted)
static __always_inline int exec_forget(struct pt_regs *ctx) {
    struct tkey_t k = {.tgid = current_tgid(), .gen = gen_of(current_tgid()), .addr = PT_REGS_PARM1(ctx)};
    execs.delete(&k);
    return 0;
}
int graph_exec_destroy(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return exec_forget(ctx); }
// cudaGraphNodeSetEnabled(exec, node, enabled), cuGraphNodeSetEnabled: a node of the exec turned on
// or off, of a kind gputop does not know: the exec's kernel count is unknown from now on
int graph_node_enabled(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return exec_forget(ctx); }

// ------------------------------------------------------------------ copies

// a direction >= NDIR counts as D_UNK (idx_below: D_UNK is NDIR - 1)
static __always_inline void count_copy(struct proc_t *p, u32 direction, u64 bytes) {
    u64 dir = idx_below(direction, NDIR);
    __sync_fetch_and_add(&p->memcpy_calls[dir], 1);
    __sync_fetch_and_add(&p->memcpy_bytes[dir], bytes);
    __sync_fetch_and_add(&p->copy_hist[idx_below(dir * NB + log2_bucket(bytes), NDIR * NB)], 1);
}

// which tracked allocation (device, managed, pinned host) holds addr, K_NONE when none does
static __always_inline u32 kind_of(u32 tgid, u64 addr) {
    struct range_key_t k = {};
    range_key(&k, tgid, addr, 64);
    u32 *kind = ranges.lookup(&k);
    return kind ? *kind : K_NONE;
}

// direction of a copy whose kind is not in the call: only device and pinned host memory that
// gputop saw allocated are classified; everything else is "unknown", never a guess. A table of 3-bit
// directions indexed by (source kind, destination kind), so that classifying adds no branch:
//   device -> device d2d, pinned -> device h2d, device -> pinned d2h, pinned -> pinned h2h
#define DIR_AT(s, d, dir) ((u64)(dir) << (3 * ((s) * 4 + (d))))
#define DIR_UNK_ALL 0x924924924924ULL    // D_UNK (4 = 0b100) in all 16 3-bit slots
#define DIR_TABLE (DIR_UNK_ALL \
    ^ DIR_AT(K_DEVICE, K_DEVICE, D_UNK ^ D_D2D) ^ DIR_AT(K_PINNED, K_DEVICE, D_UNK ^ D_H2D) \
    ^ DIR_AT(K_DEVICE, K_PINNED, D_UNK ^ D_D2H) ^ DIR_AT(K_PINNED, K_PINNED, D_UNK ^ D_H2H))
static __always_inline u32 classify(u32 tgid, u64 dst, u64 src) {
    u32 d = kind_of(tgid, dst) & 3, s = kind_of(tgid, src) & 3;
    return (DIR_TABLE >> (3 * (s * 4 + d))) & 7;
}

static __always_inline int copy_kind(struct pt_regs *ctx, int driver, u64 dst, u64 src, u64 bytes,
                                     u64 kind) {
    u32 tgid = current_tgid();
    if (nested(ctx, tgid))              // the runtime calling the driver, or its own public entry
        return 0;
    struct proc_t *p = proc_get(tgid);
    if (!p)
        return 0;
    u32 dir;
    switch (kind) {
    case 0: dir = D_H2H; break;
    case 1: dir = D_H2D; break;
    case 2: dir = D_D2H; break;
    case 3: dir = D_D2D; break;
    default: dir = classify(tgid, dst, src); break;   // 4 = cudaMemcpyDefault
    }
    count_copy(p, dir, bytes);
    return 0;
}

// cudaMemcpy(dst, src, count, kind), cudaMemcpyAsync(..., stream)
int rt_memcpy(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 0, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx),
                     PT_REGS_PARM4(ctx) & 0xffffffff);
}

// cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind)
int rt_memcpy2d(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 kind = read_u32(PT_REGS_SP(ctx) + 8);
    return copy_kind(ctx, 0, PT_REGS_PARM1(ctx), PT_REGS_PARM3(ctx),
                     PT_REGS_PARM5(ctx) * PT_REGS_PARM6(ctx), kind);
}

// cudaMemcpyPeer(dst, dstDevice, src, srcDevice, count)
int rt_memcpy_peer(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 0, PT_REGS_PARM1(ctx), PT_REGS_PARM3(ctx), PT_REGS_PARM5(ctx), 3);
}

// cuMemcpyHtoD_v2(dst, src, bytes) and friends: the direction is in the name
int drv_memcpy_htod(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, 0, 0, PT_REGS_PARM3(ctx), 1);
}
int drv_memcpy_dtoh(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, 0, 0, PT_REGS_PARM3(ctx), 2);
}
int drv_memcpy_dtod(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, 0, 0, PT_REGS_PARM3(ctx), 3);
}
// cuMemcpy(dst, src, bytes), cuMemcpyAsync(..., stream): direction from the pointers
int drv_memcpy(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx), 4);
}
// cuMemcpyPeer(dst, dstCtx, src, srcCtx, bytes)
int drv_memcpy_peer(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, 0, 0, PT_REGS_PARM5(ctx), 3);
}

// the calling process's record for a call the application made (0: the runtime's own call, see
// code_kind, or no room for a record)
static __always_inline struct proc_t *app_call(struct pt_regs *ctx, u32 tgid) {
    return nested(ctx, tgid) ? 0 : proc_get(tgid);
}

// cudaMemcpyToSymbol(symbol, src, count, offset, kind) (+Async, _ptds, _ptsz): a symbol is device
// memory; kind 1 h2d, 3 d2d, 4 (default) from the source's tracked kind
static __always_inline u32 side_dir(u32 other, u32 host_dir) {
    return other == K_PINNED ? host_dir : other == K_DEVICE ? D_D2D : D_UNK;
}
int rt_memcpy_to_symbol(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = current_tgid();
    struct proc_t *p = app_call(ctx, tgid);
    if (!p)
        return 0;
    u32 kind = PT_REGS_PARM5(ctx) & 0xffffffff;
    u32 dir = kind == 1 ? D_H2D : kind == 3 ? D_D2D : kind == 4 ? side_dir(kind_of(tgid, PT_REGS_PARM2(ctx)), D_H2D)
                                                                 : D_UNK;
    count_copy(p, dir, PT_REGS_PARM3(ctx));
    return 0;
}
// cudaMemcpyFromSymbol(dst, symbol, count, offset, kind): kind 2 d2h, 3 d2d, 4 from the destination
int rt_memcpy_from_symbol(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = current_tgid();
    struct proc_t *p = app_call(ctx, tgid);
    if (!p)
        return 0;
    u32 kind = PT_REGS_PARM5(ctx) & 0xffffffff;
    u32 dir = kind == 2 ? D_D2H : kind == 3 ? D_D2D : kind == 4 ? side_dir(kind_of(tgid, PT_REGS_PARM1(ctx)), D_D2H)
                                                                 : D_UNK;
    count_copy(p, dir, PT_REGS_PARM3(ctx));
    return 0;
}

// cudaMemcpy3D(const cudaMemcpy3DParms *p) (+Async, _ptds, _ptsz): srcArray @0, srcPtr.ptr @32,
// dstArray @64, dstPtr.ptr @96, extent {width, height, depth} @128, kind @152; cudaMemcpy3DPeer
// (const cudaMemcpy3DPeerParms *p) (+Async): srcArray @0, dstArray @72, extent @144, always d2d.
// With an array on either side the width counts elements of unknown size: the copy is counted as
// dropped ("array").
static __always_inline int copy3d(struct pt_regs *ctx, int peer) {
    u32 tgid = current_tgid();
    struct proc_t *p = app_call(ctx, tgid);
    if (!p)
        return 0;
    u64 a = PT_REGS_PARM1(ctx);
    if (read_u64(a) || read_u64(a + (peer ? 72 : 64))) {
        drop(8);
        return 0;
    }
    u64 e[3] = {};
    bpf_probe_read_user(e, sizeof(e), (void *)(a + (peer ? 144 : 128)));
    u32 dir = D_D2D;
    if (!peer) {
        u32 kind = read_u32(a + 152);
        dir = kind <= 3 ? (kind == 0 ? D_H2H : kind == 1 ? D_H2D : kind == 2 ? D_D2H : D_D2D)
                        : classify(tgid, read_u64(a + 96), read_u64(a + 32));
    }
    count_copy(p, dir, e[0] * e[1] * e[2]);
    return 0;
}
int rt_memcpy3d(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return copy3d(ctx, 0); }
int rt_memcpy3d_peer(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return copy3d(ctx, 1); }

// one side of a driver 2D/3D copy: CUmemorytype 1 host, 2 device, 3 array, 4 unified (the pointer
// is in the device field: its tracked kind decides). Returns K_PINNED for host, K_DEVICE, K_NONE
// (unknown) or 0xff for an array.
static __always_inline u32 drv_side(u32 tgid, u32 type, u64 device) {
    if (type == 1) return K_PINNED;
    if (type == 2) return K_DEVICE;
    if (type == 3) return 0xff;
    if (type == 4) {
        u32 k = kind_of(tgid, device);
        return k == K_DEVICE || k == K_PINNED ? k : K_NONE;
    }
    return K_NONE;
}
// a driver 2D/3D copy from its descriptor: the offsets of srcMemoryType, srcDevice, dstMemoryType,
// dstDevice and of WidthInBytes (Height, Depth follow; depth 1 for 2D)
static __always_inline int drv_copy_desc(struct pt_regs *ctx, u32 st, u32 sd, u32 dt, u32 dd, u32 w, int is3d) {
    u32 tgid = current_tgid();
    struct proc_t *p = app_call(ctx, tgid);
    if (!p)
        return 0;
    u64 a = PT_REGS_PARM1(ctx);
    u32 s = drv_side(tgid, read_u32(a + st), read_u64(a + sd));
    u32 d = drv_side(tgid, read_u32(a + dt), read_u64(a + dd));
    if (s == 0xff || d == 0xff) {
        drop(8);
        return 0;
    }
    u64 e[3] = {};                      // (an initialiser with a 1 would be .rodata, which bcc lacks)
    e[2] = 1;                           // depth of a 2D copy
    bpf_probe_read_user(e, is3d ? 24 : 16, (void *)(a + w));
    count_copy(p, (DIR_TABLE >> (3 * ((s & 3) * 4 + (d & 3)))) & 7, e[0] * e[1] * e[2]);
    return 0;
}
// CUDA_MEMCPY2D: srcMemoryType @16, srcDevice @32, dstMemoryType @72, dstDevice @88, WidthInBytes @112
int drv_memcpy2d(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return drv_copy_desc(ctx, 16, 32, 72, 88, 112, 0); }
// CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER (a context where 3D has a reserved field): srcMemoryType @32,
// srcDevice @48, dstMemoryType @120, dstDevice @136, WidthInBytes @176
int drv_memcpy3d(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return drv_copy_desc(ctx, 32, 48, 120, 136, 176, 1); }

// legacy v1 driver copies: 32-bit device pointers and byte counts
int drv_memcpy_htod32(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, 0, 0, PT_REGS_PARM3(ctx) & 0xffffffff, 1);
}
int drv_memcpy_dtoh32(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, 0, 0, PT_REGS_PARM3(ctx) & 0xffffffff, 2);
}
int drv_memcpy_dtod32(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return copy_kind(ctx, 1, 0, 0, PT_REGS_PARM3(ctx) & 0xffffffff, 3);
}

// Batch copies: cudaMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, [failIdx,]
// stream) and the driver's cuMemcpyBatchAsync(_v2) with the same first four arguments. One call of
// `count` copies counts `count` copies, each with its own size; a batch carries no copy kind, so each
// is classified from its pointers like cudaMemcpyDefault. Entries past BATCH_MAX are counted as dropped.
static __always_inline void count_dropped(u32 what, u64 n) {
    u64 *d = dropped.lookup(&what);
    if (d)
        __sync_fetch_and_add(d, n);
}

static __always_inline int copy_batch(struct pt_regs *ctx, int driver) {
    u32 tgid = current_tgid();
    if (driver && nested(ctx, tgid))
        return 0;
    struct proc_t *p = proc_get(tgid);
    if (!p)
        return 0;
    u64 dsts = PT_REGS_PARM1(ctx), srcs = PT_REGS_PARM2(ctx), sizes = PT_REGS_PARM3(ctx);
    u64 count = PT_REGS_PARM4(ctx);
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < BATCH_MAX; i++) {
        if (i >= count)
            break;
        u64 dst = read_u64(dsts + 8 * (u64)i), src = read_u64(srcs + 8 * (u64)i);
        count_copy(p, classify(tgid, dst, src), read_u64(sizes + 8 * (u64)i));
    }
    if (count > BATCH_MAX)
        count_dropped(7, count - BATCH_MAX);
    return 0;
}
int rt_memcpy_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return copy_batch(ctx, 0); }
int drv_memcpy_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return copy_batch(ctx, 1); }

// ------------------------------------------------------------------ allocations

// How an allocation's result is read at its return (pending_t.kind's high bits; the low byte is
// the kind K_*): F_PLAIN *out is the pointer and `size` its size; F_OUT32 *out is a 32-bit pointer
// (legacy v1 driver calls); F_PITCH size = *pitch (pending_t.name) x height (`size`); F_3D: *out is a
// cudaPitchedPtr {ptr, pitch, ...}, size = pitch x height x depth (`size`); F_HANDLE: *out is a
// cuMemCreate handle (physical memory, no address yet); F_MAP: a cuMemMap of a handle's memory at
// address `out`: its range is classified from then on, nothing is allocated.
#define F_PLAIN 0
#define F_OUT32 (1 << 8)
#define F_PITCH (2 << 8)
#define F_3D (3 << 8)
#define F_HANDLE (4 << 8)
#define F_MAP (5 << 8)
#define HANDLE_TAG (1ULL << 63)     // allocs keys of handles: never a user-space address

// an allocation call: counted at entry (calls, bytes asked for); its result read by alloc_return.
// Calls nested in another allocation call (the runtime calling the driver) and calls the runtime
// makes to its own public entry points (the caller is CUDA code) are not the application's.
static __always_inline int alloc_call(struct pt_regs *ctx, u32 kind, u64 out, u64 asked, u64 size, u64 extra,
                                      u32 flags) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pa = pend_alloc.lookup(&tid);
    if (enter_nested(pa, ctx))
        return 0;
    u32 tgid = tid >> 32;
    if (nested(ctx, tgid))
        return 0;
    struct proc_t *p = proc_get(tgid);
    if (!p)
        return 0;
    if (flags != F_MAP) {
        __sync_fetch_and_add(&p->alloc_calls, 1);
        __sync_fetch_and_add(&p->alloc_bytes, asked);
        if (kind == K_MANAGED) {
            __sync_fetch_and_add(&p->managed_alloc_calls, 1);
            __sync_fetch_and_add(&p->managed_alloc_bytes, asked);
        }
    }
    struct pending_t n = {};
    n.out = out;
    n.size = size;
    n.name = extra;
    n.kind = kind | flags;
    pending_init(&n, ctx);
    pend_alloc.update(&tid, &n);
    return 0;
}
// (out-pointer, size): cudaMalloc(Async, FromPoolAsync), cuMemAlloc_v2(Async, FromPoolAsync), ...
static __always_inline int alloc_enter(struct pt_regs *ctx, u32 kind) {
    u64 size = PT_REGS_PARM2(ctx);
    return alloc_call(ctx, kind, PT_REGS_PARM1(ctx), size, size, 0, F_PLAIN);
}
int alloc_device(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return alloc_enter(ctx, K_DEVICE); }
int alloc_managed(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return alloc_enter(ctx, K_MANAGED); }
int alloc_pinned(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return alloc_enter(ctx, K_PINNED); }
// legacy cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytes), cuMemAllocHost(void **pp, unsigned int bytes)
int alloc_device32(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 size = PT_REGS_PARM2(ctx) & 0xffffffff;
    return alloc_call(ctx, K_DEVICE, PT_REGS_PARM1(ctx), size, size, 0, F_OUT32);
}
int alloc_pinned32(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 size = PT_REGS_PARM2(ctx) & 0xffffffff;
    return alloc_call(ctx, K_PINNED, PT_REGS_PARM1(ctx), size, size, 0, F_PLAIN);
}
// cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height), cuMemAllocPitch_v2(..., elemSize):
// width x height asked for; pitch x height allocated
int alloc_pitch(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 h = PT_REGS_PARM4(ctx);
    return alloc_call(ctx, K_DEVICE, PT_REGS_PARM1(ctx), PT_REGS_PARM3(ctx) * h, h, PT_REGS_PARM2(ctx), F_PITCH);
}
// cudaMalloc3D(cudaPitchedPtr *out, cudaExtent {width, height, depth} passed in memory at [sp+8])
int alloc_3d(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 e[3] = {};
    bpf_probe_read_user(e, sizeof(e), (void *)(PT_REGS_SP(ctx) + 8));
    return alloc_call(ctx, K_DEVICE, PT_REGS_PARM1(ctx), e[0] * e[1] * e[2], e[1] * e[2], 0, F_3D);
}
// cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, flags):
// physical memory on the device or the host, by prop->location.type (offset 8: 1 device, 2..4 host)
int alloc_handle(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 loc = read_u32(PT_REGS_PARM3(ctx) + 8);
    u32 kind = loc == 1 ? K_DEVICE : (loc >= 2 && loc <= 4) ? K_PINNED : K_NONE;
    u64 size = PT_REGS_PARM2(ctx);
    return alloc_call(ctx, kind, PT_REGS_PARM1(ctx), size, size, 0, F_HANDLE);
}
// cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, handle, flags): the range takes the kind of
// the handle's memory (unknown when gputop did not see the handle created)
int map_handle(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    struct tkey_t k = {.tgid = current_tgid(), .gen = gen_of(current_tgid()), .addr = PT_REGS_PARM4(ctx) | HANDLE_TAG};
    struct alloc_t *a = allocs.lookup(&k);
    if (!a)
        return 0;
    u64 size = PT_REGS_PARM2(ctx);
    return alloc_call(ctx, a->kind & 0xff, PT_REGS_PARM1(ctx), 0, size, 0, F_MAP);
}

static __always_inline int range_put(u32 tgid, u64 a, u32 bits, u32 kind, int del) {
    struct range_key_t k = {};
    range_key(&k, tgid, a, 64 - bits);
    if (del) {
        ranges.delete(&k);
        return 0;
    }
    if (ranges.update(&k, &kind) != 0) {
        drop(4);
        return -1;
    }
    return 0;
}

// the allocation's range [base, base+size) as aligned power-of-two blocks in the LPM trie:
// ascending bits align the start, descending bits fill the rest (at most 2 blocks per bit)
static __always_inline void add_ranges(u32 tgid, u64 base, u64 size, u32 kind, int del) {
    u64 a = base, end = base + size;
    if (end <= base)
        return;
    for (u32 k = 0; k < 63; k++) {
        u64 blk = 1ull << k;
        if ((a & blk) && a + blk <= end) {
            if (range_put(tgid, a, k, kind, del))
                return;
            a += blk;
        }
    }
    for (int k = 62; k >= 0; k--) {
        u64 blk = 1ull << k;
        if (a + blk <= end) {
            if (range_put(tgid, a, k, kind, del))
                return;
            a += blk;
        }
    }
}

int alloc_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pa = pend_alloc.lookup(&tid);
    if (!leave_outermost(pa))
        return 0;
    if (PT_REGS_RC(ctx) & 0xffffffff)   // cudaSuccess == CUDA_SUCCESS == 0 (a 32-bit enum)
        return 0;
    u32 tgid = tid >> 32;
    u32 flags = pa->kind & ~0xffU, kind = pa->kind & 0xff;
    u64 size = pa->size;
    if (flags == F_MAP) {
        add_ranges(tgid, pa->out, size, kind, 0);
        return 0;
    }
    u64 v = flags == F_OUT32 ? read_u32(pa->out) : read_u64(pa->out), ptr = 0;
    bpf_probe_read_kernel(&ptr, sizeof(ptr), &v);   // an unknown value to the verifier: see drv_free32
    if (!ptr)
        return 0;
    if (flags == F_PITCH)
        size *= read_u64(pa->name);
    else if (flags == F_3D)
        size *= read_u64(pa->out + 8);
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = flags == F_HANDLE ? ptr | HANDLE_TAG : ptr};
    struct alloc_t a = {.size = size, .kind = kind};
    if (allocs.update(&k, &a) != 0) {
        drop(3);
        return 0;
    }
    if (flags != F_HANDLE)
        add_ranges(tgid, ptr, size, kind, 0);
    struct proc_t *p = proc_get(tgid);
    if (p)
        __sync_fetch_and_add(&p->live_bytes, size);
    return 0;
}

// a free of `addr` (an allocs key): its bytes stop being live, its range stops being classified
static __always_inline int free_key(struct pt_regs *ctx, u64 addr) {
    u32 tgid = current_tgid();
    struct proc_t *p = app_call(ctx, tgid);
    if (!p)
        return 0;
    __sync_fetch_and_add(&p->free_calls, 1);
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = addr};
    struct alloc_t *a = allocs.lookup(&k);
    if (!a)
        return 0;
    u64 size = a->size;
    u32 kind = a->kind;
    allocs.delete(&k);
    if (!(addr & HANDLE_TAG))
        add_ranges(tgid, k.addr, size, kind, 1);
    __sync_fetch_and_add(&p->live_bytes, -(s64)size);
    return 0;
}
// cudaFree(Async), cudaFreeHost, cuMemFree_v2(Async), cuMemFreeHost: (pointer, ...)
int rt_free(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return free_key(ctx, PT_REGS_PARM1(ctx)); }
int drv_free(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return free_key(ctx, PT_REGS_PARM1(ctx)); }
// legacy cuMemFree(CUdeviceptr_v1). The address goes through the stack as an unknown value: a
// bounded one makes the verifier walk add_ranges' loops path by path (too many instructions).
int drv_free32(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 v = PT_REGS_PARM1(ctx) & 0xffffffff, addr = 0;
    bpf_probe_read_kernel(&addr, sizeof(addr), &v);
    return free_key(ctx, addr);
}
// cuMemRelease(handle): the physical memory of a cuMemCreate goes
int release_handle(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return free_key(ctx, PT_REGS_PARM1(ctx) | HANDLE_TAG); }
// cuMemUnmap(ptr, size): the range is no longer classified (the handle's memory stays live)
int unmap_range(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = current_tgid();
    if (!nested(ctx, tgid))
        add_ranges(tgid, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), K_NONE, 1);
    return 0;
}

// ------------------------------------------------------------------ prefetch

static __always_inline int prefetch(struct pt_regs *ctx, int driver, u32 to_host) {
    u32 tgid = current_tgid();
    if (to_host > 1 || (driver && nested(ctx, tgid)))     // 2: an invalid destination
        return 0;
    struct proc_t *p = proc_get(tgid);
    if (!p)
        return 0;
    u64 i = idx_mask(to_host, NPREFETCH - 1);
    __sync_fetch_and_add(&p->prefetch_calls[i], 1);
    __sync_fetch_and_add(&p->prefetch_bytes[i], PT_REGS_PARM2(ctx));
    return 0;
}
// (ptr, count, int dstDevice, stream): -1 (cudaCpuDeviceId / CU_DEVICE_CPU) is the host
int rt_prefetch_dev(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return prefetch(ctx, 0, (s32)PT_REGS_PARM3(ctx) == -1);
}
int drv_prefetch_dev(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return prefetch(ctx, 1, (s32)PT_REGS_PARM3(ctx) == -1);
}
// (ptr, count, location {type, id} in rdx, flags, stream): type 1 = device, 2..4 = host (NUMA)
static __always_inline u32 loc_to_host(u64 loc) {
    u32 type = loc & 0xffffffff;
    return type == 1 ? 0 : (type >= 2 && type <= 4) ? 1 : 2;
}
int rt_prefetch_loc(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return prefetch(ctx, 0, loc_to_host(PT_REGS_PARM3(ctx))); }
int drv_prefetch_loc(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return prefetch(ctx, 1, loc_to_host(PT_REGS_PARM3(ctx))); }


// cudaMemPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
// stream), cuMemPrefetchBatchAsync alike: range i goes to prefetchLocs[k] for the last k with
// prefetchLocIdxs[k] <= i (the indices start at 0 and increase). Each range counts as one prefetch.
static __always_inline int prefetch_batch(struct pt_regs *ctx, int driver) {
    u32 tgid = current_tgid();
    if (driver && nested(ctx, tgid))
        return 0;
    struct proc_t *p = proc_get(tgid);
    if (!p)
        return 0;
    u64 sizes = PT_REGS_PARM2(ctx), count = PT_REGS_PARM3(ctx), locs = PT_REGS_PARM4(ctx);
    u64 idxs = PT_REGS_PARM5(ctx), nlocs = PT_REGS_PARM6(ctx);
    if (nlocs == 0)
        return 0;
    u64 k = 0;
    u32 to_host = loc_to_host(read_u64(locs));
    u64 next = nlocs > 1 ? read_u64(idxs + 8) : ~0ULL;
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < BATCH_MAX; i++) {
        if (i >= count)
            break;
        if (i >= next) {
            k++;
            to_host = loc_to_host(read_u64(locs + 8 * k));
            next = k + 1 < nlocs ? read_u64(idxs + 8 * (k + 1)) : ~0ULL;
        }
        if (to_host > 1)
            continue;
        u64 t = idx_mask(to_host, NPREFETCH - 1);
        __sync_fetch_and_add(&p->prefetch_calls[t], 1);
        __sync_fetch_and_add(&p->prefetch_bytes[t], read_u64(sizes + 8 * (u64)i));
    }
    if (count > BATCH_MAX)
        count_dropped(7, count - BATCH_MAX);
    return 0;
}
int rt_prefetch_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return prefetch_batch(ctx, 0); }
int drv_prefetch_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return prefetch_batch(ctx, 1); }

// ------------------------------------------------------------------ sync (time blocked)

int sync_enter(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *ps = pend_sync.lookup(&tid);
    if (enter_nested(ps, ctx))
        return 0;
    struct proc_t *p = proc_get(tid >> 32);
    if (!p)
        return 0;
    __sync_fetch_and_add(&p->sync_calls, 1);
    struct pending_t n = {};
    n.ts = bpf_ktime_get_ns();
    pending_init(&n, ctx);
    pend_sync.update(&tid, &n);
    return 0;
}

int sync_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *ps = pend_sync.lookup(&tid);
    if (!leave_outermost(ps))
        return 0;
    u64 dt = bpf_ktime_get_ns() - ps->ts;
    u32 tgid = tid >> 32;
    struct proc_t *p = proc_of(tgid);
    if (p)
        __sync_fetch_and_add(&p->sync_ns, dt);
    return 0;
}

// ------------------------------------------------------------------ kernel names

// __cudaRegisterFunction(fatCubinHandle, hostFun, deviceFun, deviceName, ...): the name is read by
// user space, lazily, for the kernels that launch; and here at a kernel's first launch (name_at_launch)
int register_function(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM2(ctx)};
    struct name_ptr_t v = {.ptr = PT_REGS_PARM4(ctx), .boot_ns = bpf_ktime_get_boot_ns()};
    track(tgid);
    if (name_ptrs.update(&k, &v) != 0)
        drop(2);
    return 0;
}

// the entry of a call that returns a handle through rdi: remember where, and what names it
static __always_inline int handle_enter(struct pt_regs *ctx, u64 what, u32 kind) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pn = pend_name.lookup(&tid);
    if (enter_nested(pn, ctx))
        return 0;
    struct pending_t n = {};
    n.out = PT_REGS_PARM1(ctx);
    n.name = what;
    n.kind = kind;
    pending_init(&n, ctx);
    pend_name.update(&tid, &n);
    return 0;
}

// cuModuleGetFunction(CUfunction *out, CUmodule, const char *name), cuLibraryGetKernel(out, lib, name)
int getfn_enter(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return handle_enter(ctx, PT_REGS_PARM3(ctx), 0); }

// cuKernelGetFunction(CUfunction *out, CUkernel kernel), __cudaGetKernel / cudaGetKernel
// (cudaKernel_t *out, const void *hostFun): the handle stands for the kernel or host stub
int kernel_getfn_enter(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return handle_enter(ctx, PT_REGS_PARM2(ctx), 1); }

int getfn_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pn = pend_name.lookup(&tid);
    if (!leave_outermost(pn))
        return 0;
    if (PT_REGS_RC(ctx) != 0)
        return 0;
    u32 tgid = tid >> 32;
    u64 handle = read_u64(pn->out);
    if (!handle)
        return 0;
    if (pn->kind == 0) {
        put_name(tgid, handle, pn->name);
        return 0;
    }
    struct tkey_t dst = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    u64 src_addr = pn->name;
    track(tgid);
    if (aliases.update(&dst, &src_addr) != 0)
        drop(2);
    return 0;
}

// ------------------------------------------------------------------ process life and discovery

static __always_inline void emit(u32 tgid, u32 type) {
    struct event_t *e = events.ringbuf_reserve(sizeof(struct event_t));
    if (!e) {
        drop(6);
        return;
    }
    e->ts = bpf_ktime_get_ns();
    e->tgid = tgid;
    e->gen = gen_of(tgid);
    e->type = type;
    events.ringbuf_submit(e, 0);
}

TRACEPOINT_PROBE(sched, sched_process_exec) {
    emit(bpf_get_current_pid_tgid() >> 32, EV_EXEC);
    return 0;
}

static __always_inline u64 read_ptr(u64 addr) {
    u64 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (void *)addr);
    return v;
}

#ifdef FILE_KEYS
// the struct file behind descriptor fd of the current task (0 if unreadable)
static __always_inline u64 file_of_fd(u64 fd) {
    u64 files = read_ptr(bpf_get_current_task() + OFF_TASK_FILES);
    u64 fdt = files ? read_ptr(files + OFF_FILES_FDT) : 0;
    u64 fds = fdt ? read_ptr(fdt + OFF_FDT_FD) : 0;
    return fds ? read_ptr(fds + fd * 8) : 0;
}

// an inode's change time in ns (OFF_INODE_CTIME_*: split in two members since 6.11, a timespec64
// before; the nanoseconds read as their low 32 bits, a little-endian kernel's: btf.py reads no other)
static __always_inline u64 inode_ctime(u64 inode) {
    s64 sec = 0;
    u32 nsec = 0;
    bpf_probe_read_kernel(&sec, sizeof(sec), (void *)(inode + OFF_INODE_CTIME_SEC));
    bpf_probe_read_kernel(&nsec, sizeof(nsec), (void *)(inode + OFF_INODE_CTIME_NSEC));
    return (u64)sec * 1000000000ULL + (nsec & CTIME_NSEC_MASK);
}

// an exec mapping of a file user space has not classified yet (or classified under another change
// time: another file under the same inode number): its key and name, so that it can be probed even
// when the process exits before user space reads its maps
static __always_inline void emit_file(u32 tgid, u64 file) {
    struct file_key_t key = {};
    u64 inode = read_ptr(file + OFF_FILE_INODE);
    u64 sb = inode ? read_ptr(inode + OFF_INODE_SB) : 0;
    u32 dev = 0;
    if (sb)
        bpf_probe_read_kernel(&dev, sizeof(dev), (void *)(sb + OFF_SB_DEV));
    key.dev = dev;
    key.ino = inode ? read_ptr(inode + OFF_INODE_INO) : 0;
    u64 ctime = inode ? inode_ctime(inode) : 0;
    struct known_file_t *known = known_files.lookup(&key);
    if (known) {
        if (known->ctime == ctime) {
            if (known->state == FILE_PROBED)
                emit(tgid, EV_MMAP);
            return;
        }
        known_files.delete(&key);
    }
    struct file_event_t *e = events.ringbuf_reserve(sizeof(struct file_event_t));
    if (!e) {
        drop(6);
        return;
    }
    e->h.ts = bpf_ktime_get_ns();
    e->h.tgid = tgid;
    e->h.gen = gen_of(tgid);
    e->h.type = EV_FILE;
    e->key = key;
    e->ctime = ctime;
    e->depth = 0;
    e->complete = 0;
    u64 d = read_ptr(file + OFF_FILE_DENTRY);
#pragma unroll
    for (int i = 0; i < PATH_DEPTH; i++) {
        if (!d)
            break;
        bpf_probe_read_kernel_str(e->names[i], PATH_NAME, (void *)read_ptr(d + OFF_DENTRY_NAME));
        e->depth = i + 1;
        u64 parent = read_ptr(d + OFF_DENTRY_PARENT);
        if (parent == d) {
            e->complete = 1;
            break;
        }
        d = parent;
    }
    events.ringbuf_submit(e, 0);
}
#endif

// a new executable file mapping (dlopen of a CUDA library): rescan that process once the
// mapping exists, at the syscall's exit
TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
    if ((args->prot & 4 /* PROT_EXEC */) && (s64)args->fd >= 0) {
        u64 tid = bpf_get_current_pid_tgid();
        u64 file = 1;
#ifdef FILE_KEYS
        file = file_of_fd(args->fd);
        if (!file)
            file = 1;
#endif
        exec_mmap.update(&tid, &file);
    }
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mmap) {
    u64 tid = bpf_get_current_pid_tgid();
    u64 *pending = exec_mmap.lookup(&tid);
    if (!pending)
        return 0;
    u64 file = *pending;
    exec_mmap.delete(&tid);
    if (args->ret < 0 && args->ret >= -4095)
        return 0;
#ifdef FILE_KEYS
    if (file != 1) {
        emit_file(tid >> 32, file);
        return 0;
    }
#endif
    emit(tid >> 32, EV_MMAP);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if ((u32)id != tgid)
        return 0;                       // a thread, not the process
    u64 pk = pkey(tgid);
    struct proc_t *p = procs.lookup(&pk);
    if (p) {
        p->exited_ns = bpf_ktime_get_ns();
        emit(tgid, EV_EXIT);
    } else if (tracked.lookup(&pk)) {
        emit(tgid, EV_EXIT_IDLE);       // no record to show: just forget it
    } else {
        return 0;
    }
    gen_bump(tgid);                     // after the events, which name the exiting process's generation
    return 0;
}

// a child inherits its parent's mappings: give it the parent's code ranges before it launches
// (args->parent_pid is the forking thread's id: the process is the current task's tgid; a new
// thread also comes through here, and user space ignores it)
TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent = current_tgid();
    u64 ppk = pkey(parent);
    if (procs.lookup(&ppk) || tracked.lookup(&ppk))
        emit(args->child_pid, EV_FORK);
    return 0;
}

#ifdef UVM_CPU_FAULTS
// CPU faults on managed memory: a user page fault inside a managed range of a traced process
TRACEPOINT_PROBE(exceptions, page_fault_user) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct proc_t *p = proc_of(tgid);
    if (!p || !p->managed_alloc_calls)
        return 0;
    if (kind_of(tgid, args->address) == K_MANAGED)
        __sync_fetch_and_add(&p->uvm_cpu_faults, 1);
    return 0;
}
#endif
