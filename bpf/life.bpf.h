// Process life and discovery, from tracepoints: execs, executable mappings (a CUDA library loaded:
// rescan the process; with FILE_KEYS, the file named for user space if it has not classified it),
// forks (a child inherits its parent's code ranges) and exits (the record's last counts, then the
// PID's next generation), each an event on the ring buffer.
//
// The ring is shared by every tenant of the host, and user space drains it at its own pace (issue 40:
// a loop of mmap and munmap of a probed library froze gputop). So events are coalesced where they
// repeat and each tenant has a share of them (docs/SECURITY.md, "Fair share"):
// - a rescan is asked once per process until user space takes it (rescan_pending: it deletes the
//   entry before it reads the process's maps, so a later mapping asks again), or COALESCE_NS passed;
// - a file is named once until user space classifies it (it deletes the file_pending entry then), or
//   COALESCE_NS passed, under one change time (an inode number another file has now is named at
//   once); meanwhile its mappings ask for a rescan;
// - a tenant (a uid; for uid 0, a cgroup: containers run as root in pods of their own) emits at most
//   TENANT_EVENTS per EVENT_WINDOW_NS; the rest are dropped and counted as its own (tenant_events).
#ifndef __LIFE_BPF_H
#define __LIFE_BPF_H

// 1 when the current task's tenant may emit one more event in this window; else its loss is counted
static __always_inline int tenant_share(void) {
    struct tenant_t t = tenant_of_current();
    u64 now = bpf_ktime_get_ns();
    struct share_t *s = tenant_events.lookup(&t);
    if (!s) {
        struct share_t fresh = {.window_ns = now};
        tenant_events.insert(&t, &fresh);       // another CPU's may be there already: use that one
        s = tenant_events.lookup(&t);
        if (!s)
            return 1;                           // no room even for an LRU entry: the ring decides
    }
    if (now - s->window_ns >= EVENT_WINDOW_NS) {
        s->window_ns = now;                     // racy across CPUs: a window may start twice, never late
        s->used = 0;
    }
    if (s->used >= TENANT_EVENTS) {
        __sync_fetch_and_add(&s->dropped, 1);
        drop(DROP_EVENTS);
        return 0;
    }
    __sync_fetch_and_add(&s->used, 1);
    return 1;
}

// one event; 1 when it is on the ring
static __always_inline int emit(u32 tgid, u32 type) {
    if (!tenant_share())
        return 0;
    struct event_t *e = events.ringbuf_reserve(sizeof(struct event_t));
    if (!e) {
        drop(DROP_EVENTS);
        return 0;
    }
    e->ts = bpf_ktime_get_ns();
    e->tgid = tgid;
    e->gen = gen_of(tgid);
    e->type = type;
    events.ringbuf_submit(e, 0);
    return 1;
}

// ask user space to rescan process tgid (EV_MMAP), unless a request of it is pending
static __always_inline void ask_rescan(u32 tgid) {
    u64 now = bpf_ktime_get_ns();
    u64 *asked = rescan_pending.lookup(&tgid);
    if (asked && now - *asked < COALESCE_NS)
        return;
    // noted before the event is out: user space may take it (and delete the note) at once
    rescan_pending.update(&tgid, &now);
    if (!emit(tgid, EV_MMAP))
        rescan_pending.delete(&tgid);
}

TRACEPOINT_PROBE(sched, sched_process_exec) {
    emit(bpf_get_current_pid_tgid() >> 32, EV_EXEC);
    return 0;
}

#ifdef FILE_KEYS
// the struct file behind descriptor fd of the current task (0 if unreadable)
static __always_inline u64 file_of_fd(u64 fd) {
    u64 files = read_ptr(bpf_get_current_task() + OFF_TASK_FILES);
    u64 fdt = files ? read_ptr(files + OFF_FILES_FDT) : 0;
    u64 fds = fdt ? read_ptr(fdt + OFF_FDT_FD) : 0;
    return fds ? read_ptr(fds + fd * 8) : 0;
}

// an inode's change time in ns (OFF_INODE_CTIME_*: split in two members since 6.11, a timespec64
// before; the nanoseconds read as their low 32 bits, a little-endian kernel's: btf.py reads no other)
static __always_inline u64 inode_ctime(u64 inode) {
    s64 sec = 0;
    u32 nsec = 0;
    bpf_probe_read_kernel(&sec, sizeof(sec), (void *)(inode + OFF_INODE_CTIME_SEC));
    bpf_probe_read_kernel(&nsec, sizeof(nsec), (void *)(inode + OFF_INODE_CTIME_NSEC));
    return (u64)sec * 1000000000ULL + (nsec & CTIME_NSEC_MASK);
}

