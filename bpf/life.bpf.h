// Process life and discovery, from tracepoints: execs, executable mappings (a CUDA library loaded:
// rescan the process; with FILE_KEYS, the file named for user space if it has not classified it),
// forks (a child inherits its parent's code ranges) and exits (the record's last counts, then the
// PID's next generation), each an event on the ring buffer.
#ifndef __LIFE_BPF_H
#define __LIFE_BPF_H

static __always_inline void emit(u32 tgid, u32 type) {
    struct event_t *e = events.ringbuf_reserve(sizeof(struct event_t));
    if (!e) {
        drop(DROP_EVENTS);
        return;
    }
    e->ts = bpf_ktime_get_ns();
    e->tgid = tgid;
    e->gen = gen_of(tgid);
    e->type = type;
    events.ringbuf_submit(e, 0);
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
                emit(tgid, EV_MMAP);
            return;
        }
        known_files.delete(&key);
    }
    struct file_event_t *e = events.ringbuf_reserve(sizeof(struct file_event_t));
    if (!e) {
        drop(DROP_EVENTS);
        return;
    }
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
    emit(tid >> 32, EV_MMAP);
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
    } else if (tracked.lookup(&pk)) {
        emit(tgid, EV_EXIT_IDLE);       // no record to show: just forget it
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
