// Fair share of the tables tenants fill (issue 40; docs/SECURITY.md, "Fair share"). Every table a
// process's calls add entries to is shared by all the host's tenants, so each tenant (tenant_of_current:
// a uid; for uid 0, a cgroup) may hold at most TENANT_SHARE_PCT % of each class of them (share_cap):
// a tenant at its share loses its own new entries, never another's. What each tenant lost, to its
// share or to a full table, is counted as its own (lost[]: lose()).
//
// Who holds what: a process's entries are charged to its owner, the tenant of the task that made its
// first entry (owners: one per process, itself charged as SH_OWNERS), so that all of them are given
// back to the tenant they were charged to whatever the process does to its uid afterwards. Each counter
// has one writer: the BPF side adds what it makes and takes off what it deletes (tenant_held), user
// space counts what it deletes (tenant_credit: the entries of processes that are gone); a tenant holds
// held - released.
#ifndef __SHARE_BPF_H
#define __SHARE_BPF_H

// the current task's tenant
static __always_inline struct tenant_t tenant_of_current(void) {
    struct tenant_t t = {};
    t.uid = (u32)bpf_get_current_uid_gid();
    if (t.uid == 0)
        t.cgroup = bpf_get_current_cgroup_id();
    return t;
}

// the entries one tenant may hold of share class c (SH_*: constant where inlined). A class of several
// tables (names and aliases; gids, graphs, execs and gparts) is charged their sum: each holds at most that
static __always_inline s64 share_cap(u32 c) {
    u64 n = c == SH_OWNERS ? MAX_PROCS * 4ULL : c == SH_PROCS ? MAX_PROCS : c == SH_KERNELS ? MAX_KERNELS
          : c == SH_NAMES ? MAX_NAMES : c == SH_NAME_PTRS ? MAX_NAME_PTRS : c == SH_ALLOCS ? MAX_ALLOCS
          : c == SH_RANGES ? MAX_ALLOCS * 8ULL : c == SH_CAPTURES ? MAX_CAPTURES
          : c == SH_GRAPHS ? MAX_GRAPHS : c == SH_SYNC_HISTS ? MAX_SYNC_HISTS : c == SH_CALL_STACKS ? MAX_STACKS
          : c == SH_CALL_SITES ? MAX_SITES : c == SH_JOINS ? MAX_JOINED
          : c == SH_CAPTURE_EVENTS ? MAX_CAPTURE_EVENTS : MAX_GRAPH_NODES;
    return n * TENANT_SHARE_PCT / 100;
}

// tenant t's counters, made if it has none (0: no room for another tenant)
static __always_inline struct held_t *held_of(struct tenant_t *t) {
    struct held_t *h = tenant_held.lookup(t);
    if (h)
        return h;
    u32 z = 0;
    struct held_t *zero = zero_held.lookup(&z);
    if (!zero)
        return 0;
    tenant_held.insert(t, zero);            // another CPU's may be there already: use that one
    return tenant_held.lookup(t);
}

// One more entry of class c for tenant t, reserved (charged) when it has room: 1; else 0. Reserved
// before the entry is made (one atomic add: CPUs making entries at once cannot pass the share together;
// without BPF's atomics, fetch_add, each may pass it by one),
// given back (share_add -1) when the entry could not be made after all.
static __always_inline int share_reserve(struct tenant_t *t, u32 c) {
    struct held_t *h = held_of(t);
    if (!h)
        return 0;
    struct credit_t *cr = tenant_credit.lookup(t);
    s64 was = fetch_add(&h->held[idx_below(c, NSHARE)], 1);
    if (was - (cr ? cr->released[idx_below(c, NSHARE)] : 0) >= share_cap(c)) {
        __sync_fetch_and_add(&h->held[idx_below(c, NSHARE)], -1);
        return 0;
    }
    return 1;
}

// n more (or, negative, fewer) entries of class c held by tenant t
static __always_inline void share_add(struct tenant_t *t, u32 c, s64 n) {
    struct tenant_t key = *t;
    struct held_t *h = tenant_held.lookup(&key);
    if (h)
        __sync_fetch_and_add(&h->held[idx_below(c, NSHARE)], n);
}

// The owner of process tgid (the current task's process), made if it has none: the tenant its
// entries are charged to; 0 when that tenant has no room for one more process's entries.
static __always_inline struct tenant_t *owner_of(u32 tgid) {
    u64 pk = pkey(tgid);
    struct tenant_t *o = owners.lookup(&pk);
    if (o)
        return o;
    struct tenant_t t = tenant_of_current();
    if (!share_reserve(&t, SH_OWNERS))
        return 0;
    if (owners.insert(&pk, &t) != 0)        // another CPU's, or no room
        share_add(&t, SH_OWNERS, -1);
    return owners.lookup(&pk);
}

// Before process tgid makes an entry of class c: its owner, the entry reserved (share_reserve), when it
// has room for it; else 0 (the caller gives the entry up and counts the loss: lose()). When the entry
// cannot be made after all (there already, the table full): share_add(owner, c, -1).
static __always_inline struct tenant_t *share_take(u32 tgid, u32 c) {
    struct tenant_t *o = owner_of(tgid);
    if (!o || !share_reserve(o, c))
        return 0;
    return o;
}

// n entries of class c of process tgid were deleted by the BPF side (a free, a capture's end, a graph
// destroyed): given back to its owner
static __always_inline void share_give(u32 tgid, u32 c, s64 n) {
    u64 pk = pkey(tgid);
    struct tenant_t *o = owners.lookup(&pk);
    if (o)
        share_add(o, c, -n);
}

// A call of the current process lost to a full table or its tenant's share (one of drop kind `what`,
// class c): counted once, by the caller that gives the call up, for the tenant it was lost to (the
// process's owner, or the current task's tenant when the process has none)
static __always_inline void lose(u32 what, u32 c) {
    drop(what);
    u64 pk = pkey(current_tgid());
    struct tenant_t *o = owners.lookup(&pk);
    struct tenant_t t = o ? *o : tenant_of_current();
    struct held_t *h = held_of(&t);
    if (h)
        __sync_fetch_and_add(&h->lost[idx_below(c, NSHARE)], 1);
}

// the process's record, made if it has none; 0 when the table is full or its tenant's share is (not
// counted as lost: the caller that gives the call up counts it, once)
static __always_inline struct proc_t *proc_make(u32 tgid) {
    u64 pk = pkey(tgid);
    struct proc_t *p = procs.lookup(&pk);
    if (p)
        return p;
    u32 z = 0;
    struct proc_t *zero = zero_proc.lookup(&z);
    if (!zero)
        return 0;
    struct tenant_t *o = share_take(tgid, SH_PROCS);
    if (!o)
        return 0;
    // insert, not update: a record another CPU just created must not be replaced under it
    int created = procs.insert(&pk, zero) == 0;
    if (!created)
        share_add(o, SH_PROCS, -1);
    p = procs.lookup(&pk);
    if (p && created)
        bpf_get_current_comm(p->comm, sizeof(p->comm));
    return p;
}

// the process's record, or 0 when it has none
static __always_inline struct proc_t *proc_of(u32 tgid) {
    u64 pk = pkey(tgid);
    return procs.lookup(&pk);
}

static __always_inline struct proc_t *proc_get(u32 tgid) {
    struct proc_t *p = proc_make(tgid);
    if (!p)
        lose(DROP_PROCS, SH_PROCS);
    return p;
}

#endif /* __SHARE_BPF_H */
