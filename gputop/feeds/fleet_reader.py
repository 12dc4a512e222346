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
    nodes_matcher,
    parse_duration,
    refresh_queries,
    selector,
    watch_selector,
)
from gputop.feeds.fleet_topk import (
    GPU_LINES,
    Scope,
    View,
    exited_query,
    filter_expr,
    fleet_summary,
    keys_of,
    label_query,
    node_line_gpus,
    rank_labels,
    rest_query,
    sort_expr,
    top_query,
    totals_queries,
)
from gputop.feeds.http_config import HttpConfig
from gputop.model import ProcKey, ProcSample, Snapshot

#: refreshes read at down targets' last scrapes (one per distinct time) in one refresh, at most
LAST_READS = 3

#: a process's time series: ``{series name: [(t, v)]}`` by process
Series = dict[ProcKey, dict[str, list[tuple[float, float]]]]
Watched = tuple[tuple[str, int], ...]


#: the jobs of the top-K reading's totals (``fleet_topk.totals_queries``)
TOTALS = "scope:totals"


@dataclass(frozen=True)
class _Top:
    """The first half of a top-K refresh: the selector of the rows to read, the top ones, the exited ones
    (read for the totals), the jobs already sent."""

    procs: str
    shown: frozenset[tuple[str, int]]
    exited: frozenset[tuple[str, int]]
    submitted: tuple[str, ...]


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
    #: with ``table_only``, read the table's top this many rows by its sort column and the fleet's totals
    #: summed by Prometheus, once the feed is told the table's view (``gputop.feeds.fleet_topk``); 0: every row
    top: int = 0
    #: ``-p``: only these PIDs (on any node), for the top rows' reading (the dashboard keeps them itself too)
    pids: frozenset[int] = frozenset()


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
        #: what the last refresh's table holds when it read the top rows only (``FleetConfig.top``); None: every row
        self.scope: Scope | None = None
        #: GPUs of the last refresh (a top-K refresh reads the node lines' families only over GPU_LINES)
        self._gpus = 0

    @property
    def queries(self) -> int:
        return self.client.queries

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def jobs(self, info: list[Sample], watched: Watched, procs: str = "") -> tuple[dict[str, str], dict[str, str]]:
        """The refresh's instant queries and its ``query_range`` ones, by job name (``SnapshotBuilder.add``);
        ``procs``: matchers narrowing the per-process ones (the top rows)."""
        cfg = self.config
        return refresh_queries(info, watched, url=cfg.url, match=cfg.match, window=cfg.window, nodes=cfg.nodes,
                               table_only=cfg.table_only, procs=procs)

    def read(self, at: float, watched: Watched, interval_s: float,
             view: View | None = None) -> tuple[Snapshot, Series]:
        """One refresh: every query at ``at``; raises ``FleetError`` when Prometheus fails. ``view``: the
        table's sort and filter, for a reading of its top rows (``FleetConfig.top``; ``self.scope``)."""
        q = self.client.query
        info = q(info_query(self.config.match), at)
        if not any(PART not in s["metric"] or s["metric"][PART] == "known" for s in info):
            where = f" matching {{{self.config.match}}}" if self.config.match else ""
            raise FleetError("empty", f"Prometheus at {self.config.url} holds no gputop metrics{where} "
                             "(gputop_build_info is empty)",
                             "check that Prometheus scrapes 'gputop exporter' on each node (its /targets page), "
                             "and --match")
        self.scope = None
        step = max(1.0, interval_s)
        builder = SnapshotBuilder()
        builder.add("build_info", info)
        futures: dict[Future[list[Sample]], str] = {}
        top = self._top(info, view, watched, at, futures) if view is not None else None
        if top is None:
            jobs, range_jobs = self.jobs(info, watched)
        else:
            jobs, range_jobs = self.jobs(info, watched, procs=top.procs)
            for key in top.submitted:
                jobs.pop(key, None)
        for key, expr in range_jobs.items():
            futures[self._pool.submit(self.client.query_range, expr, at - step * SERIES_POINTS, at, step)] = key
        for key, expr in jobs.items():
            futures[self._pool.submit(q, expr, at)] = key
        ranges: dict[str, list[Sample]] = {}
        totals: list[Sample] = []
        try:
            for fut in as_completed(list(futures)):
                key = futures.pop(fut)          # the answer goes once read (as_completed lets go too)
                if key.startswith("range:"):
                    ranges[key] = fut.result()
                elif key.startswith(TOTALS):
                    totals += fut.result()
                else:
                    builder.add(key, fut.result())      # the first FleetError propagates
                del fut
        except FleetError:
            for pending in futures:
                pending.cancel()
            raise
        snap = builder.build(at=at, window_s=self.window_s, host=self.config.url, nodes=self.config.nodes)
        exited: list[ProcSample] = []
        if top is not None:     # the rows read: the top ones and the watched ones (not others the selector found)
            shown = top.shown | set(watched)
            exited = [p for p in snap.processes if p.key in top.exited]
            snap = replace(snap, processes=tuple(p for p in snap.processes if p.key in shown))
        snap = self._keep_stale(snap, builder, interval_s)
        del builder
        if top is not None and view is not None:
            summary = fleet_summary(totals, snap, exited, self.window_s)
            snap.__dict__["summary"] = summary          # the fleet's totals, not the rows' (Snapshot.summary)
            self.scope = Scope(view, self.config.top, summary.processes, len(snap.processes), summary)
        self._gpus = len(snap.gpus)
        series: Series = {}
        for name, _ in SERIES_QUERIES:
            for k, by_name in series_points(ranges.get(f"range:{name}", ()), name).items():
                if k in watched:
                    series.setdefault(k, {}).update(by_name)
        return snap, series

    def _top(self, info: list[Sample], view: View, watched: Watched, at: float,
             futures: dict[Future[list[Sample]], str]) -> _Top | None:
        """The first half of a top-K refresh (``gputop.feeds.fleet_topk``): the top rows by the sort column,
        the exited processes (waited for), the totals and the unscoped queries (sent, in ``futures``).
        None: every row is read (not the dashboard's reading, or a column neither Prometheus nor the
        labels order: none of the table's)."""
        cfg = self.config
        if not cfg.table_only or cfg.top <= 0:
            return None
        k, w = cfg.top, cfg.window
        pids = f'pid=~"{"|".join(str(p) for p in sorted(cfg.pids))}"' if cfg.pids else ""
        sel = selector(cfg.match, nodes_matcher(info, cfg.url, cfg.nodes), pids)
        text = view.query.strip().lower()
        named = {m["instance"] for s in info if text and "instance" in (m := s["metric"])
                 and text in str(m.get("node", "")).lower()}
        where = filter_expr(view.query, sel, named)
        # a value Prometheus orders by, else the labels the client ranks by (PID, node, command, ...)
        by_labels = sort_expr(view.sort, sel, w, self.window_s) is None
        expr = label_query(view.sort, sel, where) if by_labels else top_query(view, k, sel, w, self.window_s, where)
        if expr is None:
            return None
        q = self.client.query
        top_f = self._pool.submit(q, expr, at)
        exited_f = self._pool.submit(q, exited_query(sel, where), at)
        for i, expr in enumerate(totals_queries(sel, w, where)):
            futures[self._pool.submit(q, expr, at)] = f"{TOTALS}{i}"
        unscoped, _ = self.jobs(info, ())
        if self._gpus > GPU_LINES and not view.query.strip():     # the panel shows a line per node
            unscoped["gpus"] = node_line_gpus(selector(cfg.match, nodes_matcher(info, cfg.url, cfg.nodes)))
        submitted = ("source_up", "gpus")
        for key in submitted:
            futures[self._pool.submit(q, unscoped[key], at)] = key
        try:
            exited = keys_of(exited_f.result())
            if by_labels:       # ranked here, by the table's comparison
                node_of = {m["instance"]: m["node"] for s in info
                           if PART not in (m := s["metric"]) and "instance" in m and "node" in m}
                keys = rank_labels(view, k, top_f.result(), node_of, exited)
            else:
                keys = keys_of(top_f.result())
            if len(keys) < k and not by_labels:       # fewer have a value: the others sort last
                keys += keys_of(q(rest_query(view, k - len(keys), sel, w, self.window_s, where), at))
        except FleetError:
            for pending in futures:
                pending.cancel()
            raise
        read = sorted({*keys, *watched, *exited})
        # the processes' instances and PIDs: a selector that may find a few others (dropped once built)
        procs = watch_selector(read) if read else 'pid="none"'
        return _Top(procs, frozenset(keys), frozenset(exited), submitted)

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