// an exec mapping of a file user space has not classified yet (or classified under another change
// time: another file under the same inode number): its key and name, so that it can be probed even
// when the process exits before user space reads its maps
static __always_inline void emit_file(u32 tgid, u64 file) {
    struct file_key_t key = {};
    u64 inode = read_ptr(file + OFF_FILE_INODE);
    u64 sb = inode ? read_ptr(inode + OFF_INODE_SB) : 0;
    u32 dev = 0;
    if (sb)
        bpf_probe_read_kernel(&dev, sizeof(dev), (void *)(sb + OFF_SB_DEV));
    key.dev = dev;
    key.ino = inode ? read_ptr(inode + OFF_INODE_INO) : 0;
    u64 ctime = inode ? inode_ctime(inode) : 0;
    struct known_file_t *known = known_files.lookup(&key);
    if (known) {
        if (known->ctime == ctime) {
            if (known->state == FILE_PROBED)
                ask_rescan(tgid);
            return;
        }
        known_files.delete(&key);
    }
    u64 now = bpf_ktime_get_ns();
    struct named_t *named = file_pending.lookup(&key);
    if (named && named->ctime == ctime && now - named->ns < COALESCE_NS) {
        ask_rescan(tgid);               // named already: its process's maps name it again
        return;
    }
    struct named_t naming = {.ns = now, .ctime = ctime};
    if (!tenant_share())
        return;
    struct file_event_t *e = events.ringbuf_reserve(sizeof(struct file_event_t));
    if (!e) {
        drop(DROP_EVENTS);
        return;
    }
    file_pending.update(&key, &naming);     // before the submit: user space deletes it once it classifies
    e->h.ts = bpf_ktime_get_ns();
    e->h.tgid = tgid;
    e->h.gen = gen_of(tgid);
    e->h.type = EV_FILE;
    e->key = key;
    e->ctime = ctime;
    e->depth = 0;
    e->complete = 0;
    u64 d = read_ptr(file + OFF_FILE_DENTRY);
#pragma unroll
    for (int i = 0; i < PATH_DEPTH; i++) {
        if (!d)
            break;
        bpf_probe_read_kernel_str(e->names[i], PATH_NAME, (void *)read_ptr(d + OFF_DENTRY_NAME));
        e->depth = i + 1;
        u64 parent = read_ptr(d + OFF_DENTRY_PARENT);
        if (parent == d) {
            e->complete = 1;
            break;
        }
        d = parent;
    }
    events.ringbuf_submit(e, 0);
}
#endif

// a new executable file mapping (dlopen of a CUDA library): rescan that process once the
// mapping exists, at the syscall's exit
TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
    if ((args->prot & 4 /* PROT_EXEC */) && (s64)args->fd >= 0) {
        u64 tid = bpf_get_current_pid_tgid();
        u64 file = 1;
#ifdef FILE_KEYS
        file = file_of_fd(args->fd);
        if (!file)
            file = 1;
#endif
        exec_mmap.update(&tid, &file);
    }
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mmap) {
    u64 tid = bpf_get_current_pid_tgid();
    u64 *pending = exec_mmap.lookup(&tid);
    if (!pending)
        return 0;
    u64 file = *pending;
    exec_mmap.delete(&tid);
    if (args->ret < 0 && args->ret >= -4095)
        return 0;
#ifdef FILE_KEYS
    if (file != 1) {
        emit_file(tid >> 32, file);
        return 0;
    }
#endif
    ask_rescan(tid >> 32);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if ((u32)id != tgid)
        return 0;                       // a thread, not the process
    u64 pk = pkey(tgid);
    struct proc_t *p = procs.lookup(&pk);
    if (p) {
        p->exited_ns = bpf_ktime_get_ns();
        emit(tgid, EV_EXIT);
    } else if (tracked.lookup(&pk) || owners.lookup(&pk)) {
        emit(tgid, EV_EXIT_IDLE);       // no record to show: just forget it (and give its entries back)
    } else {
        return 0;
    }
    gen_bump(tgid);                     // after the events, which name the exiting process's generation
    return 0;
}

// a child inherits its parent's mappings: give it the parent's code ranges before it launches
// (args->parent_pid is the forking thread's id: the process is the current task's tgid; a new
// thread also comes through here, and user space ignores it)
TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent = current_tgid();
    u64 ppk = pkey(parent);
    if (procs.lookup(&ppk) || tracked.lookup(&ppk))
        emit(args->child_pid, EV_FORK);
    return 0;
}

#endif /* __LIFE_BPF_H */
