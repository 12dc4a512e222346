// A stand-in CUDA runtime for what the real one cannot show without a GPU:
//  - runtime -> driver nesting: cudaLaunchKernel calls the REAL libcuda.so.1's cuLaunchKernel,
//    cudaMemcpy(kind 1/2/3) calls the real cuMemcpyHtoD_v2/DtoH_v2/DtoD_v2, cudaStreamSynchronize
//    calls the real cuStreamSynchronize (as the real runtime does on a GPU host);
//  - stream capture that succeeds (launches between begin and end are recorded, not run), and
//    events recorded and waited on (other streams join a capture through them);
//  - graphs that succeed: handles from the heap for captured, created and cloned graphs and for
//    executable graphs (a destroyed one's address comes back, as with the real runtime); nodes
//    added, instantiation, updates and launches succeed; the runtime's graph calls enter the real
//    libcuda.so.1's twin first (cuStreamEndCapture, cuGraphInstantiateWithFlags,
//    cuGraphAddKernelNode_v2, cuGraphLaunch), as the runtime does on a GPU host; driver graph calls
//    (cuGraphCreate, cuGraphAddKernelNode_v2, cuGraphAddNode, cuGraphInstantiateWithFlags,
//    cuGraphLaunch) succeed too, for --cuda;
//  - memsets: cudaMemset(Async), cudaMemset2D call the real cuMemsetD8_v2 (Async), cuMemsetD2D8_v2;
//  - allocations that succeed (device, pinned, managed: host memory from mmap), so copies with
//    cudaMemcpyDefault can be classified and CPU faults on managed memory can be produced.
// The path of libcuda.so.1 comes from $SHIM_LIBCUDA. SHIM_SYNC_MS or SHIM_SYNC_SCHEDULE set the time a sync
// blocks (sync_wait); cudaDeviceSynchronize and cudaEventSynchronize block the same way, then call the real
// cuCtxSynchronize and cuEventSynchronize.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void *, void **, void **);
typedef int (*cu_copy_t)(uint64_t, uint64_t, size_t);
typedef int (*cu_sync_t)(void *);

static void *libcuda(void) {
    static void *h;
    if (!h) {
        const char *path = getenv("SHIM_LIBCUDA");
        h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h)
            abort();
    }
    return h;
}

static int launch_via_driver(const void *func, dim3 g, dim3 b, void **args, size_t smem, void *stream) {
    static cu_launch_t f;
    if (!f)
        f = (cu_launch_t)dlsym(libcuda(), "cuLaunchKernel");
    f((void *)func, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem, stream, args, NULL);
    return 0;
}

int cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem, void *stream) {
    return launch_via_driver(func, g, b, args, smem, stream);
}

int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    static cu_copy_t htod, dtoh, dtod;
    if (!htod) {
        htod = (cu_copy_t)dlsym(libcuda(), "cuMemcpyHtoD_v2");
        dtoh = (cu_copy_t)dlsym(libcuda(), "cuMemcpyDtoH_v2");
        dtod = (cu_copy_t)dlsym(libcuda(), "cuMemcpyDtoD_v2");
    }
    uint64_t d = (uint64_t)(uintptr_t)dst, s = (uint64_t)(uintptr_t)src;
    switch (kind) {
    case 1: return htod(d, s, n);
    case 2: return dtoh(d, s, n);
    case 3: return dtod(d, s, n);
    default: memmove(dst, src, n); return 0;
    }
}

