// Time blocked in synchronisations (device, stream, event): the outermost call's entry to its return,
// per thread (pend_sync: user space adds the time of syncs still under way).
#ifndef __SYNC_BPF_H
#define __SYNC_BPF_H

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

#endif /* __SYNC_BPF_H */
