// A hostile "CPython" (tests/bpf/test_call_sites.py): built as python3.11, it exports a _PyRuntime laid out
// as 3.11's (the offsets passed with -D from gputop's own table) whose one thread state is the calling
// thread's, and whose frame chain is garbage: a cycle of two frames (cycle), or 10,000 frames deep
// (deep), each frame's code a pointer to nothing. Then N cudaLaunchKernel through the real runtime.
// gputop must walk it within its bounds and show no name it made up.
//
//   python3.11 LIBCUDART cycle|deep N      prints "ready PID", waits for a line on stdin, launches,
//                                          prints "done", exits at the end of its input
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#define DEEP 10000

// _PyRuntime: big enough for any offset the table has (interp_head)
__attribute__((visibility("default"))) unsigned char _PyRuntime[4096];

static unsigned char interp[4096];
static unsigned char tstate[4096];
static unsigned char cframe[64];
static unsigned char frames[DEEP][128];

static void put(unsigned char *at, uint64_t v) { memcpy(at, &v, sizeof(v)); }

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);

int main(int argc, char **argv) {
    if (argc < 4)
        return 2;
    void *rt = dlopen(argv[1], RTLD_NOW);
    if (!rt)
        return 3;
    launch_t launch = (launch_t)dlsym(rt, "cudaLaunchKernel");
    int deep = strcmp(argv[2], "deep") == 0;
    long n = atol(argv[3]);
    put(_PyRuntime + INTERP_HEAD, (uint64_t)interp);        // interpreters.head
    put(_PyRuntime + INTERP_HEAD + 8, (uint64_t)interp);    // interpreters.main
    put(interp + THREADS_HEAD, (uint64_t)tstate);
    put(tstate + TS_NEXT, 0);
    put(tstate + TS_THREAD_ID, (uint64_t)pthread_self());
    put(tstate + TS_NATIVE_TID, (uint64_t)syscall(SYS_gettid));
    put(tstate + TS_FRAME, (uint64_t)cframe);
    put(cframe + CFRAME_CURRENT, (uint64_t)frames[0]);
    int count = deep ? DEEP : 2;
    for (int i = 0; i < count; i++) {
        unsigned char *f = frames[i];
        put(f + FR_CODE, 0x1000 + 16 * (uint64_t)i);        // no code object: unmapped
        put(f + FR_INSTR, 0x1000 + 16 * (uint64_t)i + 2);
        f[FR_OWNER] = 0;
        // the cycle: 0 -> 1 -> 0; deep: i -> i + 1, the last has none
        uint64_t prev = deep ? (i + 1 < count ? (uint64_t)frames[i + 1] : 0) : (uint64_t)frames[1 - i];
        put(f + FR_PREVIOUS, prev);
    }
    printf("ready %d\n", getpid());
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return 0;
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    for (long i = 0; i < n; i++)
        launch((const void *)0x2001, g, b, NULL, 0, NULL);
    printf("done\n");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin))
        ;
    return 0;
}
