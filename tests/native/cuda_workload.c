// A CUDA workload without a GPU: calls the real runtime/driver entry points in exactly known
// patterns. Every call fails for lack of a driver, but the uprobes at entry fire.
//
// Build modes (tests/conftest.py):
//   -DLINKED          link libcudart.so.12 (or libcudart_static.a) and libcuda.so.1 at build time
//   -DLINKED_CUDA     bind the cu_* OPs' driver functions by symbol (link libcuda.so.1)
//   (default)         dlopen the libraries given with --cudart / --cuda, optionally late
//
// Usage: cuda_workload [--cudart PATH] [--cuda PATH | --cuda-proc PATH] [--wait FILE] [--dlopen-delay-ms N]
//   --cuda-proc PATH  as --cuda, with the driver's functions from its cuGetProcAddress_v2
//                      [--threads T] [--procs P] OP...
// OPs (each runs in every thread of every process):
//   launch:N:gx,gy,gz:bx,by,bz:K      cudaLaunchKernel N times with host stub K (0..2)
//   launch_ptsz:...  launch_exc:...  launch_coop:...  launch_internal:...   (same arguments)
//   cu_launch:N:gx,gy,gz:bx,by,bz:H   cuLaunchKernel with CUfunction handle H (hex)
//   cu_launch_ex:N:gx,gy,gz:bx,by,bz:H
//   memcpy:N:KIND:BYTES  memcpy_async:N:KIND:BYTES  memcpy2d:N:W:H:KIND  memcpy_peer:N:BYTES
//   cu_htod:N:BYTES  cu_dtoh:N:BYTES  cu_dtod:N:BYTES  cu_memcpy:N:BYTES
//   malloc:N:BYTES  malloc_managed:N:BYTES  malloc_host:N:BYTES  free:N
//   sync:N  device_sync:N  cu_ctx_sync:N  event_sync:N  graph_launch:N
//   prefetch:N:BYTES:DEV      cudaMemPrefetchAsync to device DEV (-1: the host), with the runtime's
//                             plain signature: an int device (CUDA 12) or a cudaMemLocation (CUDA 13,
//                             whose runtime has cudaMemPrefetchBatchAsync and no _v2)
//   prefetch_v2:N:BYTES:DEV   cudaMemPrefetchAsync_v2 (CUDA 12.2+ runtimes): a cudaMemLocation
//   prefetch_batch:N:C:BYTES  cudaMemPrefetchBatchAsync of C ranges, range i of BYTES*(i+1) bytes; the
//                             first C/2 ranges go to device 0, the rest to the host (two locations)
//   memcpy_batch:N:C:BYTES    cudaMemcpyBatchAsync of C copies, copy i of BYTES*(i+1) bytes
//   memcpy_attr:N:BYTES       cudaMemcpyWithAttributesAsync(host_buf, host_buf + 8, BYTES, attr, 0) (CUDA 13.2+)
//   cu_prefetch:N:BYTES:DEV   cuMemPrefetchAsync(host_buf, BYTES, DEV, 0) (-1: the host)
//   cu_prefetch_v2:N:BYTES:DEV  cuMemPrefetchAsync_v2 with a CUmemLocation (12.2+ drivers)
//   cu_launch_ptsz:N:gx,gy,gz:bx,by,bz:H   cuLaunchKernel_ptsz (the per-thread default stream)
//   malloc_async:N:BYTES  malloc_pool:N:BYTES  free_async:N      cudaMallocAsync, cudaMallocFromPoolAsync,
//                             cudaFreeAsync (the free of the last allocation; host_buf when none)
//   malloc_pitch:N:W:H  malloc_3d:N:W:H:D   cudaMallocPitch, cudaMalloc3D
//   device_reset:N            cudaDeviceReset (the shim frees memory of its own in it)
//   to_symbol:N:BYTES:KIND  from_symbol:N:BYTES:KIND   cudaMemcpyToSymbol / FromSymbol on stub 0's address
//                             and host_buf (or the last allocation when KIND is 4)
//   memcpy3d:N:W:H:D:KIND     cudaMemcpy3D between host_buf and the last allocation (or host_buf)
//   memcpy3d_array:N          cudaMemcpy3D from a (made-up) CUDA array
//   memcpy3d_peer:N:W:H:D     cudaMemcpy3DPeer
//   cu_alloc_async:N:BYTES  cu_free_async:N  cu_alloc_pitch:N:W:H
//   cu_create:N:BYTES:LOC     cuMemCreate of BYTES at location type LOC (1 device, 2 host)
//   cu_map:N:BYTES            cuMemAddressReserve BYTES, cuMemMap the last handle there (once; N maps)
//   cu_unmap:N:BYTES  cu_release:N      cuMemUnmap the last mapping, cuMemRelease the last handle
//   cu_memcpy2d:N:W:H:ST:DT   cuMemCpy2D_v2 of W x H bytes, source/destination CUmemorytype ST/DT
//                             (4 = unified: the last mapping or allocation)
//   cu_memcpy3d:N:W:H:D:ST:DT cuMemcpy3D_v2 likewise
//   memset:N:V:BYTES  memset2d:N:V:W:H  memset3d:N:V:W:H:D   cudaMemset / 2D / 3D (width in bytes) in variant V:
//                             plain, async, ptds (cudaMemset_ptds...), ptsz (cudaMemsetAsync_ptsz...)
//   cu_memset:N:V:BITS:COUNT  cu_memset2d:N:V:BITS:W:H   cuMemsetD<BITS>_v2 / cuMemsetD2D<BITS>_v2 (BITS 8, 16,
//                             32) in variant V: plain, async, ptds, ptsz, v1 (the legacy names: 32-bit
//                             counts, called with garbage in the registers' upper halves)
//   nccl:N:OP:COUNT:DTYPE    (--nccl PATH) nccl<OP> (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter,
//                            AlltoAll, Gather, Scatter, Send, Recv; OP as spelled there) of COUNT elements of
//                            datatype DTYPE (garbage in the register's upper half) on a NULL communicator: NCCL
//                            refuses it (ncclInvalidArgument) after its entry; nccl_config: the *Config form
//   nccl_bcast:N:COUNT:DTYPE  ncclBcast   nccl_group:N  ncclGroupStart, then ncclGroupEnd
//   nccl_init:N:NRANKS:RANK  ncclCommInitRank with a zero ncclUniqueId (no GPU: it fails)
//   cu_alloc32:N:BYTES  cu_free32:N  cu_htod32:N:BYTES  cu_dtoh32:N:BYTES  cu_dtod32:N:BYTES   (v1 names)
//   classify_batch:N:BYTES    allocate 2 device + 1 pinned buffers, then N cudaMemcpyBatchAsync calls of 4
//                             copies of BYTES each: h2d, d2h, d2d and pageable->device (unknown)
//   classify:N:BYTES   allocate 2 device + 2 pinned buffers, then N times each cudaMemcpyDefault
//                      h2d, d2h, d2d, h2h (interior pointers too) and pageable->device (unknown);
//                      then free one device buffer and copy into it once more (unknown)
//   managed_touch:PAGES  cudaMallocManaged PAGES pages, then write one byte in each page
//   bench:N            N cudaLaunchKernel calls, timed: prints "ns_per_call X" (bench/probe_cost.py)
//   paced:RATE:MS      cudaLaunchKernel at RATE calls/s for MS milliseconds
//   capture:N:K        begin capturing stream 0x77, N launches into it, end the capture,
//                      K launches into the same stream, then one cudaGraphLaunch
//   capture_fork:N:K   fork/join capture: begin capturing stream 0x77 (one launch into it), record
//                      event 0xe1 there, stream 0x88 waits on it (joins), N launches into 0x88,
//                      record 0xe2 on 0x88, 0x77 waits on it (join back), end the capture; then K
//                      launches into 0x88, a new capture on 0x77 that 0x88 does not join with K
//                      more launches into 0x88, its end, and one cudaGraphLaunch
//   capture_flood:N:J  begin capturing stream 0x77, record N events (0x10000 + i) there, J streams
//                      (0x20000 + j) wait on the first (each joins the capture); the capture is never ended
//   capture_threads:N:K:MODE  thread A begins capturing its per-thread default stream, thread B launches K
//                      times into its own, A launches N times into the capture and ends it, B launches K
//                      more: MODE 0 through cudaStreamPerThread (0x2), MODE 1 through stream 0 and the
//                      _ptsz entry points (--default-stream per-thread)
//   graphs (a stack of graphs and one of executable graphs; "top" is the last pushed):
//   g_capture:N:K      capture N launches of stub K on stream 0x77 into a new graph (pushed)
//   g_capture_to:N:K   cudaStreamBeginCaptureToGraph into the top graph, N launches of stub K, end
//   g_begin:N:K        begin a capture on stream 0x77, N launches of stub K into it, never end it
//   g_create:1         cudaGraphCreate (pushed)      g_clone:1   cudaGraphClone of the top (pushed)
//   g_kernel:N:K       N cudaGraphAddKernelNode of stub K to the top graph
//   g_node:N:K         N cudaGraphAddNode of kernel stub K (cudaGraphAddNode_v2 where the runtime has it,
//                      CUDA 13's 6-argument cudaGraphAddNode, else 12.2's 5-argument one)
//   g_cond:1           cudaGraphAddNode of a conditional node to the top graph
//   g_child:N          N cudaGraphAddChildGraphNode: the graph under the top as a child of the top
//   g_inst:N:V         instantiate the top graph N times (execs pushed): V 0 cudaGraphInstantiate,
//                      1 WithFlags, 2 WithParams
//   g_launch:N         N cudaGraphLaunch of the top exec on stream 0x99 (g_launch_ptsz: _ptsz, stream 0)
//   g_launch_capture:N:K   capture on 0x77: N graph launches of the top exec, K launches of stub 0 (pushed)
//   g_update:1         cudaGraphExecUpdate(top exec, top graph)    g_enable:1  cudaGraphNodeSetEnabled(top exec)
//   g_destroy:1  g_exec_destroy:1   destroy the top graph / exec (popped)   g_swap:1  swap the top two graphs
//   cu_g_create:1  cu_g_inst:1  cu_g_launch:N      cuGraphCreate, cuGraphInstantiateWithFlags, cuGraphLaunch
//   cu_g_kernel:N:H    N cuGraphAddKernelNode_v2 of CUkernel H (hex; func NULL) to the top graph
//   cu_g_node:N:H      N cuGraphAddNode of CUfunction H (hex)
//   by_handle:N:K      __cudaGetKernel(&h, stub K), then N cudaLaunchKernel(h, ...) (nvcc 12.8+ stubs)
//   register:K:NAME    __cudaRegisterFunction(NULL, stub K, NAME, NAME, ...) (no launch)
//   register_in:K:LIB  __cudaRegisterFunction of stub K under the name LIB holds UNTOUCHED_AT bytes into its
//                      gputop_untouched (a constant on a page this process never touched; no launch)
//   lib_register:0:LIB registered_kernels.c's register_kernels() (its calls of __cudaRegisterFunction), prints
//                      "registered"      lib_launch:N:K   N launches of that library's stub K
//   register_many:N:PREFIX   N registrations, as `import torch` makes: stubs 0..2 as PREFIX_0..2, then
//                      N-3 made-up stub addresses as PREFIX_kNNNNNN (names kept in memory, as a program's are)
//   fork:N             fork a child that makes N launches of stub 0; wait for it
//   sleep:MS
//   await:0:FILE       wait until FILE exists
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define UNTOUCHED_AT (256 * 1024)      // tests/native/untouched_names.c: where its name is

