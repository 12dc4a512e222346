"""A scripted, realistic GPU-host scenario built with gputop.model, for recordings in tests/data/.

Run ``python tests/data/scenario.py`` to (re)write ``tests/data/scenario.jsonl`` (90 snapshots at
1 Hz of a two-GPU training/inference node) — the recording behind the UI tests, the screenshots
and the e2e replay test. ``bench_snapshots(64, 75)`` builds the benchmark's 64-process recording.

Deterministic: a fixed seed and fixed times (2026-01-01 09:00:00 UTC onwards).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gputop import callsites, latency  # noqa: E402
from gputop.model import (  # noqa: E402
    NCCL_OPS,
    CallBytes,
    CallSites,
    Counts,
    GpuSample,
    KernelStat,
    ProcSample,
    Rates,
    Snapshot,
    SourceStatus,
    SyncLatency,
)
from gputop.record import Recorder  # noqa: E402
from gputop.sources.bpf.pystacks.sites import RawFrame, RawSite  # noqa: E402

T0 = 1767258000.0  # 2026-01-01 09:00:00 UTC
HOST = "gpu-node-07"
GIB = 1 << 30
MIB = 1 << 20


@dataclass
class Workload:
    """One process: its steady rates (per second) and how they vary over time."""

    pid: int
    comm: str
    cmdline: str
    user: str | None
    gpu: int | None
    launches: float  # per second
    kernels: list[tuple[str, float, int, int]]  # name, share of launches, grid blocks, threads per block
    h2d: float = 0.0
    d2h: float = 0.0
    d2d: float = 0.0
    sync_pct: float = 0.0
    sync_calls: float = 0.0
    uvm_faults: float = 0.0
    managed: bool = False
    live_mem: int = 0
    gpu_mem: int | None = 0
    sm: float | None = 0.0
    cpu: float | None = 10.0
    rss: int = 2 * GIB
    launch_bound: bool | None = False
    container: str | None = None
    start: int = 0  # first frame
    end: int | None = None  # frame at which it is reported exited
    wave: float = 0.0  # relative amplitude of a slow sine on the rates
    #: kernels run inside CUDA graph launches per second (replays of captured graphs), spread over the
    #: kernels by share, and kernels per graph
    graph_kernels: float = 0.0
    graph_size: int = 1
    period: float = 30.0
    total: dict[str, float] = field(default_factory=dict)
    #: everything counted since first seen, and the launch-shape histograms (as the live sampler has them)
    counts: Counts | None = None
    grid_hist: dict[str, int] = field(default_factory=dict)
    block_hist: dict[str, int] = field(default_factory=dict)
    #: NCCL: all-reduces per second of this many fp32 elements each (gradient buckets), and the communicator
    nccl_allreduce: float = 0.0
    nccl_count: int = 0
    nccl_comm: tuple[int, int] | None = None
    #: its syncs' latency histograms since first seen, as the BPF source reads them (gputop/latency.py)
    sync_raw: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    #: where its launches come from: (stack, innermost frame first, as "file:line function" or, native,
    #: "object!symbol"; the kernel it launches; its share of the launches); sampled 1 in ``site_period``
    sites: list[tuple[tuple[str, ...], str, float]] = field(default_factory=list)
    site_period: int = 128
    site_raw: dict[tuple[int, int], int] = field(default_factory=dict)


def _syncs(w: Workload, calls: int, wait_s: float) -> SyncLatency | None:
    """The interval's syncs added to the workload's histograms: 90 % short, 9 % three times the mean, 1 %
    fourteen times (a stall), all through cudaStreamSynchronize; drawn without the random generator (the
    scenario's other values stay as they were)."""
    before = dict(w.sync_raw)
    if calls:
        mean_ns = wait_s * 1e9 / calls
        n9, n1 = round(calls * 0.09), round(calls * 0.01)
        total, buckets = w.sync_raw.get("stream", (0, (0,) * latency.BUCKETS))
        b = list(buckets)
        for factor, n in ((0.55, calls - n9 - n1), (3.2, n9), (14.0, n1)):
            b[latency.bucket_of(int(mean_ns * factor))] += n
            total += int(mean_ns * factor) * n
        w.sync_raw["stream"] = (total, tuple(b))
    return latency.sync_latency(w.sync_raw, before or None)


def _plus(a: object, b: object) -> object:
    """a + b for counts and {key: CallBytes | int} maps (None: not counted)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, CallBytes) and isinstance(b, CallBytes):
        return CallBytes(a.calls + b.calls, a.bytes + b.bytes)
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _plus(a.get(k), b.get(k)) for k in {**a, **b}}
    return a + b  # type: ignore[operator]


def _accumulate(total: Counts | None, iv: Counts) -> Counts:
    """The totals after one more interval; live bytes are a level, not a sum."""
    if total is None:
        return iv
    summed = {f.name: _plus(getattr(total, f.name), getattr(iv, f.name)) for f in fields(Counts)}
    summed["live_alloc_bytes"] = iv.live_alloc_bytes
    return Counts(**summed)  # type: ignore[arg-type]


def _bucket(n: float) -> str:
    return f"2^{max(0, math.floor(math.log2(max(1.0, n))))}"


def _raw_frame(text: str) -> RawFrame:
    """``/path/file.py:88 function`` (Python), or ``/path/object!symbol`` (a native caller)."""
    if "!" in text:
        obj, symbol = text.split("!", 1)
        return RawFrame(obj, None, symbol, native=True, address=0x7F0000001000 + len(text))
    where, function = text.split(" ", 1)
    file, line = where.rsplit(":", 1)
    return RawFrame(file, int(line), function, address=0x7F0000100000 + len(text))


def _call_sites(w: Workload, frame: int, launches: int, interval: float) -> CallSites | None:
    """The interval's launches sampled one in ``site_period`` (on average) and spread over the workload's
    call sites by their shares, counted as the BPF side counts them, estimated as the live feed does
    (gputop/callsites.py); drawn from a generator of its own (the scenario's other values stay as they were)."""
    if not w.sites:
        return None
    rng = random.Random(w.pid * 7919 + frame)
    before = dict(w.site_raw) if frame > w.start else None
    n = sum(1 for _ in range(launches) if rng.random() < 1 / w.site_period) if launches < 2000 else \
        max(0, round(rng.gauss(launches / w.site_period, math.sqrt(launches / w.site_period))))
    picks = rng.choices(range(len(w.sites)), weights=[share for _, _, share in w.sites], k=n)
    funcs = {name: 0x5000 + i for i, (name, *_) in enumerate(w.kernels)}
    for i in picks:
        key = (i + 1, funcs[w.sites[i][1]])
        w.site_raw[key] = w.site_raw.get(key, 0) + 1
    raw = [RawSite(stack, func, count, tuple(_raw_frame(f) for f in w.sites[stack - 1][0]),
                   python="!" not in w.sites[stack - 1][0][0], truncated=False)
           for (stack, func), count in sorted(w.site_raw.items())]
    base = [RawSite(stack, func, count, (), True, False) for (stack, func), count in (before or {}).items()]
    names = {v: k for k, v in funcs.items()}
    return callsites.estimate(raw, base if before is not None else None, launches, 1 / interval,
                              lambda func: names.get(func, f"0x{func:x}"), period=w.site_period)


def _sample(w: Workload, frame: int, rng: random.Random, interval: float, exited: bool) -> ProcSample:
    k = 1.0 + w.wave * math.sin(2 * math.pi * frame / w.period) + rng.uniform(-0.04, 0.04)
    k = max(0.0, k) if not exited else 0.0
    launches = round(w.launches * k * interval)
    ar = round(w.nccl_allreduce * k * interval)
    memcpy = {
        d: CallBytes(round(b * k * interval / (4 * MIB)) if b else 0, round(b * k * interval))
        for d, b in (("h2d", w.h2d), ("d2h", w.d2h), ("d2d", w.d2d), ("h2h", 0.0), ("unknown", 0.0))
    }
    faults = round(w.uvm_faults * k * interval)
    sync_s = min(interval, w.sync_pct / 100 * interval * (k if k else 1.0))
    per_kernel = []
    grid_hist = w.grid_hist        # histograms count since first seen, like the sampler's
    block_hist = w.block_hist
    grid_sum = block_sum = 0.0
    left = launches
    graph_launches = round(w.graph_kernels * k * interval / w.graph_size)
    gleft = graph_kernels = graph_launches * w.graph_size
    for i, (name, share, grid, block) in enumerate(w.kernels):
        # the last kernel takes what rounding left, so the kernels (and histograms) add up to launches
        n = left if i == len(w.kernels) - 1 else min(left, round(launches * share))
        left -= n
        gn = gleft if i == len(w.kernels) - 1 else min(gleft, round(graph_kernels * share))
        gleft -= gn
        tot = w.total.get(name, 0.0) + n
        w.total[name] = tot
        gtot = w.total.get("graph " + name, 0.0) + gn
        w.total["graph " + name] = gtot
        per_kernel.append(
            KernelStat(
                name=name,
                launches=int(tot),
                grid_blocks_avg=float(grid),
                block_threads_avg=float(block),
                interval_launches=n,
                launches_per_s=n / interval,
                object="libtorch_cuda.so" if "at::" in name else None,
                graph_launches=int(gtot),
                interval_graph_launches=gn,
                graph_launches_per_s=gn / interval,
            )
        )
        if n:
            grid_hist[_bucket(grid)] = grid_hist.get(_bucket(grid), 0) + n
            block_hist[_bucket(block)] = block_hist.get(_bucket(block), 0) + n
            grid_sum += grid * n
            block_sum += block * n
    per_kernel.sort(key=lambda s: -(s.launches + (s.graph_launches or 0)))
    counted = sum(s.interval_launches or 0 for s in per_kernel)
    iv = Counts(
        launches=launches,
        graph_launches=graph_launches,
        captured_launches=0,
        graph_kernel_launches=graph_kernels,
        grid_blocks_sum=round(grid_sum),
        block_threads_sum=round(block_sum),
        memcpy=memcpy,
        alloc_calls=rng.randint(0, 3) if launches else 0,
        alloc_bytes=rng.randint(0, 3) * 64 * MIB if launches else 0,
        free_calls=rng.randint(0, 3) if launches else 0,
        live_alloc_bytes=w.live_mem,
        managed_alloc_calls=1 if w.managed and frame == w.start else 0,
        managed_alloc_bytes=w.live_mem if w.managed and frame == w.start else 0,
        prefetch={
            "to_device": CallBytes(4, 512 * MIB) if w.managed else CallBytes(0, 0),
            "to_host": CallBytes(0, 0),
        },
        # CPU faults on managed memory only: GPU-side UVM needs kprobes (null, as live on such hosts)
        uvm_cpu_faults=faults,
        uvm_gpu_faults=None,
        uvm_migrated=None,
        uvm_thrashing=None,
        sync_calls=round(w.sync_calls * k * interval),
        sync_wait_s=sync_s,
        # PyTorch zeroes buffers (zero_, cuBLAS workspaces): a memset of 512 KiB for every 25 launches
        memset_calls=launches // 25,
        memset_bytes=launches // 25 * 512 * 1024,
        nccl={op: CallBytes(ar, ar * 4 * w.nccl_count) if op == "allreduce" else CallBytes(0, 0) for op in NCCL_OPS},
        nccl_calls=ar,
        nccl_bytes=ar * 4 * w.nccl_count,
        nccl_group_calls=0,
        nccl_untyped_calls=0,
        nccl_comms=1 if w.nccl_comm and frame == w.start else 0,
    )
    tot = w.counts = _accumulate(w.counts, iv)
    rates = Rates(
        launches_per_s=launches / interval,
        graph_launches_per_s=graph_launches / interval,
        graph_kernel_launches_per_s=graph_kernels / interval,
        memcpy_bytes_per_s={d: cb.bytes / interval for d, cb in memcpy.items()},
        uvm_faults_per_s=faults / interval,
        sync_wait_pct=100 * sync_s / interval,
        memset_bytes_per_s=launches // 25 * 512 * 1024 / interval,
        nccl_calls_per_s=ar / interval,
        nccl_bytes_per_s=ar * 4 * w.nccl_count / interval,
    )
    return ProcSample(
        pid=w.pid,
        comm=w.comm,
        ppid=1,
        cmdline=w.cmdline,
        user=w.user,
        container=w.container,
        state="exited" if exited else "running",
        interval=iv,
        total=tot,
        rates=rates,
        grid_blocks_avg=grid_sum / counted if counted else None,
        block_threads_avg=block_sum / counted if counted else None,
        grid_blocks_hist=dict(grid_hist),
        block_threads_hist=dict(block_hist),
        kernels=tuple(per_kernel[:20]),
        gpu_index=w.gpu,
        gpu_mem_bytes=w.gpu_mem,
        gpu_util_pct=None if w.sm is None else min(100.0, w.sm * (k if k else 0.0)),
        cpu_pct=None if w.cpu is None else (w.cpu * k if not exited else 0.0),
        rss_bytes=w.rss,
        launch_bound=w.launch_bound,
        sync_latency=_syncs(w, iv.sync_calls or 0, sync_s),
        nccl_comm_size=w.nccl_comm[0] if w.nccl_comm else None,
        nccl_comm_rank=w.nccl_comm[1] if w.nccl_comm else None,
        call_sites=_call_sites(w, frame, launches, interval),
    )


ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::GeluCUDAKernelImpl(...)::{lambda(float)#1}, "
    "at::detail::Array<char*, 2> >"
)
LAYERNORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, "
    "float const*, float const*, float const*, float*, float*, float*)"
)
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
GEMM = "ampere_sgemm_128x64_tn"

# call sites (innermost frame first): a GPT-2 training loop, eager and compiled
TORCH = "/opt/venv/lib/python3.12/site-packages/torch"
GPT2 = "/home/alice/gpt2"
_TRAIN = (f"{TORCH}/nn/modules/module.py:1762 Module._call_impl", f"{GPT2}/model.py:131 Block.forward",
          f"{TORCH}/nn/modules/module.py:1762 Module._call_impl", f"{GPT2}/model.py:176 GPT.forward",
          f"{GPT2}/train.py:214 train_step", f"{GPT2}/train.py:301 main", f"{GPT2}/train.py:305 <module>")
_ATTN = (f"{GPT2}/model.py:61 CausalSelfAttention.forward", *_TRAIN)


def _eager_sites() -> list[tuple[tuple[str, ...], str, float]]:
    return [
        ((f"{GPT2}/model.py:88 MLP.forward", *_TRAIN), ELEMENTWISE, 0.30),
        ((f"{GPT2}/model.py:87 MLP.forward", *_TRAIN), GELU, 0.22),
        ((f"{TORCH}/nn/functional.py:2910 layer_norm", f"{TORCH}/nn/modules/normalization.py:217 LayerNorm.forward",
          *_TRAIN), LAYERNORM, 0.14),
        ((f"{TORCH}/nn/modules/linear.py:125 Linear.forward", f"{GPT2}/model.py:86 MLP.forward", *_TRAIN), GEMM, 0.14),
        (_ATTN, SOFTMAX, 0.12),
        ((f"{TORCH}/optim/adamw.py:480 _multi_tensor_adamw", f"{TORCH}/optim/adamw.py:227 AdamW.step",
          f"{GPT2}/train.py:222 train_step", f"{GPT2}/train.py:301 main"), ELEMENTWISE, 0.08),
    ]


def _compiled_sites() -> list[tuple[tuple[str, ...], str, float]]:
    call = "/tmp/torchinductor_alice/c4/cc4xqnbd7yw2.py:412 call"
    run = f"{TORCH}/_inductor/runtime/triton_heuristics.py:1076 CachingAutotuner.run"
    tail = (f"{TORCH}/_inductor/output_code.py:583 CompiledFxGraph.__call__", f"{GPT2}/train.py:214 train_step",
            f"{GPT2}/train.py:301 main")
    return [
        ((run, call, *tail), "triton_per_fused_add_gelu_native_layer_norm_0", 0.46),
        ((call, *tail), GEMM, 0.30),
        ((run, "/tmp/torchinductor_alice/c4/cc4xqnbd7yw2.py:388 call", *tail), "triton_red_fused__softmax_1", 0.18),
        (_ATTN, "flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>>", 0.06),
    ]


def workloads() -> list[Workload]:
    return [
        Workload(
            4242,
            "python",
            "python train.py --model gpt2-medium --fused=0",
            "alice",
            0,
            52_000,
            [
                (ELEMENTWISE, 0.38, 48, 128),
                (GELU, 0.22, 48, 128),
                (LAYERNORM, 0.14, 24, 128),
                (SOFTMAX, 0.12, 32, 128),
                (GEMM, 0.14, 320, 256),
            ],
            h2d=1.8e9,
            d2h=4.0e7,
            d2d=2.1e8,
            sync_pct=38,
            sync_calls=2400,
            nccl_allreduce=12,
            nccl_count=25 << 18,       # 25 MiB gradient buckets of fp32 elements (DDP's default)
            nccl_comm=(8, 3),
            live_mem=21 * GIB,
            gpu_mem=23 * GIB,
            sm=48,
            cpu=99,
            rss=7 * GIB,
            launch_bound=True,
            wave=0.05,
            sites=_eager_sites(),
            site_period=128,
        ),
        Workload(
            4243,
            "python",
            "python train.py --model gpt2-medium --fused=1",
            "alice",
            1,
            3_900,
            [
                ("triton_per_fused_add_gelu_native_layer_norm_0", 0.46, 1728, 256),
                ("triton_red_fused__softmax_1", 0.18, 864, 128),
                (GEMM, 0.30, 320, 256),
                ("flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>>", 0.06, 2048, 128),
            ],
            h2d=1.8e9,
            d2h=4.0e7,
            d2d=9.0e7,
            sync_pct=6,
            sync_calls=180,
            live_mem=19 * GIB,
            gpu_mem=21 * GIB,
            sm=70,
            cpu=34,
            rss=7 * GIB,
            launch_bound=False,
            wave=0.04,
            sites=_compiled_sites(),
            site_period=16,
        ),
        Workload(
            5120,
            "tritonserver",
            "tritonserver --model-repository=/models --http-port 8000",
            "triton",
            0,
            14_000,
            [
                ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4", 0.5, 512, 128),
                ("void cub::DeviceReduceKernel<...>", 0.2, 64, 256),
                ("fused_multihead_attention_v2_fp16_64_64_kernel", 0.3, 384, 128),
            ],
            h2d=6.0e8,
            d2h=3.0e8,
            sync_pct=12,
            sync_calls=900,
            live_mem=11 * GIB,
            gpu_mem=12 * GIB,
            sm=22,
            cpu=41,
            rss=3 * GIB,
            wave=0.55,
            period=24,
            sites=[
                (("/opt/tritonserver/backends/tensorrt/libnvinfer.so.10!nvinfer1::rt::ExecutionContext::enqueueV3",
                  "/opt/tritonserver/backends/tensorrt/libtriton_tensorrt.so!ModelInstanceState::Run"),
                 "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4", 0.5),
                (("/opt/tritonserver/backends/tensorrt/libnvinfer_plugin.so.10!bertQKVToContextPlugin::enqueue",
                  "/opt/tritonserver/backends/tensorrt/libnvinfer.so.10!nvinfer1::rt::ExecutionContext::enqueueV3"),
                 "fused_multihead_attention_v2_fp16_64_64_kernel", 0.3),
                (("/opt/tritonserver/lib/libtritonserver.so!triton::core::InferenceRequest::Run",),
                 "void cub::DeviceReduceKernel<...>", 0.2),
            ],
            site_period=32,
        ),
        Workload(
            6001,
            "python",
            "python uvm_stress.py --oversubscribe 1.5",
            "bob",
            1,
            900,
            [("stream_triad_kernel(float*, float const*, float const*, float)", 1.0, 65536, 256)],
            sync_pct=22,
            sync_calls=60,
            uvm_faults=12_500,
            managed=True,
            live_mem=120 * GIB,
            gpu_mem=28 * GIB,
            sm=8,
            cpu=12,
            rss=40 * GIB,
            wave=0.3,
            period=17,
            sites=[(("/home/bob/uvm_stress.py:47 triad", "/home/bob/uvm_stress.py:80 main",
                     "/home/bob/uvm_stress.py:95 <module>"),
                    "stream_triad_kernel(float*, float const*, float const*, float)", 1.0)],
            site_period=16,
        ),
        Workload(
            7007,
            "nbody",
            "./nbody -benchmark -numbodies=1048576",
            "carol",
            0,
            120,
            [("void integrateBodies<float>(vec4<float>::Type*, vec4<float>::Type*, ...)", 1.0, 4096, 256)],
            sync_pct=91,
            sync_calls=120,
            live_mem=96 * MIB,
            gpu_mem=400 * MIB,
            sm=25,
            cpu=100,
            rss=300 * MIB,
            start=20,
            sites=[(("/usr/local/cuda/samples/bin/nbody!integrateNbodySystem<float>",
                     "/usr/local/cuda/samples/bin/nbody!BodySystemCUDA<float>::update"),
                    "void integrateBodies<float>(vec4<float>::Type*, vec4<float>::Type*, ...)", 1.0)],
            site_period=16,
        ),
        Workload(
            7300,
            "python",
            "python eval.py --ckpt step_12000.pt",
            "dave",
            1,
            6_500,
            [(ELEMENTWISE, 0.5, 96, 256), (GEMM, 0.5, 160, 256)],
            h2d=2.5e8,
            d2h=1.2e8,
            sync_pct=15,
            sync_calls=400,
            live_mem=5 * GIB,
            gpu_mem=6 * GIB,
            sm=10,
            cpu=88,
            rss=4 * GIB,
            end=60,
            sites=[
                ((f"{TORCH}/nn/modules/linear.py:125 Linear.forward", "/home/dave/eval.py:52 evaluate",
                  "/home/dave/eval.py:90 <module>"), GEMM, 0.5),
                (("/home/dave/eval.py:55 evaluate", "/home/dave/eval.py:90 <module>"), ELEMENTWISE, 0.5),
            ],
            site_period=16,
        ),
        Workload(
            12001,
            "vllm",
            "python -m vllm.entrypoints.openai.api_server --model llama-3-8b",
            None,
            1,
            9_800,
            [
                ("paged_attention_v2_kernel<__nv_bfloat16, 128, 16, 128, 512>", 0.4, 256, 128),
                ("void vllm::rms_norm_kernel<c10::BFloat16>", 0.3, 128, 1024),
                ("sm90_xmma_gemm_bf16bf16_bf16f32", 0.3, 264, 384),
            ],
            h2d=2.0e7,
            d2h=8.0e6,
            d2d=1.1e9,
            sync_pct=9,
            sync_calls=700,
            live_mem=13 * GIB,
            gpu_mem=None,
            sm=None,
            cpu=None,
            rss=9 * GIB,
            launch_bound=None,
            container="3f2a9c1b7e40",
            wave=0.25,
            period=40,
            graph_kernels=58_000,     # decode steps replayed as CUDA graphs of 290 kernels
            graph_size=290,
            sites=[
                (("/opt/vllm/vllm/attention/ops/paged_attn.py:187 PagedAttention.forward_decode",
                  "/opt/vllm/vllm/attention/backends/xformers.py:612 XFormersImpl.forward",
                  "/opt/vllm/vllm/worker/model_runner.py:1650 ModelRunner.execute_model"),
                 "paged_attention_v2_kernel<__nv_bfloat16, 128, 16, 128, 512>", 0.4),
                (("/opt/vllm/vllm/model_executor/layers/layernorm.py:98 RMSNorm.forward_cuda",
                  "/opt/vllm/vllm/worker/model_runner.py:1650 ModelRunner.execute_model"),
                 "void vllm::rms_norm_kernel<c10::BFloat16>", 0.3),
                (("/opt/vllm/vllm/model_executor/layers/linear.py:135 UnquantizedLinearMethod.apply",
                  "/opt/vllm/vllm/worker/model_runner.py:1650 ModelRunner.execute_model"),
                 "sm90_xmma_gemm_bf16bf16_bf16f32", 0.3),
            ],
            site_period=32,
        ),
        Workload(
            8100,
            "dcgm-exporter",
            "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv",
            "root",
            None,
            0,
            [],
            gpu_mem=None,
            sm=None,
            cpu=0.4,
            rss=90 * MIB,
        ),
    ]


def _gpus(procs: list[ProcSample], frame: int) -> tuple[GpuSample, ...]:
    out = []
    for index in (0, 1):
        mine = [p for p in procs if p.gpu_index == index and p.state == "running"]
        util = min(100.0, sum(p.gpu_util_pct or 0 for p in mine) + (12 if index == 1 else 0))
        used = sum(p.gpu_mem_bytes or 0 for p in mine) + (14 * GIB if index == 1 else 0) + 600 * MIB
        h2d = sum((p.rates.memcpy_bytes_per_s or {}).get("h2d", 0) for p in mine if p.rates)
        d2h = sum((p.rates.memcpy_bytes_per_s or {}).get("d2h", 0) for p in mine if p.rates)
        out.append(
            GpuSample(
                index=index,
                uuid=f"GPU-7c1e{index}a52-91f3-4b7e-8d0c-2f6e0a9b3c1{index}",
                name="NVIDIA A100-SXM4-80GB",
                util_pct=round(util),
                mem_util_pct=round(util * 0.6),
                mem_used_bytes=min(used, 80 * GIB),
                mem_total_bytes=80 * GIB,
                temp_c=52 + util * 0.22 + 2 * math.sin(frame / 9),
                power_w=round(90 + util * 2.9, 1),
                power_limit_w=400.0,
                sm_clock_mhz=1410.0,
                pcie_tx_bytes_per_s=d2h * 1.02 + 1e6,
                pcie_rx_bytes_per_s=h2d * 1.02 + 2e6,
                xid_errors=0 if index == 0 or frame < 70 else 1,
            )
        )
    return tuple(out)


def _sources(n_procs: int, launches: float) -> dict[str, SourceStatus]:
    return {
        "bpf": SourceStatus(
            "ok",
            None,
            objects=7,
            probes=212,
            dropped=0,
            overhead_ns_per_s=launches * 55.0,
            probe_hits_per_s=launches * 1.3 + 800,
            # the launches' uprobe hits pay the trap; the 800 tracepoint hits do not
            trap_ns=760.0,
            cost_ns_per_s=launches * 1.3 * 760.0 + launches * 55.0,
        ),
        "nvml": SourceStatus("ok"),
        "uvm": SourceStatus("ok", "CPU faults on managed memory only", scope="cpu"),
    }


def scenario_snapshots(frames: int = 90, interval: float = 1.0, seed: int = 7) -> Iterator[Snapshot]:
    rng = random.Random(seed)
    ws = workloads()
    for frame in range(frames):
        procs = []
        for w in ws:
            if frame < w.start or (w.end is not None and frame > w.end):
                continue
            procs.append(_sample(w, frame, rng, interval, exited=w.end is not None and frame == w.end))
        launches = sum(p.rates.launches_per_s or 0 for p in procs if p.rates)
        yield Snapshot(
            time=T0 + frame * interval,
            interval_s=interval,
            host=HOST,
            sources=_sources(len(procs), launches),
            gpus=_gpus(procs, frame),
            processes=tuple(procs),
        )


def bench_snapshots(
    n_procs: int = 64, frames: int = 75, interval: float = 1.0, seed: int = 11
) -> Iterator[Snapshot]:
    """``n_procs`` busy processes with changing rates, so every refresh changes every row."""
    rng = random.Random(seed)
    base = workloads()[:7]
    ws = []
    for i in range(n_procs):
        t = base[i % len(base)]
        ws.append(
            Workload(
                20000 + i,
                t.comm,
                f"{t.cmdline} --rank {i}",
                t.user,
                i % 2,
                t.launches * rng.uniform(0.3, 2),
                list(t.kernels),
                h2d=t.h2d,
                d2h=t.d2h,
                d2d=t.d2d,
                sync_pct=t.sync_pct,
                sync_calls=t.sync_calls,
                uvm_faults=t.uvm_faults,
                managed=t.managed,
                live_mem=t.live_mem,
                gpu_mem=t.gpu_mem,
                sm=t.sm,
                cpu=t.cpu,
                rss=t.rss,
                launch_bound=t.launch_bound,
                wave=0.3,
                period=rng.uniform(8, 30),
            )
        )
    for frame in range(frames):
        procs = [_sample(w, frame, rng, interval, exited=False) for w in ws]
        launches = sum(p.rates.launches_per_s or 0 for p in procs if p.rates)
        yield Snapshot(
            time=T0 + frame * interval,
            interval_s=interval,
            host=HOST,
            sources=_sources(len(procs), launches),
            gpus=_gpus(procs, frame),
            processes=tuple(procs),
        )


def write(path: Path, snaps: Iterator[Snapshot]) -> int:
    with Recorder(path) as rec:
        for s in snaps:
            rec.write(s)
        return rec.count


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("scenario.jsonl")
    n = write(out, scenario_snapshots())
    print(f"wrote {n} snapshots to {out}")