static void *shim_alloc(size_t size) {
    size_t len = (size + 4095) & ~(size_t)4095;
    void *p = mmap(NULL, len ? len : 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    madvise(p, len, MADV_NOHUGEPAGE);
    return p;
}

int cudaMalloc(void **p, size_t size) { *p = shim_alloc(size); return *p ? 0 : 2; }
int cudaMallocHost(void **p, size_t size) { *p = shim_alloc(size); return *p ? 0 : 2; }
int cudaMallocManaged(void **p, size_t size, unsigned flags) { (void)flags; *p = shim_alloc(size); return *p ? 0 : 2; }
int cudaFree(void *p) { (void)p; return 0; }
// allocation paths that succeed; some call the shim's own public entry points, as a runtime may: those
// inner calls are the runtime's, not the application's
int cudaMallocAsync(void **p, size_t size, void *stream) { (void)stream; return cudaMalloc(p, size); }
int cudaFreeAsync(void *p, void *stream) { (void)stream; return cudaFree(p); }
int cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height) {
    *pitch = (width + 511) & ~(size_t)511;
    return cudaMalloc(p, *pitch * height);
}
typedef struct { void *ptr; size_t pitch, xsize, ysize; } pitched_ptr;
typedef struct { size_t width, height, depth; } extent3;
int cudaMalloc3D(pitched_ptr *out, extent3 e) {
    void *p = NULL;
    size_t pitch = 0;
    int rc = cudaMallocPitch(&p, &pitch, e.width, e.height * e.depth);
    out->ptr = p;
    out->pitch = pitch;
    out->xsize = e.width;
    out->ysize = e.height;
    return rc;
}
int cudaDeviceReset(void) {               // frees what the runtime allocated for itself
    void *own = NULL;
    cudaMalloc(&own, 4096);
    return cudaFree(own);
}
// driver virtual memory management: handles for physical memory, mapped at reserved addresses
int cuMemCreate(uint64_t *handle, size_t size, const void *prop, unsigned long long flags) {
    static uint64_t next = 0x1000;
    (void)size; (void)prop; (void)flags;
    *handle = next++;
    return 0;
}
int cuMemAddressReserve(uint64_t *ptr, size_t size, size_t align, uint64_t addr, unsigned long long flags) {
    (void)align; (void)addr; (void)flags;
    *ptr = (uint64_t)(uintptr_t)shim_alloc(size);
    return 0;
}
int cuMemMap(uint64_t ptr, size_t size, size_t offset, uint64_t handle, unsigned long long flags) {
    (void)ptr; (void)size; (void)offset; (void)handle; (void)flags;
    return 0;
}
int cuMemUnmap(uint64_t ptr, size_t size) { (void)ptr; (void)size; return 0; }
int cuMemRelease(uint64_t handle) { (void)handle; return 0; }
int cuMemcpy2D_v2(const void *desc) { (void)desc; return 0; }
// a batch whose copies are classified from the allocations above (nothing is copied)
int cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count, void *attrs, size_t *attrsIdxs,
                         size_t numAttrs, void *stream) {
    (void)dsts; (void)srcs; (void)sizes; (void)count; (void)attrs; (void)attrsIdxs; (void)numAttrs; (void)stream;
    return 0;
}
// every CUDA runtime defines it (gputop tells a runtime from a wrapper in front of one by it)
void **__cudaRegisterFatBinary(void *fatCubin) { (void)fatCubin; return NULL; }
// nvcc 12.8+ launch stubs: a handle for the host stub, then a launch by handle
int __cudaGetKernel(void **kernel, const void *hostFun) {
    *kernel = malloc(16);                 // an opaque heap handle, as the real runtime returns
    (void)hostFun;
    return 0;
}
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize) {
    (void)fatCubinHandle; (void)hostFun; (void)deviceFun; (void)deviceName; (void)thread_limit;
    (void)tid; (void)bid; (void)bDim; (void)gDim; (void)wSize;
}
int cudaStreamBeginCapture(void *stream, int mode) { (void)stream; (void)mode; return 0; }
int cudaStreamBeginCapture_ptsz(void *stream, int mode) { (void)stream; (void)mode; return 0; }
static void *handle_new(void) { return malloc(32); }
static void *drv(const char *name) {
    void *f = dlsym(libcuda(), name);
    if (!f)
        abort();
    return f;
}
int cudaStreamEndCapture_ptsz(void *stream, void **graph) {
    void *g = NULL;
    ((int (*)(void *, void **))drv("cuStreamEndCapture_ptsz"))(stream, &g);
    *graph = handle_new();
    return 0;
}
int cudaLaunchKernel_ptsz(const void *func, dim3 g, dim3 b, void **args, size_t smem, void *stream) {
    return launch_via_driver(func, g, b, args, smem, stream);     // as the real runtime: no public re-entry
}
int cudaStreamEndCapture(void *stream, void **graph) {
    void *g = NULL;
    ((int (*)(void *, void **))drv("cuStreamEndCapture"))(stream, &g);
    *graph = handle_new();
    return 0;
}
int cudaStreamBeginCaptureToGraph(void *stream, void *graph, const void *deps, const void *edges, size_t n,
                                  int mode) {
    (void)stream; (void)graph; (void)deps; (void)edges; (void)n; (void)mode;
    return 0;
}
int cudaGraphLaunch(void *exec, void *stream) {
    ((int (*)(void *, void *))drv("cuGraphLaunch"))(exec, stream);
    return 0;
}
int cudaGraphCreate(void **graph, unsigned flags) { (void)flags; *graph = handle_new(); return 0; }
static int instantiate(void **exec, void *graph, unsigned long long flags) {
    void *e = NULL;
    ((int (*)(void **, void *, unsigned long long))drv("cuGraphInstantiateWithFlags"))(&e, graph, flags);
    *exec = handle_new();
    return 0;
}
int cudaGraphInstantiate(void **exec, void *graph, unsigned long long flags) { return instantiate(exec, graph, flags); }
int cudaGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    return instantiate(exec, graph, flags);
}
int cudaGraphInstantiateWithParams(void **exec, void *graph, void *params) {
    (void)params;
    return instantiate(exec, graph, 0);
}
int cudaGraphAddKernelNode(void **node, void *graph, const void *deps, size_t n, const void *params) {
    unsigned char drv_params[80] = {0};   // CUDA_KERNEL_NODE_PARAMS_v2 (the real driver fails it anyway)
    void *nd = NULL;
    (void)params;
    ((int (*)(void **, void *, const void *, size_t, const void *))drv("cuGraphAddKernelNode_v2"))(
        &nd, graph, deps, n, drv_params);
    *node = handle_new();
    return 0;
}
int cudaGraphAddChildGraphNode(void **node, void *graph, const void *deps, size_t n, void *child) {
    (void)graph; (void)deps; (void)n; (void)child;
    *node = handle_new();
    return 0;
}
// CUDA 12.2's cudaGraphAddNode (params 5th) and 12.3's _v2 (edge data, params 6th)
int cudaGraphAddNode(void **node, void *graph, const void *deps, size_t n, void *params) {
    (void)graph; (void)deps; (void)n; (void)params;
    *node = handle_new();
    return 0;
}
int cudaGraphAddNode_v2(void **node, void *graph, const void *deps, const void *edges, size_t n, void *params) {
    (void)edges;
    return cudaGraphAddNode(node, graph, deps, n, params);
}
int cudaGraphClone(void **clone, void *original) { (void)original; *clone = handle_new(); return 0; }
int cudaGraphExecUpdate(void *exec, void *graph, void *info) { (void)exec; (void)graph; (void)info; return 0; }
int cudaGraphNodeSetEnabled(void *exec, void *node, unsigned enabled) { (void)exec; (void)node; (void)enabled; return 0; }
int cudaGraphDestroy(void *graph) { free(graph); return 0; }
int cudaGraphExecDestroy(void *exec) { free(exec); return 0; }
// the driver's, for --cuda
int cuGraphCreate(void **graph, unsigned flags) { return cudaGraphCreate(graph, flags); }
int cuGraphAddKernelNode_v2(void **node, void *graph, const void *deps, size_t n, const void *params) {
    (void)graph; (void)deps; (void)n; (void)params;
    *node = handle_new();
    return 0;
}
int cuGraphAddNode(void **node, void *graph, const void *deps, size_t n, void *params) {
    return cudaGraphAddNode(node, graph, deps, n, params);
}
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)graph; (void)flags;
    *exec = handle_new();
    return 0;
}
int cuGraphLaunch(void *exec, void *stream) { (void)exec; (void)stream; return 0; }
// events: through the real driver (as the runtime does on a GPU host), then success
int cudaEventRecord(void *event, void *stream) {
    static int (*f)(void *, void *);
    if (!f)
        f = (int (*)(void *, void *))dlsym(libcuda(), "cuEventRecord");
    f(event, stream);
    return 0;
}
int cudaStreamWaitEvent(void *stream, void *event, unsigned flags) {
    static int (*f)(void *, void *, unsigned);
    if (!f)
        f = (int (*)(void *, void *, unsigned))dlsym(libcuda(), "cuStreamWaitEvent");
    f(stream, event, flags);
    return 0;
}

