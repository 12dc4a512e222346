// Runs PROG ARGS... as a new process with exactly the PID given (clone3 with set_tid, Linux 5.5+,
// needs CAP_SYS_ADMIN): a reused PID on demand (tests/bpf/test_faults.py). Waits for it and exits
// with its status.
//
// Usage: spawn_at_pid PID PROG [ARGS...]
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: spawn_at_pid PID PROG [ARGS...]\n");
        return 2;
    }
    pid_t want = (pid_t)atoi(argv[1]);
    struct clone_args args;
    memset(&args, 0, sizeof(args));
    args.exit_signal = SIGCHLD;
    args.set_tid = (uint64_t)(uintptr_t)&want;
    args.set_tid_size = 1;
    long pid = syscall(SYS_clone3, &args, sizeof(args));
    if (pid < 0) {
        fprintf(stderr, "spawn_at_pid: clone3 with PID %d: %s\n", (int)want, strerror(errno));
        return 1;
    }
    if (pid == 0) {
        execv(argv[2], argv + 2);
        perror("execv");
        _exit(127);
    }
    int status = 0;
    waitpid((pid_t)pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
