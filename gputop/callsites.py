"""Call sites from sampled launches: a process's samples by (stack, kernel) (the BPF source's counters,
pystacks/sites.py) grouped by call site (the innermost Python frame, or the native caller where the
launching thread ran no Python), and the launches each made estimated from them.

The estimate: every launch has the same chance of being sampled (bpf/sites.bpf.h), so a site's part of a
process's samples estimates its part of the process's launches, which are counted exactly: over an
interval, launches/s(site) = launches/s(process) x s / S, for s of the interval's S samples (S counts the
samples no table had room for too: they are a site of their own, "unrecorded"). Its error is the binomial
one, as the half-width of the 95 % Wilson score interval of p = s / S times launches/s(process): about
1.96 x sqrt(p (1 - p) / S) once S is large (with S >= 2,000 a share is known to within +-2.2 points at
worst), and never 0 with few samples (3 of 3 samples from one site is not a certainty).
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
    """The half-width of the 95 % Wilson score interval of a proportion ``p`` estimated from ``n`` samples."""
    if not n:
        return math.inf
    z2 = Z95 * Z95
    return Z95 / (1 + z2 / n) * math.sqrt(max(p * (1.0 - p), 0.0) / n + z2 / (4 * n * n))


def frame_of(f: RawFrame) -> Frame:
    if f.function is None and f.file is None:
        return Frame(None, None, f"0x{f.address:x}")
    if f.native:
        return Frame(os.path.basename(f.file) if f.file else None, None, f.function or f"0x{f.address:x}")
    return Frame(f.file, f.line, f.function)


def site_key(r: RawSite) -> tuple[object, ...]:
    """What makes a call site: its innermost frame (an unresolved one: by its code object or address)."""
    if r.unrecorded:
        return ("unrecorded",)
    if not r.frames:
        return ("none",)
    f = r.frames[0]
    if f.function is None:
        return ("addr", f.native, f.address)
    return (f.native, f.file, f.line, f.function)


@dataclass
class _Site:
    kind: str
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
        s = sites.setdefault(site_key(r), _Site("unrecorded" if r.unrecorded else "python" if r.python else "native"))
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
    # the top sites by samples since first seen (a set that changes slowly: the exporter's series come from
    # it), shown busiest in the interval first
    top = sorted(sites.values(), key=lambda s: -s.total)[:TOP_SITES]
    for s in sorted(top, key=lambda s: (-s.samples, -s.total)):
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
            kind=s.kind,
            frames=tuple(frame_of(f) for f in s.frames[stack]),
            truncated=s.truncated[stack],
            samples=s.samples,
            total_samples=s.total,
            launches_per_s=est,
            launches_per_s_error=err,
            share_pct=100.0 * share,
            share_pct_error=100.0 * half_width(share, n_tot),
            top_kernel=None if s.kind == "unrecorded" else kernel_label(func),
        ))
    return CallSites(samples=n_iv, total_samples=n_tot, sites=tuple(out), period=period)
