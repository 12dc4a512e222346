"""``--baseline FILE``: a process recorded with ``--record``, to compare live processes against.

Which recorded process: by default the one with the most launches in total (``total.launches``,
highest value seen), else the one given as ``baseline_pid``. The compare screen's ``b`` key cycles
through the recording's other busiest processes.

What its numbers are: each per-interval value (rates, percentages, averages, interval counts, GPU
memory, CPU %) is the mean over the samples where the process was running and the value was known;
cumulative counts (``total``), the top kernels and the histograms are those of its last sample.
Pure (no Textual).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputop.counters import PROC, RATED
from gputop.model import CallBytes, Counts, ProcSample, Rates
from gputop.record import RecordingError, read_recording
from gputop.view.history import Point, point_of


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