typedef struct { unsigned x, y, z; } dim3;
typedef struct {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    void *stream;
    void *attrs;
    unsigned numAttrs;
} launch_config;   // cudaLaunchConfig_t and CUlaunchConfig share this layout

// host stubs: their symbols are C++-mangled kernel names, as nvcc emits them
__attribute__((noinline)) void stub0(void) __asm__("_Z10fused_stepPfS_i");
__attribute__((noinline)) void stub1(void) __asm__("_Z12unfused_stepPKfPfi");
__attribute__((noinline)) void stub2(void) __asm__("_ZN6gputop4test12saxpy_kernelEfPKfPf");
void stub0(void) { __asm__ volatile("nop"); }
void stub1(void) { __asm__ volatile("nop; nop"); }
void stub2(void) { __asm__ volatile("nop; nop; nop"); }
static void (*const stubs[3])(void) = {stub0, stub1, stub2};

typedef int (*launch_t)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*launch_exc_t)(const launch_config *, const void *, void **);
typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void *, void **, void **);
typedef int (*cu_launch_ex_t)(const launch_config *, void *, void **, void **);
typedef int (*memcpy_t)(void *, const void *, size_t, int);
typedef int (*memcpy_async_t)(void *, const void *, size_t, int, void *);
typedef int (*memcpy2d_t)(void *, size_t, const void *, size_t, size_t, size_t, int);
typedef int (*memcpy_peer_t)(void *, int, const void *, int, size_t);
typedef int (*cu_copy_t)(uint64_t, uint64_t, size_t);
typedef int (*malloc_t)(void **, size_t);
typedef int (*malloc_managed_t)(void **, size_t, unsigned);
typedef int (*free_t)(void *);
typedef int (*sync_t)(void *);
typedef int (*void_t)(void);
typedef int (*graph_launch_t)(void *, void *);
typedef int (*event_record_t)(void *, void *);
typedef int (*wait_event_t)(void *, void *, unsigned);
typedef int (*begin_capture_t)(void *, int);
typedef int (*get_kernel_t)(void **, const void *);
typedef void (*reg_fn_t)(void **, const char *, char *, const char *, int, void *, void *, void *, void *, int *);
typedef int (*end_capture_t)(void *, void **);
typedef struct { void *func; dim3 grid, block; unsigned smem; void **params, **extra; } kernel_node_params;
typedef struct { int type; int reserved0[3]; union { long long reserved1[29]; kernel_node_params kernel;
                 void *graph; } u; long long reserved2; } graph_node_params;   // cudaGraphNodeParams
typedef struct { void *func; unsigned gx, gy, gz, bx, by, bz, smem; void **params, **extra; void *kern, *ctx; }
    cu_kernel_node_params;                                                      // CUDA_KERNEL_NODE_PARAMS_v2
typedef struct { int type; int id; } mem_location;      // cudaMemLocation: type 1 device, 2 host
typedef int (*prefetch_dev_t)(const void *, size_t, int, void *);
typedef int (*prefetch_loc_t)(const void *, size_t, mem_location, unsigned, void *);
typedef int (*prefetch_batch_t)(void **, size_t *, size_t, mem_location *, size_t *, size_t, unsigned long long,
                                void *);
// CUDA 12.8/12.9: (..., numAttrs, size_t *failIdx, stream); CUDA 13: (..., numAttrs, stream). Passing
// NULL for both trailing arguments suits either.
typedef int (*memcpy_batch_t)(void **, void **, size_t *, size_t, void *, size_t *, size_t, void *, void *);
// the layouts of cuda.h / driver_types.h (x86-64)
typedef struct { void *ptr; size_t pitch, xsize, ysize; } pitched_ptr;
typedef struct { size_t width, height, depth; } extent3;
typedef struct { size_t x, y, z; } pos3;
typedef struct { void *src_array; pos3 src_pos; pitched_ptr src; void *dst_array; pos3 dst_pos; pitched_ptr dst;
                 extent3 extent; int kind; } memcpy3d_parms;
typedef struct { void *src_array; pos3 src_pos; pitched_ptr src; int src_device; void *dst_array; pos3 dst_pos;
                 pitched_ptr dst; int dst_device; extent3 extent; } memcpy3d_peer_parms;
typedef struct { int type, handle_types; int loc_type, loc_id; void *win32; unsigned char flags[8]; } alloc_prop;
typedef struct { size_t src_x, src_y; int src_type; const void *src_host; uint64_t src_device; void *src_array;
                 size_t src_pitch; size_t dst_x, dst_y; int dst_type; void *dst_host; uint64_t dst_device;
                 void *dst_array; size_t dst_pitch; size_t width, height; } cu_memcpy2d_desc;
typedef struct { size_t src_x, src_y, src_z, src_lod; int src_type; const void *src_host; uint64_t src_device;
                 void *src_array; void *reserved0; size_t src_pitch, src_height; size_t dst_x, dst_y, dst_z, dst_lod;
                 int dst_type; void *dst_host; uint64_t dst_device; void *dst_array; void *reserved1;
                 size_t dst_pitch, dst_height; size_t width, height, depth; } cu_memcpy3d_desc;

static struct {
    launch_t launch, launch_ptsz, launch_coop, launch_internal;
    launch_exc_t launch_exc;
    cu_launch_t cu_launch;
    cu_launch_ex_t cu_launch_ex;
    memcpy_t memcpy_;
    memcpy_async_t memcpy_async;
    memcpy2d_t memcpy2d;
    memcpy_peer_t memcpy_peer;
    cu_copy_t cu_htod, cu_dtoh, cu_dtod, cu_memcpy;
    malloc_t malloc_, malloc_host;
    malloc_managed_t malloc_managed;
    free_t free_;
    sync_t sync;
    void_t device_sync, cu_ctx_sync;
    graph_launch_t graph_launch;
    event_record_t event_record;
    wait_event_t wait_event;
    begin_capture_t begin_capture;
    end_capture_t end_capture;
    begin_capture_t begin_capture_ptsz;
    end_capture_t end_capture_ptsz;
    get_kernel_t get_kernel;
    reg_fn_t register_function;
    void *prefetch_plain;       // prefetch_dev_t or prefetch_loc_t, see plain_takes_location
    int plain_takes_location;
    prefetch_loc_t prefetch_v2;
    prefetch_batch_t prefetch_batch;
    memcpy_batch_t memcpy_batch;
    int (*memcpy_attr)(void *, const void *, size_t, void *, void *);
    prefetch_dev_t cu_prefetch;
    prefetch_loc_t cu_prefetch_v2;
    cu_launch_t cu_launch_ptsz;
    int (*malloc_async)(void **, size_t, void *), (*malloc_pool)(void **, size_t, void *, void *);
    int (*free_async)(void *, void *), (*malloc_pitch)(void **, size_t *, size_t, size_t);
    int (*malloc_3d)(pitched_ptr *, extent3), (*device_reset)(void);
    int (*to_symbol)(const void *, const void *, size_t, size_t, int);
    int (*from_symbol)(void *, const void *, size_t, size_t, int);
    int (*memcpy3d)(const memcpy3d_parms *), (*memcpy3d_peer)(const memcpy3d_peer_parms *);
    int (*cu_alloc_async)(uint64_t *, size_t, void *), (*cu_free_async)(uint64_t, void *);
    int (*cu_alloc_pitch)(uint64_t *, size_t *, size_t, size_t, unsigned);
    int (*cu_create)(uint64_t *, size_t, const alloc_prop *, unsigned long long);
    int (*cu_reserve)(uint64_t *, size_t, size_t, uint64_t, unsigned long long);
    int (*cu_map)(uint64_t, size_t, size_t, uint64_t, unsigned long long);
    int (*cu_unmap)(uint64_t, size_t), (*cu_release)(uint64_t);
    int (*cu_memcpy2d)(const cu_memcpy2d_desc *), (*cu_memcpy3d)(const cu_memcpy3d_desc *);
    int (*cu_alloc32)(uint32_t *, unsigned), (*cu_free32)(uint32_t);
    int (*cu_htod32)(uint32_t, const void *, unsigned), (*cu_dtoh32)(void *, uint32_t, unsigned);
    int (*cu_dtod32)(uint32_t, uint32_t, unsigned);
    int (*g_create)(void **, unsigned), (*g_clone)(void **, void *);
    int (*g_begin_to)(void *, void *, const void *, const void *, size_t, int);
    int (*g_kernel)(void **, void *, const void *, size_t, const kernel_node_params *);
    int (*g_node5)(void **, void *, const void *, size_t, graph_node_params *);
    int (*g_node6)(void **, void *, const void *, const void *, size_t, graph_node_params *);
    int (*g_child)(void **, void *, const void *, size_t, void *);
    int (*g_inst)(void **, void *, unsigned long long), (*g_inst_flags)(void **, void *, unsigned long long);
    int (*g_inst_params)(void **, void *, void *);
    int (*g_launch_ptsz)(void *, void *);
    int (*g_update)(void *, void *, void *), (*g_enable)(void *, void *, unsigned);
    int (*g_destroy)(void *), (*g_exec_destroy)(void *);
    int (*cu_g_create)(void **, unsigned), (*cu_g_inst)(void **, void *, unsigned long long);
    int (*cu_g_kernel)(void **, void *, const void *, size_t, const cu_kernel_node_params *);
    int (*cu_g_node)(void **, void *, const void *, size_t, graph_node_params *);
    int (*cu_g_launch)(void *, void *);
} api;

