// NCCL (libnccl.so.2, or NCCL linked into a program): collectives and point-to-point calls by operation,
// with their bytes (count × the datatype's size), group calls, and the communicators a process creates.
// Entry probes only, as on the launch paths; ncclCommInitRank* also has a return probe (the communicator
// exists only if it succeeded). ncclBcast is not probed: it is ncclBroadcast's wrapper and calls it (one
// call, counted there); the *Config forms (2.31+) take the plain form's arguments first.
#ifndef __NCCL_BPF_H
#define __NCCL_BPF_H

// one call of operation op of count elements of datatype dtype (an unknown datatype: counted, its bytes not)
static __always_inline int nccl_count(u32 op, u64 count, u64 dtype) {
    struct proc_t *p = proc_get(current_tgid());
    if (!p)
        return 0;
    u64 i = idx_below(op, NNCCL);
    __sync_fetch_and_add(&p->nccl_calls[i], 1);
    __sync_fetch_and_add(&p->nccl_all_calls, 1);
    dtype &= 0xffffffff;                // an int enum: the register's upper half is not the caller's
    if (dtype >= NCCL_DTYPES) {
        __sync_fetch_and_add(&p->nccl_untyped_calls, 1);
        return 0;
    }
    u64 bytes = count << ((NCCL_DTYPE_LOG2 >> (2 * dtype)) & 3);
    __sync_fetch_and_add(&p->nccl_bytes[i], bytes);
    __sync_fetch_and_add(&p->nccl_all_bytes, bytes);
    return 0;
}

// (sendbuff, recvbuff, count, datatype, ...): count and datatype in rdx and ecx
int nccl_allreduce(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_ALLREDUCE, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
int nccl_broadcast(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_BROADCAST, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
int nccl_reduce(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_REDUCE, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
int nccl_allgather(struct pt_regs *ctx) { count_hit(HIT_ENTRY);       // count: sendcount, this rank's part
    return nccl_count(NCCL_ALLGATHER, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
int nccl_reducescatter(struct pt_regs *ctx) { count_hit(HIT_ENTRY);   // count: recvcount, this rank's part
    return nccl_count(NCCL_REDUCESCATTER, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
int nccl_alltoall(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_ALLTOALL, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
int nccl_gather(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_GATHER, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
int nccl_scatter(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_SCATTER, PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx)); }
// ncclSend(sendbuff, count, datatype, peer, comm, stream), ncclRecv(recvbuff, ...): rsi and edx
int nccl_send(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_SEND, PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx)); }
int nccl_recv(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    return nccl_count(NCCL_RECV, PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx)); }

// ncclGroupStart()
int nccl_group(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    struct proc_t *p = proc_get(current_tgid());
    if (p)
        __sync_fetch_and_add(&p->nccl_group_calls, 1);
    return 0;
}

// ncclCommInitRankScalable(newcomm*, nranks, myrank, ...): nranks the second argument, rank the third
static __always_inline int nccl_init_at(struct pt_regs *ctx, u64 rank) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t n = {};
    n.size = PT_REGS_PARM2(ctx) & 0xffffffff;
    n.kind = rank & 0xffffffff;
    pending_init(&n, ctx);
    pend_nccl.update(&tid, &n);
    return 0;
}
int nccl_init_enter(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return nccl_init_at(ctx, PT_REGS_PARM3(ctx)); }
// ncclCommInitRank(comm*, nranks, commId (128 bytes, by value), rank), ncclCommInitRankConfig(..., rank,
// config): the id is copied onto the stack on x86-64 (rank in edx, the third register), passed by its
// copy's address on arm64 (in x2: rank in w3)
int nccl_init_id_enter(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
#ifdef GPUTOP_ARM64
    return nccl_init_at(ctx, PT_REGS_PARM4(ctx));
#else
    return nccl_init_at(ctx, PT_REGS_PARM3(ctx));
#endif
}

// at its return: a communicator exists when it succeeded (or goes on without blocking); the process keeps
// the largest one's size and its rank in it (the latest of equal ones)
int nccl_init_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *ps = pend_nccl.lookup(&tid);
    if (!ps)
        return 0;
    u64 nranks = ps->size, rank = ps->kind;
    pend_nccl.delete(&tid);
    u32 rc = PT_REGS_RC(ctx);
    if (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS)
        return 0;
    struct proc_t *p = proc_get(tid >> 32);
    if (!p)
        return 0;
    __sync_fetch_and_add(&p->nccl_comms, 1);
    if (nranks >= p->nccl_nranks) {
        p->nccl_nranks = nranks;
        p->nccl_rank = rank;
    }
    return 0;
}

#endif /* __NCCL_BPF_H */
