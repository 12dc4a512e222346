"""``--baseline FILE``: a process recorded with ``--record``, to compare live processes against.

Which recorded process: by default the one with the most launches in total (``total.launches``,
highest value seen), else the one given as ``baseline_pid``. The compare screen's ``b`` key cycles
through the recording's other busiest processes.

What its numbers are: each per-interval value (rates, percentages, averages, interval counts, GPU
memory, CPU %) is the mean over the samples where the process was running and the value was known;
cumulative counts (``total``), the top kernels and the histograms are those of its last sample. A call
site's launches/s is the mean of its estimates over the samples that list it with one (their errors
combined as independent: the root of the sum of their squares over their number), its share, stack and
top kernel those of the last sample that lists it.
Pure (no Textual).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputop.counters import PROC, RATED
from gputop.model import CallBytes, CallSite, CallSites, Counts, ProcSample, Rates
from gputop.model.limits import MAX_CALL_SITES
from gputop.record import RecordingError, read_recording
from gputop.view.history import Point, point_of
from gputop.view.sites import site_key


def _mean(values: Iterable[float | int | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _mean_map(maps: Sequence[Mapping[str, float] | None]) -> dict[str, float] | None:
    present = [m for m in maps if m is not None]
    if not present:
        return None
    keys = sorted({k for m in present for k in m})
    out = {}
    for k in keys:
        v = _mean(m.get(k) for m in present)
        if v is not None:
            out[k] = v
    return out


def _mean_callbytes(maps: Sequence[Mapping[str, CallBytes] | None]) -> dict[str, CallBytes] | None:
    present = [m for m in maps if m is not None]
    if not present:
        return None
    out = {}
    for k in sorted({k for m in present for k in m}):
        cbs = [m[k] for m in present if k in m]
        out[k] = CallBytes(
            round(sum(c.calls for c in cbs) / len(cbs)), round(sum(c.bytes for c in cbs) / len(cbs))
        )
    return out


def _mean_counts(counts: Sequence[Counts | None]) -> Counts | None:
    present = [c for c in counts if c is not None]
    if not present:
        return None
    kw: dict[str, Any] = {}
    for q in PROC:
        vals = [getattr(c, q.field) for c in present]
        if q.paired:        # calls and bytes by direction (copies, prefetches, NCCL operations)
            kw[q.field] = _mean_callbytes(vals)
        elif q.directions:  # one value by direction (UVM migrations)
            kw[q.field] = _mean_map(vals)
        else:
            kw[q.field] = _mean(vals)
    return Counts(**kw)


def _mean_rates(rates: Sequence[Rates | None]) -> Rates | None:
    present = [r for r in rates if r is not None]
    if not present:
        return None
    kw: dict[str, Any] = {}
    for q in RATED:
        assert q.rate is not None
        values = [getattr(r, q.rate.field) for r in present]
        kw[q.rate.field] = _mean_map(values) if q.directions else _mean(values)
    return Rates(**kw)


def _mean_call_sites(sites: Sequence[CallSites | None]) -> CallSites | None:
    """The call sites of several samples (see the module docstring), busiest first."""
    present = [cs for cs in sites if cs is not None]
    if not present:
        return None
    last: dict[tuple[object, ...], CallSite] = {}
    estimates: dict[tuple[object, ...], list[tuple[float, float]]] = {}
    for cs in present:
        for s in cs.sites:
            key = site_key(s)
            last[key] = s
            if s.launches_per_s is not None:
                estimates.setdefault(key, []).append((s.launches_per_s, s.launches_per_s_error or 0.0))
    out = []
    for key, s in last.items():
        known = estimates.get(key, [])
        rate = sum(v for v, _ in known) / len(known) if known else None
        err = math.sqrt(sum(e * e for _, e in known)) / len(known) if known else None
        out.append(dataclasses.replace(s, launches_per_s=rate, launches_per_s_error=err))
    out.sort(key=lambda s: -(s.launches_per_s if s.launches_per_s is not None else -1.0))
    n = len(present)
    return dataclasses.replace(present[-1], samples=round(sum(cs.samples for cs in present) / n),
                               sites=tuple(out[:MAX_CALL_SITES]))


_MEAN_FIELDS = (
    "grid_blocks_avg",
    "block_threads_avg",
    "gpu_mem_bytes",
    "gpu_util_pct",
    "cpu_pct",
    "rss_bytes",
)


def summarize(samples: Sequence[ProcSample]) -> ProcSample:
    """One sample standing for the whole recording of a process (see the module docstring)."""
    if not samples:
        raise ValueError("no samples to summarise")
    last = samples[-1]
    kw: dict[str, Any] = {name: _mean(getattr(s, name) for s in samples) for name in _MEAN_FIELDS}
    # sync latency: the percentiles of every sync the recording saw of it (its last sample's since first seen)
    sync = last.sync_latency
    return dataclasses.replace(
        last,
        state="running",
        interval=_mean_counts([s.interval for s in samples]),
        rates=_mean_rates([s.rates for s in samples]),
        sync_latency=dataclasses.replace(sync, interval=sync.total) if sync is not None else None,
        call_sites=_mean_call_sites([s.call_sites for s in samples]),
        **kw,
    )


@dataclass(frozen=True)
class BaselineProcess:
    pid: int
    comm: str | None
    cmdline: str | None
    total_launches: int | None
    samples: tuple[tuple[float, ProcSample], ...]
    summary: ProcSample

    def points(self) -> list[Point]:
        return [point_of(t, p) for t, p in self.samples]

    @property
    def label(self) -> str:
        return f"{self.pid} {self.cmdline or self.comm or 'N/A'}"


@dataclass(frozen=True)
class Baseline:
    path: Path
    host: str
    candidates: tuple[BaselineProcess, ...]  #: the chosen process first


def load_baseline(path: Path | str, pid: int | None = None, keep: int = 8) -> Baseline:
    """Read a recording and summarise its ``keep`` busiest processes (``pid`` first if given).

    Raises ``RecordingError`` for unreadable files, recordings without processes, or an absent ``pid``.
    """
    path = Path(path)
    best: dict[int, int] = {}
    host = ""
    for snap in read_recording(path):
        host = snap.host
        for p in snap.processes:
            launches = p.total.launches if p.total and p.total.launches is not None else -1
            best[p.pid] = max(best.get(p.pid, -1), launches)
    if not best:
        raise RecordingError(
            f"{path}: the recording holds no processes to compare against",
            "record while the baseline workload runs: gputop --record FILE",
        )
    order = sorted(best, key=lambda q: (-best[q], q))
    if pid is not None:
        if pid not in best:
            some = ", ".join(str(q) for q in order[:8])
            raise RecordingError(
                f"{path}: no process {pid} in the recording (busiest: {some})",
                "pick one of those PIDs as the baseline process",
            )
        order.remove(pid)
        order.insert(0, pid)
    chosen = order[:keep]
    samples: dict[int, list[tuple[float, ProcSample]]] = {q: [] for q in chosen}
    for snap in read_recording(path):
        for p in snap.processes:
            if p.pid in samples and p.state != "exited":
                samples[p.pid].append((snap.time, p))
    out = []
    for q in chosen:
        s = samples[q]
        if not s:
            continue
        last = s[-1][1]
        out.append(
            BaselineProcess(
                pid=q,
                comm=last.comm,
                cmdline=last.cmdline,
                total_launches=best[q] if best[q] >= 0 else None,
                samples=tuple(s),
                summary=summarize([p for _, p in s]),
            )
        )
    if not out:
        raise RecordingError(f"{path}: no running samples of the chosen processes")
    return Baseline(path=path, host=host, candidates=tuple(out))
