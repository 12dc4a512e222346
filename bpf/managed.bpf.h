// Managed (unified) memory: prefetches by destination (to_device, to_host), one range or a batch, and
// CPU page faults inside a traced process's managed allocations (UVM_CPU_FAULTS, where the kernel has
// the tracepoint).
#ifndef __MANAGED_BPF_H
#define __MANAGED_BPF_H

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
        count_dropped(DROP_BATCH, count - BATCH_MAX);
    return 0;
}
int rt_prefetch_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return prefetch_batch(ctx, 0); }
int drv_prefetch_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return prefetch_batch(ctx, 1); }

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

#endif /* __MANAGED_BPF_H */
