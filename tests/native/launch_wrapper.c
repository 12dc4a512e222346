// A library preloaded in front of the CUDA runtime, as GPU-sharing and interception layers are: it
// exports cudaLaunchKernel, cudaLaunchKernel_ptsz and cudaMemcpy, counts nothing itself and forwards each
// call to the next definition (the real libcudart) through dlsym(RTLD_NEXT). It defines no
// __cudaRegisterFatBinary: it is not a runtime.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*memcpy_t)(void *, const void *, size_t, int);

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t smem, void *stream) {
    static launch_t real;
    if (!real) real = (launch_t)next("cudaLaunchKernel");
    return real ? real(f, g, b, args, smem, stream) : 1;
}
int cudaLaunchKernel_ptsz(const void *f, dim3 g, dim3 b, void **args, size_t smem, void *stream) {
    static launch_t real;
    if (!real) real = (launch_t)next("cudaLaunchKernel_ptsz");
    return real ? real(f, g, b, args, smem, stream) : 1;
}
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    static memcpy_t real;
    if (!real) real = (memcpy_t)next("cudaMemcpy");
    return real ? real(dst, src, n, kind) : 1;
}
