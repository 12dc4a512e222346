"""Metrics derived from several sources. Stdlib only (and ``gputop.model``); see docs/nvml.md
("Launch-bound") and docs/dashboard.md ("Summary line").

A process is *launch-bound* when the CPU side, not the GPU, limits it: it issues kernels at a high rate
while the GPU stays mostly idle, i.e. each kernel is short compared with the time the host needs to
issue the next one (framework dispatch plus the CUDA launch call), so the GPU waits for work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gputop.model import ProcSample, Snapshot, Summary

__all__ = ["LaunchBoundRule", "is_launch_bound", "summary"]


@dataclass(frozen=True)
class LaunchBoundRule:
    """Thresholds of the launch-bound heuristic: ``launches_per_s >= min_launches_per_s`` and
    ``gpu_util_pct < max_gpu_util_pct``.

    Defaults: 5000 launches/s is 200 µs of wall time per kernel. A CUDA launch costs the host about
    2-10 µs and an eager-mode framework op another 10-50 µs, so at that rate the host spends a large
    share of every kernel's slot issuing it; GPU-bound training steps with large kernels issue hundreds
    to a few thousand per second and stay below it, while small-batch eager inference and unfused
    element-wise chains issue 10^4 and more. 50 % utilisation: NVML's utilisation is the share of time
    at least one kernel was running, so below half the GPU sat idle more than it worked.
    """

    min_launches_per_s: float = 5000.0
    max_gpu_util_pct: float = 50.0


def _unknown(value: float | None) -> bool:
    return value is None or math.isnan(value)


def is_launch_bound(
    launches_per_s: float | None, gpu_util_pct: float | None, rule: LaunchBoundRule
) -> bool | None:
    """Whether a process looks launch-bound under ``rule``; None when either input is unknown (None or
    NaN): never a guess. ``gpu_util_pct`` is the process's SM utilisation when NVML gives it, else the
    utilisation of its GPU."""
    if launches_per_s is None or gpu_util_pct is None or _unknown(launches_per_s) or _unknown(gpu_util_pct):
        return None
    return launches_per_s >= rule.min_launches_per_s and gpu_util_pct < rule.max_gpu_util_pct


def _total(procs: Sequence[ProcSample], get: Callable[[ProcSample], float | None], counted: bool) -> float | None:
    """The sum of ``get`` over ``procs``; None when one of them is unknown, or when there is no process
    and no source counting (a sum of nothing is 0 only where something would have been counted)."""
    if not procs and not counted:
        return None
    total = 0.0
    for p in procs:
        v = get(p)
        if v is None or math.isnan(v):
            return None
        total += v
    return total


def _memcpy(direction: str) -> Callable[[ProcSample], float | None]:
    def get(p: ProcSample) -> float | None:
        by_dir = p.rates.memcpy_bytes_per_s if p.rates is not None else None
        return None if by_dir is None else by_dir.get(direction)
    return get


def summary(snap: Snapshot, procs: Sequence[ProcSample] | None = None) -> Summary:
    """Totals of ``procs`` (default: every process of ``snap``), htop's Tasks: line: how many are listed,
    running, stopped and exited; the sums of their launches/s, graph kernels/s and H2D/D2H/D2D bytes/s
    over the snapshot's interval (None when any of them is unknown); the GPUs, and how many are busy
    (utilisation above 0 %: a kernel ran in NVML's last sample period; None without GPUs or when a
    GPU's utilisation is unknown)."""
    ps = snap.processes if procs is None else procs
    counted = any(st.status == "ok" for name, st in snap.sources.items() if name in ("bpf", "prometheus"))
    utils = [g.util_pct for g in snap.gpus]
    busy = None if not utils or any(u is None or math.isnan(u) for u in utils) else sum(
        1 for u in utils if u is not None and u > 0)
    return Summary(
        processes=len(ps),
        running=sum(1 for p in ps if p.state == "running"),
        stopped=sum(1 for p in ps if p.state == "stopped"),
        exited=sum(1 for p in ps if p.state == "exited"),
        launches_per_s=_total(ps, lambda p: p.rates.launches_per_s if p.rates else None, counted),
        graph_kernel_launches_per_s=_total(
            ps, lambda p: p.rates.graph_kernel_launches_per_s if p.rates else None, counted),
        h2d_bytes_per_s=_total(ps, _memcpy("h2d"), counted),
        d2h_bytes_per_s=_total(ps, _memcpy("d2h"), counted),
        d2d_bytes_per_s=_total(ps, _memcpy("d2d"), counted),
        gpus=len(utils),
        gpus_busy=busy,
    )
