// Call sites: where the launches come from. One launch in N on average (site_period[0], set by
// user space from what a walk costs: gputop/sources/bpf/pystacks/) is sampled: the launching thread's
// CPython frames are walked to STACK_DEPTH (innermost first) where the process runs a CPython user space
// has described (py_procs), else the launch's native caller is taken (the return address), and
// (process, stack, kernel) counts one more sample in the kernel (py_sites; the stack itself once, in
// py_stacks). Counts stay exact: a sample only adds a walk. The gaps between samples are random (1 to
// 2 x period - 1 launches of this CPU, uniform), so a loop of launches in a fixed order cannot alias
// with them: every launch has the same chance of being sampled whatever came before it.
#ifndef __SITES_BPF_H
#define __SITES_BPF_H

// whether thread state ts is the current thread's: its thread_id is the thread's pthread_self() (the task's
// thread pointer, self), else its native_thread_id the thread's id as its process sees it (ns_tid)
static __always_inline int py_mine(struct pyproc_t *l, u64 ts, u64 self, u32 ns_tid) {
    if (self && l->ts_thread_id != NO_OFFSET)
        return read_u64(ts + l->ts_thread_id) == self;
    return ns_tid && l->ts_native_tid != NO_OFFSET && (u32)read_u64(ts + l->ts_native_tid) == ns_tid;
}

// the thread state of the current thread in process l, found through the main interpreter's list of them
// (py_mine; _PyRuntime.interpreters.main follows .head in every version); remembered per thread. A thread
// that has none (a C++ worker: autograd's, NCCL's) is remembered as such (NO_TSTATE) and looked for again
// at one sample in NO_TSTATE_RETRY only: the list's walk is the dearest part of a sample.
static __always_inline u64 py_tstate(struct pyproc_t *l, u64 id, u64 self, u32 ns_tid) {
    u64 *c = py_threads.lookup(&id);
    if (c && *c == NO_TSTATE && bpf_get_prandom_u32() % NO_TSTATE_RETRY)
        return 0;
    if (c && *c && *c != NO_TSTATE && py_mine(l, *c, self, ns_tid))
        return *c;
    u64 interp = read_u64(l->runtime + l->interp_head + 8);
    u64 ts = interp ? read_u64(interp + l->threads_head) : 0;
#pragma clang loop unroll(disable)
    for (int i = 0; i < PY_THREADS; i++) {
        if (!ts)
            break;
        if (py_mine(l, ts, self, ns_tid)) {
            py_threads.update(&id, &ts);
            return ts;
        }
        ts = read_u64(ts + l->ts_next);
    }
    u64 none = NO_TSTATE;
    py_threads.update(&id, &none);
    return 0;
}

// the frames of thread state ts into sc->st (innermost first; C-stack shim frames skipped), its depth
// counted in the map value (not a register: the verifier would walk every (frame, depth) pair apart)
static __always_inline void py_walk(struct pyproc_t *l, u64 ts, struct stack_scratch_t *sc) {
    struct pystack_t *st = &sc->st;
    u32 window = l->frame_window;       // the bytes of a frame the layout's fields lie in (a frame near the
    if (window > FRAME_WINDOW)          // end of its mapping is read whole)
        window = FRAME_WINDOW;
    if (window < 8)
        window = 8;
    u64 f = read_u64(ts + l->ts_frame);
    if (l->cframe_current != NO_OFFSET && f)
        f = read_u64(f + l->cframe_current);
#pragma clang loop unroll(disable)
    for (int i = 0; i < STACK_DEPTH + STACK_SKIP; i++) {
        if (!f || st->depth >= STACK_DEPTH)
            break;
        if (bpf_probe_read_user(sc->window, window, (void *)f) != 0)
            break;                      // not a frame (a hostile chain): the walk ends here
        u64 code = *(u64 *)(sc->window + (l->fr_code & FRAME_WINDOW_ALIGN8)) & ~l->code_tag_mask;
        u64 prev = *(u64 *)(sc->window + (l->fr_previous & FRAME_WINDOW_ALIGN8));
        u64 instr = l->instr_is_index ? *(u32 *)(sc->window + (l->fr_instr & FRAME_WINDOW_ALIGN4))
                                      : *(u64 *)(sc->window + (l->fr_instr & FRAME_WINDOW_ALIGN8)) - code;
        // the eval loop's entry frames (3.12+: owned by the C stack; 3.14: by the interpreter, and the C stack next)
        u32 shim = l->fr_owner != NO_OFFSET && sc->window[l->fr_owner & (FRAME_WINDOW - 1)] >= l->owner_cstack;
        if (code && !shim) {
            u32 j = st->depth & (STACK_DEPTH - 1);
            st->frames[j].code = code;
            st->frames[j].instr = instr;
            st->depth++;
        }
        if (prev == f)
            break;                      // a frame that is its own caller
        f = prev;
    }
    if (f)                              // frames left: at STACK_DEPTH kept, or the reads' bound
        st->flags |= STACK_TRUNCATED;
}