// memsets through the real driver's (cuMemsetD8_v2, cuMemsetD2D8_v2, Async), as the runtime does on a GPU host
int cudaMemset(void *p, int v, size_t n) {
    static int (*f)(uint64_t, unsigned char, size_t);
    if (!f)
        f = (int (*)(uint64_t, unsigned char, size_t))dlsym(libcuda(), "cuMemsetD8_v2");
    f((uint64_t)(uintptr_t)p, (unsigned char)v, n);
    return 0;
}
int cudaMemsetAsync(void *p, int v, size_t n, void *stream) {
    static int (*f)(uint64_t, unsigned char, size_t, void *);
    if (!f)
        f = (int (*)(uint64_t, unsigned char, size_t, void *))dlsym(libcuda(), "cuMemsetD8Async");
    f((uint64_t)(uintptr_t)p, (unsigned char)v, n, stream);
    return 0;
}
int cudaMemset2D(void *p, size_t pitch, int v, size_t w, size_t h) {
    static int (*f)(uint64_t, size_t, unsigned char, size_t, size_t);
    if (!f)
        f = (int (*)(uint64_t, size_t, unsigned char, size_t, size_t))dlsym(libcuda(), "cuMemsetD2D8_v2");
    f((uint64_t)(uintptr_t)p, pitch, (unsigned char)v, w, h);
    return 0;
}

