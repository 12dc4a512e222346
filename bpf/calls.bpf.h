// Each call counted once: calls the runtime makes to the driver (or to its own public entry points),
// calls passed on by a driver-level interception layer (rule 7, docs/collector.md), and calls with a
// return probe nested in one another.
#ifndef __CALLS_BPF_H
#define __CALLS_BPF_H

// Each call is counted once, whichever layers it passes through: an entry point whose caller
// (the return address: at [sp] on x86-64, in x30 on arm64) is code of the CUDA runtime or driver is the runtime calling the
// driver (or the driver calling itself), already counted where the application called in.
// Only driver-layer probes ask: the driver never calls the runtime.
static __always_inline u32 code_kind(u32 tgid, u64 addr) {
    struct range_key_t k = {};
    range_key(&k, tgid, addr, 64);
    u32 *kind = code.lookup(&k);
    return kind ? *kind : 0;
}

// Rule 7 (docs/collector.md): a driver-level interception layer (GPU-sharing layers preloaded in
// front of libcuda) counts where the application called it; its whole text is CUDA code (CODE_LAYER),
// so the driver's entry behind it sees a CUDA caller. A layer that forwards by a tail call (a jump)
// leaves the application's return address at [sp] instead: the driver's entry then has the same sp
// and return address as the layer's. So, once a layer is probed, each entry into a layer records
// (sp, return address) per thread; a driver entry with both equal is that call passing through and
// consumes the record. A record left by a layer that forwarded by a call is dropped at that call.
static __always_inline int through_layer(struct pt_regs *ctx, u32 tgid, u64 sp, u64 ra) {
    u32 zero = 0;
    u32 *on = layers.lookup(&zero);
    if (!on || !*on)
        return 0;
    u32 tid = bpf_get_current_pid_tgid();
    if (code_kind(tgid, PT_REGS_IP(ctx)) == CODE_LAYER) {     // an entry point of the layer itself
        struct via_t v = {.sp = sp, .ra = ra};
        via_layer.update(&tid, &v);
        return 0;
    }
    struct via_t *v = via_layer.lookup(&tid);
    if (!v || v->sp != sp || v->ra != ra)
        return 0;
    via_layer.delete(&tid);
    return 1;
}

// Calls with a return probe nest by depth. A deeper entry (sp below the outermost entry's) is
// the runtime calling the driver; an entry at or above it means the earlier call's return was
// missed (thread killed), so the slot starts over. Returns the thread's slot when nested.
// An entry at the same sp into another function is a tail call from the outermost one (a driver-level
// layer jumping to the driver, rule 7): nested too.
static __always_inline struct pending_t *enter_nested(struct pending_t *ps, struct pt_regs *ctx) {
    u64 sp = PT_REGS_SP(ctx);
    if (ps && ps->depth > 0 && (sp < ps->sp || (sp == ps->sp && PT_REGS_IP(ctx) != ps->ip))) {
        ps->depth++;
        return ps;
    }
    return 0;
}

// the return of a call tracked by depth: true at the return of the outermost call
static __always_inline int leave_outermost(struct pending_t *ps) {
    if (!ps || ps->depth == 0)
        return 0;
    return --ps->depth == 0;
}

// the entry state of an outermost call
static __always_inline void pending_init(struct pending_t *n, struct pt_regs *ctx) {
    n->depth = 1;
    n->sp = PT_REGS_SP(ctx);
    n->ip = PT_REGS_IP(ctx);
}

// driver-layer probes: true when called from CUDA code (see code_kind), or passed on by a
// driver-level layer's tail call (see through_layer)
static __always_inline int nested_at(struct pt_regs *ctx, u32 tgid, u64 sp, u64 ra) {
    u32 kind = code_kind(tgid, ra);
    if (kind == CODE_LAYER) {       // a layer forwarding by a call: its entry's record is spent
        u32 tid = bpf_get_current_pid_tgid();
        via_layer.delete(&tid);
    }
    if (kind)
        return 1;
    return through_layer(ctx, tgid, sp, ra);
}
static __always_inline int nested(struct pt_regs *ctx, u32 tgid) {
    return nested_at(ctx, tgid, PT_REGS_SP(ctx), RA_OF(RA_SLOT(ctx)));
}

// the calling process's record for a call the application made (0: the runtime's own call, see
// code_kind, or no room for a record)
static __always_inline struct proc_t *app_call(struct pt_regs *ctx, u32 tgid) {
    return nested(ctx, tgid) ? 0 : proc_get(tgid);
}

#endif /* __CALLS_BPF_H */
