// Allocations (device, managed, pinned host; legacy 32-bit, pitched, 3D, cuMemCreate handles and their
// mappings), counted at entry and read at return, and frees. Each live allocation's range is kept in
// the ranges trie: which memory an address is (kind_of), what classifies copies and CPU faults.
#ifndef __ALLOC_BPF_H
#define __ALLOC_BPF_H

// which tracked allocation (device, managed, pinned host) holds addr, K_NONE when none does
static __always_inline u32 kind_of(u32 tgid, u64 addr) {
    struct range_key_t k = {};
    range_key(&k, tgid, addr, 64);
    u32 *kind = ranges.lookup(&k);
    return kind ? *kind : K_NONE;
}

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
// cudaMalloc3D(cudaPitchedPtr *out, cudaExtent {width, height, depth}): the extent (24 bytes) passed by value,
// in memory at [sp+8] on x86-64, by its copy's address in x1 on arm64 (BIG_BYVAL)
int alloc_3d(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 e[3] = {};
    bpf_probe_read_user(e, sizeof(e), (void *)BIG_BYVAL(ctx, 2, 8));
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

// one block of an allocation's range put into the trie (1: a new entry, 0: there already, -1: no room) or,
// del, taken out (1: it was there)
static __always_inline int range_put(u32 tgid, u64 a, u32 bits, u32 kind, int del) {
    struct range_key_t k = {};
    range_key(&k, tgid, a, 64 - bits);
    if (del)
        return ranges.delete(&k) == 0;
    int rc = ranges.insert(&k, &kind);
    if (rc == 0)
        return 1;
    if (rc == -EEXIST && ranges.update(&k, &kind) == 0)
        return 0;
    lose(DROP_RANGES, SH_RANGES);
    return -1;
}

// the allocation's range [base, base+size) as aligned power-of-two blocks in the LPM trie:
// ascending bits align the start, descending bits fill the rest (at most 2 blocks per bit); the
// blocks made or taken out are charged to (or given back to) the process's tenant, whose share is
// looked at once per range
static __always_inline void add_ranges(u32 tgid, u64 base, u64 size, u32 kind, int del) {
    u64 a = base, end = base + size;
    if (end <= base)
        return;
    struct tenant_t *o = del ? 0 : share_take(tgid, SH_RANGES);
    if (!del && !o) {
        lose(DROP_RANGES, SH_RANGES);
        return;
    }
    s64 n = 0;
    for (u32 k = 0; k < 63; k++) {
        u64 blk = 1ull << k;
        if ((a & blk) && a + blk <= end) {
            int r = range_put(tgid, a, k, kind, del);
            if (r < 0)
                goto out;
            n += r;
            a += blk;
        }
    }
    for (int k = 62; k >= 0; k--) {
        u64 blk = 1ull << k;
        if (a + blk <= end) {
            int r = range_put(tgid, a, k, kind, del);
            if (r < 0)
                goto out;
            n += r;
            a += blk;
        }
    }
out:
    if (o)
        share_add(o, SH_RANGES, n - 1);     // one was reserved
    else if (del)
        share_give(tgid, SH_RANGES, n);
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
    struct tenant_t *o = share_take(tgid, SH_ALLOCS);
    // a new entry is charged; an address already there (its free was not seen) is replaced, not charged
    int rc = o ? allocs.insert(&k, &a) : -ENOSPC;
    if (rc != 0 && o)
        share_add(o, SH_ALLOCS, -1);    // not made here: the reservation goes back
    if (rc == -EEXIST)
        rc = allocs.update(&k, &a);
    if (rc != 0) {
        lose(DROP_ALLOCS, SH_ALLOCS);
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
    if (allocs.delete(&k) == 0)
        share_give(tgid, SH_ALLOCS, 1);
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

#endif /* __ALLOC_BPF_H */
