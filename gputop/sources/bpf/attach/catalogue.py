"""The probe catalogue as data: which entry point is handled by which BPF function.

See docs/architecture.md, "Probe catalogue", for the argument registers each handler decodes. Every
launch and copy entry point gets an entry probe only; return probes exist only where the value
is known at return (allocation out-pointers, sync durations, driver handle -> name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    symbol: str
    entry: str
    ret: str | None = None


#: handlers with a twin for _ptsz entry points, where stream 0 is the calling thread's own stream
PER_THREAD = frozenset({"rt_launch", "rt_launch_checked", "rt_launch_exc", "drv_launch", "drv_launch_ex",
                        "begin_capture", "begin_capture_graph", "end_capture", "record_event", "wait_event",
                        "rt_graph_launch", "drv_graph_launch"})


def _entry(symbol: str, entry: str) -> str:
    return f"{entry}_ptsz" if symbol.endswith("_ptsz") and entry in PER_THREAD else entry


def _variants(symbols: tuple[str, ...], entry: str, ret: str | None = None) -> list[Probe]:
    return [Probe(s, _entry(s, entry), ret) for s in symbols]


LAUNCH = (
    _variants(("cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchCooperativeKernel",
               "cudaLaunchCooperativeKernel_ptsz"), "rt_launch")
    + _variants(("cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"), "rt_launch_exc")
    + _variants(("cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchCooperativeKernel",
                 "cuLaunchCooperativeKernel_ptsz"), "drv_launch")
    + _variants(("cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"), "drv_launch_ex")
)

GRAPH = (
    _variants(("cudaGraphLaunch", "cudaGraphLaunch_ptsz"), "rt_graph_launch")
    + _variants(("cuGraphLaunch", "cuGraphLaunch_ptsz"), "drv_graph_launch")
    + _variants(("cudaStreamBeginCapture", "cudaStreamBeginCapture_ptsz", "cuStreamBeginCapture",
                 "cuStreamBeginCapture_v2", "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2_ptsz"),
                "begin_capture", "begin_capture_return")
    + _variants(("cudaStreamBeginCaptureToGraph", "cudaStreamBeginCaptureToGraph_ptsz", "cuStreamBeginCaptureToGraph",
                 "cuStreamBeginCaptureToGraph_ptsz"), "begin_capture_graph", "begin_capture_return")
    + _variants(("cudaStreamEndCapture", "cudaStreamEndCapture_ptsz", "cuStreamEndCapture",
                 "cuStreamEndCapture_ptsz"), "end_capture", "graph_return")
    # other streams join a capture by waiting on an event recorded in it (fork/join capture)
    + _variants(("cudaEventRecord", "cudaEventRecord_ptsz", "cudaEventRecordWithFlags",
                 "cudaEventRecordWithFlags_ptsz", "cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags",
                 "cuEventRecordWithFlags_ptsz"), "record_event")
    + _variants(("cudaStreamWaitEvent", "cudaStreamWaitEvent_ptsz", "cuStreamWaitEvent", "cuStreamWaitEvent_ptsz"),
                "wait_event")
    # kernels inside graphs: how each graph is built, read at return (bpf/graph.bpf.h, graph_return)
    + _variants(("cudaGraphCreate", "cuGraphCreate"), "graph_create", "graph_return")
    + _variants(("cudaGraphClone", "cuGraphClone"), "graph_clone", "graph_return")
    + _variants(("cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams",
                 "cudaGraphInstantiateWithParams_ptsz", "cuGraphInstantiate", "cuGraphInstantiate_v2",
                 "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz"),
                "graph_instantiate", "graph_return")
    + _variants(("cudaGraphAddKernelNode", "cuGraphAddKernelNode"), "graph_add_kernel", "graph_return")
    + _variants(("cuGraphAddKernelNode_v2",), "graph_add_kernel_v2", "graph_return")
    + _variants(("cudaGraphAddChildGraphNode", "cuGraphAddChildGraphNode"), "graph_add_child", "graph_return")
    + _variants(("cudaGraphAddNode_v2", "cuGraphAddNode_v2"), "graph_add_node6", "graph_return")
    + _variants(("cuGraphAddNode",), "graph_add_node5", "graph_return")
    + _variants(("cudaGraphExecUpdate", "cuGraphExecUpdate", "cuGraphExecUpdate_v2"), "graph_exec_update",
                "graph_return")
    + _variants(("cudaGraphDestroy", "cuGraphDestroy"), "graph_destroy")
    + _variants(("cudaGraphExecDestroy", "cuGraphExecDestroy"), "graph_exec_destroy")
    + _variants(("cudaGraphNodeSetEnabled", "cuGraphNodeSetEnabled"), "graph_node_enabled")
)

COPY = (
    _variants(("cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz"), "rt_memcpy")
    + _variants(("cudaMemcpy2D", "cudaMemcpy2D_ptds", "cudaMemcpy2DAsync", "cudaMemcpy2DAsync_ptsz"),
                "rt_memcpy2d")
    + _variants(("cudaMemcpyPeer", "cudaMemcpyPeerAsync"), "rt_memcpy_peer")
    + _variants(("cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoDAsync_v2",
                 "cuMemcpyHtoDAsync_v2_ptsz"), "drv_memcpy_htod")
    + _variants(("cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoHAsync_v2",
                 "cuMemcpyDtoHAsync_v2_ptsz"), "drv_memcpy_dtoh")
    + _variants(("cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds", "cuMemcpyDtoDAsync_v2",
                 "cuMemcpyDtoDAsync_v2_ptsz"), "drv_memcpy_dtod")
    + _variants(("cuMemcpy", "cuMemcpy_ptds", "cuMemcpyAsync", "cuMemcpyAsync_ptsz"), "drv_memcpy")
    + _variants(("cuMemcpyPeer", "cuMemcpyPeer_ptds", "cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz"),
                "drv_memcpy_peer")
    + _variants(("cudaMemcpyToSymbol", "cudaMemcpyToSymbol_ptds", "cudaMemcpyToSymbolAsync",
                 "cudaMemcpyToSymbolAsync_ptsz"), "rt_memcpy_to_symbol")
    + _variants(("cudaMemcpyFromSymbol", "cudaMemcpyFromSymbol_ptds", "cudaMemcpyFromSymbolAsync",
                 "cudaMemcpyFromSymbolAsync_ptsz"), "rt_memcpy_from_symbol")
    + _variants(("cudaMemcpy3D", "cudaMemcpy3D_ptds", "cudaMemcpy3DAsync", "cudaMemcpy3DAsync_ptsz"), "rt_memcpy3d")
    + _variants(("cudaMemcpy3DPeer", "cudaMemcpy3DPeer_ptds", "cudaMemcpy3DPeerAsync", "cudaMemcpy3DPeerAsync_ptsz"),
                "rt_memcpy3d_peer")
    + _variants(("cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds", "cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz",
                 "cuMemcpy2DUnaligned_v2", "cuMemcpy2DUnaligned_v2_ptds"), "drv_memcpy2d")
    + _variants(("cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds", "cuMemcpy3DAsync_v2", "cuMemcpy3DAsync_v2_ptsz",
                 "cuMemcpy3DPeer", "cuMemcpy3DPeer_ptds", "cuMemcpy3DPeerAsync", "cuMemcpy3DPeerAsync_ptsz"),
                "drv_memcpy3d")
    # legacy v1 driver names (32-bit device pointers and sizes), for programs built against old headers
    + _variants(("cuMemcpyHtoD", "cuMemcpyHtoDAsync"), "drv_memcpy_htod32")
    + _variants(("cuMemcpyDtoH", "cuMemcpyDtoHAsync"), "drv_memcpy_dtoh32")
    + _variants(("cuMemcpyDtoD", "cuMemcpyDtoDAsync"), "drv_memcpy_dtod32")
    # copies with attributes (CUDA 13.1+ runtime, 13.2+ driver): (dst, src, size, attr, stream), the direction
    # from the pointers as cuMemcpy's
    + _variants(("cudaMemcpyWithAttributesAsync", "cudaMemcpyWithAttributesAsync_ptsz", "cuMemcpyWithAttributesAsync",
                 "cuMemcpyWithAttributesAsync_ptsz"), "drv_memcpy")
    # batches (CUDA 12.8+): one call counts each of its copies (bpf/copy.bpf.h, copy_batch)
    + _variants(("cudaMemcpyBatchAsync", "cudaMemcpyBatchAsync_ptsz"), "rt_memcpy_batch")
    + _variants(("cuMemcpyBatchAsync", "cuMemcpyBatchAsync_ptsz", "cuMemcpyBatchAsync_v2",
                 "cuMemcpyBatchAsync_v2_ptsz"), "drv_memcpy_batch")
)

def _memset_driver(width: str, suffix: str) -> tuple[str, ...]:
    """cuMemsetD<width>_<suffix> (or the 2D twin) with its Async and per-thread-stream names."""
    v = f"_{suffix}" if suffix else ""
    return (f"cuMemset{width}{v}", f"cuMemset{width}{v}_ptds", f"cuMemset{width}Async", f"cuMemset{width}Async_ptsz")


MEMSET = (
    _variants(("cudaMemset", "cudaMemset_ptds", "cudaMemsetAsync", "cudaMemsetAsync_ptsz"), "rt_memset")
    + _variants(("cudaMemset2D", "cudaMemset2D_ptds", "cudaMemset2DAsync", "cudaMemset2DAsync_ptsz"), "rt_memset2d")
    + _variants(("cudaMemset3D", "cudaMemset3D_ptds", "cudaMemset3DAsync", "cudaMemset3DAsync_ptsz"), "rt_memset3d")
    + [p for w, h in (("D8", "drv_memset8"), ("D16", "drv_memset16"), ("D32", "drv_memset32"),
                      ("D2D8", "drv_memset2d8"), ("D2D16", "drv_memset2d16"), ("D2D32", "drv_memset2d32"))
       # the legacy v1 names (32-bit pointers and counts), for programs built against old headers
       for p in [*_variants(_memset_driver(w, "v2"), h), Probe(f"cuMemset{w}", f"{h}_v1")]]
)

ALLOC = (
    _variants(("cudaMalloc", "cudaMallocAsync", "cudaMallocAsync_ptsz", "cudaMallocFromPoolAsync",
               "cudaMallocFromPoolAsync_ptsz", "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
               "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"), "alloc_device", "alloc_return")
    + _variants(("cudaMallocPitch", "cuMemAllocPitch_v2"), "alloc_pitch", "alloc_return")
    + _variants(("cudaMalloc3D",), "alloc_3d", "alloc_return")
    + _variants(("cudaMallocManaged", "cuMemAllocManaged"), "alloc_managed", "alloc_return")
    + _variants(("cudaMallocHost", "cudaHostAlloc", "cuMemAllocHost_v2", "cuMemHostAlloc"),
                "alloc_pinned", "alloc_return")
    # virtual memory management (PyTorch's expandable segments, NCCL): physical memory is allocated
    # and freed by handle; mapping it gives it an address that copies are classified by
    + _variants(("cuMemCreate",), "alloc_handle", "alloc_return")
    + _variants(("cuMemMap",), "map_handle", "alloc_return")
    + _variants(("cuMemUnmap",), "unmap_range")
    + _variants(("cuMemRelease",), "release_handle")
    # legacy v1 driver names: 32-bit device pointers and sizes
    + _variants(("cuMemAlloc",), "alloc_device32", "alloc_return")
    + _variants(("cuMemAllocHost",), "alloc_pinned32", "alloc_return")
    + _variants(("cuMemFree",), "drv_free32")
    + _variants(("cudaFree", "cudaFreeHost", "cudaFreeAsync", "cudaFreeAsync_ptsz"), "rt_free")
    + _variants(("cuMemFree_v2", "cuMemFreeHost", "cuMemFreeAsync", "cuMemFreeAsync_ptsz"), "drv_free")
)

PREFETCH = (
    _variants(("cudaMemPrefetchAsync_v2", "cudaMemPrefetchAsync_v2_ptsz"), "rt_prefetch_loc")
    + _variants(("cuMemPrefetchAsync", "cuMemPrefetchAsync_ptsz"), "drv_prefetch_dev")
    + _variants(("cuMemPrefetchAsync_v2", "cuMemPrefetchAsync_v2_ptsz"), "drv_prefetch_loc")
    # batches (CUDA 13): each range of a call counts as one prefetch (bpf/managed.bpf.h, prefetch_batch)
    + _variants(("cudaMemPrefetchBatchAsync", "cudaMemPrefetchBatchAsync_ptsz"), "rt_prefetch_batch")
    + _variants(("cuMemPrefetchBatchAsync", "cuMemPrefetchBatchAsync_ptsz"), "drv_prefetch_batch")
)
#: cudaMemPrefetchAsync changed its signature in CUDA 13 (a cudaMemLocation instead of a device)
PREFETCH_RT_PLAIN = ("cudaMemPrefetchAsync", "cudaMemPrefetchAsync_ptsz")
#: so did cudaGraphAddNode (edge data before the count, as 12.3's cudaGraphAddNode_v2)
ADD_NODE_RT_PLAIN = "cudaGraphAddNode"

#: syncs, timed at return, by API (gputop/latency.py's APIS: each its own latency histogram)
SYNC = (
    _variants(("cudaDeviceSynchronize", "cudaThreadSynchronize"), "sync_enter_device", "sync_return")
    + _variants(("cudaStreamSynchronize", "cudaStreamSynchronize_ptsz", "cuStreamSynchronize",
                 "cuStreamSynchronize_ptsz"), "sync_enter_stream", "sync_return")
    + _variants(("cudaEventSynchronize", "cuEventSynchronize"), "sync_enter_event", "sync_return")
    + _variants(("cuCtxSynchronize",), "sync_enter_context", "sync_return")
)

#: NCCL (libnccl.so.2, or linked into a program): each collective and its *Config form (2.31+, the same
#: arguments first), point-to-point calls, group calls, communicators created (read at return). Not
#: ncclBcast: it calls ncclBroadcast (one call, counted there). The p-prefixed names (pncclAllReduce) are
#: the same functions (aliases: probed once)
NCCL = (
    [Probe(sym, f"nccl_{op}") for op, names in (
        ("allreduce", ("ncclAllReduce", "ncclAllReduceConfig")),
        ("broadcast", ("ncclBroadcast", "ncclBroadcastConfig")),
        ("reduce", ("ncclReduce", "ncclReduceConfig")), ("allgather", ("ncclAllGather", "ncclAllGatherConfig")),
        ("reducescatter", ("ncclReduceScatter", "ncclReduceScatterConfig")),
        ("alltoall", ("ncclAlltoAll", "ncclAlltoAllConfig")), ("gather", ("ncclGather", "ncclGatherConfig")),
        ("scatter", ("ncclScatter", "ncclScatterConfig")), ("send", ("ncclSend",)), ("recv", ("ncclRecv",)))
     for sym in names]
    + [Probe("ncclGroupStart", "nccl_group")]
    + _variants(("ncclCommInitRank", "ncclCommInitRankConfig"), "nccl_init_id_enter", "nccl_init_return")
    + _variants(("ncclCommInitRankScalable",), "nccl_init_enter", "nccl_init_return")
)

NAMES = [
    Probe("__cudaRegisterFunction", "register_function"),
    *_variants(("cuModuleGetFunction", "cuLibraryGetKernel", "cudaLibraryGetKernel"), "getfn_enter",
               "getfn_return"),
    # handle -> what it stands for: a CUkernel for a CUfunction, a host stub for a cudaKernel_t (nvcc 12.8+
    # launch stubs launch by handle)
    *_variants(("cuKernelGetFunction", "__cudaGetKernel", "cudaGetKernel"), "kernel_getfn_enter", "getfn_return"),
]

ALL: tuple[Probe, ...] = tuple(LAUNCH + GRAPH + COPY + MEMSET + ALLOC + PREFETCH + SYNC + NAMES + NCCL)

#: an object is probed when it defines at least one of these (NCCL built against a shared runtime has no
#: launch or copy entry point of its own)
ANCHORS = frozenset(p.symbol for p in LAUNCH + COPY + NCCL)


#: runtime launch entry points: an object defining one of these is a runtime or wraps one
RUNTIME_LAUNCH = ("cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel")


def is_runtime_wrapper(functions: dict[str, int]) -> bool:
    """An object that defines runtime launch entry points but is no CUDA runtime.

    Every CUDA runtime, shared or linked into a program, defines ``__cudaRegisterFatBinary`` (the
    programs it serves register their kernels through it). A library preloaded in front of the
    runtime that exports ``cudaLaunchKernel`` and friends (GPU-sharing and interception layers)
    does not: it forwards to the runtime behind it, where each call is counted once. So its
    runtime entry points are not probed and its code counts as the application's.
    """
    return "__cudaRegisterFatBinary" not in functions and any(n in functions for n in RUNTIME_LAUNCH)


#: driver entry points that count something: an object defining one of these is a driver or a layer over it
DRIVER_COUNTED = frozenset(p.symbol for p in (*LAUNCH, *GRAPH, *COPY, *MEMSET, *ALLOC, *PREFETCH, *SYNC)
                           if p.symbol.startswith("cu") and not p.symbol.startswith("cuda")
                           and (p not in GRAPH or p.entry.startswith("drv_graph_launch")))


def is_driver_layer(functions: dict[str, int]) -> bool:
    """An object that defines driver entry points but is no CUDA driver (rule 7, docs/collector.md).

    NVIDIA's driver library exports its debugger interface (``cudbg*``, which cuda-gdb attaches
    through) beside the ``cu*`` API; GPU-sharing and interception layers preloaded in front of it
    export ``cuLaunchKernel`` and friends and forward each call to it, and have no debugger interface.
    """
    return not any(n.startswith("cudbg") for n in functions) and not DRIVER_COUNTED.isdisjoint(functions)


#: nvcc's launch stubs call these; they are thunks that jump to the public entry points
INTERNAL_LAUNCH = {"__cudaLaunchKernel": "cudaLaunchKernel", "__cudaLaunchKernel_ptsz": "cudaLaunchKernel_ptsz"}


def probes_for(functions: dict[str, int],
               jump_target: Callable[[str], int | None] = lambda _name: -1) -> list[tuple[Probe, int]]:
    """The probes to attach to an object with these function symbols, with their addresses.

    ``jump_target(name)`` says where a function that is only a jump goes (-1: it has a body; None:
    unknown). A thunk ``__cudaLaunchKernel`` -> ``cudaLaunchKernel`` is not probed (the public
    entry counts the launch). Any other body gets ``rt_launch``, and the public entry the checked
    handler, which skips calls coming from the runtime's own code.
    """
    if not ANCHORS.intersection(functions):
        return []
    wrapper = is_runtime_wrapper(functions)
    # a runtime wrapper forwards to the runtime, which counts each call: only its driver layer is probed
    out = [(p, functions[p.symbol]) for p in ALL
           if p.symbol in functions and not (wrapper and p.symbol.lstrip("_").startswith("cuda"))]
    if wrapper:
        return _unique(out)
    for internal, public in INTERNAL_LAUNCH.items():
        if internal not in functions:
            continue
        target = jump_target(internal)
        if target is None and public in functions:
            continue   # its code could not be read: assume the usual thunk rather than risk double counts
        if public in functions and target == functions[public]:
            continue
        out.insert(0, (Probe(internal, _entry(internal, "rt_launch")), functions[internal]))
        out = [(Probe(p.symbol, _entry(public, "rt_launch_checked")), a) if p.symbol == public else (p, a)
               for p, a in out]
    # CUDA 13 runtimes have cudaMemPrefetchBatchAsync and no _v2: the plain name takes a location
    loc = "cudaMemPrefetchAsync_v2" not in functions and "cudaMemPrefetchBatchAsync" in functions
    for sym in PREFETCH_RT_PLAIN:
        if sym in functions:
            out.append((Probe(sym, "rt_prefetch_loc" if loc else "rt_prefetch_dev"), functions[sym]))
    if ADD_NODE_RT_PLAIN in functions:
        out.append((Probe(ADD_NODE_RT_PLAIN, "graph_add_node6" if loc else "graph_add_node5", "graph_return"),
                    functions[ADD_NODE_RT_PLAIN]))
    return _unique(out)


def _unique(out: list[tuple[Probe, int]]) -> list[tuple[Probe, int]]:
    """Aliases (two names, one address) are probed once: a second probe would count twice."""
    seen: set[int] = set()
    unique = []
    for probe, addr in out:
        if addr not in seen:
            seen.add(addr)
            unique.append((probe, addr))
    return unique


# ------------------------------------------------------------------ what a library offers

@dataclass(frozen=True)
class Feature:
    """A family of entry points, one line of `gputop doctor` and of docs/support.md: a library has it
    when it defines any of ``symbols``. ``counted`` False: gputop knows it and does not count it."""
    layer: str                  # "runtime" or "driver"
    name: str
    symbols: tuple[str, ...]
    counted: bool = True


FEATURES: tuple[Feature, ...] = (
    Feature("runtime", "launches", ("cudaLaunchKernel",)),
    Feature("runtime", "launches with attributes (cudaLaunchKernelExC)", ("cudaLaunchKernelExC",)),
    Feature("runtime", "per-thread default stream (_ptsz)", ("cudaLaunchKernel_ptsz",)),
    Feature("runtime", "graph launches", ("cudaGraphLaunch",)),
    Feature("runtime", "capture into a graph (cudaStreamBeginCaptureToGraph)", ("cudaStreamBeginCaptureToGraph",)),
    Feature("runtime", "graph nodes by parameters (cudaGraphAddNode)", ("cudaGraphAddNode", "cudaGraphAddNode_v2")),
    Feature("runtime", "copies", ("cudaMemcpy",)),
    Feature("runtime", "batch copies (cudaMemcpyBatchAsync)", ("cudaMemcpyBatchAsync",)),
    Feature("runtime", "copies with attributes (cudaMemcpyWithAttributesAsync)", ("cudaMemcpyWithAttributesAsync",)),
    Feature("runtime", "memsets", ("cudaMemset",)),
    Feature("runtime", "allocations", ("cudaMalloc",)),
    Feature("runtime", "prefetch (cudaMemPrefetchAsync)", PREFETCH_RT_PLAIN),
    Feature("runtime", "prefetch to a location (cudaMemPrefetchAsync_v2)", ("cudaMemPrefetchAsync_v2",)),
    Feature("runtime", "batch prefetch (cudaMemPrefetchBatchAsync)", ("cudaMemPrefetchBatchAsync",)),
    Feature("runtime", "syncs", ("cudaStreamSynchronize", "cudaDeviceSynchronize")),
    Feature("runtime", "kernel names (__cudaRegisterFunction)", ("__cudaRegisterFunction",)),
    Feature("runtime", "launch by kernel handle (cudaGetKernel)", ("cudaGetKernel",)),
    Feature("runtime", "library kernels (cudaLibraryGetKernel)", ("cudaLibraryGetKernel",)),
    Feature("runtime", "3D batch copies (cudaMemcpy3DBatchAsync)", ("cudaMemcpy3DBatchAsync",), counted=False),
    Feature("runtime", "3D copies with attributes (cudaMemcpy3DWithAttributesAsync)",
            ("cudaMemcpy3DWithAttributesAsync",), counted=False),
    Feature("runtime", "copies to or from CUDA arrays (cudaMemcpy*Array*)",
            ("cudaMemcpy2DToArray", "cudaMemcpyToArray"), counted=False),
    Feature("runtime", "multi-device cooperative launches (cudaLaunchCooperativeKernelMultiDevice)",
            ("cudaLaunchCooperativeKernelMultiDevice",), counted=False),
    Feature("driver", "launches", ("cuLaunchKernel",)),
    Feature("driver", "launches with attributes (cuLaunchKernelEx)", ("cuLaunchKernelEx",)),
    Feature("driver", "per-thread default stream (_ptsz)", ("cuLaunchKernel_ptsz",)),
    Feature("driver", "graph launches", ("cuGraphLaunch",)),
    Feature("driver", "capture into a graph (cuStreamBeginCaptureToGraph)", ("cuStreamBeginCaptureToGraph",)),
    Feature("driver", "graph nodes by parameters (cuGraphAddNode)", ("cuGraphAddNode", "cuGraphAddNode_v2")),
    Feature("driver", "kernel nodes by CUkernel (cuGraphAddKernelNode_v2)", ("cuGraphAddKernelNode_v2",)),
    Feature("driver", "copies", ("cuMemcpyHtoD_v2",)),
    Feature("driver", "batch copies (cuMemcpyBatchAsync)", ("cuMemcpyBatchAsync", "cuMemcpyBatchAsync_v2")),
    Feature("driver", "copies with attributes (cuMemcpyWithAttributesAsync)", ("cuMemcpyWithAttributesAsync",)),
    Feature("driver", "memsets", ("cuMemsetD8_v2",)),
    Feature("driver", "allocations", ("cuMemAlloc_v2",)),
    Feature("driver", "stream-ordered allocations (cuMemAllocAsync)", ("cuMemAllocAsync",)),
    Feature("driver", "virtual memory (cuMemCreate)", ("cuMemCreate",)),
    Feature("driver", "prefetch (cuMemPrefetchAsync)", ("cuMemPrefetchAsync",)),
    Feature("driver", "prefetch to a location (cuMemPrefetchAsync_v2)", ("cuMemPrefetchAsync_v2",)),
    Feature("driver", "batch prefetch (cuMemPrefetchBatchAsync)", ("cuMemPrefetchBatchAsync",)),
    Feature("driver", "syncs", ("cuCtxSynchronize", "cuStreamSynchronize")),
    Feature("driver", "kernel names (cuModuleGetFunction)", ("cuModuleGetFunction",)),
    Feature("driver", "library kernels (cuLibraryGetKernel)", ("cuLibraryGetKernel",)),
    Feature("driver", "3D batch copies (cuMemcpy3DBatchAsync)", ("cuMemcpy3DBatchAsync", "cuMemcpy3DBatchAsync_v2"),
            counted=False),
    Feature("driver", "copies to or from CUDA arrays (cuMemcpy*A*)", ("cuMemcpyHtoA_v2", "cuMemcpyAtoH_v2"),
            counted=False),
    Feature("driver", "legacy launches (cuLaunch, cuLaunchGrid: the block shape set apart)",
            ("cuLaunch", "cuLaunchGrid"), counted=False),
    Feature("driver", "multi-device cooperative launches (cuLaunchCooperativeKernelMultiDevice)",
            ("cuLaunchCooperativeKernelMultiDevice",), counted=False),
)


@dataclass(frozen=True)
class Coverage:
    """What gputop probes in one CUDA library, by the symbols it defines (never by its version)."""
    layer: str                          # "runtime" or "driver"
    present: tuple[Feature, ...]        # counted
    absent: tuple[Feature, ...]         # not defined by this library: not probed, nothing to count
    uncounted: tuple[Feature, ...]      # defined, known, not counted by gputop


def library_layer(functions: dict[str, int]) -> str | None:
    """"runtime" for a CUDA runtime (shared, or linked statically into a program), "driver" for NVIDIA's
    driver library (its debugger interface, rule 7), None for anything else (wrappers and layers included)."""
    if "__cudaRegisterFatBinary" in functions and any(n in functions for n in RUNTIME_LAUNCH):
        return "runtime"
    if any(n.startswith("cudbg") for n in functions) and "cuLaunchKernel" in functions:
        return "driver"
    return None


def coverage(functions: dict[str, int]) -> Coverage | None:
    """Which of ``FEATURES`` this library has (None: it is no CUDA runtime or driver)."""
    layer = library_layer(functions)
    if layer is None:
        return None
    mine = [f for f in FEATURES if f.layer == layer]
    has = [f for f in mine if any(s in functions for s in f.symbols)]
    return Coverage(layer, tuple(f for f in has if f.counted), tuple(f for f in mine if f.counted and f not in has),
                    tuple(f for f in has if not f.counted))
