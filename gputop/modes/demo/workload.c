// gputop demo workload: the same elementwise chain y = relu(a*x + b), unfused (three kernels per
// step) or fused (one kernel per step), launched through the CUDA runtime at a fixed step rate.
// Without a GPU every launch fails right after entry, which is where gputop traces it.
// Usage: workload LIBCUDART unfused|fused STEPS_PER_S
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*sync_t)(void *);

// host stubs named as nvcc names kernels: (float const*, float*, int) and friends
__attribute__((noinline)) void k_scale(void) __asm__("_Z13unfused_scalePKfPfi");
__attribute__((noinline)) void k_bias(void) __asm__("_Z12unfused_biasPKfPfi");
__attribute__((noinline)) void k_relu(void) __asm__("_Z12unfused_reluPKfPfi");
__attribute__((noinline)) void k_fused(void) __asm__("_Z21fused_scale_bias_reluPKfPfi");
void k_scale(void) { __asm__ volatile("nop"); }
void k_bias(void) { __asm__ volatile("nop; nop"); }
void k_relu(void) { __asm__ volatile("nop; nop; nop"); }
void k_fused(void) { __asm__ volatile("nop; nop; nop; nop"); }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: workload LIBCUDART unfused|fused STEPS_PER_S\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "workload: %s\n", dlerror());
        return 1;
    }
    launch_t launch = (launch_t)dlsym(h, "cudaLaunchKernel");
    sync_t sync = (sync_t)dlsym(h, "cudaStreamSynchronize");
    if (!launch || !sync) {
        fprintf(stderr, "workload: %s has no cudaLaunchKernel\n", argv[1]);
        return 1;
    }
    int fused = strcmp(argv[2], "fused") == 0;
    double rate = atof(argv[3]);
    dim3 grid = {4096, 1, 1}, block = {256, 1, 1};
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long done = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9;
        for (long due = (long)(el * rate); done < due; done++) {
            if (fused) {
                launch((const void *)k_fused, grid, block, NULL, 0, NULL);
            } else {
                launch((const void *)k_scale, grid, block, NULL, 0, NULL);
                launch((const void *)k_bias, grid, block, NULL, 0, NULL);
                launch((const void *)k_relu, grid, block, NULL, 0, NULL);
            }
            if (done % 100 == 99)
                sync(NULL);
        }
        usleep(1000);
    }
}
