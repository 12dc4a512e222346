"""Where each displayed value lives in the model. Pure lookups, no arithmetic, no Textual."""

from __future__ import annotations

from gputop.counters import BY_FIELD, SHOWS
from gputop.model import Counts, ProcSample


def rate(p: ProcSample, key: str) -> float | None:
    """The value of shown rate ``key`` (``counters.SHOWS``: a column's key, a history series' name) of a
    process: its quantity's rate, or its direction's; None: unknown."""
    q, shows = SHOWS[key]
    return rate_in(p, q.field) if shows.direction is None else rate_in(p, q.field, shows.direction)


def rate_in(p: ProcSample, name: str, direction: str | None = None) -> float | None:
    """The rate of quantity ``name`` (a ``Counts`` field of the catalogue) of a process, of ``direction`` for a
    directed one; None: unknown."""
    r = BY_FIELD[name].rate
    v = getattr(p.rates, r.field, None) if r is not None else None
    if direction is not None:
        return None if v is None else v.get(direction)
    return v


def _level(p: ProcSample) -> Counts | None:
    """Counts that hold levels (live bytes): the cumulative record, else the interval one."""
    return p.total if p.total is not None else p.interval


def live_alloc_bytes(p: ProcSample) -> int | None:
    c = _level(p)
    return c.live_alloc_bytes if c else None


def total_launches(p: ProcSample) -> int | None:
    return p.total.launches if p.total else None


def interval_count(p: ProcSample, name: str) -> float | None:
    if p.interval is None:
        return None
    value = getattr(p.interval, name)
    return None if value is None else float(value)


def interval_prefetch_bytes(p: ProcSample, direction: str) -> int | None:
    if p.interval is None or p.interval.prefetch is None:
        return None
    cb = p.interval.prefetch.get(direction)
    return cb.bytes if cb else None


def interval_uvm_migrated(p: ProcSample, direction: str) -> int | None:
    if p.interval is None or p.interval.uvm_migrated is None:
        return None
    return p.interval.uvm_migrated.get(direction)


def command(p: ProcSample) -> str | None:
    """The command line (program without its directory) when known, else the kernel's comm."""
    if not p.cmdline:
        return p.comm
    program, _, args = p.cmdline.partition(" ")
    program = program.rsplit("/", 1)[-1] or program
    return f"{program} {args}" if args else program


def sync_latency_s(p: ProcSample, figure: str, api: str = "all", total: bool = False) -> float | None:
    """A sync latency figure (``p50_s``, ``p90_s``, ``p99_s``, ``max_s``) of ``api`` (``all``: every API) over
    the interval, or since first seen; None where unknown or without a sync."""
    s = p.sync_latency
    if s is None:
        return None
    lat = (s.total if total else s.interval).get(api)
    return getattr(lat, figure) if lat is not None else None