// one more sample of (process, stack, kernel func); the stack kept once per process. -1: not kept (a full
// table or the tenant's share)
static __always_inline int site_count(u32 tgid, u32 gen, struct pystack_t *st, u64 func) {
    u64 h = 0xcbf29ce484222325ULL ^ st->flags;
#pragma clang loop unroll(disable)
    for (int j = 0; j < STACK_DEPTH; j++) {
        if (j >= st->depth)
            break;
        h = (h ^ st->frames[j].code ^ (st->frames[j].instr << 40) ^ j) * 0x100000001b3ULL;
    }
    h |= 1;                             // 0 is no stack
    struct tkey_t sk = {.tgid = tgid, .gen = gen, .addr = h};
    if (!py_stacks.lookup(&sk)) {
        struct tenant_t *o = share_take(tgid, SH_CALL_STACKS);
        if (!o) {
            lose(DROP_CALL_SITES, SH_CALL_STACKS);
            return -1;
        }
        if (py_stacks.insert(&sk, st) != 0) {
            share_add(o, SH_CALL_STACKS, -1);
            if (!py_stacks.lookup(&sk)) {
                lose(DROP_CALL_SITES, SH_CALL_STACKS);
                return -1;
            }
        }
    }
    struct site_key_t k = {.tgid = tgid, .gen = gen, .stack = h, .func = func};
    u64 *n = py_sites.lookup(&k);
    if (!n) {
        struct tenant_t *o = share_take(tgid, SH_CALL_SITES);
        if (!o) {
            lose(DROP_CALL_SITES, SH_CALL_SITES);
            return -1;
        }
        u64 zero = 0;
        if (py_sites.insert(&k, &zero) != 0)
            share_add(o, SH_CALL_SITES, -1);
        n = py_sites.lookup(&k);
        if (!n) {
            lose(DROP_CALL_SITES, SH_CALL_SITES);
            return -1;
        }
    }
    __sync_fetch_and_add(n, 1);
    return 0;
}

// A sampled launch of kernel func by process tgid: its Python stack, else its native caller (the
// return address, RA_OF(ra_slot): arch.bpf.h)
static __always_inline void site_sample(struct stack_scratch_t *sc, u32 tgid, u64 func, u64 ra_slot) {
    u64 t0 = bpf_ktime_get_ns();
    struct pystack_t *st = &sc->st;
    u32 gen = gen_of(tgid);
    st->depth = 0;
    st->flags = 0;
    u64 pk = pkey_gen(tgid, gen);
    struct pyproc_t *l = py_procs.lookup(&pk);
    if (l) {
        u64 id = bpf_get_current_pid_tgid();
        u64 self = 0;                   // the thread's pthread_self()
#ifdef OFF_TASK_THREAD_POINTER
        self = read_ptr(bpf_get_current_task() + OFF_TASK_THREAD_POINTER);
#endif
        u32 ns_tid = (u32)id;
        if (!self && l->pidns_ino) {    // the thread's id as its process sees it
            struct bpf_pidns_info ns = {};
            ns_tid = bpf_get_ns_current_pid_tgid(l->pidns_dev, l->pidns_ino, &ns, sizeof(ns)) == 0 ? ns.pid : 0;
        }
        u64 ts = py_tstate(l, id, self, ns_tid);
        if (ts) {
            py_walk(l, ts, sc);
            st->flags |= STACK_PYTHON;
        }
    }
    if (!st->depth) {                   // no Python frame: the native caller
        st->frames[0].code = RA_OF(ra_slot);
        st->frames[0].instr = 0;
        st->depth = st->frames[0].code ? 1 : 0;
        st->flags = STACK_NATIVE | (st->flags & STACK_PYTHON);
    }
    if (site_count(tgid, gen, st, func) && l)
        __sync_fetch_and_add(&l->unrecorded, 1);    // in no table: user space counts it in the samples
    sc->busy = 0;
    // what the walk cost, by kind: [0], [1] Python stacks' ns and walks, [2], [3] native callers'
    u32 c = (st->flags & STACK_NATIVE) ? 2 : 0;
    u64 *ns = site_cost.lookup(&c);
    if (ns)
        *ns += bpf_ktime_get_ns() - t0;
    c += 1;
    u64 *walks = site_cost.lookup(&c);
    if (walks)
        *walks += 1;
}

// The sampled launch handed to site_walk, one program verified once (inlined into each of the ten launch
// handlers, the walk's loops made loading minutes long under emulation on older verifiers): a tail call, the
// launch's kernel and where its return address is (RA_SLOT) left in this CPU's scratch. Uprobe programs may be preempted (Linux 6.1+:
// migration disabled only), so the scratch is taken with a flag: a task run meanwhile on this CPU skips its
// sample instead (the gaps stay random). With no program in site_tail (not loaded yet), no sample.
static __always_inline void site_handoff(struct pt_regs *ctx, u64 func, u64 ra_slot) {
    u32 z = 0;
    struct stack_scratch_t *sc = stack_scratch.lookup(&z);
    if (!sc)
        return;
#ifdef __sync_val_compare_and_swap
    if (sc->busy)
        return;
    sc->busy = 1;
#else
    if (__sync_val_compare_and_swap(&sc->busy, 0, 1) != 0)
        return;
#endif
    sc->func = func;
    sc->sp = ra_slot;
    site_tail.call(ctx, 0);
    sc->busy = 0;                       // the tail call did not happen
}

// the sample itself (site_tail[0], put there by user space: attach/uprobes.py)
int site_walk(struct pt_regs *ctx) {
    u32 z = 0;
    struct stack_scratch_t *sc = stack_scratch.lookup(&z);
    if (sc)
        site_sample(sc, current_tgid(), sc->func, sc->sp);
    return 0;
}

// Whether this launch (counted on hit h, the CPU's entry counters) is sampled: the next sample is due at a
// launch chosen at random (see above); a gap drawn under a longer period than the one now in force (it was
// lowered) ends at once (one sample per CPU a change: the new period holds from there). site_period[0] == 0:
// none. (site_period is an array: its lookup is inlined, a few instructions.)
static __always_inline int site_due(struct hit_t *h) {
    u32 z = 0;
    u64 *period = site_period.lookup(&z);
    if (!h || !period)
        return 0;
    u64 p = *period, n = ++h->launches, due = h->next;
    if (!p || (n < due && due - n < 2 * p))
        return 0;
    h->next = n + 1 + bpf_get_prandom_u32() % (2 * p - 1);
    return 1;
}

#endif /* __SITES_BPF_H */
