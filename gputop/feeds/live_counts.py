"""The live feed's counting: a process's raw counters (the BPF source's ``RawProc``) against its last
reading -> interval and total ``Counts`` (one per quantity of the catalogue, gputop/counters.py), rates
(``counters.rates``), averages, histograms and its top kernels, and with the host's and NVML's data one
``ProcSample``. ``ProcDeltas`` holds the last reading of each process; ``gputop.feeds.live.Sampler``
owns it and decides when a process is new, gone or reused."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gputop import callsites, counters, latency
from gputop.counters import PROC, Kind, Quantity
from gputop.derive import LaunchBoundRule, is_launch_bound
from gputop.model import MEMCPY_DIRECTIONS, CallBytes, Counts, KernelStat, ProcSample
from gputop.model.limits import MAX_KERNELS
from gputop.sources.bpf import IdleProc, RawKernel, RawProc
from gputop.sources.host import HostProc
from gputop.sources.nvml import NvmlProc

#: a process younger than this at its first refresh keeps the interval's length as its window (its start
#: time has the kernel's 10 ms resolution: a window of a few ticks would make a rate of a few launches)
YOUNG_MIN_S = 0.2


def hist(buckets: tuple[int, ...]) -> dict[str, int]:
    """The model's ``{"2^k": count}`` of log2 buckets (empty ones left out)."""
    return {f"2^{k}": n for k, n in enumerate(buckets) if n}


def counts(raw: RawProc, base: RawProc | None, uvm_cpu: bool) -> Counts:
    """Counts of ``raw`` minus ``base`` (None: since gputop first saw the process), one per
    quantity of the catalogue (gputop/counters.py)."""
    c = raw.counters
    b = base.counters if base else dict.fromkeys(c, 0)

    def d(name: str) -> int:
        return c[name] - b[name]

    def pairs(q: Quantity) -> dict[str, CallBytes]:
        calls, nbytes = getattr(raw, f"{q.bpf}_calls"), getattr(raw, f"{q.bpf}_bytes")
        if q.sparse is not None and not any(calls):
            return {}           # a family most processes never use (NCCL): none of its directions, not 0s
        bcalls = getattr(base, f"{q.bpf}_calls") if base else None
        bbytes = getattr(base, f"{q.bpf}_bytes") if base else None
        out = {n: CallBytes(calls[i] - (bcalls[i] if bcalls else 0), nbytes[i] - (bbytes[i] if bbytes else 0))
               for i, n in enumerate(q.directions)}
        if q.sparse is not None:    # only the directions (NCCL operations) the process used
            out = {n: cb for i, (n, cb) in enumerate(out.items()) if calls[i]}
        return out

    def value(q: Quantity) -> int | float | dict[str, CallBytes] | None:
        if q.bpf is None or (q.needs_fault_tracepoint and not uvm_cpu):
            return None
        if q.directions:
            return pairs(q)
        if q.kind is Kind.GAUGE:
            # allocations made before gputop attached are not known: then live bytes are unknown
            return c[q.bpf] if raw.complete else None
        if q.unknown_if is not None and d(q.unknown_if):
            return None     # a graph launched without gputop knowing its kernels: the window's count
        return d(q.bpf) if q.integral else d(q.bpf) / q.bpf_per_unit

    kw: dict[str, Any] = {q.field: value(q) for q in PROC}
    return Counts(**kw)


def zero_counts(uvm_cpu: bool, complete: bool) -> Counts:
    """The counts of a process with no record: no probe of it fired since gputop first saw it."""

    def zero(q: Quantity) -> int | float | dict[str, CallBytes] | None:
        if q.bpf is None or (q.needs_fault_tracepoint and not uvm_cpu):
            return None
        if q.directions:
            return {} if q.sparse is not None else dict.fromkeys(q.directions, CallBytes(0, 0))
        if q.kind is Kind.GAUGE and not complete:
            return None     # as counts: unknown if it ran CUDA before
        return 0 if q.integral else 0.0

    kw: dict[str, Any] = {q.field: zero(q) for q in PROC}
    return Counts(**kw)


