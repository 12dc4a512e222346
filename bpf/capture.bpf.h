// Stream captures: a stream in capture mode records what is launched into it into a graph instead
// of running it. Which streams capture (capturing, joined through events: capture_events), how many
// captures are under way on the host (capture_n), and what each records into (a graph content).
#ifndef __CAPTURE_BPF_H
#define __CAPTURE_BPF_H

#ifndef EEXIST
#define EEXIST 17
#endif

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
    if (!o && joined.delete(&k) == 0)
        share_give(tgid, SH_JOINS, 1);
    return o;
}

// A stream of process tgid joins capture cap (joined) / an event of it is recorded into capture cap
// (capture_events): the entry updated in place when there, else made and charged to the process's
// tenant (SH_JOINS, SH_CAPTURE_EVENTS: hash tables, not LRU ones, so that no tenant's entries push out
// another's); a join lost to the share or a full table is counted as the tenant's (DROP_CAPTURES: the
// joined stream's launches are then counted as run). Two functions: bcc rewrites a table's calls only
// where it is named.
static __always_inline void join_put(u32 tgid, struct tkey_t *k, struct cap_t *cap) {
    if (joined.lookup(k)) {
        joined.update(k, cap);
        return;
    }
    struct tenant_t *o = share_take(tgid, SH_JOINS);
    int rc = o ? joined.insert(k, cap) : -ENOSPC;
    if (rc != 0 && o)
        share_add(o, SH_JOINS, -1);
    if (rc == -EEXIST)                  // another thread's, made meanwhile
        joined.update(k, cap);
    else if (rc != 0)
        lose(DROP_CAPTURES, SH_JOINS);
}

static __always_inline void event_put(u32 tgid, struct tkey_t *k, struct cap_t *cap) {
    if (capture_events.lookup(k)) {
        capture_events.update(k, cap);
        return;
    }
    struct tenant_t *o = share_take(tgid, SH_CAPTURE_EVENTS);
    int rc = o ? capture_events.insert(k, cap) : -ENOSPC;
    if (rc != 0 && o)
        share_add(o, SH_CAPTURE_EVENTS, -1);
    if (rc == -EEXIST)
        capture_events.update(k, cap);
    else if (rc != 0)
        lose(DROP_CAPTURES, SH_CAPTURE_EVENTS);
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
// or'd into a launch handler's ptsz: the stream it passes is the stream itself, not its address (arm64)
#define STREAM_VAL 2
static __always_inline u64 stream_id(u64 stream, int ptsz) {
    if (stream == 2 || (ptsz && stream == 0))
        return PER_THREAD_STREAM | (u32)bpf_get_current_pid_tgid();
    return stream;
}

// launches into a stream in capture mode are recorded into a graph, not run: the capture, or 0. stream_ref is
// the stream's address (read here), or with STREAM_VAL in ptsz the stream itself (arm64: in a register)
static __always_inline struct cap_t *captured_by(u32 tgid, struct proc_t *p, u64 stream_ref, int ptsz) {
    if (!p->capturing)
        return 0;
    u64 stream = (ptsz & STREAM_VAL) ? stream_ref : read_u64(stream_ref);
    return capture_of(tgid, stream_id(stream, ptsz & 1));
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
    struct tenant_t *o = share_take(tgid, SH_CAPTURES);
    int rc = o ? capturing.insert(&k, &cap) : -ENOSPC;
    if (rc != 0 && o)
        share_add(o, SH_CAPTURES, -1);
    if (rc != 0) {
        if (rc != -EEXIST)              // another thread's return marked it (the driver's twin)
            lose(DROP_CAPTURES, SH_CAPTURES);
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
    share_give(tgid, SH_CAPTURES, 1);
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
    if (!any_capture(tgid) || nested(ctx, tgid))    // the runtime's own call of the driver's: done once
        return 0;
    struct tkey_t ek = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM1(ctx)};
    struct cap_t *c = capture_of(tgid, stream_id(PT_REGS_PARM2(ctx), ptsz));
    if (!c) {
        if (capture_events.delete(&ek) == 0)    // recorded outside a capture: joins nothing
            share_give(tgid, SH_CAPTURE_EVENTS, 1);
        return 0;
    }
    struct cap_t cap = *c;
    event_put(tgid, &ek, &cap);
    return 0;
}
int record_event(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return record_event_at(ctx, 0); }
int record_event_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return record_event_at(ctx, 1); }

// cudaStreamWaitEvent(stream, event, flags) / cuStreamWaitEvent(hStream, hEvent, flags): a
// stream that waits on an event of a capture joins that capture (fork); the origin waiting on
// an event of a joined stream (the join back) changes nothing
static __always_inline int wait_event_at(struct pt_regs *ctx, int ptsz) {
    u32 tgid = current_tgid();
    if (!any_capture(tgid) || nested(ctx, tgid))
        return 0;
    struct tkey_t ek = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM2(ctx)};
    struct cap_t *e = capture_events.lookup(&ek);
    if (!e)
        return 0;
    struct cap_t cap = *e;
    u64 stream = stream_id(PT_REGS_PARM1(ctx), ptsz);
    if (!live_capture(tgid, cap.origin, cap.seq)) {
        if (capture_events.delete(&ek) == 0)    // that capture has ended
            share_give(tgid, SH_CAPTURE_EVENTS, 1);
        return 0;
    }
    if (stream == cap.origin || capture_of(tgid, stream))
        return 0;
    struct tkey_t sk = {.tgid = tgid, .gen = gen_of(tgid), .addr = stream};
    join_put(tgid, &sk, &cap);
    return 0;
}
int wait_event(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return wait_event_at(ctx, 0); }
int wait_event_ptsz(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return wait_event_at(ctx, 1); }

#endif /* __CAPTURE_BPF_H */