#ifdef LINKED
int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, void *);
int cudaLaunchCooperativeKernel(const void *, dim3, dim3, void **, size_t, void *);
int __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
int cudaLaunchKernelExC(const launch_config *, const void *, void **);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaMemcpyAsync(void *, const void *, size_t, int, void *);
int cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
int cudaMemcpyPeer(void *, int, const void *, int, size_t);
int cudaMalloc(void **, size_t);
int cudaMallocHost(void **, size_t);
int cudaMallocManaged(void **, size_t, unsigned);
int cudaFree(void *);
int cudaStreamSynchronize(void *);
int cudaDeviceSynchronize(void);
int cudaGraphLaunch(void *, void *);
static void bind_linked(void) {
    api.launch = cudaLaunchKernel;
    api.launch_ptsz = cudaLaunchKernel_ptsz;
    api.launch_coop = cudaLaunchCooperativeKernel;
#ifdef HAVE_INTERNAL_LAUNCH
    api.launch_internal = __cudaLaunchKernel;
#endif
    api.launch_exc = cudaLaunchKernelExC;
    api.memcpy_ = cudaMemcpy;
    api.memcpy_async = cudaMemcpyAsync;
    api.memcpy2d = cudaMemcpy2D;
    api.memcpy_peer = cudaMemcpyPeer;
    api.malloc_ = cudaMalloc;
    api.malloc_host = cudaMallocHost;
    api.malloc_managed = cudaMallocManaged;
    api.free_ = cudaFree;
    api.sync = cudaStreamSynchronize;
    api.device_sync = cudaDeviceSynchronize;
    api.graph_launch = cudaGraphLaunch;
}
#endif

static void *must_dlopen(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cuda_workload: dlopen %s: %s\n", path, dlerror());
        exit(3);
    }
    return h;
}

#define SYM(h, field, name) (api.field = (__typeof__(api.field))dlsym(h, name))

static void *rt_handle, *cu_handle;     // for the ops that look their function up by name (memsets)
static void *nccl_handle;               // --nccl: libnccl.so.2

static void bind_cudart(const char *path) {
    void *h = must_dlopen(path);
    rt_handle = h;
    SYM(h, launch, "cudaLaunchKernel");
    SYM(h, launch_ptsz, "cudaLaunchKernel_ptsz");
    SYM(h, launch_coop, "cudaLaunchCooperativeKernel");
    SYM(h, launch_internal, "__cudaLaunchKernel");
    SYM(h, launch_exc, "cudaLaunchKernelExC");
    SYM(h, memcpy_, "cudaMemcpy");
    SYM(h, memcpy_async, "cudaMemcpyAsync");
    SYM(h, memcpy2d, "cudaMemcpy2D");
    SYM(h, memcpy_peer, "cudaMemcpyPeer");
    SYM(h, malloc_, "cudaMalloc");
    SYM(h, malloc_host, "cudaMallocHost");
    SYM(h, malloc_managed, "cudaMallocManaged");
    SYM(h, free_, "cudaFree");
    SYM(h, sync, "cudaStreamSynchronize");
    SYM(h, device_sync, "cudaDeviceSynchronize");
    SYM(h, graph_launch, "cudaGraphLaunch");
    SYM(h, event_record, "cudaEventRecord");
    SYM(h, wait_event, "cudaStreamWaitEvent");
    SYM(h, begin_capture, "cudaStreamBeginCapture");
    SYM(h, end_capture, "cudaStreamEndCapture");
    SYM(h, begin_capture_ptsz, "cudaStreamBeginCapture_ptsz");
    SYM(h, end_capture_ptsz, "cudaStreamEndCapture_ptsz");
    SYM(h, get_kernel, "__cudaGetKernel");
    SYM(h, register_function, "__cudaRegisterFunction");
    SYM(h, prefetch_plain, "cudaMemPrefetchAsync");
    SYM(h, prefetch_v2, "cudaMemPrefetchAsync_v2");
    SYM(h, prefetch_batch, "cudaMemPrefetchBatchAsync");
    SYM(h, memcpy_batch, "cudaMemcpyBatchAsync");
    SYM(h, memcpy_attr, "cudaMemcpyWithAttributesAsync");
    api.plain_takes_location = !api.prefetch_v2 && api.prefetch_batch;
    SYM(h, malloc_async, "cudaMallocAsync");
    SYM(h, malloc_pool, "cudaMallocFromPoolAsync");
    SYM(h, free_async, "cudaFreeAsync");
    SYM(h, malloc_pitch, "cudaMallocPitch");
    SYM(h, malloc_3d, "cudaMalloc3D");
    SYM(h, device_reset, "cudaDeviceReset");
    SYM(h, to_symbol, "cudaMemcpyToSymbol");
    SYM(h, from_symbol, "cudaMemcpyFromSymbol");
    SYM(h, memcpy3d, "cudaMemcpy3D");
    SYM(h, memcpy3d_peer, "cudaMemcpy3DPeer");
    SYM(h, g_create, "cudaGraphCreate");
    SYM(h, g_clone, "cudaGraphClone");
    SYM(h, g_begin_to, "cudaStreamBeginCaptureToGraph");
    SYM(h, g_kernel, "cudaGraphAddKernelNode");
    SYM(h, g_child, "cudaGraphAddChildGraphNode");
    if (!SYM(h, g_node6, "cudaGraphAddNode_v2") && api.plain_takes_location)
        SYM(h, g_node6, "cudaGraphAddNode");        // CUDA 13: edge data before the count
    else
        SYM(h, g_node5, "cudaGraphAddNode");
    SYM(h, g_inst, "cudaGraphInstantiate");
    SYM(h, g_inst_flags, "cudaGraphInstantiateWithFlags");
    SYM(h, g_inst_params, "cudaGraphInstantiateWithParams");
    SYM(h, g_launch_ptsz, "cudaGraphLaunch_ptsz");
    SYM(h, g_update, "cudaGraphExecUpdate");
    SYM(h, g_enable, "cudaGraphNodeSetEnabled");
    SYM(h, g_destroy, "cudaGraphDestroy");
    SYM(h, g_exec_destroy, "cudaGraphExecDestroy");
}

// --cuda-proc: the driver's functions from its cuGetProcAddress_v2 (as the CUDA runtime and Triton get
// them), else from dlsym on the library's handle
static int cuda_via_proc;
typedef int (*get_proc_t)(const char *, void **, int, unsigned long long, int *);

static void *cuda_sym(void *h, const char *name) {
    if (!cuda_via_proc)
        return dlsym(h, name);
    static get_proc_t gpa;
    if (!gpa && !(gpa = (get_proc_t)dlsym(h, "cuGetProcAddress_v2"))) {
        fprintf(stderr, "cuda_workload: no cuGetProcAddress_v2\n");
        exit(4);
    }
    void *fn = NULL;
    int status = 0;
    if (gpa(name, &fn, 12000, 0, &status) == 0 && fn)
        return fn;
    // the real driver knows each function by its base name and picks the version (cuMemcpyHtoD -> _v2)
    char base[128];
    size_t len = strlen(name);
    if (len < 4 || len >= sizeof(base) || strcmp(name + len - 3, "_v2"))
        return NULL;
    memcpy(base, name, len - 3);
    base[len - 3] = 0;
    fn = NULL;
    return gpa(base, &fn, 12000, 0, &status) == 0 ? fn : NULL;
}

#define CSYM(h, field, name) (api.field = (__typeof__(api.field))cuda_sym(h, name))

