// Calls cudaLaunchKernel N times through LIBCUDART (dlopen), then execs PROG ARGS...: one process,
// two programs (tests/bpf/test_faults.py). Every launch fails without a driver; the uprobe fires.
//
// Usage: launch_then_exec LIBCUDART N GOFILE PROG [ARGS...]   (prints "ready PID", waits for GOFILE)
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);

__attribute__((noinline)) void stub(void) __asm__("_Z13before_execv");
void stub(void) { __asm__ volatile("nop"); }

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: launch_then_exec LIBCUDART N GOFILE PROG [ARGS...]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    launch_t launch = lib ? (launch_t)dlsym(lib, "cudaLaunchKernel") : NULL;
    if (!launch) {
        fprintf(stderr, "launch_then_exec: %s\n", dlerror());
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    struct stat st;
    while (stat(argv[3], &st) != 0) usleep(2000);
    dim3 grid = {2, 1, 1}, block = {32, 1, 1};
    for (long i = 0, n = atol(argv[2]); i < n; i++)
        launch((const void *)stub, grid, block, NULL, 0, NULL);
    execv(argv[4], argv + 4);
    perror("execv");
    return 1;
}