def avg(total: int, n: int) -> float | None:
    """``total`` per one of ``n`` (None: none)."""
    return total / n if n else None


def _labels(raw: RawProc) -> Callable[[int], str]:
    """A kernel's label by its key (RawKernel.key) among ``raw``'s kernels (its address if not there)."""
    by_key = {k.key: k for k in raw.kernels}
    return lambda key: kernel_label(by_key[key]) if key in by_key else f"0x{key:x}"


def kernel_label(k: RawKernel) -> str:
    """The kernel's name, or its address and object when it has none."""
    if k.name:
        return k.name
    if k.object:
        return f"{os.path.basename(k.object)}@0x{k.key:x}"
    return f"0x{k.key:x}"


class ProcDeltas:
    """The last reading of each process (its raw counters, each kernel's direct and graph launches):
    the base of the next refresh's interval counts."""

    def __init__(self) -> None:
        self.procs: dict[int, RawProc] = {}
        self.kernels: dict[tuple[int, int], int] = {}
        self.graph_kernels: dict[tuple[int, int], int] = {}

    def baseline(self, pid: int, raw: RawProc) -> None:
        """``raw`` as the base of ``pid``'s first interval (what was counted before it is in the totals only)."""
        self.procs[pid] = raw
        self.kernels.update(((pid, k.key), k.launches) for k in raw.kernels)

    def keep(self, pid: int, raw: RawProc) -> None:
        """``raw`` as the base of ``pid``'s next interval (its kernels' are kept by ``sample``)."""
        self.procs[pid] = raw

    def forget(self, pid: int) -> None:
        """Forget ``pid``'s last counters (it exited, or the PID was reused)."""
        self.procs.pop(pid, None)

    def forget_kernels(self, pids: set[int]) -> None:
        """Forget the kernels' launches of the processes ``pids``."""
        self.kernels = {k: v for k, v in self.kernels.items() if k[0] not in pids}
        self.graph_kernels = {k: v for k, v in self.graph_kernels.items() if k[0] not in pids}

    def sample(self, pid: int, raw: RawProc | None, idle: IdleProc | None, host: HostProc | None,
               nvp: NvmlProc | None, gpu_util: dict[int, float | None], elapsed: float, state: str,
               uvm_cpu: bool, rule: LaunchBoundRule, sample_period: int | None = None) -> ProcSample:
        """One process's sample; ``idle``: it has no record and its counts are known to be zero;
        ``rule``: when a process counts as launch-bound; ``sample_period``: one launch in that many sampled
        for its call site."""
        interval = total = None
        rates = None
        grid_avg = block_avg = None
        kernels: tuple[KernelStat, ...] = ()
        extra: dict[str, Any] = {}
        if raw is not None:
            base = self.procs.get(pid)
            interval = counts(raw, base, uvm_cpu)
            total = counts(raw, None, uvm_cpu)
            n = interval.launches or 0
            grid_avg = avg(interval.grid_blocks_sum or 0, n)
            block_avg = avg(interval.block_threads_sum or 0, n)
            per_s = 1.0 / elapsed if elapsed > 0 else None
            if base is None and state == "running" and host is not None and host.start_time is not None:
                # it started within the interval (a new process's first refresh): its counts cover its life,
                # not the whole interval (which read half a process's rate when it started halfway through)
                age = time.time() - host.start_time
                if YOUNG_MIN_S <= age < elapsed:
                    per_s = 1.0 / age
            rates = None if per_s is None else counters.rates(counters.counts_value(interval), per_s)
            kernels = self._top_kernels(pid, raw, per_s, interval.graph_kernel_launches is not None,
                                        total.graph_kernel_launches is not None)
            extra = {
                "grid_blocks_hist": hist(raw.grid_hist),
                "block_threads_hist": hist(raw.block_hist),
                "memcpy_size_hist": {d: hist(h) for d, h in zip(MEMCPY_DIRECTIONS, raw.copy_hist)},
                "sync_latency": latency.sync_latency(raw.sync_hist, base.sync_hist if base else None),
                "nccl_comm_size": raw.nccl_comm[0] if raw.nccl_comm else None,
                "nccl_comm_rank": raw.nccl_comm[1] if raw.nccl_comm else None,
                "call_sites": callsites.estimate(raw.call_sites, base.call_sites if base else None,
                                                 interval.launches, per_s, _labels(raw), sample_period),
            }
        elif idle is not None:
            interval = total = zero_counts(uvm_cpu, idle.complete)
            rates = None if elapsed <= 0 else counters.rates(counters.counts_value(interval), 1.0 / elapsed)
            extra = {"grid_blocks_hist": {}, "block_threads_hist": {},
                     "memcpy_size_hist": {d: {} for d in MEMCPY_DIRECTIONS}}
        gpu_index = nvp.gpu_index if nvp else None
        launch_bound = None
        if rates is not None and gpu_index is not None:
            launch_bound = is_launch_bound(rates.launches_per_s, gpu_util.get(gpu_index), rule)
        return ProcSample(
            pid=pid,
            comm=host.comm if host else (raw.comm if raw is not None and raw.comm else None),
            ppid=host.ppid if host else None,
            cmdline=host.cmdline if host else None,
            user=host.user if host else None,
            container=host.container if host else None,
            nspid=host.nspid if host else None,
            state=state,
            interval=interval,
            total=total,
            rates=rates,
            grid_blocks_avg=grid_avg,
            block_threads_avg=block_avg,
            kernels=kernels,
            gpu_index=gpu_index,
            gpu_mem_bytes=nvp.gpu_mem_bytes if nvp else None,
            gpu_util_pct=nvp.sm_util_pct if nvp else None,
            cpu_pct=host.cpu_pct if host else None,
            rss_bytes=host.rss_bytes if host else None,
            cpu_time_s=host.cpu_time_s if host else None,
            mem_pct=host.mem_pct if host else None,
            kernel_state=host.state if host and state != "exited" else None,
            launch_bound=launch_bound,
            start_time=host.start_time if host else None,
            **extra,
        )

    def _top_kernels(self, pid: int, raw: RawProc, per_s: float | None, interval_known: bool = True,
                     total_known: bool = True) -> tuple[KernelStat, ...]:
        """The top kernels by launches, direct and inside graph launches; their graph launches are
        known where the process's are (``*_known``) and its graph tables lost nothing."""
        top = sorted(raw.kernels, key=lambda k: (-(k.launches + k.graph_launches), k.key))[:MAX_KERNELS]
        out = []
        for k in top:
            prev = self.kernels.get((pid, k.key), 0)
            gprev = self.graph_kernels.get((pid, k.key), 0)
            g_iv = k.graph_launches - gprev if interval_known and raw.graph_kernels_known else None
            out.append(KernelStat(
                name=kernel_label(k),
                launches=k.launches,
                grid_blocks_avg=avg(k.grid_sum, k.launches),
                block_threads_avg=avg(k.block_sum, k.launches),
                interval_launches=k.launches - prev,
                launches_per_s=(k.launches - prev) * per_s if per_s is not None else None,
                object=k.object,
                address=None if k.name else k.key,
                graph_launches=k.graph_launches if total_known and raw.graph_kernels_known else None,
                interval_graph_launches=g_iv,
                graph_launches_per_s=g_iv * per_s if g_iv is not None and per_s is not None else None,
            ))
        for k in raw.kernels:
            self.kernels[(pid, k.key)] = k.launches
            self.graph_kernels[(pid, k.key)] = k.graph_launches
        return tuple(out)
