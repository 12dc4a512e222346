"""Where each displayed value lives in the model. Pure lookups, no arithmetic, no Textual."""

from __future__ import annotations

from gputop.model import Counts, ProcSample


def launches_per_s(p: ProcSample) -> float | None:
    return p.rates.launches_per_s if p.rates else None


def graph_kernels_per_s(p: ProcSample) -> float | None:
    return p.rates.graph_kernel_launches_per_s if p.rates else None


def memcpy_per_s(p: ProcSample, direction: str) -> float | None:
    if p.rates is None or p.rates.memcpy_bytes_per_s is None:
        return None
    return p.rates.memcpy_bytes_per_s.get(direction)


def h2d_per_s(p: ProcSample) -> float | None:
    return memcpy_per_s(p, "h2d")


def d2h_per_s(p: ProcSample) -> float | None:
    return memcpy_per_s(p, "d2h")


def d2d_per_s(p: ProcSample) -> float | None:
    return memcpy_per_s(p, "d2d")


def uvm_faults_per_s(p: ProcSample) -> float | None:
    return p.rates.uvm_faults_per_s if p.rates else None


def sync_wait_pct(p: ProcSample) -> float | None:
    return p.rates.sync_wait_pct if p.rates else None


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


def interval_memcpy_calls(p: ProcSample, direction: str) -> int | None:
    if p.interval is None or p.interval.memcpy is None:
        return None
    cb = p.interval.memcpy.get(direction)
    return cb.calls if cb else None


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
