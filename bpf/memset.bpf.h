// Memsets (cudaMemset*, cuMemsetD*): calls and bytes set, counted once where the application called
// (the runtime's cudaMemset calls the driver's cuMemsetD8_v2: app_call skips that nested call). A memset
// into a capturing stream is counted as a call, as a copy is (it asks the GPU for the work either way).
#ifndef __MEMSET_BPF_H
#define __MEMSET_BPF_H

static __always_inline int count_memset(struct pt_regs *ctx, u64 bytes) {
    struct proc_t *p = app_call(ctx, current_tgid());
    if (!p)
        return 0;
    __sync_fetch_and_add(&p->memset_calls, 1);
    __sync_fetch_and_add(&p->memset_bytes, bytes);
    return 0;
}

// cudaMemset(devPtr, value, count), cudaMemsetAsync(..., stream)
int rt_memset(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return count_memset(ctx, PT_REGS_PARM3(ctx));
}

// cudaMemset2D(devPtr, pitch, value, width, height), cudaMemset2DAsync(..., stream): width in bytes
int rt_memset2d(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return count_memset(ctx, PT_REGS_PARM4(ctx) * PT_REGS_PARM5(ctx));
}

// cudaMemset3D(cudaPitchedPtr p, int value, cudaExtent e), cudaMemset3DAsync(..., stream): both structs
// are passed by value, over 16 bytes: x86-64 copies them onto the stack, p {ptr, pitch, xsize, ysize} at
// [sp + 8], e {width (bytes), height, depth} at [sp + 40]; arm64 passes their copies' addresses, p's in x0,
// e's in x2 (value in w1) (BIG_BYVAL)
int rt_memset3d(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u64 e = BIG_BYVAL(ctx, 3, 40);
    return count_memset(ctx, read_u64(e) * read_u64(e + 8) * read_u64(e + 16));
}

// cuMemsetD8_v2(dst, value, n), cuMemsetD16_v2, cuMemsetD32_v2 (+Async(..., stream)): n elements of 1, 2 or
// 4 bytes; cuMemsetD2D8_v2(dst, pitch, value, width, height) and its twins: width × height elements. The
// legacy v1 names take 32-bit pointers and counts: the registers' upper halves are not the caller's.
#define V1 0xffffffffULL
static __always_inline int memset_1d(struct pt_regs *ctx, u64 elem, u64 mask) {
    return count_memset(ctx, (PT_REGS_PARM3(ctx) & mask) * elem);
}
static __always_inline int memset_2d(struct pt_regs *ctx, u64 elem, u64 mask) {
    return count_memset(ctx, (PT_REGS_PARM4(ctx) & mask) * (PT_REGS_PARM5(ctx) & mask) * elem);
}
int drv_memset8(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_1d(ctx, 1, ~0ULL); }
int drv_memset8_v1(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_1d(ctx, 1, V1); }
int drv_memset16(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_1d(ctx, 2, ~0ULL); }
int drv_memset16_v1(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_1d(ctx, 2, V1); }
int drv_memset32(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_1d(ctx, 4, ~0ULL); }
int drv_memset32_v1(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_1d(ctx, 4, V1); }
int drv_memset2d8(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_2d(ctx, 1, ~0ULL); }
int drv_memset2d8_v1(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_2d(ctx, 1, V1); }
int drv_memset2d16(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_2d(ctx, 2, ~0ULL); }
int drv_memset2d16_v1(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_2d(ctx, 2, V1); }
int drv_memset2d32(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_2d(ctx, 4, ~0ULL); }
int drv_memset2d32_v1(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return memset_2d(ctx, 4, V1); }
#undef V1

#endif /* __MEMSET_BPF_H */
