// Kernel names: what a launched function (host stub, CUfunction, CUkernel or handle) is called, kept
// where user space can read it after the process is gone (names, name_ptrs, aliases).
#ifndef __NAMES_BPF_H
#define __NAMES_BPF_H

// a process with names (or code ranges) but maybe no record: its exit is still reported
static __always_inline void track(u32 tgid) {
    u8 one = 1;
    u64 pk = pkey(tgid);
    tracked.update(&pk, &one);
}

// The name at user_str, kept for (tgid, addr). A copy that fails or is empty is never a name: the BPF
// side cannot fault a page in, and a registered name often sits on a page of its library the process
// has not touched yet (a fresh `import torch`: most of them). Nothing is kept then; user space reads
// the name from the process or its file (naming.py) and never takes an empty one.
static __always_inline void put_name(u32 tgid, u64 addr, u64 user_str) {
    u32 z = 0;
    // a name is 256 bytes: build it in a per-CPU scratch slot, not on the 512-byte stack
    struct name_t *n = name_scratch.lookup(&z);
    if (!n)
        return;
    __builtin_memset(n, 0, sizeof(*n));
    if (bpf_probe_read_user_str(n->name, NAME_LEN, (void *)user_str) <= 1)
        return;                         // not read (or nothing there): no name, no loss
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = addr};
    int had = names.lookup(&k) != 0;
    struct tenant_t *o = had ? 0 : share_take(tgid, SH_NAMES);
    if (!had && !o) {
        lose(DROP_NAMES, SH_NAMES);
        return;
    }
    track(tgid);
    // a new entry is inserted (charged once: another CPU's insert of it fails here and updates)
    int rc = o ? names.insert(&k, n) : names.update(&k, n);
    if (rc != 0 && o)
        share_add(o, SH_NAMES, -1);        // not made here: the reservation goes back
    if (rc == -EEXIST)
        rc = names.update(&k, n);
    if (rc != 0)
        lose(DROP_NAMES, SH_NAMES);
}

// A registered kernel's name, read at the pair's first launch while the process's memory holds it
// (user space reads registrations lazily: a process that execs or exits first would lose them).
// Names only for kernels that launch; the first launch of a pair is the slow path anyway.
static __always_inline void name_at_launch(u32 tgid, u64 func) {
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = func};
    if (names.lookup(&k))
        return;
    struct name_ptr_t *np = name_ptrs.lookup(&k);
    if (np)
        put_name(tgid, func, np->ptr);
}

// __cudaRegisterFunction(fatCubinHandle, hostFun, deviceFun, deviceName, ...): the name is read by
// user space, lazily, for the kernels that launch; and here at a kernel's first launch (name_at_launch)
int register_function(struct pt_regs *ctx) { count_hit(HIT_ENTRY);
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct tkey_t k = {.tgid = tgid, .gen = gen_of(tgid), .addr = PT_REGS_PARM2(ctx)};
    struct name_ptr_t v = {.ptr = PT_REGS_PARM4(ctx), .boot_ns = bpf_ktime_get_boot_ns()};
    int had = name_ptrs.lookup(&k) != 0;
    struct tenant_t *o = had ? 0 : share_take(tgid, SH_NAME_PTRS);
    if (!had && !o) {
        lose(DROP_NAMES, SH_NAME_PTRS);
        return 0;
    }
    track(tgid);
    int rc = o ? name_ptrs.insert(&k, &v) : name_ptrs.update(&k, &v);     // (as put_name)
    if (rc != 0 && o)
        share_add(o, SH_NAME_PTRS, -1);        // not made here: the reservation goes back
    if (rc == -EEXIST)
        rc = name_ptrs.update(&k, &v);
    if (rc != 0)
        lose(DROP_NAMES, SH_NAME_PTRS);
    return 0;
}

// the entry of a call that returns a handle through rdi: remember where, and what names it
static __always_inline int handle_enter(struct pt_regs *ctx, u64 what, u32 kind) {
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pn = pend_name.lookup(&tid);
    if (enter_nested(pn, ctx))
        return 0;
    struct pending_t n = {};
    n.out = PT_REGS_PARM1(ctx);
    n.name = what;
    n.kind = kind;
    pending_init(&n, ctx);
    pend_name.update(&tid, &n);
    return 0;
}

// cuModuleGetFunction(CUfunction *out, CUmodule, const char *name), cuLibraryGetKernel(out, lib, name)
int getfn_enter(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return handle_enter(ctx, PT_REGS_PARM3(ctx), 0); }

// cuKernelGetFunction(CUfunction *out, CUkernel kernel), __cudaGetKernel / cudaGetKernel
// (cudaKernel_t *out, const void *hostFun): the handle stands for the kernel or host stub
int kernel_getfn_enter(struct pt_regs *ctx) { count_hit(HIT_ENTRY); return handle_enter(ctx, PT_REGS_PARM2(ctx), 1); }

int getfn_return(struct pt_regs *ctx) { count_hit(HIT_RETURN);
    u64 tid = bpf_get_current_pid_tgid();
    struct pending_t *pn = pend_name.lookup(&tid);
    if (!leave_outermost(pn))
        return 0;
    if (PT_REGS_RC(ctx) != 0)
        return 0;
    u32 tgid = tid >> 32;
    u64 handle = read_u64(pn->out);
    if (!handle)
        return 0;
    if (pn->kind == 0) {
        put_name(tgid, handle, pn->name);
        return 0;
    }
    struct tkey_t dst = {.tgid = tgid, .gen = gen_of(tgid), .addr = handle};
    u64 src_addr = pn->name;
    int had = aliases.lookup(&dst) != 0;
    struct tenant_t *o = had ? 0 : share_take(tgid, SH_NAMES);
    if (!had && !o) {
        lose(DROP_NAMES, SH_NAMES);
        return 0;
    }
    track(tgid);
    int rc = o ? aliases.insert(&dst, &src_addr) : aliases.update(&dst, &src_addr);   // (as put_name)
    if (rc != 0 && o)
        share_add(o, SH_NAMES, -1);        // not made here: the reservation goes back
    if (rc == -EEXIST)
        rc = aliases.update(&dst, &src_addr);
    if (rc != 0)
        lose(DROP_NAMES, SH_NAMES);
    return 0;
}

#endif /* __NAMES_BPF_H */
