// Kernels inside graphs.
//
// A graph replay is one cudaGraphLaunch; its kernels pass no entry point. So gputop follows how each
// graph is built and counts, per graph launch, the kernels of the graph it replays. A graph's
// content has an id (gid): `graphs` maps a graph handle to the content it is building, `execs` an
// executable graph to the content it was instantiated from. Per content: its kernel count, its
// launches and flags (`gids`); its kernel nodes by function (`gnodes`: captured launches, kernel
// nodes) and the other contents it holds (`gparts`: child graphs, graphs launched into a capture,
// the content a modified graph started from), with their multiplicity. A content that an exec, a
// clone or a parent refers to is frozen: modifying its graph afterwards starts a new content that
// holds the frozen one as a part, so an exec keeps what it was instantiated from. User space
// multiplies each content's launches by its kernels, per function (gputop/sources/bpf/read/graphs.py).
// A content's flags: G_UNKNOWN (its kernel count is not known: a conditional node, a part gputop did
// not see), G_LOST (a node or part could not be stored: the count is exact, per kernel not).
#ifndef __GRAPH_BPF_H
#define __GRAPH_BPF_H

static __always_inline struct gid_t *gid_get(u32 tgid, u64 gid) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = gid};
    return gids.lookup(&k);
}

// a new content holding `kernels` kernels: its id, or 0 when the table is full
static __always_inline u64 gid_new(u32 tgid, u64 kernels, u32 flags) {
    struct gid_t g = {.kernels = kernels, .flags = flags};
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = bpf_ktime_get_ns()};
    struct tenant_t *o = share_take(tgid, SH_GRAPHS);
    if (!o) {
        lose(DROP_GRAPHS, SH_GRAPHS);
        return 0;
    }
    if (gids.insert(&k, &g) != 0) {
        k.addr++;                       // the same nanosecond on another CPU
        if (gids.insert(&k, &g) != 0) {
            share_add(o, SH_GRAPHS, -1);
            lose(DROP_GRAPHS, SH_GRAPHS);
            return 0;
        }
    }
    return k.addr;
}

// one more `item` in (tgid, gid) of gnodes / gparts; -1 when the table is full
static __always_inline int gnode_add(u32 tgid, u64 gid, u64 item) {
    struct gkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .gid = gid, .item = item};
    u64 *c = gnodes.lookup(&k);
    if (!c) {
        u64 z = 0;
        struct tenant_t *o = share_take(tgid, SH_GRAPH_NODES);
        if (o && gnodes.insert(&k, &z) != 0)     // (another CPU just did, or no room)
            share_add(o, SH_GRAPH_NODES, -1);
        c = gnodes.lookup(&k);
    }
    if (!c) {
        lose(DROP_GRAPHS, SH_GRAPH_NODES);
        return -1;
    }
    __sync_fetch_and_add(c, 1);
    return 0;
}
static __always_inline int gpart_add(u32 tgid, u64 gid, u64 item) {
    struct gkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .gid = gid, .item = item};
    u64 *c = gparts.lookup(&k);
    if (!c) {
        u64 z = 0;
        struct tenant_t *o = share_take(tgid, SH_GRAPHS);
        if (o && gparts.insert(&k, &z) != 0)     // (another CPU just did, or no room)
            share_add(o, SH_GRAPHS, -1);
        c = gparts.lookup(&k);
    }
    if (!c) {
        lose(DROP_GRAPHS, SH_GRAPHS);
        return -1;
    }
    __sync_fetch_and_add(c, 1);
    return 0;
}

// a kernel (host stub, CUfunction or handle) recorded into content gid
static __always_inline void content_add_kernel(u32 tgid, u64 gid, u64 func) {
    struct gid_t *g = gid_get(tgid, gid);
    if (!g)
        return;
    __sync_fetch_and_add(&g->kernels, 1);
    if (gnode_add(tgid, gid, func))
        g->flags |= G_LOST;
}

// content `part` (frozen) added to content gid: a child graph, a graph launched into a capture;
// part 0 (a graph gputop did not see built) makes gid's count unknown
static __always_inline void content_add_part(u32 tgid, u64 gid, u64 part) {
    struct gid_t *g = gid_get(tgid, gid);
    if (!g)
        return;
    struct gid_t *c = part ? gid_get(tgid, part) : 0;
    if (!c) {
        g->flags |= G_UNKNOWN;
        return;
    }
    __sync_fetch_and_add(&g->kernels, c->kernels);
    g->flags |= c->flags;
    if (gpart_add(tgid, gid, part))
        g->flags |= G_LOST;
}

// the content graph `handle` builds, frozen from now on (an exec, a clone or a parent holds it);
// 0 when gputop did not see the graph built
static __always_inline u64 graph_freeze(u32 tgid, u64 handle) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    struct graph_t *gr = graphs.lookup(&k);
    if (!gr)
        return 0;
    gr->frozen = 1;
    return gr->gid;
}

