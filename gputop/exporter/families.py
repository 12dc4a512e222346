"""The pieces of a scrape's metric families that need no snapshot: the histograms' ``le`` bounds (log2
buckets of the snapshot as Prometheus' cumulative buckets, every ``--buckets`` step), the sync latency
buckets, the label values' caps and the call-site label, the sparse families a process uses, and the
set of families one scrape fills (``Families``). Owned here, used by metrics.py."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from itertools import accumulate
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from gputop import latency
from gputop.counters import PROC
from gputop.model import LOG2_BUCKETS, CallBytes, CallSite, Counts, LatencyHistogram
from gputop.textsafe import sanitize_middle

#: label value caps (characters, after escaping)
COMM_LIMIT = 64
CONTAINER_LIMIT = 128
CMDLINE_LIMIT = 512
USER_LIMIT = 64
KERNEL_LIMIT = 128
SITE_LIMIT = 256

#: finite ``le`` bounds exported per histogram (values are integers, so bucket k is ``le`` 2^(k+1) - 1);
#: a block has at most 1024 threads, so its histogram stops at 2047
GRID_FINITE = LOG2_BUCKETS - 1
BLOCK_FINITE = 11
COPY_FINITE = LOG2_BUCKETS - 1
SYNC_METRIC = "gputop_sync_duration_seconds"
SYNC_HELP = ("Time each synchronisation call blocked, by API (device, stream, event, context); le at powers of "
             "four (--buckets log2) or sixteen (log16) nanoseconds up to 68.7 s (docs/metrics.md).")



def sync_buckets(h: LatencyHistogram, step: int) -> list[tuple[str, float]]:
    """A sync latency histogram's Prometheus buckets: every ``latency.EXPORT_LE_NS`` bound (``--buckets
    log2``: powers of four nanoseconds), every other one (``log16``: powers of sixteen, 4.096 us to 68.7 s),
    or none (+Inf, ``_count`` and ``_sum`` only)."""
    every = {0: 0, 1: 1}.get(step, 2)
    out: list[tuple[str, float]] = []
    if every:           # log16: 2^12, 2^16 ... 2^36 ns, the odd ones of 2^10 ... 2^36 (the last kept)
        out = [(floatToGoString(le / 1e9), float(n))
               for i, (le, n) in enumerate(zip(latency.EXPORT_LE_NS, h.le_counts)) if i % every == every - 1]
    out.append(("+Inf", float(h.calls)))
    return out


@cache
def bucket_ends(finite: int, step: int = 1) -> tuple[int, ...]:
    """The log2 buckets whose upper bounds are exported as finite ``le``: every ``step``-th one
    (bucket k ends at 2^(k+1) - 1), and the last finite one, so that no finite value reaches +Inf;
    none for ``step`` 0 (+Inf, ``_count`` and ``_sum`` only)."""
    if step == 0:
        return ()
    ends = [k for k in range(finite) if (k + 1) % step == 0]
    if not ends or ends[-1] != finite - 1:
        ends.append(finite - 1)
    return tuple(ends)


@cache
def le_bounds(finite: int, step: int = 1) -> tuple[str, ...]:
    """The ``le`` labels of a log2 histogram with ``finite`` finite buckets (every ``step``-th), then +Inf."""
    return (*(floatToGoString(float((1 << (k + 1)) - 1)) for k in bucket_ends(finite, step)), "+Inf")


def cumulative(hist: Mapping[str, int] | None, finite: int, step: int = 1) -> list[tuple[str, float]] | None:
    """Prometheus buckets (cumulative, ``le``) from the snapshot's ``{"2^k": count}`` log2 buckets."""
    if hist is None:
        return None
    counts = [0] * LOG2_BUCKETS
    for key, n in hist.items():
        k = int(key.removeprefix("2^"))
        counts[min(k, LOG2_BUCKETS - 1)] += int(n)
    below = list(accumulate(counts))        # below[k]: the values in buckets 0 to k (integers: exact)
    out = [(le, float(below[k])) for k, le in zip(bucket_ends(finite, step), le_bounds(finite, step)[:-1])]
    out.append(("+Inf", float(below[-1])))
    return out


_M = TypeVar("_M", CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)


class Families:
    """Metric families being filled for one scrape, created on first use, yielded in order."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def _family(self, kind: type[_M], name: str, doc: str, labels: Sequence[str]) -> _M:
        m = self._by_name.get(name)
        if m is None:
            m = self._by_name[name] = kind(name, doc, labels=labels)
        assert isinstance(m, kind)
        return m

    def counter(self, name: str, doc: str, labels: Sequence[str]) -> CounterMetricFamily:
        return self._family(CounterMetricFamily, name, doc, labels)

    def gauge(self, name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
        return self._family(GaugeMetricFamily, name, doc, labels)

    def histogram(self, name: str, doc: str, labels: Sequence[str]) -> HistogramMetricFamily:
        return self._family(HistogramMetricFamily, name, doc, labels)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._by_name.values())


def site_label(site: CallSite) -> str:
    """A call site as a label value: ``dir/file.py:line function`` (the file's last two parts, as the
    dashboard shows it), a native caller's ``symbol (object)``; through the sanitiser, cut in the middle
    to SITE_LIMIT characters (the file and line at the start, the function's end kept)."""
    if site.kind == "unrecorded":
        return "(unrecorded)"
    if not site.frames:
        return "(no frame)"
    f = site.frames[0]
    if site.kind == "native":
        name = f.function if f.function is not None else "?"
        text = f"{name} ({f.file})" if f.file else name
    else:
        where = "/".join(f.file.split("/")[-2:]) if f.file else "?"
        line = f":{f.line}" if f.line is not None else ""
        text = f"{where}{line} {f.function if f.function is not None else '?'}"
    return sanitize_middle(text, SITE_LIMIT)


def _nonzero(value: object) -> bool:
    if isinstance(value, Mapping):
        return any(_nonzero(v) for v in value.values())
    if isinstance(value, CallBytes):
        return bool(value.calls or value.bytes)
    return bool(value)


def used_families(t: Counts) -> set[str]:
    """The sparse families (``Quantity.sparse``) a process's totals use: one of their values is non-zero."""
    return {q.sparse for q in PROC if q.sparse is not None and _nonzero(getattr(t, q.field))}
