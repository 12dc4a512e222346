"""Sync latency: the buckets the BPF side counts each synchronisation's duration in, and the figures read
from them (percentiles, the exporter's histogram). Stdlib only; bpf/sync.bpf.h computes ``bucket_of`` in C
(the constants reach it through gputop/sources/bpf/common/abi.py) and tests/unit/test_latency.py holds the
two to each other.

Log-linear buckets of nanoseconds, as HdrHistogram's: below 2^MIN_LOG2 ns (1.024 µs) one bucket; then each
power of two [2^e, 2^(e+1)) split into SUB equal parts, for e from MIN_LOG2 to MAX_LOG2 (2^41 ns: 36.6
minutes); the last bucket holds everything longer. A bucket's width is at most 1/SUB (12.5 %) of its lower
bound, so a figure given as its bucket's midpoint is within 6.25 % of the true value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gputop.model import Latency, LatencyHistogram, SyncLatency

#: one API's histogram as the BPF source reads it: (durations' sum in ns, bucket counts)
Raw = tuple[int, tuple[int, ...]]

#: each power of two in SUB parts
SUB_BITS = 3
SUB = 1 << SUB_BITS
#: the first power of two split (below it: bucket 0) and the last one (above it: the last bucket)
MIN_LOG2 = 10
MAX_LOG2 = 40
#: bucket 0, (MAX_LOG2 - MIN_LOG2 + 1) powers of two in SUB parts, and the open-ended last one
BUCKETS = 1 + (MAX_LOG2 - MIN_LOG2 + 1) * SUB + 1
#: the synchronisation calls timed, by index: cudaDeviceSynchronize (cudaThreadSynchronize), cudaStreamSynchronize
#: and cuStreamSynchronize, cudaEventSynchronize and cuEventSynchronize, cuCtxSynchronize
APIS: tuple[str, ...] = ("device", "stream", "event", "context")
#: the figures' name for all of them together
ALL = "all"
#: the exporter's histogram: its ``le`` bounds, powers of four nanoseconds from 1.024 µs to 68.7 s (each one a
#: bucket bound here, so the exported counts are exact)
EXPORT_LE_NS: tuple[int, ...] = tuple(1 << e for e in range(MIN_LOG2, 38, 2))


def bucket_of(ns: int) -> int:
    """The bucket of a duration of ``ns`` nanoseconds (bpf/sync.bpf.h's slat_bucket)."""
    if ns < 1 << MIN_LOG2:
        return 0
    e = ns.bit_length() - 1
    if e > MAX_LOG2:
        return BUCKETS - 1
    return 1 + (e - MIN_LOG2) * SUB + ((ns >> (e - SUB_BITS)) & (SUB - 1))


def bounds_ns(i: int) -> tuple[int, int | None]:
    """Bucket ``i``'s durations: [low, high) nanoseconds (high None: the last bucket has no end)."""
    if i <= 0:
        return 0, 1 << MIN_LOG2
    if i >= BUCKETS - 1:
        return 1 << (MAX_LOG2 + 1), None
    e, sub = MIN_LOG2 + (i - 1) // SUB, (i - 1) % SUB
    step = 1 << (e - SUB_BITS)
    return (1 << e) + sub * step, (1 << e) + (sub + 1) * step


def value_s(i: int) -> float:
    """The figure bucket ``i`` stands for, in seconds: its midpoint (the last bucket: its low bound)."""
    low, high = bounds_ns(i)
    return (low if high is None else (low + high) / 2) / 1e9


def percentile(buckets: Sequence[int], q: float) -> float | None:
    """The q-quantile (0 < q <= 1) of the durations counted in ``buckets``, by nearest rank, in seconds."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = max(1, -(-int(q * total * 1_000_000) // 1_000_000))      # ceil(q × total) without float drift
    seen = 0
    for i, n in enumerate(buckets):
        seen += n
        if seen >= rank:
            return value_s(i)
    return value_s(len(buckets) - 1)


def latency(buckets: Sequence[int]) -> Latency:
    """Calls, p50, p90, p99 and maximum of the durations counted in ``buckets``."""
    calls = sum(buckets)
    if calls <= 0:
        return Latency(0)
    top = max(i for i, n in enumerate(buckets) if n)
    return Latency(calls, percentile(buckets, 0.5), percentile(buckets, 0.9), percentile(buckets, 0.99),
                   value_s(top))


def histogram(buckets: Sequence[int], sum_ns: int) -> LatencyHistogram:
    """``buckets`` (and their durations' sum) as the exporter publishes them."""
    counts, seen, bound = [], 0, iter(EXPORT_LE_NS)
    le = next(bound, None)
    for i, n in enumerate(buckets):
        low, _high = bounds_ns(i)
        while le is not None and low >= le:
            counts.append(seen)
            le = next(bound, None)
        seen += n
    while le is not None:
        counts.append(seen)
        le = next(bound, None)
    return LatencyHistogram(seen, sum_ns / 1e9, tuple(counts))


def merged(hists: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Bucket counts of several APIs together."""
    return tuple(sum(col) for col in zip(*hists)) if hists else ()


def minus(now: Sequence[int], before: Sequence[int] | None) -> tuple[int, ...] | None:
    """The counts added since ``before`` (None: not known, when a count went down)."""
    if before is None:
        return tuple(now)
    out = tuple(a - b for a, b in zip(now, before))
    return None if any(d < 0 for d in out) else out


def _with_all(by_api: Mapping[str, tuple[int, ...]]) -> dict[str, Latency]:
    out = {api: latency(b) for api, b in by_api.items()}
    if by_api:
        out[ALL] = latency(merged(list(by_api.values())))
    return out


def sync_latency(now: Mapping[str, Raw], before: Mapping[str, Raw] | None) -> SyncLatency | None:
    """A process's sync latency from its histograms now and at the start of the interval (``before``; None:
    the interval is all it did since first seen); None when it never synchronised. An API whose counts went
    down (not the same histogram) has no interval figures; "all" then has none either."""
    if not now:
        return None
    interval: dict[str, tuple[int, ...]] = {}
    known = True
    for api, (_sum, buckets) in now.items():
        prev = (before or {}).get(api)
        d = minus(buckets, prev[1] if prev is not None else None)
        if d is None:
            known = False
        else:
            interval[api] = d
    iv = _with_all(interval)
    if not known:
        iv.pop(ALL, None)
    return SyncLatency(interval=iv, total=_with_all({api: b for api, (_s, b) in now.items()}),
                       histograms={api: histogram(b, s) for api, (s, b) in now.items()})