static void bind_cuda(const char *path) {
    void *h = must_dlopen(path);
    cu_handle = h;
    CSYM(h, cu_launch, "cuLaunchKernel");
    CSYM(h, cu_launch_ex, "cuLaunchKernelEx");
    CSYM(h, cu_htod, "cuMemcpyHtoD_v2");
    CSYM(h, cu_dtoh, "cuMemcpyDtoH_v2");
    CSYM(h, cu_dtod, "cuMemcpyDtoD_v2");
    CSYM(h, cu_memcpy, "cuMemcpy");
    CSYM(h, cu_ctx_sync, "cuCtxSynchronize");
    CSYM(h, cu_alloc_async, "cuMemAllocAsync");
    CSYM(h, cu_free_async, "cuMemFreeAsync");
    CSYM(h, cu_alloc_pitch, "cuMemAllocPitch_v2");
    CSYM(h, cu_create, "cuMemCreate");
    CSYM(h, cu_reserve, "cuMemAddressReserve");
    CSYM(h, cu_map, "cuMemMap");
    CSYM(h, cu_unmap, "cuMemUnmap");
    CSYM(h, cu_release, "cuMemRelease");
    CSYM(h, cu_memcpy2d, "cuMemcpy2D_v2");
    CSYM(h, cu_memcpy3d, "cuMemcpy3D_v2");
    CSYM(h, cu_alloc32, "cuMemAlloc");
    CSYM(h, cu_free32, "cuMemFree");
    CSYM(h, cu_htod32, "cuMemcpyHtoD");
    CSYM(h, cu_dtoh32, "cuMemcpyDtoH");
    CSYM(h, cu_dtod32, "cuMemcpyDtoD");
    CSYM(h, cu_g_create, "cuGraphCreate");
    CSYM(h, cu_g_inst, "cuGraphInstantiateWithFlags");
    CSYM(h, cu_g_kernel, "cuGraphAddKernelNode_v2");
    CSYM(h, cu_g_node, "cuGraphAddNode");
    CSYM(h, cu_g_launch, "cuGraphLaunch");
    CSYM(h, cu_prefetch, "cuMemPrefetchAsync");
    if (!cuda_via_proc) {           // the per-thread and _v2 variants are chosen by flags and versions there
        CSYM(h, cu_prefetch_v2, "cuMemPrefetchAsync_v2");
        CSYM(h, cu_launch_ptsz, "cuLaunchKernel_ptsz");
    }
}

#ifdef LINKED_CUDA
// linked against libcuda.so.1: the driver's functions bound by the dynamic linker, by symbol
int cuLaunchKernel(), cuLaunchKernelEx(), cuMemcpyHtoD_v2(), cuMemcpyDtoH_v2(), cuMemcpyDtoD_v2(), cuCtxSynchronize(),
    cuMemAllocAsync(), cuMemFreeAsync(), cuGraphLaunch();
#define LSYM(field, fn) (api.field = (__typeof__(api.field))fn)
static void bind_cuda_linked(void) {
    LSYM(cu_launch, cuLaunchKernel);
    LSYM(cu_launch_ex, cuLaunchKernelEx);
    LSYM(cu_htod, cuMemcpyHtoD_v2);
    LSYM(cu_dtoh, cuMemcpyDtoH_v2);
    LSYM(cu_dtod, cuMemcpyDtoD_v2);
    LSYM(cu_ctx_sync, cuCtxSynchronize);
    LSYM(cu_alloc_async, cuMemAllocAsync);
    LSYM(cu_free_async, cuMemFreeAsync);
    LSYM(cu_g_launch, cuGraphLaunch);
}
#endif

static int nops;
static char **ops;
static pthread_barrier_t cap_barrier;
static long cap_n, cap_k;
static int cap_mode;

static void *capture_thread_a(void *arg) {
    (void)arg;
    dim3 one = {1, 1, 1};
    void *graph = NULL, *s = cap_mode ? NULL : (void *)0x2;
    if (cap_mode) api.begin_capture_ptsz(s, 0); else api.begin_capture(s, 0);
    pthread_barrier_wait(&cap_barrier);         // B launches into its own stream meanwhile
    pthread_barrier_wait(&cap_barrier);
    for (long i = 0; i < cap_n; i++)
        (cap_mode ? api.launch_ptsz : api.launch)((const void *)stubs[0], one, one, NULL, 0, s);
    if (cap_mode) api.end_capture_ptsz(s, &graph); else api.end_capture(s, &graph);
    pthread_barrier_wait(&cap_barrier);
    return NULL;
}

static void *capture_thread_b(void *arg) {
    (void)arg;
    dim3 one = {1, 1, 1};
    void *s = cap_mode ? NULL : (void *)0x2;
    pthread_barrier_wait(&cap_barrier);
    for (long i = 0; i < cap_k; i++)
        (cap_mode ? api.launch_ptsz : api.launch)((const void *)stubs[1], one, one, NULL, 0, s);
    pthread_barrier_wait(&cap_barrier);
    pthread_barrier_wait(&cap_barrier);
    for (long i = 0; i < cap_k; i++)
        (cap_mode ? api.launch_ptsz : api.launch)((const void *)stubs[1], one, one, NULL, 0, s);
    return NULL;
}

static void *graphs[64], *execs[64];  // graph and exec stacks (g_* ops)
static int ngraphs, nexecs;
static void *last_alloc;          // the last allocation that succeeded (malloc_*)
static uint64_t last_handle, last_map;
static char host_buf[1 << 20];

#define NEED(f) do { if (!api.f) { fprintf(stderr, "cuda_workload: %s not bound\n", #f); exit(4); } } while (0)

static void parse_dim(const char *s, dim3 *d) {
    d->x = d->y = d->z = 1;
    sscanf(s, "%u,%u,%u", &d->x, &d->y, &d->z);
}

#define TOP_GRAPH (ngraphs ? graphs[ngraphs - 1] : NULL)
#define TOP_EXEC (nexecs ? execs[nexecs - 1] : NULL)
static void push_graph(void *g) { if (ngraphs < 64) graphs[ngraphs++] = g; }

static void graph_op(const char *name, long n, const char *a) {
    dim3 one = {1, 1, 1};
    void *s = (void *)0x77, *node = NULL, *g = NULL;
    const void *stub = (const void *)stubs[atoi(a) % 3];
    if (!strcmp(name, "g_capture") || !strcmp(name, "g_capture_to")) {
        NEED(launch);
        NEED(begin_capture);
        NEED(end_capture);
        if (name[9] == '_') { NEED(g_begin_to); api.g_begin_to(s, TOP_GRAPH, NULL, NULL, 0, 0); }
        else api.begin_capture(s, 0);
        for (long i = 0; i < n; i++)
            api.launch(stub, one, one, NULL, 0, s);
        api.end_capture(s, &g);
        if (name[9] != '_')
            push_graph(g);
    } else if (!strcmp(name, "g_begin")) {
        NEED(launch);
        NEED(begin_capture);
        api.begin_capture(s, 0);
        for (long i = 0; i < n; i++)
            api.launch(stub, one, one, NULL, 0, s);
    } else if (!strcmp(name, "g_create") || !strcmp(name, "cu_g_create")) {
        if (name[0] == 'g') { NEED(g_create); api.g_create(&g, 0); }
        else { NEED(cu_g_create); api.cu_g_create(&g, 0); }
        push_graph(g);
    } else if (!strcmp(name, "g_clone")) {
        NEED(g_clone);
        api.g_clone(&g, TOP_GRAPH);
        push_graph(g);
    } else if (!strcmp(name, "g_kernel")) {
        NEED(g_kernel);
        kernel_node_params p = {(void *)stub, one, one, 0, NULL, NULL};
        for (long i = 0; i < n; i++)
            api.g_kernel(&node, TOP_GRAPH, NULL, 0, &p);
    } else if (!strcmp(name, "g_node") || !strcmp(name, "g_cond") || !strcmp(name, "cu_g_node")) {
        graph_node_params p;
        memset(&p, 0, sizeof(p));
        p.type = name[2] == 'c' ? 13 : 0;
        p.u.kernel.func = name[0] == 'c' ? (void *)strtoull(a, NULL, 16) : (void *)stub;
        for (long i = 0; i < n; i++) {
            if (name[0] == 'c') { NEED(cu_g_node); api.cu_g_node(&node, TOP_GRAPH, NULL, 0, &p); }
            else if (api.g_node6) api.g_node6(&node, TOP_GRAPH, NULL, NULL, 0, &p);
            else { NEED(g_node5); api.g_node5(&node, TOP_GRAPH, NULL, 0, &p); }
        }
    } else if (!strcmp(name, "cu_g_kernel")) {
        NEED(cu_g_kernel);
        cu_kernel_node_params p;
        memset(&p, 0, sizeof(p));
        p.kern = (void *)strtoull(a, NULL, 16);
        p.gx = p.gy = p.gz = p.bx = p.by = p.bz = 1;
        for (long i = 0; i < n; i++)
            api.cu_g_kernel(&node, TOP_GRAPH, NULL, 0, &p);
    } else if (!strcmp(name, "g_child")) {
        NEED(g_child);
        for (long i = 0; i < n; i++)
            api.g_child(&node, TOP_GRAPH, NULL, 0, ngraphs > 1 ? graphs[ngraphs - 2] : NULL);
    } else if (!strcmp(name, "g_inst") || !strcmp(name, "cu_g_inst")) {
        for (long i = 0; i < n; i++) {
            void *e = NULL;
            int v = atoi(a);
            if (name[0] == 'c') { NEED(cu_g_inst); api.cu_g_inst(&e, TOP_GRAPH, 0); }
            else if (v == 0) { NEED(g_inst); api.g_inst(&e, TOP_GRAPH, 0); }
            else if (v == 1) { NEED(g_inst_flags); api.g_inst_flags(&e, TOP_GRAPH, 0); }
            else { NEED(g_inst_params); api.g_inst_params(&e, TOP_GRAPH, NULL); }
            if (nexecs < 64) execs[nexecs++] = e;
        }
    } else if (!strcmp(name, "g_launch") || !strcmp(name, "cu_g_launch") || !strcmp(name, "g_launch_ptsz")) {
        for (long i = 0; i < n; i++) {
            if (name[0] == 'c') { NEED(cu_g_launch); api.cu_g_launch(TOP_EXEC, (void *)0x99); }
            else if (name[8] == '_') { NEED(g_launch_ptsz); api.g_launch_ptsz(TOP_EXEC, NULL); }
            else { NEED(graph_launch); api.graph_launch(TOP_EXEC, (void *)0x99); }
        }
    } else if (!strcmp(name, "g_launch_capture")) {
        NEED(begin_capture);
        NEED(end_capture);
        NEED(graph_launch);
        NEED(launch);
        api.begin_capture(s, 0);
        for (long i = 0; i < n; i++)
            api.graph_launch(TOP_EXEC, s);
        for (long i = 0, k = atol(a); i < k; i++)
            api.launch((const void *)stubs[0], one, one, NULL, 0, s);
        api.end_capture(s, &g);
        push_graph(g);
    } else if (!strcmp(name, "g_update")) {
        NEED(g_update);
        api.g_update(TOP_EXEC, TOP_GRAPH, NULL);
    } else if (!strcmp(name, "g_enable")) {
        NEED(g_enable);
        api.g_enable(TOP_EXEC, NULL, 0);
    } else if (!strcmp(name, "g_destroy")) {
        NEED(g_destroy);
        api.g_destroy(TOP_GRAPH);
        if (ngraphs) ngraphs--;
    } else if (!strcmp(name, "g_exec_destroy")) {
        NEED(g_exec_destroy);
        api.g_exec_destroy(TOP_EXEC);
        if (nexecs) nexecs--;
    } else if (!strcmp(name, "g_swap")) {
        if (ngraphs > 1) { g = graphs[ngraphs - 1]; graphs[ngraphs - 1] = graphs[ngraphs - 2]; graphs[ngraphs - 2] = g; }
    } else {
        fprintf(stderr, "cuda_workload: unknown op %s\n", name);
        exit(2);
    }
}

