"""Metrics derived from several sources. Stdlib only; see docs/nvml.md ("Launch-bound").

A process is *launch-bound* when the CPU side, not the GPU, limits it: it issues kernels at a high rate
while the GPU stays mostly idle, i.e. each kernel is short compared with the time the host needs to
issue the next one (framework dispatch plus the CUDA launch call), so the GPU waits for work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LaunchBoundRule", "is_launch_bound"]


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
