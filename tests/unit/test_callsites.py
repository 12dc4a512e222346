"""gputop/callsites.py: call sites from sampled launches, and the estimates' errors."""

from __future__ import annotations

import math
import random

from gputop.callsites import Z95, estimate, half_width
from gputop.sources.bpf.pystacks.sites import RawFrame, RawSite


def raw(stack: int, func: int, samples: int, fn: str | None, line: int = 1) -> RawSite:
    frames = (RawFrame("/srv/train.py", line, fn, address=0x1000 + stack), RawFrame("/srv/train.py", 9, "main"))
    return RawSite(stack, func, samples, frames if fn else (), True, False)


def label(k: int) -> str:
    return f"k{k}"


def test_wilson_half_width() -> None:
    # large n: the normal approximation's 1.96 sqrt(p (1 - p) / n)
    assert math.isclose(half_width(0.3, 100_000), Z95 * math.sqrt(0.21 / 100_000), rel_tol=1e-3)
    # few samples, all of one site: not a certainty
    assert half_width(1.0, 3) > 0.2 and half_width(0.0, 3) > 0.2
    assert half_width(0.5, 0) == math.inf
    # 2,000 samples: at worst +-2.2 points (collector.md)
    assert half_width(0.5, 2000) < 0.022


def test_a_site_is_its_innermost_frame_over_stacks_and_kernels() -> None:
    rows = [raw(1, 0xA, 60, "big", 43), raw(2, 0xB, 10, "big", 43), raw(3, 0xA, 30, "mid", 47)]
    cs = estimate(rows, None, 1000, 1.0, label, 16)
    assert cs is not None and cs.period == 16 and cs.total_samples == 100
    big = next(s for s in cs.sites if s.frames[0].function == "big")
    assert big.total_samples == 70 and big.top_kernel == "k10" and big.kind == "python"
    assert math.isclose(big.share_pct or 0, 70.0) and math.isclose(big.share_pct_error or 0,
                                                                     100 * half_width(0.7, 100))
    # the first interval (no base): its samples are not the interval's, so no estimate yet
    assert cs.samples == 0 and big.launches_per_s is None


def test_interval_estimates_from_the_interval_samples() -> None:
    base = [raw(1, 0xA, 60, "big"), raw(3, 0xA, 30, "mid")]
    now = [raw(1, 0xA, 120, "big"), raw(3, 0xA, 30, "mid"), raw(4, 0xC, 20, "new")]
    cs = estimate(now, base, 8000, 0.5, label)          # 8,000 launches in 2 s
    assert cs is not None and cs.samples == 80
    by = {s.frames[0].function: s for s in cs.sites}
    assert (by["big"].samples, by["mid"].samples, by["new"].samples) == (60, 0, 20)
    assert math.isclose(by["big"].launches_per_s or 0, 4000 * 0.75)
    assert math.isclose(by["big"].launches_per_s_error or 0, 4000 * half_width(0.75, 80))
    assert by["mid"].launches_per_s == 0.0 and (by["mid"].launches_per_s_error or 0) > 0
    assert cs.sites[0].frames[0].function == "big"      # busiest in the interval first


def test_no_launches_in_the_interval_is_zero_not_unknown() -> None:
    rows = [raw(1, 0xA, 5, "big")]
    cs = estimate(rows, rows, 0, 1.0, label)
    assert cs is not None and cs.sites[0].launches_per_s == 0.0


def test_unrecorded_samples_keep_the_shares_honest() -> None:
    rows = [raw(1, 0xA, 50, "big"), RawSite(0, 0, 50, (), False, False, unrecorded=True)]
    cs = estimate(rows, None, None, None, label)
    assert cs is not None
    by = {s.kind: s for s in cs.sites}
    assert math.isclose(by["python"].share_pct or 0, 50.0) and by["unrecorded"].top_kernel is None


def test_the_top_sites_are_chosen_by_samples_since_first_seen() -> None:
    rnd = random.Random(7)
    rows = [raw(i, 0xA, rnd.randrange(1, 1000), f"f{i}", i) for i in range(1, 40)]
    cs = estimate(rows, None, None, None, label)
    assert cs is not None and len(cs.sites) == 20
    kept = sorted(s.total_samples for s in cs.sites)
    assert kept == sorted(r.samples for r in rows)[-20:]


def test_nothing_sampled_is_none() -> None:
    assert estimate([], None, 100, 1.0, label) is None