static void *(*kernel_stub)(int);      // lib_register's library

static void *named_fn(int driver, const char *fmt, const char *x, const char *y) {
    char sym[96];
    snprintf(sym, sizeof(sym), fmt, x, y);
    void *h = driver ? cu_handle : rt_handle;
    void *f = h ? (driver ? cuda_sym(h, sym) : dlsym(h, sym)) : NULL;
    if (!f) {
        fprintf(stderr, "cuda_workload: %s not bound\n", sym);
        exit(4);
    }
    return f;
}

// memset:N:V:BYTES ... cu_memset2d:N:V:BITS:W:H (see the OPs above); dst is host_buf: the real libraries fail
// for lack of a driver before touching it, the shim runtime writes it
static void memset_op(const char *name, long n, const char *v, const char *b, const char *c, const char *e) {
    typedef struct { void *ptr; size_t pitch, xsize, ysize; } pitched;
    typedef struct { size_t width, height, depth; } extent;
    int async = !strcmp(v, "async") || !strcmp(v, "ptsz");
    const char *tail = !strcmp(v, "ptds") ? "_ptds" : !strcmp(v, "ptsz") ? "Async_ptsz" : async ? "Async" : "";
    if (!strcmp(name, "memset")) {
        void *f = named_fn(0, "cudaMemset%s%s", tail, "");
        for (long i = 0; i < n; i++)
            async ? ((int (*)(void *, int, size_t, void *))f)(host_buf, 0, strtoull(b, NULL, 10), NULL)
                  : ((int (*)(void *, int, size_t))f)(host_buf, 0, strtoull(b, NULL, 10));
    } else if (!strcmp(name, "memset2d")) {
        void *f = named_fn(0, "cudaMemset2D%s%s", tail, "");
        size_t w = strtoull(b, NULL, 10), h = strtoull(c, NULL, 10);
        for (long i = 0; i < n; i++)
            async ? ((int (*)(void *, size_t, int, size_t, size_t, void *))f)(host_buf, w, 0, w, h, NULL)
                  : ((int (*)(void *, size_t, int, size_t, size_t))f)(host_buf, w, 0, w, h);
    } else if (!strcmp(name, "memset3d")) {
        void *f = named_fn(0, "cudaMemset3D%s%s", tail, "");
        unsigned long long d = 0;
        sscanf(e, "%llu", &d);
        extent x = {strtoull(b, NULL, 10), strtoull(c, NULL, 10), d};
        pitched p = {host_buf, x.width, x.width, x.height};
        for (long i = 0; i < n; i++)
            async ? ((int (*)(pitched, int, extent, void *))f)(p, 0, x, NULL)
                  : ((int (*)(pitched, int, extent))f)(p, 0, x);
    } else {
        // cu_memset:N:V:BITS:COUNT, cu_memset2d:N:V:BITS:W:H
        int two = !strcmp(name, "cu_memset2d"), v1 = !strcmp(v, "v1");
        const char *dtail = !strcmp(v, "ptds") ? "_v2_ptds" : !strcmp(v, "ptsz") ? "Async_ptsz" : async ? "Async"
                          : v1 ? "" : "_v2";
        void *f = named_fn(1, two ? "cuMemsetD2D%s%s" : "cuMemsetD%s%s", b, dtail);
        // the v1 names take 32-bit counts: the upper halves of the registers carry garbage, as a caller's may
        uint64_t junk = v1 ? 0xdead00000000ULL : 0;
        uint64_t dst = 0x1000, w = strtoull(c, NULL, 10) | junk, h = two ? (strtoull(e, NULL, 10) | junk) : 0;
        for (long i = 0; i < n; i++) {
            if (two)
                async ? ((int (*)(uint64_t, size_t, unsigned, uint64_t, uint64_t, void *))f)(dst, w, 0, w, h, NULL)
                      : ((int (*)(uint64_t, size_t, unsigned, uint64_t, uint64_t))f)(dst, w, 0, w, h);
            else
                async ? ((int (*)(uint64_t, unsigned, uint64_t, void *))f)(dst, 0, w, NULL)
                      : ((int (*)(uint64_t, unsigned, uint64_t))f)(dst, 0, w);
        }
    }
}

typedef struct { char internal[128]; } nccl_unique_id;

static void *nccl_fn(const char *fmt, const char *x) {
    char sym[96];
    snprintf(sym, sizeof(sym), fmt, x);
    void *f = nccl_handle ? dlsym(nccl_handle, sym) : NULL;
    if (!f) {
        fprintf(stderr, "cuda_workload: %s not bound\n", sym);
        exit(4);
    }
    return f;
}

// nccl:N:OP:COUNT:DTYPE and friends (the OPs above)
static void nccl_op(const char *name, long n, const char *a, const char *b, const char *c) {
    typedef uint64_t u64;
    int config = !strcmp(name, "nccl_config");
    if (!strcmp(name, "nccl_group")) {
        int (*start)(void) = (int (*)(void))nccl_fn("ncclGroupStart%s", "");
        int (*end)(void) = (int (*)(void))nccl_fn("ncclGroupEnd%s", "");
        for (long i = 0; i < n; i++) {
            start();
            end();
        }
        return;
    }
    if (!strcmp(name, "nccl_init")) {
        int (*init)(void **, int, nccl_unique_id, int) = (int (*)(void **, int, nccl_unique_id, int))
            nccl_fn("ncclCommInitRank%s", "");
        nccl_unique_id id;
        memset(&id, 0, sizeof(id));
        for (long i = 0; i < n; i++) {
            void *comm = NULL;
            init(&comm, atoi(a), id, atoi(b));
        }
        return;
    }
    // the datatype with garbage in its register's upper half: NCCL reads an int (ecx), so must gputop
    u64 junk = 0xbad0000000000000ULL;
    if (!strcmp(name, "nccl_bcast")) {
        int (*f)(void *, u64, u64, u64, void *, void *) = (int (*)(void *, u64, u64, u64, void *, void *))
            nccl_fn("ncclBcast%s", "");
        for (long i = 0; i < n; i++)
            f(host_buf, strtoull(a, NULL, 10), junk | strtoull(b, NULL, 10), 0, NULL, NULL);
        return;
    }
    u64 count = strtoull(b, NULL, 10), dtype = junk | strtoull(c, NULL, 10);
    void *f = nccl_fn(config ? "nccl%sConfig" : "nccl%s", a);
    for (long i = 0; i < n; i++) {
        if (!strcmp(a, "Send") || !strcmp(a, "Recv"))          // (buf, count, datatype, peer, comm, stream)
            ((int (*)(void *, u64, u64, u64, void *, void *))f)(host_buf, count, dtype, 1, NULL, NULL);
        else if (!strcmp(a, "Reduce"))      // (send, recv, count, datatype, op, root, comm, stream[, config])
            ((int (*)(void *, void *, u64, u64, u64, u64, void *, void *, void *))f)(
                host_buf, host_buf, count, dtype, 0, 0, NULL, NULL, NULL);
        else if (!strcmp(a, "AllGather") || !strcmp(a, "AlltoAll"))   // (send, recv, count, datatype, comm, ...)
            ((int (*)(void *, void *, u64, u64, void *, void *, void *))f)(host_buf, host_buf, count, dtype, NULL,
                                                                         NULL, NULL);
        else                                // (send, recv, count, datatype, op or root, comm, stream[, config])
            ((int (*)(void *, void *, u64, u64, u64, void *, void *, void *))f)(host_buf, host_buf, count, dtype, 0,
                                                                               NULL, NULL, NULL);
    }
}

