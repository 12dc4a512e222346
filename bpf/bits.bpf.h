// Shared helpers: what could not be counted (drops), probe hits, reads of user and kernel memory,
// log2 buckets and array indices the verifier can bound.
#ifndef __BITS_BPF_H
#define __BITS_BPF_H

// one more of drop kind `what` (DROP_*)
static __always_inline void drop(u32 what) {
    u64 *d = dropped.lookup(&what);
    if (d)
        __sync_fetch_and_add(d, 1);
}

// n more of drop kind `what`
static __always_inline void count_dropped(u32 what, u64 n) {
    u64 *d = dropped.lookup(&what);
    if (d)
        __sync_fetch_and_add(d, n);
}

// a run of a uprobe program: HIT_ENTRY or HIT_RETURN; the CPU's counters of that kind (launches: sites.bpf.h)
static __always_inline struct hit_t *count_hit(u32 kind) {
    struct hit_t *n = hits.lookup(&kind);
    if (n)
        n->runs++;
    return n;
}

static __always_inline u32 current_tgid(void) {
    return bpf_get_current_pid_tgid() >> 32;
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

// floor(log2(v)) for v > 0, 0 to 63 (log2_bucket's steps without its clamp)
static __always_inline u32 log2_u64(u64 v) {
    u64 r, s;
    r = (((v >> 32) + 0xffffffffULL) >> 32) << 5; v >>= r;
    s = (((v >> 16) + 0xffffULL) >> 16) << 4; v >>= s; r |= s;
    s = (((v >> 8) + 0xffULL) >> 8) << 3; v >>= s; r |= s;
    s = (((v >> 4) + 0xfULL) >> 4) << 2; v >>= s; r |= s;
    s = (((v >> 2) + 0x3ULL) >> 2) << 1; v >>= s; r |= s;
    return (r | (v >> 1)) & 63;
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

// the value at p before n was added to it: one atomic fetch-and-add (Linux 5.12+, LLVM 12+). A program
// built without BPF's atomics (gputop/sources/bpf/common/linux.py's NO_CMPXCHG defines the builtin
// away) reads, then adds: CPUs doing it at once may each see the value before the others' adds.
static __always_inline s64 fetch_add(s64 *p, s64 n) {
#ifdef __sync_val_compare_and_swap
    s64 was = *(volatile s64 *)p;
    __sync_fetch_and_add(p, n);
    return was;
#else
    return __sync_fetch_and_add(p, n);
#endif
}

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

static __always_inline u64 read_ptr(u64 addr) {
    u64 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (void *)addr);
    return v;
}

#endif /* __BITS_BPF_H */
