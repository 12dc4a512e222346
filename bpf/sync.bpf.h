// Time blocked in synchronisations (device, stream, event, context): the outermost call's entry to its
// return, per thread (pend_sync: user space adds the time of syncs still under way), and each one's
// duration in its process's latency histogram of that API (sync_hist, gputop/latency.py's buckets).
#ifndef __SYNC_BPF_H
#define __SYNC_BPF_H

static __always_inline int sync_begin(struct pt_regs *ctx, u32 api) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *ps = pend_sync.lookup(&tid);
    if (enter_nested(ps, ctx))          // the runtime's sync calling the driver's: timed as the outer one
        return 0;
    struct proc_t *p = proc_get(tid >> 32);
    if (!p)
        return 0;
    __sync_fetch_and_add(&p->sync_calls, 1);
    struct pending_t n = {};
    n.ts = bpf_ktime_get_ns();
    n.kind = api;
    pending_init(&n, ctx);
    pend_sync.update(&tid, &n);
    return 0;
}

// cudaDeviceSynchronize, cudaThreadSynchronize
int sync_enter_device(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return sync_begin(ctx, SYNC_DEVICE); }
// cudaStreamSynchronize, cuStreamSynchronize (+_ptsz)
int sync_enter_stream(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return sync_begin(ctx, SYNC_STREAM); }
// cudaEventSynchronize, cuEventSynchronize
int sync_enter_event(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return sync_begin(ctx, SYNC_EVENT); }
// cuCtxSynchronize
int sync_enter_context(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return sync_begin(ctx, SYNC_CONTEXT); }

// the bucket of a duration (gputop/latency.py's bucket_of): below 2^SLAT_MIN_LOG2 ns bucket 0; each power of
// two up to 2^SLAT_MAX_LOG2 in 2^SLAT_SUB_BITS parts; longer: the last bucket
static __always_inline u64 slat_bucket(u64 ns) {
    if (ns < (1ULL << SLAT_MIN_LOG2))
        return 0;
    u32 e = log2_u64(ns);
    if (e > SLAT_MAX_LOG2)
        return NSLAT - 1;
    return 1 + ((u64)(e - SLAT_MIN_LOG2) << SLAT_SUB_BITS) + ((ns >> (e - SLAT_SUB_BITS)) & ((1 << SLAT_SUB_BITS) - 1));
}

// one more duration of ns in process tgid's histogram of api (made at its first: charged to its owner)
static __always_inline void slat_add(u32 tgid, u32 api, u64 ns) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = api};
    struct slat_t *h = sync_hist.lookup(&k);
    if (!h) {
        u32 z = 0;
        struct slat_t *zero = zero_slat.lookup(&z);
        if (!zero)
            return;
        struct tenant_t *o = share_take(tgid, SH_SYNC_HISTS);
        if (!o) {
            lose(DROP_SYNC_HISTS, SH_SYNC_HISTS);
            return;
        }
        int err = sync_hist.insert(&k, zero);     // another thread's may be there already: use that one
        if (err)
            share_add(o, SH_SYNC_HISTS, -1);
        h = sync_hist.lookup(&k);
        if (!h) {
            lose(DROP_SYNC_HISTS, SH_SYNC_HISTS);
            return;
        }
    }
    __sync_fetch_and_add(&h->count, 1);
    __sync_fetch_and_add(&h->sum_ns, ns);
    __sync_fetch_and_add(&h->bucket[idx_below(slat_bucket(ns), NSLAT)], 1);
}

int sync_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *ps = pend_sync.lookup(&tid);
    if (!leave_outermost(ps))
        return 0;
    u64 dt = bpf_ktime_get_ns() - ps->ts;
    u32 tgid = tid >> 32;
    // a record retired while this sync blocked (retire.py: unchanged for long) is made again: user space
    // adds the retired one's counts to it
    struct proc_t *p = proc_get(tgid);
    if (p)
        __sync_fetch_and_add(&p->sync_ns, dt);
    slat_add(tgid, ps->kind, dt);
    return 0;
}

#endif /* __SYNC_BPF_H */
