"""Call sites as the dashboard and batch mode show them (gputop/callsites.py estimates them): one line a
site (``dir/file.py:line function``, or a native caller's ``symbol (object)``), its estimated launches a
second with the estimate's 95 % half-width, its share of the samples since first seen, its top kernel;
and a site's whole stack. Every text comes from the traced process: through the one sanitiser."""

from __future__ import annotations

import math
from dataclasses import replace

from gputop.model import CallSite, CallSites, Frame
from gputop.view import format as fmt

HEAD = ("CALL SITE", "LAUNCH/s (est.)", "SHARE (all)", "TOP KERNEL")


def frame_label(f: Frame, native: bool = False) -> str:
    """``dir/file.py:line function`` (the file's last two parts); a native caller: ``symbol (object)``."""
    if native:
        name = fmt.text(f.function) if f.function is not None else "?"
        return f"{name} ({fmt.text(f.file)})" if f.file else name
    where = fmt.text("/".join(f.file.split("/")[-2:])) if f.file else "?"
    line = f":{f.line}" if f.line is not None else ""
    return f"{where}{line} {fmt.text(f.function) if f.function is not None else '?'}"


def site_label(site: CallSite) -> str:
    if site.kind == "unrecorded":
        return "(samples not recorded: tables full)"
    if not site.frames:
        return "(no frame)"
    return frame_label(site.frames[0], site.kind == "native")


def site_key(site: CallSite) -> tuple[object, ...]:
    """What a site is from one snapshot to the next (its kind and innermost frame): a cursor follows it."""
    return (site.kind, site.frames[0] if site.frames else None)


def _err(error: float, unit: str) -> str:
    return f" ±{fmt.si(error)}{unit}" if math.isfinite(error) else f" ±{fmt.NA}"


def estimate(value: float | None, error: float | None, unit: str = "") -> str:
    """``12.3k ±400``; N/A when unknown; no ± when the estimate is exact (no launch: 0)."""
    if value is None:
        return fmt.NA
    if error is None or error == 0:
        return f"{fmt.si(value)}{unit}"
    return f"{fmt.si(value)}{unit}{_err(error, unit)}"


def share(site: CallSite) -> str:
    """``41.2% ±1.3`` (points of a 95 % interval); N/A when unknown."""
    if site.share_pct is None or not math.isfinite(site.share_pct):
        return fmt.NA
    err = site.share_pct_error
    tail = "" if err is None else f" ±{err:.1f}" if math.isfinite(err) else f" ±{fmt.NA}"
    return f"{site.share_pct:.1f}%{tail}"


def site_rows(cs: CallSites | None, limit: int) -> list[tuple[str, str, str, str]]:
    """(site, launches/s, share, kernel) of the top ``limit`` sites, busiest first."""
    if cs is None:
        return []
    return [(site_label(s), estimate(s.launches_per_s, s.launches_per_s_error), share(s), fmt.text(s.top_kernel))
            for s in cs.sites[:limit]]


def summary(cs: CallSites | None) -> str:
    """What the estimates stand on: the samples over the interval and since first seen, and the period."""
    if cs is None:
        return "call sites: no launch sampled yet"
    period = f", 1 launch in {cs.period:,} sampled" if cs.period else ""
    return f"call sites: {cs.samples:,} samples this interval, {cs.total_samples:,} in all{period}"


def without_rates(cs: CallSites | None) -> CallSites | None:
    """The call sites of a process no longer reported: what was counted since first seen stays (shares,
    stacks), the launches a second are no longer known (never frozen at the last interval)."""
    if cs is None:
        return None
    return replace(cs, samples=0, sites=tuple(replace(s, samples=0, launches_per_s=None, launches_per_s_error=None)
                                              for s in cs.sites))


def stack_lines(site: CallSite) -> list[str]:
    """The site's most sampled stack, innermost frame first, one line a frame (full file names)."""
    native = site.kind == "native"
    out = []
    for i, f in enumerate(site.frames):
        if native:
            out.append(f"#{i}  {frame_label(f, True)}")
        else:
            where = fmt.text(f.file) if f.file else "?"
            line = f":{f.line}" if f.line is not None else ""
            out.append(f"#{i}  {fmt.text(f.function) if f.function is not None else '?'}  {where}{line}")
    if site.truncated:
        out.append(f"    … deeper frames not kept (the first {len(site.frames)} are)")
    return out