static void run_op(const char *op) {
    char name[32] = {0}, a[1024] = {0}, b[64] = {0}, c[64] = {0}, e[64] = {0};
    long n = 0;
    sscanf(op, "%31[^:]:%ld:%1023[^:]:%63[^:]:%63[^:]:%63s", name, &n, a, b, c, e);
    if (!strcmp(name, "await")) {          // await:0:FILE   until FILE exists
        struct stat st;
        while (stat(a, &st) != 0)
            usleep(2000);
        return;
    }
    if (!strcmp(name, "sleep")) {
        usleep((useconds_t)n * 1000);
        return;
    }
    if (!strcmp(name, "bench")) {
        NEED(launch);
        dim3 one = {1, 1, 1};
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; i++)
            api.launch((const void *)stubs[0], one, one, NULL, 0, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
        printf("ns_per_call %.1f\n", n ? ns / n : 0.0);
        fflush(stdout);
        return;
    }
    if (!strcmp(name, "paced")) {
        NEED(launch);
        dim3 one = {1, 1, 1};
        long ms = atol(a);
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        long done = 0;
        for (;;) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            double el = (t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9;
            if (el * 1000 >= ms) break;
            long due = (long)(el * n);
            while (done < due) {
                api.launch((const void *)stubs[0], one, one, NULL, 0, NULL);
                done++;
            }
            usleep(1000);
        }
        return;
    }
    if (!strncmp(name, "g_", 2) || !strncmp(name, "cu_g_", 5)) {
        graph_op(name, n, a);
        return;
    }
    if (!strcmp(name, "by_handle")) {
        NEED(get_kernel);
        NEED(launch);
        void *handle = NULL;
        dim3 one = {1, 1, 1};
        api.get_kernel(&handle, (const void *)stubs[atoi(a) % 3]);
        for (long i = 0; i < n; i++)
            api.launch(handle, one, one, NULL, 0, NULL);
        return;
    }
    if (!strcmp(name, "register_many")) {
        NEED(register_function);
        char *names = malloc((size_t)n * 64);
        for (long i = 0; i < n; i++) {
            char *nm = names + i * 64;
            if (i < 3)
                snprintf(nm, 64, "%s_%ld", a, i);
            else
                snprintf(nm, 64, "%s_k%06ld", a, i);
            const char *stub = i < 3 ? (const char *)stubs[i] : (const char *)(uintptr_t)(0x100000000ULL + i * 16);
            api.register_function(NULL, stub, nm, nm, -1, NULL, NULL, NULL, NULL, NULL);
        }
        return;                         // the names stay allocated for the process's life
    }
    if (!strcmp(name, "lib_register")) {   // tests/native/registered_kernels.c, as its constructor would
        void *lib = must_dlopen(a);
        void (*reg)(void **) = (void (*)(void **))dlsym(lib, "register_kernels");
        kernel_stub = (void *(*)(int))dlsym(lib, "kernel_stub");
        if (!reg || !kernel_stub) {
            fprintf(stderr, "cuda_workload: %s is not registered_kernels.c\n", a);
            exit(3);
        }
        reg(NULL);
        printf("registered\n");
        fflush(stdout);
        return;
    }
    if (!strcmp(name, "lib_launch")) {
        NEED(launch);
        if (!kernel_stub) {
            fprintf(stderr, "cuda_workload: lib_launch before lib_register\n");
            exit(3);
        }
        dim3 one = {1, 1, 1};
        for (long i = 0; i < n; i++)
            api.launch(kernel_stub(atoi(a)), one, one, NULL, 0, NULL);
        return;
    }
    if (!strcmp(name, "register_in")) {
        // the name is a constant of another object (tests/native/untouched_names.c), on a page of it
        // this process never touches: the registration passes its address, as nvcc's code does
        NEED(register_function);
        const char *blob = dlsym(must_dlopen(a), "gputop_untouched");
        if (!blob) {
            fprintf(stderr, "cuda_workload: %s has no gputop_untouched\n", a);
            exit(3);
        }
        api.register_function(NULL, (const char *)stubs[n % 3], blob + UNTOUCHED_AT, blob + UNTOUCHED_AT, -1,
                              NULL, NULL, NULL, NULL, NULL);
        return;
    }
    if (!strcmp(name, "register")) {
        NEED(register_function);
        char *kept = strdup(a);         // a program's kernel names are static data: they stay
        api.register_function(NULL, (const char *)stubs[n % 3], kept, kept, -1, NULL, NULL, NULL, NULL, NULL);
        return;
    }
    if (!strcmp(name, "fork")) {
        NEED(launch);
        dim3 one = {1, 1, 1};
        pid_t child = fork();
        if (child == 0) {
            printf("child %d\n", (int)getpid());
            fflush(stdout);
            usleep(300000);           // a forked worker initialising before it launches
            for (long i = 0; i < n; i++)
                api.launch((const void *)stubs[0], one, one, NULL, 0, NULL);
            _exit(0);
        }
        waitpid(child, NULL, 0);
        return;
    }
    if (!strcmp(name, "capture")) {
        NEED(launch);
        NEED(begin_capture);
        NEED(end_capture);
        NEED(graph_launch);
        dim3 one = {1, 1, 1};
        void *stream = (void *)0x77, *graph = NULL;
        long k = atol(a);
        api.begin_capture(stream, 0);
        for (long i = 0; i < n; i++)
            api.launch((const void *)stubs[0], one, one, NULL, 0, stream);
        api.end_capture(stream, &graph);
        for (long i = 0; i < k; i++)
            api.launch((const void *)stubs[0], one, one, NULL, 0, stream);
        api.graph_launch(graph, stream);
        return;
    }
    if (!strcmp(name, "capture_threads")) {
        NEED(launch);
        NEED(launch_ptsz);
        NEED(begin_capture);
        NEED(end_capture);
        NEED(begin_capture_ptsz);
        NEED(end_capture_ptsz);
        cap_n = n;
        cap_k = atol(a);
        cap_mode = atoi(b);
        pthread_t ta, tb;
        pthread_barrier_init(&cap_barrier, NULL, 2);
        pthread_create(&ta, NULL, capture_thread_a, NULL);
        pthread_create(&tb, NULL, capture_thread_b, NULL);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&cap_barrier);
        return;
    }
    if (!strcmp(name, "capture_flood")) {
        NEED(begin_capture);
        NEED(event_record);
        NEED(wait_event);
        void *s1 = (void *)0x77;
        long j = atol(a);
        api.begin_capture(s1, 0);
        for (long i = 0; i < n; i++)
            api.event_record((void *)(0x10000 + i), s1);
        for (long i = 0; i < j; i++)
            api.wait_event((void *)(0x20000 + i), (void *)0x10000, 0);
        return;
    }
    if (!strcmp(name, "capture_fork")) {
        NEED(launch);
        NEED(begin_capture);
        NEED(end_capture);
        NEED(graph_launch);
        NEED(event_record);
        NEED(wait_event);
        dim3 one = {1, 1, 1};
        void *s1 = (void *)0x77, *s2 = (void *)0x88, *e1 = (void *)0xe1, *e2 = (void *)0xe2, *graph = NULL;
        long k = atol(a);
        api.begin_capture(s1, 0);
        api.launch((const void *)stubs[0], one, one, NULL, 0, s1);
        api.event_record(e1, s1);
        api.wait_event(s2, e1, 0);                      // fork: s2 joins the capture
        for (long i = 0; i < n; i++)
            api.launch((const void *)stubs[0], one, one, NULL, 0, s2);
        api.event_record(e2, s2);
        api.wait_event(s1, e2, 0);                      // join back
        api.end_capture(s1, &graph);                    // s2 leaves the capture with s1
        for (long i = 0; i < k; i++)
            api.launch((const void *)stubs[0], one, one, NULL, 0, s2);
        api.begin_capture(s1, 0);                       // a new capture that s2 does not join
        for (long i = 0; i < k; i++)
            api.launch((const void *)stubs[0], one, one, NULL, 0, s2);
        api.end_capture(s1, &graph);
        api.graph_launch(graph, s1);
        return;
    }
    if (!strcmp(name, "classify")) {
        NEED(malloc_);
        NEED(malloc_host);
        NEED(memcpy_);
        NEED(free_);
        size_t sz = strtoull(a, NULL, 10);
        char *d1 = NULL, *d2 = NULL, *h1 = NULL, *h2 = NULL;
        api.malloc_((void **)&d1, sz);
        api.malloc_((void **)&d2, sz);
        api.malloc_host((void **)&h1, sz);
        api.malloc_host((void **)&h2, sz);
        for (long i = 0; i < n; i++) {
            api.memcpy_(d1 + 16, h1, 64, 4);
            api.memcpy_(h1, d1, 64, 4);
            api.memcpy_(d2, d1 + sz - 64, 64, 4);
            api.memcpy_(h2, h1 + 128, 64, 4);
            api.memcpy_(d1, host_buf, 64, 4);
        }
        api.free_(d1);
        api.memcpy_(d1, h1, 64, 4);
        return;
    }
    if (!strcmp(name, "prefetch_batch") || !strcmp(name, "memcpy_batch")) {
        size_t count = strtoull(a, NULL, 10), unit = strtoull(b, NULL, 10);
        void **ptrs = calloc(count ? count : 1, sizeof(void *)), **srcs = calloc(count ? count : 1, sizeof(void *));
        size_t *sizes = calloc(count ? count : 1, sizeof(size_t));
        for (size_t i = 0; i < count; i++) {
            ptrs[i] = host_buf + 64 * (i % 1024);
            srcs[i] = host_buf + 32;
            sizes[i] = unit * (i + 1);
        }
        mem_location locs[2] = {{1, 0}, {2, 0}};
        size_t idxs[2] = {0, count / 2};
        for (long i = 0; i < n; i++) {
            if (name[0] == 'p') {
                NEED(prefetch_batch);
                api.prefetch_batch(ptrs, sizes, count, locs, idxs, count / 2 ? 2 : 1, 0, NULL);
            } else {
                NEED(memcpy_batch);
                api.memcpy_batch(ptrs, srcs, sizes, count, NULL, NULL, 0, NULL, NULL);
            }
        }
        free(ptrs);
        free(srcs);
        free(sizes);
        return;
    }
    if (!strcmp(name, "classify_batch")) {
        NEED(malloc_);
        NEED(malloc_host);
        NEED(memcpy_batch);
        size_t sz = strtoull(a, NULL, 10);
        char *d1 = NULL, *d2 = NULL, *h1 = NULL;
        api.malloc_((void **)&d1, sz);
        api.malloc_((void **)&d2, sz);
        api.malloc_host((void **)&h1, sz);
        void *dsts[4] = {d1, h1, d2, d1}, *srcs[4] = {h1, d1, d1, host_buf};
        size_t sizes[4] = {sz, sz, sz, sz};
        for (long i = 0; i < n; i++)
            api.memcpy_batch(dsts, srcs, sizes, 4, NULL, NULL, 0, NULL, NULL);
        return;
    }
    if (!strcmp(name, "managed_touch")) {
        NEED(malloc_managed);
        volatile char *p = NULL;
        api.malloc_managed((void **)&p, (size_t)n * 4096, 1);
        for (long i = 0; p && i < n; i++)
            p[i * 4096] = 1;
        return;
    }
    if (!strncmp(name, "memset", 6) || !strncmp(name, "cu_memset", 9)) {
        memset_op(name, n, a, b, c, e);
        return;
    }
    if (!strncmp(name, "nccl", 4)) {
        nccl_op(name, n, a, b, c);
        return;
    }
    dim3 g, bl;
    if (!strncmp(name, "launch", 6) || !strncmp(name, "cu_launch", 9)) {
        parse_dim(a, &g);
        parse_dim(b, &bl);
    }
    for (long i = 0; i < n; i++) {
        if (!strcmp(name, "launch")) {
            NEED(launch);
            api.launch((const void *)stubs[atoi(c) % 3], g, bl, NULL, 0, NULL);
        } else if (!strcmp(name, "launch_ptsz")) {
            NEED(launch_ptsz);
            api.launch_ptsz((const void *)stubs[atoi(c) % 3], g, bl, NULL, 0, NULL);
        } else if (!strcmp(name, "launch_coop")) {
            NEED(launch_coop);
            api.launch_coop((const void *)stubs[atoi(c) % 3], g, bl, NULL, 0, NULL);
        } else if (!strcmp(name, "launch_internal")) {
            NEED(launch_internal);
            api.launch_internal((const void *)stubs[atoi(c) % 3], g, bl, NULL, 0, NULL);
        } else if (!strcmp(name, "launch_exc")) {
            NEED(launch_exc);
            launch_config cfg = {g, bl, 0, NULL, NULL, 0};
            api.launch_exc(&cfg, (const void *)stubs[atoi(c) % 3], NULL);
        } else if (!strcmp(name, "cu_launch")) {
            NEED(cu_launch);
            api.cu_launch((void *)strtoull(c, NULL, 16), g.x, g.y, g.z, bl.x, bl.y, bl.z, 0, NULL, NULL, NULL);
        } else if (!strcmp(name, "cu_launch_ptsz")) {
            NEED(cu_launch_ptsz);
            api.cu_launch_ptsz((void *)strtoull(c, NULL, 16), g.x, g.y, g.z, bl.x, bl.y, bl.z, 0, NULL, NULL, NULL);
        } else if (!strcmp(name, "cu_launch_ex")) {
            NEED(cu_launch_ex);
            launch_config cfg = {g, bl, 0, NULL, NULL, 0};
            api.cu_launch_ex(&cfg, (void *)strtoull(c, NULL, 16), NULL, NULL);
        } else if (!strcmp(name, "memcpy")) {
            NEED(memcpy_);
            api.memcpy_(host_buf, host_buf + 8, strtoull(b, NULL, 10), atoi(a));
        } else if (!strcmp(name, "memcpy_async")) {
            NEED(memcpy_async);
            api.memcpy_async(host_buf, host_buf + 8, strtoull(b, NULL, 10), atoi(a), NULL);
        } else if (!strcmp(name, "memcpy2d")) {
            NEED(memcpy2d);
            size_t w = strtoull(a, NULL, 10), h = strtoull(b, NULL, 10);
            api.memcpy2d(host_buf, w, host_buf, w, w, h, atoi(c));
        } else if (!strcmp(name, "memcpy_peer")) {
            NEED(memcpy_peer);
            api.memcpy_peer(host_buf, 0, host_buf, 1, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_htod")) {
            NEED(cu_htod);
            api.cu_htod(0x1000, (uint64_t)(uintptr_t)host_buf, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_dtoh")) {
            NEED(cu_dtoh);
            api.cu_dtoh((uint64_t)(uintptr_t)host_buf, 0x1000, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_dtod")) {
            NEED(cu_dtod);
            api.cu_dtod(0x1000, 0x2000, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_memcpy")) {
            NEED(cu_memcpy);
            api.cu_memcpy(0x1000, 0x2000, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "malloc")) {
            NEED(malloc_);
            void *p = NULL;
            api.malloc_(&p, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "malloc_host")) {
            NEED(malloc_host);
            void *p = NULL;
            api.malloc_host(&p, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "malloc_managed")) {
            NEED(malloc_managed);
            void *p = NULL;
            api.malloc_managed(&p, strtoull(a, NULL, 10), 1);
        } else if (!strcmp(name, "free")) {
            NEED(free_);
            api.free_(host_buf);
        } else if (!strcmp(name, "sync")) {
            NEED(sync);
            api.sync(NULL);
        } else if (!strcmp(name, "event_sync")) {
            static int (*event_sync)(void *);
            if (!event_sync)
                event_sync = (int (*)(void *))named_fn(0, "cudaEventSynchronize%s%s", "", "");
            event_sync(NULL);           // a made-up event: the real driver would dereference it
        } else if (!strcmp(name, "device_sync")) {
            NEED(device_sync);
            api.device_sync();
        } else if (!strcmp(name, "cu_ctx_sync")) {
            NEED(cu_ctx_sync);
            api.cu_ctx_sync();
        } else if (!strcmp(name, "prefetch")) {
            NEED(prefetch_plain);
            int dev = atoi(b);
            if (api.plain_takes_location) {
                mem_location loc = {dev < 0 ? 2 : 1, dev < 0 ? 0 : dev};
                ((prefetch_loc_t)api.prefetch_plain)(host_buf, strtoull(a, NULL, 10), loc, 0, NULL);
            } else {
                ((prefetch_dev_t)api.prefetch_plain)(host_buf, strtoull(a, NULL, 10), dev, NULL);
            }
        } else if (!strcmp(name, "prefetch_v2")) {
            NEED(prefetch_v2);
            int dev = atoi(b);
            mem_location loc = {dev < 0 ? 2 : 1, dev < 0 ? 0 : dev};
            api.prefetch_v2(host_buf, strtoull(a, NULL, 10), loc, 0, NULL);
        } else if (!strcmp(name, "malloc_async") || !strcmp(name, "malloc_pool")) {
            void *p = NULL;
            int rc;
            if (name[7] == 'a') {
                NEED(malloc_async);
                rc = api.malloc_async(&p, strtoull(a, NULL, 10), NULL);
            } else {
                NEED(malloc_pool);
                rc = api.malloc_pool(&p, strtoull(a, NULL, 10), NULL, NULL);
            }
            if (rc == 0 && p)
                last_alloc = p;
        } else if (!strcmp(name, "free_async")) {
            NEED(free_async);
            api.free_async(last_alloc ? last_alloc : host_buf, NULL);
            last_alloc = NULL;
        } else if (!strcmp(name, "malloc_pitch")) {
            NEED(malloc_pitch);
            void *p = NULL;
            size_t pitch = 0;
            if (api.malloc_pitch(&p, &pitch, strtoull(a, NULL, 10), strtoull(b, NULL, 10)) == 0 && p)
                last_alloc = p;
        } else if (!strcmp(name, "malloc_3d")) {
            NEED(malloc_3d);
            pitched_ptr out = {0};
            extent3 ext = {strtoull(a, NULL, 10), strtoull(b, NULL, 10), strtoull(c, NULL, 10)};
            if (api.malloc_3d(&out, ext) == 0 && out.ptr)
                last_alloc = out.ptr;
        } else if (!strcmp(name, "device_reset")) {
            NEED(device_reset);
            api.device_reset();
        } else if (!strcmp(name, "to_symbol")) {
            NEED(to_symbol);
            int kind = atoi(b);
            api.to_symbol((const void *)stubs[0], kind == 4 && last_alloc ? last_alloc : host_buf,
                          strtoull(a, NULL, 10), 0, kind);
        } else if (!strcmp(name, "from_symbol")) {
            NEED(from_symbol);
            int kind = atoi(b);
            api.from_symbol(kind == 4 && last_alloc ? last_alloc : host_buf, (const void *)stubs[0],
                            strtoull(a, NULL, 10), 0, kind);
        } else if (!strcmp(name, "memcpy3d") || !strcmp(name, "memcpy3d_array")) {
            NEED(memcpy3d);
            memcpy3d_parms p3;
            memset(&p3, 0, sizeof(p3));
            size_t w = strtoull(a, NULL, 10);
            p3.src = (pitched_ptr){host_buf, w, w, 1};
            p3.dst = (pitched_ptr){last_alloc ? last_alloc : host_buf + 64, w, w, 1};
            p3.extent = (extent3){w, strtoull(b, NULL, 10), strtoull(c, NULL, 10)};
            p3.kind = atoi(e);
            if (name[8] == '_') {
                p3.src_array = (void *)0xa11a7;
                p3.extent = (extent3){16, 16, 1};
            }
            api.memcpy3d(&p3);
        } else if (!strcmp(name, "memcpy3d_peer")) {
            NEED(memcpy3d_peer);
            memcpy3d_peer_parms pp;
            memset(&pp, 0, sizeof(pp));
            size_t w = strtoull(a, NULL, 10);
            pp.src = (pitched_ptr){host_buf, w, w, 1};
            pp.dst = (pitched_ptr){host_buf + 64, w, w, 1};
            pp.dst_device = 1;
            pp.extent = (extent3){w, strtoull(b, NULL, 10), strtoull(c, NULL, 10)};
            api.memcpy3d_peer(&pp);
        } else if (!strcmp(name, "cu_alloc_async")) {
            NEED(cu_alloc_async);
            uint64_t d = 0;
            if (api.cu_alloc_async(&d, strtoull(a, NULL, 10), NULL) == 0 && d)
                last_alloc = (void *)(uintptr_t)d;
        } else if (!strcmp(name, "cu_free_async")) {
            NEED(cu_free_async);
            api.cu_free_async((uint64_t)(uintptr_t)(last_alloc ? last_alloc : host_buf), NULL);
            last_alloc = NULL;
        } else if (!strcmp(name, "cu_alloc_pitch")) {
            NEED(cu_alloc_pitch);
            uint64_t d = 0;
            size_t pitch = 0;
            api.cu_alloc_pitch(&d, &pitch, strtoull(a, NULL, 10), strtoull(b, NULL, 10), 4);
        } else if (!strcmp(name, "cu_create")) {
            NEED(cu_create);
            alloc_prop prop;
            memset(&prop, 0, sizeof(prop));
            prop.type = 1;                              // CU_MEM_ALLOCATION_TYPE_PINNED
            prop.loc_type = atoi(b);
            uint64_t h = 0;
            if (api.cu_create(&h, strtoull(a, NULL, 10), &prop, 0) == 0)
                last_handle = h;
        } else if (!strcmp(name, "cu_map")) {
            NEED(cu_map);
            NEED(cu_reserve);
            size_t size = strtoull(a, NULL, 10);
            if (!last_map)
                api.cu_reserve(&last_map, size, 0, 0, 0);
            api.cu_map(last_map ? last_map : 0x7000000000ULL, size, 0, last_handle, 0);
        } else if (!strcmp(name, "cu_unmap")) {
            NEED(cu_unmap);
            api.cu_unmap(last_map ? last_map : 0x7000000000ULL, strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_release")) {
            NEED(cu_release);
            api.cu_release(last_handle);
        } else if (!strcmp(name, "cu_memcpy2d") || !strcmp(name, "cu_memcpy3d")) {
            int st = atoi(c), dt = atoi(e);
            uint64_t unified = last_map ? last_map : (uint64_t)(uintptr_t)last_alloc;
            if (name[9] == '2') {
                NEED(cu_memcpy2d);
                cu_memcpy2d_desc d;
                memset(&d, 0, sizeof(d));
                d.src_type = st; d.src_host = host_buf; d.src_device = st == 4 ? unified : 0x1000;
                d.dst_type = dt; d.dst_host = host_buf + 64; d.dst_device = dt == 4 ? unified : 0x2000;
                d.width = strtoull(a, NULL, 10); d.height = strtoull(b, NULL, 10);
                d.src_pitch = d.dst_pitch = d.width;
                api.cu_memcpy2d(&d);
            } else {
                NEED(cu_memcpy3d);
                // cu_memcpy3d:N:W:H:D:ST:DT -- D in c, ST/DT packed as "ST,DT" in e
                cu_memcpy3d_desc d;
                memset(&d, 0, sizeof(d));
                sscanf(e, "%d,%d", &st, &dt);
                d.src_type = st; d.src_host = host_buf; d.src_device = st == 4 ? unified : 0x1000;
                d.dst_type = dt; d.dst_host = host_buf + 64; d.dst_device = dt == 4 ? unified : 0x2000;
                d.width = strtoull(a, NULL, 10); d.height = strtoull(b, NULL, 10); d.depth = strtoull(c, NULL, 10);
                d.src_pitch = d.dst_pitch = d.width;
                d.src_height = d.dst_height = d.height;
                api.cu_memcpy3d(&d);
            }
        } else if (!strcmp(name, "cu_alloc32")) {
            NEED(cu_alloc32);
            uint32_t d = 0;
            api.cu_alloc32(&d, (unsigned)strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_free32")) {
            NEED(cu_free32);
            api.cu_free32(0x1000);
        } else if (!strcmp(name, "cu_htod32")) {
            NEED(cu_htod32);
            api.cu_htod32(0x1000, host_buf, (unsigned)strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_dtoh32")) {
            NEED(cu_dtoh32);
            api.cu_dtoh32(host_buf, 0x1000, (unsigned)strtoull(a, NULL, 10));
        } else if (!strcmp(name, "cu_dtod32")) {
            NEED(cu_dtod32);
            api.cu_dtod32(0x1000, 0x2000, (unsigned)strtoull(a, NULL, 10));
        } else if (!strcmp(name, "memcpy_attr")) {
            NEED(memcpy_attr);
            unsigned char attr[64] = {0};       // cudaMemcpyAttributes: no hints, stream order
            api.memcpy_attr(host_buf, host_buf + 8, strtoull(a, NULL, 10), attr, NULL);
        } else if (!strcmp(name, "cu_prefetch_v2")) {
            NEED(cu_prefetch_v2);
            int dev = atoi(b);
            mem_location loc = {dev < 0 ? 2 : 1, dev < 0 ? 0 : dev};
            api.cu_prefetch_v2(host_buf, strtoull(a, NULL, 10), loc, 0, NULL);
        } else if (!strcmp(name, "cu_prefetch")) {
            NEED(cu_prefetch);
            api.cu_prefetch(host_buf, strtoull(a, NULL, 10), atoi(b), NULL);
        } else if (!strcmp(name, "graph_launch")) {
            NEED(graph_launch);
            api.graph_launch((void *)0x1234, NULL);
        } else {
            fprintf(stderr, "cuda_workload: unknown op %s\n", op);
            exit(2);
        }
    }
}

static void *thread_main(void *arg) {
    (void)arg;
    for (int i = 0; i < nops; i++)
        run_op(ops[i]);
    return NULL;
}

int main(int argc, char **argv) {
    const char *cudart = NULL, *cuda = NULL, *wait_file = NULL;
    int threads = 1, procs = 1, delay_ms = 0;
    int i = 1;
    for (; i < argc && !strncmp(argv[i], "--", 2); i += 2) {
        if (i + 1 >= argc) break;
        if (!strcmp(argv[i], "--cudart")) cudart = argv[i + 1];
        else if (!strcmp(argv[i], "--cuda")) cuda = argv[i + 1];
        else if (!strcmp(argv[i], "--nccl")) nccl_handle = must_dlopen(argv[i + 1]);
        else if (!strcmp(argv[i], "--cuda-proc")) { cuda = argv[i + 1]; cuda_via_proc = 1; }
        else if (!strcmp(argv[i], "--wait")) wait_file = argv[i + 1];
        else if (!strcmp(argv[i], "--dlopen-delay-ms")) delay_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--procs")) procs = atoi(argv[i + 1]);
        else { fprintf(stderr, "cuda_workload: unknown option %s\n", argv[i]); return 2; }
    }
    ops = argv + i;
    nops = argc - i;
#ifdef LINKED
    bind_linked();
#endif
#ifdef LINKED_CUDA
    bind_cuda_linked();
#endif
    if (delay_ms) usleep((useconds_t)delay_ms * 1000);
    if (cudart) bind_cudart(cudart);
    if (cuda) bind_cuda(cuda);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    if (wait_file) {
        struct stat st;
        while (stat(wait_file, &st) != 0) usleep(2000);
    }
    for (int p = 1; p < procs; p++) {
        if (fork() == 0) {
            procs = 1;
            break;
        }
    }
    pthread_t tids[64];
    if (threads > 64) threads = 64;
    for (int t = 0; t < threads; t++) pthread_create(&tids[t], NULL, thread_main, NULL);
    for (int t = 0; t < threads; t++) pthread_join(tids[t], NULL);
    while (wait(NULL) > 0) {}
    return 0;
}
