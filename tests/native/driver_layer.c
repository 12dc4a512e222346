// A driver-level interception layer, as GPU-sharing layers for Kubernetes are (HAMi-core's libvgpu.so
// and its kind): preloaded into the process, it exports the driver's entry points (launches, graph
// launches, copies, allocations, syncs), hooks dlsym() and cuGetProcAddress() so that code looking the
// driver up gets its functions, and forwards every call to the real libcuda.so.1 ($LAYER_LIBCUDA, else
// the default search), counting nothing itself. Built twice (tests/bpf/test_driver_layer.py): as
// optimised C forwards, with tail calls (the layer jumps to the driver: the driver's entry sees the
// application's return address), and with -DNO_TAIL, where the layer does work after the call (the
// driver's entry sees the layer's return address).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *(*dlsym_t)(void *, const char *);

static volatile long forwarded;     // work after the call (-DNO_TAIL): no tail call

#ifdef NO_TAIL
#define FORWARD(call) do { CUresult r_ = (call); forwarded++; return r_; } while (0)
#else
#define FORWARD(call) return (call)
#endif

static dlsym_t real_dlsym(void) {
    static dlsym_t f;
    if (!f)
        f = (dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!f)
        f = (dlsym_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return f;
}

static void *driver(void) {
    static void *h;
    if (!h) {
        const char *path = getenv("LAYER_LIBCUDA");
        h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h)
            abort();
    }
    return h;
}

#define REAL(type, name) static __typeof__((type)0) real_; if (!real_) real_ = (type)real_dlsym()(driver(), name)

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void *stream, void **params, void **extra) {
    REAL(CUresult (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                      void **, void **), "cuLaunchKernel");
    FORWARD(real_(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra));
}

CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) {
    REAL(CUresult (*)(const void *, void *, void **, void **), "cuLaunchKernelEx");
    FORWARD(real_(config, f, params, extra));
}

CUresult cuGraphLaunch(void *exec, void *stream) {
    REAL(CUresult (*)(void *, void *), "cuGraphLaunch");
    FORWARD(real_(exec, stream));
}

CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n) {
    REAL(CUresult (*)(uint64_t, const void *, size_t), "cuMemcpyHtoD_v2");
    FORWARD(real_(dst, src, n));
}

CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n) {
    REAL(CUresult (*)(void *, uint64_t, size_t), "cuMemcpyDtoH_v2");
    FORWARD(real_(dst, src, n));
}

CUresult cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t n) {
    REAL(CUresult (*)(uint64_t, uint64_t, size_t), "cuMemcpyDtoD_v2");
    FORWARD(real_(dst, src, n));
}

CUresult cuMemAllocAsync(uint64_t *dptr, size_t n, void *stream) {
    REAL(CUresult (*)(uint64_t *, size_t, void *), "cuMemAllocAsync");
    FORWARD(real_(dptr, n, stream));
}

CUresult cuMemFreeAsync(uint64_t dptr, void *stream) {
    REAL(CUresult (*)(uint64_t, void *), "cuMemFreeAsync");
    FORWARD(real_(dptr, stream));
}

CUresult cuStreamSynchronize(void *stream) {
    REAL(CUresult (*)(void *), "cuStreamSynchronize");
    FORWARD(real_(stream));
}

CUresult cuCtxSynchronize(void) {
    REAL(CUresult (*)(void), "cuCtxSynchronize");
    FORWARD(real_());
}

static const struct { const char *name; void *fn; } hooks[] = {
    {"cuLaunchKernel", (void *)cuLaunchKernel},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx},
    {"cuGraphLaunch", (void *)cuGraphLaunch},
    {"cuMemcpyHtoD_v2", (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyDtoH_v2", (void *)cuMemcpyDtoH_v2},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2},
    {"cuMemcpyDtoD_v2", (void *)cuMemcpyDtoD_v2},
    {"cuMemcpyDtoD", (void *)cuMemcpyDtoD_v2},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize},
    {"cuCtxSynchronize", (void *)cuCtxSynchronize},
};

static void *hooked(const char *name) {
    for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++)
        if (!strcmp(name, hooks[i].name))
            return hooks[i].fn;
    return NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    void *mine = hooked(symbol);
    if (mine) {
        *pfn = mine;
        if (status)
            *status = 0;
        return 0;
    }
    REAL(CUresult (*)(const char *, void **, int, uint64_t, int *), "cuGetProcAddress_v2");
    FORWARD(real_(symbol, pfn, version, flags, status));
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

void *dlsym(void *handle, const char *name) {
    if (!strcmp(name, "cuGetProcAddress_v2"))
        return (void *)cuGetProcAddress_v2;
    if (!strcmp(name, "cuGetProcAddress"))
        return (void *)cuGetProcAddress;
    void *mine = hooked(name);
    return mine ? mine : real_dlsym()(handle, name);
}
