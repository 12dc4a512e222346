"""The fleet's reading of one refresh: ``FleetReader`` sends the queries (``fleet_queries``) side by side
through ``PromClient``, all at one instant, hands the answers to ``SnapshotBuilder`` as they arrive, and
keeps the rows of targets that are down, marked stale (from the last refresh that scraped them, else
read at their last scrape). ``FleetConfig``: what to read and how. Stdlib only."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace

from gputop.feeds.fleet_builder import SnapshotBuilder, series_points
from gputop.feeds.fleet_client import FleetError, PromClient, Sample, sample_value
from gputop.feeds.fleet_queries import (
    PART,
    SERIES_POINTS,
    SERIES_QUERIES,
    info_query,
    last_scrape_query,
    parse_duration,
    refresh_queries,
)
from gputop.feeds.http_config import HttpConfig
from gputop.model import ProcKey, ProcSample, Snapshot

#: refreshes read at down targets' last scrapes (one per distinct time) in one refresh, at most
LAST_READS = 3

#: a process's time series: ``{series name: [(t, v)]}`` by process
Series = dict[ProcKey, dict[str, list[tuple[float, float]]]]
Watched = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class FleetConfig:
    url: str
    #: label matchers added to every selector (``--match``), without braces
    match: str = ""
    #: the window of increase() and rate() (``--window``)
    window: str = "2m"
    interval_s: float = 5.0
    #: only these nodes (``--node``); empty: all
    nodes: frozenset[str] = frozenset()
    #: seconds a query may take before Prometheus counts as slow; None: max(10, 2 x interval)
    timeout_s: float | None = None
    #: query workers (queries of one refresh run side by side)
    workers: int = 4
    #: evaluate at this unix time instead of now (the benchmark's backfilled fleet)
    at: float | None = None
    #: read for every process only what the process table shows (``TABLE_FAMILIES``' increases, the
    #: gauges, total launches with the names) and everything for the watched processes (details,
    #: compare): the dashboard. False: every family for every process (batch mode, records)
    table_only: bool = False
    #: read and parse the answers in a child process (``gputop.feeds.fleet_worker``) that hands back the
    #: snapshot in chunks: the dashboard, whose keys would wait while answers are parsed here
    child: bool = False
    #: how to log in (``--http.config.file``): headers and TLS settings, its secrets read
    http: HttpConfig | None = None


class FleetReader:
    """The queries of one refresh and the snapshot built from their answers: in the feed's own
    process, or in the child process of ``gputop.feeds.fleet_worker``."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.window_s = parse_duration(config.window)
        self.client = PromClient(config.url, config.timeout_s or max(10.0, 2 * config.interval_s), config.http)
        self._pool = ThreadPoolExecutor(max_workers=max(1, config.workers), thread_name_prefix="gputop-fleet-q")
        #: each target's rows at the last refresh that scraped it: shown, marked stale, while it is down
        self._rows: dict[str, tuple[ProcSample, ...]] = {}
        #: read the rows of down targets never read up at their last scrape (not in that read itself)
        self._fill = True

    @property
    def queries(self) -> int:
        return self.client.queries

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def jobs(self, info: list[Sample], watched: Watched) -> tuple[dict[str, str], dict[str, str]]:
        """The refresh's instant queries and its ``query_range`` ones, by job name (``SnapshotBuilder.add``)."""
        cfg = self.config
        return refresh_queries(info, watched, url=cfg.url, match=cfg.match, window=cfg.window, nodes=cfg.nodes,
                               table_only=cfg.table_only)

    def read(self, at: float, watched: Watched, interval_s: float) -> tuple[Snapshot, Series]:
        """One refresh: every query at ``at``; raises ``FleetError`` when Prometheus fails."""
        q = self.client.query
        info = q(info_query(self.config.match), at)
        if not any(PART not in s["metric"] or s["metric"][PART] == "known" for s in info):
            where = f" matching {{{self.config.match}}}" if self.config.match else ""
            raise FleetError("empty", f"Prometheus at {self.config.url} holds no gputop metrics{where} "
                             "(gputop_build_info is empty)",
                             "check that Prometheus scrapes 'gputop exporter' on each node (its /targets page), "
                             "and --match")
        jobs, range_jobs = self.jobs(info, watched)
        step = max(1.0, interval_s)
        builder = SnapshotBuilder()
        builder.add("build_info", info)
        futures: dict[Future[list[Sample]], str] = {}
        for key, expr in range_jobs.items():
            futures[self._pool.submit(self.client.query_range, expr, at - step * SERIES_POINTS, at, step)] = key
        for key, expr in jobs.items():
            futures[self._pool.submit(q, expr, at)] = key
        ranges: dict[str, list[Sample]] = {}
        try:
            for fut in as_completed(list(futures)):
                key = futures.pop(fut)          # the answer goes once read (as_completed lets go too)
                if key.startswith("range:"):
                    ranges[key] = fut.result()
                else:
                    builder.add(key, fut.result())      # the first FleetError propagates
                del fut
        except FleetError:
            for pending in futures:
                pending.cancel()
            raise
        snap = builder.build(at=at, window_s=self.window_s, host=self.config.url, nodes=self.config.nodes)
        snap = self._keep_stale(snap, builder, interval_s)
        del builder
        series: Series = {}
        for name, _ in SERIES_QUERIES:
            for k, by_name in series_points(ranges.get(f"range:{name}", ()), name).items():
                if k in watched:
                    series.setdefault(k, {}).update(by_name)
        return snap, series

    def _keep_stale(self, snap: Snapshot, b: SnapshotBuilder, interval_s: float) -> Snapshot:
        """The rows of the targets that are down now: their last known ones (from the last refresh that
        scraped them, or what Prometheus still holds of them, else read at their last scrape), marked
        ``stale``."""
        if not b.up:
            return snap
        by: dict[str, list[ProcSample]] = {}
        for p in snap.processes:
            by.setdefault(p.instance or "", []).append(p)
        down = {i for i, v in b.up.items() if v < 1}
        rows_of = {i: tuple(by.get(i, ())) for i in b.up if i not in down}
        for i in down:
            if i in by:
                rows_of[i] = tuple(by[i])
            elif i in self._rows:
                rows_of[i] = self._rows[i]
        nodes = self.config.nodes
        unknown = sorted(i for i in down if i not in rows_of and (not nodes or b.name(i) in nodes))
        if unknown and self._fill:
            rows_of.update(self._last_rows(unknown, b, snap.time, interval_s))
        self._rows = rows_of
        if not down:
            return snap
        rows = [p for p in snap.processes if p.instance not in down]
        for i in down:
            rows += [replace(p, stale=True) for p in rows_of.get(i, ())]
        rows.sort(key=lambda q: (q.node or "", q.instance or "", q.pid))
        return replace(snap, processes=tuple(rows))

    def _last_rows(self, instances: Sequence[str], b: SnapshotBuilder, at: float,
                   interval_s: float) -> dict[str, tuple[ProcSample, ...]]:
        """The rows of targets that are down and were never read up: each read at its last scrape within
        NAME_LOOKBACK (the last sample of its ``gputop_build_info``), one refresh per distinct time
        (at most LAST_READS; the others have no rows). Once per target: the rows are kept."""
        last = self.client.query(last_scrape_query(self.config.match, instances), at)
        by_time: dict[float, list[str]] = {}
        for s in last:
            by_time.setdefault(sample_value(s), []).append(s["metric"].get("instance", ""))
        out: dict[str, tuple[ProcSample, ...]] = {i: () for i in instances}
        for t in sorted(by_time, reverse=True)[:LAST_READS]:
            names = frozenset(n for i in by_time[t] if (n := b.name(i)) is not None)
            if not names:
                continue
            sub = FleetReader(replace(self.config, nodes=names))
            sub._fill = False
            try:
                rows = sub.read(t, (), interval_s)[0].processes
            except FleetError:
                continue
            finally:
                sub.close()
            with self.client._lock:
                self.client.queries += sub.queries
            for i in by_time[t]:
                out[i] = tuple(p for p in rows if p.instance == i)
        return out

    def info_query(self) -> str:
        """Each target's node name, its ``up`` and the node names of the last NAME_LOOKBACK: one query
        (``fleet_queries.info_query``)."""
        return info_query(self.config.match)