// How long a sync blocks: SHIM_SYNC_MS each, or SHIM_SYNC_SCHEDULE ("US*N,US*N,...": N syncs of US
// microseconds each, in turn, then from the start again). With SHIM_SYNC_LOG, each sync's time in the shim
// (its sleep and the driver's call) is appended to that file in nanoseconds, one a line.
static void sync_wait(void) {
    static long i;
    long us = 10000;
    const char *ms = getenv("SHIM_SYNC_MS"), *sched = getenv("SHIM_SYNC_SCHEDULE");
    if (ms)
        us = atol(ms) * 1000;
    if (sched) {
        long total = 0, at;
        const char *p;
        for (p = sched; *p; ) {
            long u = strtol(p, (char **)&p, 10), n = *p == '*' ? strtol(p + 1, (char **)&p, 10) : 1;
            total += n > 0 ? n : 0;
            (void)u;
            while (*p == ',')
                p++;
        }
        at = total ? __atomic_fetch_add(&i, 1, __ATOMIC_RELAXED) % total : 0;
        for (p = sched; *p; ) {
            long u = strtol(p, (char **)&p, 10), n = *p == '*' ? strtol(p + 1, (char **)&p, 10) : 1;
            if (at < n) {
                us = u;
                break;
            }
            at -= n;
            while (*p == ',')
                p++;
        }
    }
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static int timed_sync(const char *driver_fn, void *arg, int has_arg) {
    uint64_t t0 = now_ns();
    sync_wait();
    void *f = dlsym(libcuda(), driver_fn);
    int r = has_arg ? ((int (*)(void *))f)(arg) : ((int (*)(void))f)();
    const char *log = getenv("SHIM_SYNC_LOG");
    if (log) {
        uint64_t dt = now_ns() - t0;
        FILE *out = fopen(log, "a");
        if (out) {
            fprintf(out, "%llu\n", (unsigned long long)dt);
            fclose(out);
        }
    }
    return r;
}

int cudaStreamSynchronize(void *stream) { return timed_sync("cuStreamSynchronize", stream, 1); }
int cudaDeviceSynchronize(void) { return timed_sync("cuCtxSynchronize", NULL, 0); }
int cudaEventSynchronize(void *event) { return timed_sync("cuEventSynchronize", event, 1); }
