"""Display arithmetic of the compare screen: the metrics shown side by side and their ratio B/A, and the
call sites of A beside B.

Pure, no Textual. A ratio is display arithmetic over two model values; it is unknown (``None``)
whenever either side is unknown, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from gputop.counters import PROC, Quantity
from gputop.model import CallSite, ProcSample
from gputop.view import columns, fields, sites
from gputop.view import format as fmt

Value = Optional[float]


@dataclass(frozen=True)
class Metric:
    label: str
    value: Callable[[ProcSample], Value]
    render: Callable[[Value], str]
    #: a rate or the interval's count: ``~`` before it while its process is warming up (the fleet view:
    #: over a window its series does not fill, it reads low; docs/fleet.md "Warming up")
    windowed: bool = False

    @property
    def binary(self) -> bool:
        return self.render is fmt.bytes_


def _f(v: float | int | None) -> Value:
    return None if v is None else float(v)


def _count(name: str) -> Callable[[ProcSample], Value]:
    return lambda p: fields.interval_count(p, name)


def _total(name: str) -> Callable[[ProcSample], Value]:
    return lambda p: _f(getattr(p.total, name)) if p.total is not None else None


def _with_graphs(direct: Value, in_graphs: float | int | None) -> Value:
    """Kernels run: launched ones plus those inside graph launches (unknown if either is)."""
    return None if direct is None or in_graphs is None else direct + in_graphs


def _no_graphs(in_graphs: float | int | None, graph_launches: float | int | None) -> float | int | None:
    """Kernels run inside graphs: 0 when no graph was launched (a recording without the field, a baseline's
    mean), else as counted."""
    return 0 if in_graphs is None and graph_launches == 0 else in_graphs


def _kernels_per_s(p: ProcSample) -> Value:
    in_graphs = _no_graphs(fields.rate_in(p, "graph_kernel_launches"), fields.interval_count(p, "graph_launches"))
    return _with_graphs(fields.rate_in(p, "launches"), in_graphs)


def _kernels_total(p: ProcSample) -> Value:
    t = p.total
    return None if t is None else _with_graphs(_f(t.launches), _no_graphs(t.graph_kernel_launches, t.graph_launches))


def _total_copied(p: ProcSample) -> Value:
    m = p.total.memcpy if p.total is not None else None
    return None if m is None else float(sum(cb.bytes for cb in m.values()))


#: the compare screen's own metrics of the quantities with more than a count and a rate (totals, averages,
#: the directions the table has no column for), after their rates
_SPECIAL: dict[str, tuple[Metric, ...]] = {
    "launches": (
        Metric("launches total", lambda p: _f(fields.total_launches(p)), fmt.si),
        # a fused or graph-replayed workload against an unfused one: every kernel that ran
        Metric("kernels run/s", _kernels_per_s, fmt.si, windowed=True),
        Metric("kernels run total", _kernels_total, fmt.si)),
    "grid_blocks_sum": (
        Metric("avg grid blocks", lambda p: p.grid_blocks_avg, fmt.num),
        Metric("avg block threads", lambda p: p.block_threads_avg, fmt.num)),
    "memcpy": (
        Metric("H2H B/s", lambda p: fields.rate_in(p, "memcpy", "h2h"), fmt.bytes_, windowed=True),
        Metric("no-dir copy B/s", lambda p: fields.rate_in(p, "memcpy", "unknown"), fmt.bytes_, windowed=True),
        Metric("copied total", _total_copied, fmt.bytes_)),
    "live_alloc_bytes": (Metric("live alloc", lambda p: _f(fields.live_alloc_bytes(p)), fmt.bytes_),),
    "prefetch": (Metric("prefetch →GPU", lambda p: _f(fields.interval_prefetch_bytes(p, "to_device")), fmt.bytes_,
                        windowed=True),),
    "uvm_migrated": (Metric("UVM migrated H2D", lambda p: _f(fields.interval_uvm_migrated(p, "h2d")), fmt.bytes_,
                            windowed=True),),
    "sync_wait_s": (
        Metric("sync p50", lambda p: fields.sync_latency_s(p, "p50_s"), fmt.seconds),
        Metric("sync p99", lambda p: fields.sync_latency_s(p, "p99_s"), fmt.seconds),
        Metric("sync max", lambda p: fields.sync_latency_s(p, "max_s"), fmt.seconds)),
}


def _rate_metrics(q: Quantity) -> tuple[Metric, ...]:
    """The compared values of a quantity's rate (the catalogue's ``Shows.compare``)."""
    if q.rate is None:
        return ()
    render = columns.rate_render(q, pct_digits=1)
    return tuple(Metric(s.compare, _rate(s.key), render, windowed=True) for s in q.rate.shows if s.compare is not None)


def _rate(key: str) -> Callable[[ProcSample], Value]:
    return lambda p: fields.rate(p, key)


def _render(q: Quantity) -> Callable[[Value], str]:
    return fmt.bytes_ if q.unit == "bytes" else fmt.seconds if q.unit == "seconds" else fmt.si


def _metrics(q: Quantity) -> tuple[Metric, ...]:
    """A quantity's metrics: the screen's own, then its interval's and its total's (gputop/counters.py)."""
    plain = ((q.compare, _count(q.field), True), (q.compare_total, _total(q.field), False))
    return (*_rate_metrics(q), *_SPECIAL.get(q.field, ()),
            *(Metric(label, value, _render(q), windowed) for label, value, windowed in plain if label))


#: every metric compared, the catalogue's quantities in its order, then the process's GPU and CPU use
METRICS: tuple[Metric, ...] = (
    *(m for q in PROC for m in _metrics(q)),
    Metric("GPU mem", lambda p: _f(p.gpu_mem_bytes), fmt.bytes_),
    Metric("SM %", lambda p: p.gpu_util_pct, fmt.pct),
    Metric("CPU %", lambda p: p.cpu_pct, fmt.pct),
    Metric("RSS", lambda p: _f(p.rss_bytes), fmt.bytes_),
)


def ratio(a: Value, b: Value) -> Value:
    """B/A. Unknown if either is unknown; 1 when both are 0; +inf when only A is 0."""
    if a is None or b is None:
        return None
    if a == 0:
        return 1.0 if b == 0 else math.inf
    return b / a


def format_ratio(r: Value) -> str:
    if r is None:
        return fmt.NA
    if math.isinf(r):
        return "∞"
    if r == 1.0:
        return "="
    if r == 0:
        return "0×"
    if r >= 100:
        return f"{r:.0f}×"
    if r >= 0.1:
        return f"{r:.2f}×"
    return f"{r:.3f}×"


def notable(r: Value, threshold: float = 1.5) -> bool:
    """Whether a ratio is far enough from 1 to highlight (either direction)."""
    if r is None or r <= 0:
        return r is not None and r == 0
    return r >= threshold or r <= 1 / threshold


@dataclass(frozen=True)
class Row:
    label: str
    a: str
    b: str
    ratio: str
    notable: bool


def rows(a: ProcSample | None, b: ProcSample | None) -> list[Row]:
    """One row per metric: formatted A, B and B/A, the ratio of the values as shown (so that
    0.0% against 0.0% is "=", and 1.0k against 20.0k is 20×). A rate or count of a process warming up
    (``Metric.windowed``) has ``~`` before it, and so has the ratio of it: they read low."""
    out = []
    low_a, low_b = (p is not None and bool(p.warming_up) for p in (a, b))
    for m in METRICS:
        ta = m.render(m.value(a) if a is not None else None)
        tb = m.render(m.value(b) if b is not None else None)
        if m.render is fmt.seconds:
            r = ratio(_seconds(ta), _seconds(tb))
        else:
            r = ratio(fmt.shown(ta, m.binary), fmt.shown(tb, m.binary))
        low = (m.windowed and low_a, m.windowed and low_b)
        out.append(Row(m.label, fmt.reads_low(ta, low[0]), fmt.reads_low(tb, low[1]),
                       fmt.reads_low(format_ratio(r), any(low)), notable(r)))
    return out


def _seconds(text: str) -> Value:
    for suffix, scale in (("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        if text.endswith(suffix):
            v = fmt.shown(text[: -len(suffix)])
            return None if v is None else v * scale
    return None


@dataclass(frozen=True)
class SiteRow:
    label: str
    a: str
    b: str


def _by_label(p: ProcSample | None) -> dict[str, CallSite]:
    """A process's call sites by their label (the busiest of those that read the same)."""
    out: dict[str, CallSite] = {}
    for s in p.call_sites.sites if p is not None and p.call_sites is not None else ():
        out.setdefault(sites.site_label(s), s)
    return out


def site_rows(a: ProcSample | None, b: ProcSample | None, top: int = 5) -> list[SiteRow]:
    """Call sites of A beside B, matched by how they read (``dir/file.py:line function``): the top
    ``top`` of each by samples, the busier side's estimated launches/s first; each side's estimate with
    its ± (N/A where that side has no such site among those it keeps, or no call sites)."""
    sa, sb = _by_label(a), _by_label(b)
    labels = list(dict.fromkeys([*list(sa)[:top], *list(sb)[:top]]))

    def rate(s: CallSite | None) -> float:
        return s.launches_per_s if s is not None and s.launches_per_s is not None else -1.0

    labels.sort(key=lambda k: -max(rate(sa.get(k)), rate(sb.get(k))))

    def cell(s: CallSite | None) -> str:
        return fmt.NA if s is None else sites.estimate(s.launches_per_s, s.launches_per_s_error)

    return [SiteRow(k, cell(sa.get(k)), cell(sb.get(k))) for k in labels]