// the content graph `handle` builds, ready to be modified: a frozen one is continued in a new
// content that holds it as a part; 0 when gputop did not see the graph built
static __always_inline u64 graph_writable(u32 tgid, u64 handle) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    struct graph_t *gr = graphs.lookup(&k);
    if (!gr)
        return 0;
    if (!gr->frozen)
        return gr->gid;
    u64 old = gr->gid;
    struct gid_t *o = gid_get(tgid, old);
    if (!o)
        return 0;
    u64 gid = gid_new(tgid, o->kernels, o->flags);
    if (!gid)
        return 0;
    if (gpart_add(tgid, gid, old)) {
        struct gid_t *g = gid_get(tgid, gid);
        if (g)
            g->flags |= G_LOST;
    }
    gr->gid = gid;
    gr->frozen = 0;
    return gid;
}

// graph or exec `handle` now stands for content gid (0: unknown, the entry goes)
static __always_inline void graph_put(u32 tgid, u64 handle, u64 gid, u64 frozen) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    struct graph_t gr = {.gid = gid, .frozen = frozen};
    if (!gid) {
        if (graphs.delete(&k) == 0)
            share_give(tgid, SH_GRAPHS, 1);
        return;
    }
    int had = graphs.lookup(&k) != 0;
    struct tenant_t *o = had ? 0 : share_take(tgid, SH_GRAPHS);
    int rc = had ? graphs.update(&k, &gr) : o ? graphs.insert(&k, &gr) : -ENOSPC;
    if (rc != 0 && o)
        share_add(o, SH_GRAPHS, -1);    // not made here: the reservation goes back
    if (rc == -EEXIST)
        rc = graphs.update(&k, &gr);
    if (rc != 0)
        lose(DROP_GRAPHS, SH_GRAPHS);
}
static __always_inline void exec_put(u32 tgid, u64 handle, u64 gid) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    if (!gid) {
        if (execs.delete(&k) == 0)
            share_give(tgid, SH_GRAPHS, 1);
        return;
    }
    int had = execs.lookup(&k) != 0;        // (as graph_put)
    struct tenant_t *o = had ? 0 : share_take(tgid, SH_GRAPHS);
    int rc = had ? execs.update(&k, &gid) : o ? execs.insert(&k, &gid) : -ENOSPC;
    if (rc != 0 && o)
        share_add(o, SH_GRAPHS, -1);    // not made here: the reservation goes back
    if (rc == -EEXIST)
        rc = execs.update(&k, &gid);
    if (rc != 0)
        lose(DROP_GRAPHS, SH_GRAPHS);
}

// What graph calls do to graphs, read at their return (graph_return): op, out-pointer, two arguments
#define OP_CREATE 1             // cudaGraphCreate(graph*, flags): a new, empty graph
#define OP_END 2                // end of a capture: *out is the graph of its content (a)
#define OP_CLONE 3              // cudaGraphClone(clone*, a): the clone holds a's content
#define OP_INSTANTIATE 4        // cudaGraphInstantiate*(exec*, a): the exec replays a's content
#define OP_KERNEL 5             // a kernel node of function b added to graph a
#define OP_CHILD 6              // a child graph node: graph b's content added to graph a
#define OP_COND 7               // a conditional node added to graph a: its kernel count is unknown
#define OP_UPDATE 8             // cudaGraphExecUpdate(exec a, graph b): exec a now replays b's content

static __always_inline int graph_call(struct pt_regs *ctx, u32 op, u64 out, u64 a, u64 b) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pg = pend_graph.lookup(&tid);
    if (enter_nested(pg, ctx))          // the runtime calling the driver's twin
        return 0;
    struct pending_t n = {};
    n.out = out;
    n.name = a;
    n.size = b;
    n.kind = op;
    pending_init(&n, ctx);
    pend_graph.update(&tid, &n);
    return 0;
}

