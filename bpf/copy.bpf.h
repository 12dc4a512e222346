// Memory copies by direction (D_*: from the call's kind or name, else from the tracked allocations at
// either end): plain, 2D, 3D, peer, to and from symbols, legacy 32-bit, and batches.
#ifndef __COPY_BPF_H
#define __COPY_BPF_H

// a direction >= NDIR counts as D_UNK (idx_below: D_UNK is NDIR - 1)
static __always_inline void count_copy(struct proc_t *p, u32 direction, u64 bytes) {
    u64 dir = idx_below(direction, NDIR);
    __sync_fetch_and_add(&p->memcpy_calls[dir], 1);
    __sync_fetch_and_add(&p->memcpy_bytes[dir], bytes);
    __sync_fetch_and_add(&p->copy_hist[idx_below(dir * NB + log2_bucket(bytes), NDIR * NB)], 1);
}

// direction of a copy whose kind is not in the call: only device and pinned host memory that
// gputop saw allocated are classified; everything else is "unknown", never a guess. A table of 3-bit
// directions indexed by (source kind, destination kind), so that classifying adds no branch:
//   device -> device d2d, pinned -> device h2d, device -> pinned d2h, pinned -> pinned h2h
#define DIR_AT(s, d, dir) ((u64)(dir) << (3 * ((s) * 4 + (d))))
#define DIR_UNK_ALL ((u64)D_UNK * 0x249249249249ULL)   // D_UNK in all 16 3-bit slots (0b001 in each, times it)
#define DIR_TABLE (DIR_UNK_ALL \
    ^ DIR_AT(K_DEVICE, K_DEVICE, D_UNK ^ D_D2D) ^ DIR_AT(K_PINNED, K_DEVICE, D_UNK ^ D_H2D) \
    ^ DIR_AT(K_DEVICE, K_PINNED, D_UNK ^ D_D2H) ^ DIR_AT(K_PINNED, K_PINNED, D_UNK ^ D_H2H))
_Static_assert(NDIR <= 8 && K_PINNED < 4, "a direction is 3 bits, a kind 2");
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

// cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind): kind the seventh (x86-64: [sp+8]; arm64: x6)
int rt_memcpy2d(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 kind = ARG7(ctx) & 0xffffffff;
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
        drop(DROP_ARRAY);
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
        drop(DROP_ARRAY);
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
        count_dropped(DROP_BATCH, count - BATCH_MAX);
    return 0;
}
int rt_memcpy_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return copy_batch(ctx, 0); }
int drv_memcpy_batch(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return copy_batch(ctx, 1); }

#endif /* __COPY_BPF_H */
