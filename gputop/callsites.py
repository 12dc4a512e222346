"""Call sites from sampled launches: a process's samples by (stack, kernel) (the BPF source's counters,
pystacks/sites.py) grouped by call site (the innermost Python frame, or the native caller where the
launching thread ran no Python), and the launches each made estimated from them.

The estimate: every launch has the same chance of being sampled (bpf/sites.bpf.h), so a site's part of a
process's samples estimates its part of the process's launches, which are counted exactly: over an
interval, launches/s(site) = launches/s(process) x s / S, for s of the interval's S samples. Its error is
the binomial one: the half-width of a 95 % interval is 1.96 x sqrt(p (1 - p) / S) x launches/s(process),
p = s / S (the normal approximation; with S >= 2,000 a share is known to within +-2.2 points at worst).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gputop.model import CallSite, CallSites, Frame
from gputop.sources.bpf.pystacks.sites import RawFrame, RawSite

#: call sites kept per process (model.limits.MAX_CALL_SITES)
TOP_SITES = 20
#: the normal quantile of a two-sided 95 % interval
Z95 = 1.959963984540054


def half_width(p: float, n: int) -> float:
    """The half-width of the 95 % interval of a proportion ``p`` estimated from ``n`` samples."""
    return Z95 * math.sqrt(max(p * (1.0 - p), 0.0) / n) if n else math.inf


def frame_of(f: RawFrame) -> Frame:
    if f.function is None and f.file is None:
        return Frame(None, None, f"0x{f.address:x}")
    if f.native:
        return Frame(os.path.basename(f.file) if f.file else None, None, f.function or f"0x{f.address:x}")
    return Frame(f.file, f.line, f.function)


def site_key(r: RawSite) -> tuple[object, ...]:
    """What makes a call site: its innermost frame (an unresolved one: by its code object or address)."""
    if not r.frames:
        return ("none",)
    f = r.frames[0]
    if f.function is None:
        return ("addr", f.native, f.address)
    return (f.native, f.file, f.line, f.function)


@dataclass
class _Site:
    python: bool
    samples: int = 0
    total: int = 0
    stacks: dict[int, int] = field(default_factory=dict)      # stack id -> total samples
    frames: dict[int, tuple[RawFrame, ...]] = field(default_factory=dict)
    truncated: dict[int, bool] = field(default_factory=dict)
    kernels: dict[int, int] = field(default_factory=dict)     # func -> total samples


def estimate(now: Iterable[RawSite], base: Iterable[RawSite] | None, launches: int | None, per_s: float | None,
             kernel_label: Callable[[int], str], period: int | None = None) -> CallSites | None:
    """The call sites of a process whose counters are ``now`` (``base``: at the interval's start; None:
    the process is new: the interval holds no samples), over an interval of ``launches`` counted
    launches, ``per_s`` its reciprocal length; None without any sample."""
    rows = list(now)
    if not rows:
        return None
    before = {(r.stack, r.func): r.samples for r in base or ()}
    sites: dict[tuple[object, ...], _Site] = {}
    for r in rows:
        s = sites.setdefault(site_key(r), _Site(r.python))
        iv = r.samples - before.get((r.stack, r.func), r.samples if base is None else 0)
        s.samples += max(iv, 0)
        s.total += r.samples
        s.stacks[r.stack] = s.stacks.get(r.stack, 0) + r.samples
        s.frames[r.stack] = r.frames
        s.truncated[r.stack] = r.truncated
        s.kernels[r.func] = s.kernels.get(r.func, 0) + r.samples
    n_iv = sum(s.samples for s in sites.values())
    n_tot = sum(s.total for s in sites.values())
    rate = launches * per_s if launches is not None and per_s is not None else None
    out = []
    for s in sorted(sites.values(), key=lambda s: (-s.samples, -s.total)):
        stack = max(s.stacks, key=lambda k: (s.stacks[k], -k))
        func = max(s.kernels, key=lambda k: (s.kernels[k], -k))
        est = err = None
        if rate is not None and launches == 0:
            est, err = 0.0, 0.0
        elif rate is not None and n_iv:
            p = s.samples / n_iv
            est, err = rate * p, rate * half_width(p, n_iv)
        share = s.total / n_tot
        out.append(CallSite(
            kind="python" if s.python else "native",
            frames=tuple(frame_of(f) for f in s.frames[stack]),
            truncated=s.truncated[stack],
            samples=s.samples,
            total_samples=s.total,
            launches_per_s=est,
            launches_per_s_error=err,
            share_pct=100.0 * share,
            share_pct_error=100.0 * half_width(share, n_tot),
            top_kernel=kernel_label(func),
        ))
    return CallSites(samples=n_iv, total_samples=n_tot, sites=tuple(out[:TOP_SITES]), period=period)