// cudaGraphCreate(graph*, flags), cuGraphCreate
int graph_create(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return graph_call(ctx, OP_CREATE, PT_REGS_PARM1(ctx), 0, 0); }
// cudaGraphClone(clone*, original), cuGraphClone
int graph_clone(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return graph_call(ctx, OP_CLONE, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0); }
// cudaGraphInstantiate(exec*, graph, ...) and WithFlags, WithParams; cuGraphInstantiate(_v2), ...
int graph_instantiate(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_INSTANTIATE, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0);
}
// cudaGraphAddKernelNode(node*, graph, deps, n, const cudaKernelNodeParams *p), cuGraphAddKernelNode:
// the function is p->func (@0)
int graph_add_kernel(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_KERNEL, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), read_u64(PT_REGS_PARM5(ctx)));
}
// cuGraphAddKernelNode_v2(..., const CUDA_KERNEL_NODE_PARAMS_v2 *p): p->func, or p->kern (@56) without one
static __always_inline u64 kernel_of(u64 params) {
    u64 f = read_u64(params);
    return f ? f : read_u64(params + 56);
}
int graph_add_kernel_v2(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_KERNEL, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), kernel_of(PT_REGS_PARM5(ctx)));
}
// cudaGraphAddChildGraphNode(node*, graph, deps, n, child), cuGraphAddChildGraphNode: the child's
// content is copied into the node
int graph_add_child(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_CHILD, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM5(ctx));
}
// cudaGraphAddNode / cuGraphAddNode (node*, graph, deps, [edgeData,] n, params): params->type @0, the
// union @16: a kernel's function (runtime: func; driver: func, or kern @56), a child graph's graph.
// Type 0 kernel, 4 child graph, 13 conditional; other nodes run no kernel.
static __always_inline int add_node(struct pt_regs *ctx, u64 params) {
    u32 type = read_u32(params);
    u32 op = type == 0 ? OP_KERNEL : type == 4 ? OP_CHILD : type == 13 ? OP_COND : 0;
    u64 b = type == 0 ? kernel_of(params + 16) : type == 4 ? read_u64(params + 16) : 0;
    return graph_call(ctx, op, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), b);
}
// CUDA 12.2+ cudaGraphAddNode and cuGraphAddNode: params 5th; cudaGraphAddNode_v2, cuGraphAddNode_v2 and
// CUDA 13's cudaGraphAddNode (edge data before the count): 6th
int graph_add_node5(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return add_node(ctx, PT_REGS_PARM5(ctx)); }
int graph_add_node6(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return add_node(ctx, PT_REGS_PARM6(ctx)); }
// cudaGraphExecUpdate(exec, graph, ...), cuGraphExecUpdate(_v2)
int graph_exec_update(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return graph_call(ctx, OP_UPDATE, 0, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx));
}

int graph_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pg = pend_graph.lookup(&tid);
    if (!leave_outermost(pg))
        return 0;
    if (PT_REGS_RC(ctx) & 0xffffffff)   // cudaSuccess == CUDA_SUCCESS == 0: nothing changed
        return 0;
    u32 tgid = tid >> 32;
    u32 op = pg->kind;
    u64 a = pg->name, b = pg->size, out = pg->out;
    u64 gid;
    switch (op) {
    case OP_CREATE:
        graph_put(tgid, read_u64(out), gid_new(tgid, 0, 0), 0);
        break;
    case OP_END:
        graph_put(tgid, read_u64(out), a, 0);
        break;
    case OP_CLONE:
        graph_put(tgid, read_u64(out), graph_freeze(tgid, a), 1);
        break;
    case OP_INSTANTIATE:
        exec_put(tgid, read_u64(out), graph_freeze(tgid, a));
        break;
    case OP_KERNEL:
        gid = graph_writable(tgid, a);
        if (gid)
            content_add_kernel(tgid, gid, b);
        break;
    case OP_CHILD:
        gid = graph_writable(tgid, a);
        if (gid)
            content_add_part(tgid, gid, graph_freeze(tgid, b));
        break;
    case OP_COND:
        gid = graph_writable(tgid, a);
        if (gid)
            content_add_part(tgid, gid, 0);
        break;
    case OP_UPDATE:
        exec_put(tgid, a, graph_freeze(tgid, b));
        break;
    }
    return 0;
}

// cudaGraphDestroy(graph), cuGraphDestroy: a content no exec, clone or parent holds goes with it
int graph_destroy(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = current_tgid();
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM1(ctx)};
    struct graph_t *gr = graphs.lookup(&k);
    if (!gr)
        return 0;
    if (!gr->frozen) {
        struct tkey_t gk = {.tgid = tgid, .gen = gen_of(tgid), .addr = gr->gid};
        if (gids.delete(&gk) == 0)      // its gnodes and gparts entries: user space sweeps them
            share_give(tgid, SH_GRAPHS, 1);
    }
    if (graphs.delete(&k) == 0)
        share_give(tgid, SH_GRAPHS, 1);
    return 0;
}
// cudaGraphExecDestroy(exec), cuGraphExecDestroy: the content stays (its launches are counted)
static __always_inline int exec_forget(struct pt_regs *ctx) {
    struct tkey_t k = {.tgid = current_tgid(), .gen = gen_of(current_tgid()), .addr = PT_REGS_PARM1(ctx)};
    if (execs.delete(&k) == 0)
        share_give(k.tgid, SH_GRAPHS, 1);
    return 0;
}
int graph_exec_destroy(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return exec_forget(ctx); }
// cudaGraphNodeSetEnabled(exec, node, enabled), cuGraphNodeSetEnabled: a node of the exec turned on
// or off, of a kind gputop does not know: the exec's kernel count is unknown from now on
int graph_node_enabled(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return exec_forget(ctx); }

#endif /* __GRAPH_BPF_H */
