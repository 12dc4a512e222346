// Kernel launches (runtime and driver, by arguments or a launch config) and graph launches. A
// (process, kernel) pair counts in its launch slot (kslots: gputop.bpf.c says why), else in its
// kernels entry, else in the process's record; a launch into a capturing stream is recorded into
// the capture's graph content instead (capture.bpf.h, graph.bpf.h).
#ifndef __LAUNCH_BPF_H
#define __LAUNCH_BPF_H

// the pair's kernels entry, made if it has none (the pair's first launch: its name is read); 0 when the
// table is full or its tenant's share is (the caller that gives the launch up counts the loss)
static __always_inline struct kstat_t *kernel_make(u32 tgid, u32 gen, u64 func) {
    struct tkey_t k = {.tgid = tgid, .gen = gen, .addr = func};
    struct kstat_t *ks = kernels.lookup(&k);
    if (ks)
        return ks;
    struct tenant_t *o = share_take(tgid, SH_KERNELS);
    if (!o)
        return 0;
    struct kstat_t zero = {};
    if (kernels.insert(&k, &zero) == 0)
        name_at_launch(tgid, func);
    else
        share_add(o, SH_KERNELS, -1);
    return kernels.lookup(&k);
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
    if (!kernel_make(tgid, gen, func))
        return 0;                       // no room: the slow path drops it
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
#ifdef GPUTOP_ARM64
    // after the stores above: arm64 may reorder plain stores, a cmpxchg orders them (casal, or ll/sc and dmb)
    __sync_val_compare_and_swap(&s->owner, who | KS_CLAIMED, mine);
#else
    s->owner = mine;                    // after the stores above (x86 keeps stores in order)
#endif
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
// The launch counted; 1 when it was captured into a graph instead (it runs nothing: not a call site)
static __always_inline int count_launch_only(u32 tgid, u64 func, u64 gx, u64 gy, u64 gz, u64 bx, u64 by, u64 bz,
                                             u64 stream_addr, int ptsz) {
    struct proc_t *p = 0;
    if (captures_under_way()) {
        p = proc_of(tgid);
        struct cap_t *cap = p ? captured_by(tgid, p, stream_addr, ptsz) : 0;
        if (cap) {
            __sync_fetch_and_add(&p->captured_launches, 1);
            content_add_kernel(tgid, cap->gid, func);
            return 1;
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
    struct kstat_t *ks = kernel_make(tgid, gen, func);
    if (!ks) {
        lose(DROP_KERNELS, SH_KERNELS);
        __sync_fetch_and_add(&p->launches, 1);
        __sync_fetch_and_add(&p->grid_sum, grid);
        __sync_fetch_and_add(&p->block_sum, block);
        return 0;
    }
    __sync_fetch_and_add(&ks->launches, 1);
    __sync_fetch_and_add(&ks->grid_sum, grid);
    __sync_fetch_and_add(&ks->block_sum, block);
    return 0;
}

// A launch counted on the CPU's entry counters h (ra_slot: where its return address is, arch.bpf.h's
// RA_SLOT), then maybe sampled for its call site (sites.bpf.h): last, so that the verifier walks the sample's
// paths after the count's once. stream_ref: the stream's address, or (ptsz | STREAM_VAL) the stream itself
static __always_inline int count_launch(struct pt_regs *ctx, struct hit_t *h, u64 ra_slot, u32 tgid, u64 func,
                                        u64 gx, u64 gy, u64 gz, u64 bx, u64 by, u64 bz, u64 stream_ref, int ptsz) {
    if (count_launch_only(tgid, func, gx, gy, gz, bx, by, bz, stream_ref, ptsz) == 0 && site_due(h))
        site_handoff(ctx, func, ra_slot);
    return 0;
}

// cudaLaunchKernel(func, dim3 grid (x|y<<32, z: two registers), dim3 block (two), args, smem, stream): func in
// the first register, the dims in the 2nd to 5th (x86-64: rsi, rdx, rcx, r8; arm64: x1..x4), the stream the
// eighth argument (x86-64: at [sp + 16], read only while the process captures; arm64: x7)
static __always_inline int rt_launch_regs(struct pt_regs *ctx, struct hit_t *h, int ptsz) {
    u64 g = PT_REGS_PARM2(ctx), b = PT_REGS_PARM4(ctx);
#ifdef GPUTOP_ARM64
    return count_launch(ctx, h, RA_SLOT(ctx), current_tgid(), PT_REGS_PARM1(ctx), g & 0xffffffff, g >> 32,
                        PT_REGS_PARM3(ctx) & 0xffffffff, b & 0xffffffff, b >> 32,
                        PT_REGS_PARM5(ctx) & 0xffffffff, ARG8(ctx), ptsz | STREAM_VAL);
#else
    return count_launch(ctx, h, PT_REGS_SP(ctx), current_tgid(), PT_REGS_PARM1(ctx), g & 0xffffffff, g >> 32,
                        PT_REGS_PARM3(ctx) & 0xffffffff, b & 0xffffffff, b >> 32,
                        PT_REGS_PARM5(ctx) & 0xffffffff, PT_REGS_SP(ctx) + 16, ptsz);
#endif
}
int rt_launch(struct pt_regs *ctx) { return rt_launch_regs(ctx, count_hit(HIT_ENTRY), 0); }
int rt_launch_ptsz(struct pt_regs *ctx) { return rt_launch_regs(ctx, count_hit(HIT_ENTRY), 1); }

// cudaLaunchKernel in a runtime whose __cudaLaunchKernel is not a plain jump to it: skip the
// calls that come from the runtime's own code (see catalogue.INTERNAL_LAUNCH)
int rt_launch_checked(struct pt_regs *ctx) { struct hit_t *h = count_hit(HIT_ENTRY);
    if (nested(ctx, current_tgid()))
        return 0;
    return rt_launch_regs(ctx, h, 0);
}
int rt_launch_checked_ptsz(struct pt_regs *ctx) { struct hit_t *h = count_hit(HIT_ENTRY);
    if (nested(ctx, current_tgid()))
        return 0;
    return rt_launch_regs(ctx, h, 1);
}

// config layout shared by cudaLaunchConfig_t and CUlaunchConfig: grid/block u32 @0..20, stream @32
static __always_inline int launch_config(struct pt_regs *ctx, struct hit_t *h, u64 ra_slot, u32 tgid, u64 cfg,
                                         u64 func, int ptsz) {
    u32 d[6] = {};
    bpf_probe_read_user(d, sizeof(d), (void *)cfg);
    return count_launch(ctx, h, ra_slot, tgid, func, d[0], d[1], d[2], d[3], d[4], d[5], cfg + 32, ptsz);
}

// cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
int rt_launch_exc(struct pt_regs *ctx) {
    return launch_config(ctx, count_hit(HIT_ENTRY), RA_SLOT(ctx), current_tgid(), PT_REGS_PARM1(ctx),
                         PT_REGS_PARM2(ctx), 0);
}
int rt_launch_exc_ptsz(struct pt_regs *ctx) {
    return launch_config(ctx, count_hit(HIT_ENTRY), RA_SLOT(ctx), current_tgid(), PT_REGS_PARM1(ctx),
                         PT_REGS_PARM2(ctx), 1);
}

// cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, ...): x86-64: bz at [sp+8], smem [sp+16], stream
// [sp+24]; arm64: bz in x6, smem x7, stream at [sp]
static __always_inline int drv_launch_regs(struct pt_regs *ctx, struct hit_t *h, int ptsz) {
    u64 sp = PT_REGS_SP(ctx);
#ifdef GPUTOP_ARM64
    u32 tgid = current_tgid();
    u64 ra_slot = RA_SLOT(ctx);
    if (nested_at(ctx, tgid, sp, RA_OF(ra_slot)))
        return 0;
    u64 bz = ARG7(ctx), stream_ref = STACK_ARG(ctx, 0);
#else
    u64 st[2] = {};                     // return address and block z in one read
    bpf_probe_read_user(st, sizeof(st), (void *)sp);
    u32 tgid = current_tgid();
    if (nested_at(ctx, tgid, sp, st[0]))
        return 0;
    u64 ra_slot = sp, bz = st[1], stream_ref = sp + 24;
#endif
    return count_launch(ctx, h, ra_slot, tgid, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx) & 0xffffffff,
                        PT_REGS_PARM3(ctx) & 0xffffffff, PT_REGS_PARM4(ctx) & 0xffffffff,
                        PT_REGS_PARM5(ctx) & 0xffffffff, PT_REGS_PARM6(ctx) & 0xffffffff,
                        bz & 0xffffffff, stream_ref, ptsz);
}
int drv_launch(struct pt_regs *ctx) { return drv_launch_regs(ctx, count_hit(HIT_ENTRY), 0); }
int drv_launch_ptsz(struct pt_regs *ctx) { return drv_launch_regs(ctx, count_hit(HIT_ENTRY), 1); }

// cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, ...)
static __always_inline int drv_launch_ex_regs(struct pt_regs *ctx, struct hit_t *h, int ptsz) {
    u32 tgid = current_tgid();
    if (nested(ctx, tgid))
        return 0;
    return launch_config(ctx, h, RA_SLOT(ctx), tgid, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), ptsz);
}
int drv_launch_ex(struct pt_regs *ctx) { return drv_launch_ex_regs(ctx, count_hit(HIT_ENTRY), 0); }
int drv_launch_ex_ptsz(struct pt_regs *ctx) { return drv_launch_ex_regs(ctx, count_hit(HIT_ENTRY), 1); }

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

#endif /* __LAUNCH_BPF_H */
