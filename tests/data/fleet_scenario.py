"""A fixed fleet scenario for the fleet view's UI tests: the scripted node of scenario.jsonl seen on
three nodes through Prometheus (what ``gputop.feeds.fleet.FleetFeed`` builds: node and instance on every
process and GPU, the same PIDs on every node, no user, CPU or RSS, which the exporter does not
export), and a feed of kind "fleet" that hands the frames over and serves their series as
``FleetFeed.series`` does (from query_range).

Deterministic: the recording's frames, each node's rates scaled by a fixed factor.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from gputop.counters import RATED  # noqa: E402
from gputop.model import ProcKey, ProcSample, Rates, Snapshot, SourceStatus  # noqa: E402
from gputop.record import read_recording  # noqa: E402
from gputop.view import fields  # noqa: E402
from screenshots import FrameFeed  # noqa: E402

#: the rates the fleet charts (query_range), by the history's names of them
_QUERIED = tuple(s.key for q in RATED if q.rate is not None and q.rate.promql is not None for s in q.rate.shows)

RECORDING = ROOT / "tests" / "data" / "scenario.jsonl"
URL = "http://prometheus.example:9090"
#: (node, instance, factor on its rates)
NODES = (("gpu-node-07", "10.0.0.7:9464", 1.0), ("gpu-node-08", "10.0.0.8:9464", 0.55),
         ("gpu-node-09", "10.0.0.9:9464", 1.35))


def _scaled(r: Rates | None, f: float) -> Rates | None:
    if r is None:
        return None
    copies = None if r.memcpy_bytes_per_s is None else {d: v * f for d, v in r.memcpy_bytes_per_s.items()}
    return replace(r, launches_per_s=None if r.launches_per_s is None else r.launches_per_s * f,
                   memcpy_bytes_per_s=copies)


def _remote(p: ProcSample, node: str, instance: str, f: float) -> ProcSample:
    return replace(p, node=node, instance=instance, user=None, cpu_pct=None, rss_bytes=None, ppid=None, nspid=None,
                   start_time=None, rates=_scaled(p.rates, f), state="running" if p.state == "exited" else p.state)


def fleet_snapshot(snap: Snapshot) -> Snapshot:
    procs = [_remote(p, node, inst, f) for node, inst, f in NODES for p in snap.processes if p.state != "exited"]
    gpus = [replace(g, node=node) for node, _, _ in NODES for g in snap.gpus]
    # as the fleet feed has them: each source's state across the nodes, no counts of one host's
    sources = {**{k: SourceStatus(v.status, v.reason) for k, v in snap.sources.items()},
               "prometheus": SourceStatus("ok")}
    return replace(snap, host=URL, interval_s=60.0, processes=tuple(procs), gpus=tuple(gpus), sources=sources)


def fleet_frames(n: int) -> list[Snapshot]:
    out = []
    for i, snap in enumerate(read_recording(RECORDING)):
        if i >= n:
            break
        out.append(fleet_snapshot(snap))
    return out


class FleetFrameFeed(FrameFeed):
    """A feed of kind "fleet" that hands over given fleet snapshots when the flow asks (``deliver``),
    and answers the fleet view's watch and query_range calls from them."""

    kind = "fleet"

    def __init__(self, frames: list[Snapshot]) -> None:
        super().__init__(frames)
        self.watched: tuple[ProcKey, ...] = ()
        self.error: str | None = None

    def watch(self, keys: Any) -> None:
        self.watched = tuple(keys)

    def series(self, key: ProcKey) -> dict[str, list[tuple[float, float]]] | None:
        """What query_range returns for ``key``: its rates at each frame."""
        out: dict[str, list[tuple[float, float]]] = {}
        for snap in self.frames:
            p = snap.process(key)
            if p is None or p.rates is None:
                continue
            for name in _QUERIED:
                v = fields.rate(p, name)
                if v is not None:
                    out.setdefault(name, []).append((snap.time, v))
        return out or None

