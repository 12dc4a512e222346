"""The fleet view's reading: ``Snapshot``s built from Prometheus's HTTP API (``gputop --prometheus URL``);
the feed that sends them is ``gputop.feeds.fleet.FleetFeed``.

Every node runs ``gputop exporter``; Prometheus scrapes them all; this feed reads them back with a
fixed number of queries per refresh, one per metric family, never one per process or node:

- ``gputop_build_info`` (each target's node name), ``gputop_source_up``, the GPU families (one
  query, by name), the per-process gauges (a query each: one selector of them all by a regular
  expression on the name costs Prometheus twice the CPU) and each process's state (last sample,
  warming up, with its Kubernetes pod and namespace from kube-state-metrics folded in:
  ``gputop.feeds.fleet_pods``);
- each per-process counter family twice: its current values (the snapshot's ``total``) and
  ``increase(FAMILY[window])``: the ``interval`` counts (rounded to integers) and, divided by the
  window, the rates (what ``rate()`` computes). Answers are read as they arrive and dropped, so a
  refresh holds one family's answer per query worker, not the fleet's every series at once;
- for the one or two processes shown in details or compare (``watch``): their histogram buckets
  and per-kernel launches (one query), and their time series through ``query_range``.

The dashboard reads less (``FleetConfig.table_only``): for every process only what its table shows
(``TABLE_FAMILIES``' increases, the gauges, total launches with the names), and everything for the
watched processes (their raw counters with the histograms, and the other increases in one query).
It also reads in a child process (``FleetConfig.child``, ``gputop.feeds.fleet_worker``), so that parsing
tens of megabytes of JSON never holds the dashboard's interpreter lock. Batch mode and records read
every family for every process, in this process.

All queries of a refresh are evaluated at one instant (the ``time`` parameter), so the numbers of
one snapshot agree with each other. Errors (unreachable, slow, refused, no gputop metrics) never
end the feed: the last good snapshot is sent again with the ``prometheus`` source unavailable and
``error`` set, so the dashboard keeps it on screen, marked stale. Stdlib only (urllib, json).

The parts, one job each (this module names them all, as callers have always imported them from here):
``fleet_client`` (the HTTP API: ``PromClient``, ``FleetError``), ``fleet_queries`` (the names read back,
the options' syntax, the PromQL of a refresh), ``fleet_builder`` (answers -> ``Snapshot``:
``SnapshotBuilder``, ``build_snapshot``, ``series_points``), ``fleet_health`` (down nodes, per-container
nodes, the sources' status) and ``fleet_reader`` (``FleetReader``, ``FleetConfig``: one refresh, stale rows).
"""

from __future__ import annotations

from gputop.feeds.fleet_builder import Results, SnapshotBuilder, build_snapshot, log2_hist, series_points
from gputop.feeds.fleet_client import MAX_ANSWER_BYTES, MAX_ERROR_BYTES, FleetError, PromClient, Sample, sample_value
from gputop.feeds.fleet_health import DOWN_SHOWN, down_clause, fleet_sources, nodes_down, per_container
from gputop.feeds.fleet_queries import (
    COUNTER_FAMILIES,
    DIRECTED,
    EXITED,
    GPU_FIELDS,
    HIST_COUNTS,
    HISTOGRAMS,
    KERNEL_LAUNCHES,
    LEVELS,
    NAME_LOOKBACK,
    PART,
    PROC_COUNTERS,
    PROC_DIRECTED,
    PROC_GAUGES,
    SERIES_POINTS,
    SERIES_QUERIES,
    START_TIME,
    TABLE_FAMILIES,
    check_url,
    info_query,
    parse_duration,
    refresh_queries,
    selector_body,
)
from gputop.feeds.fleet_reader import LAST_READS, FleetConfig, FleetReader, Series, Watched

__all__ = [
    "COUNTER_FAMILIES", "DIRECTED", "DOWN_SHOWN", "EXITED", "GPU_FIELDS", "HISTOGRAMS", "HIST_COUNTS",
    "KERNEL_LAUNCHES", "LAST_READS", "LEVELS", "MAX_ANSWER_BYTES", "MAX_ERROR_BYTES", "NAME_LOOKBACK", "PART",
    "PROC_COUNTERS", "PROC_DIRECTED", "PROC_GAUGES", "SERIES_POINTS", "SERIES_QUERIES", "START_TIME",
    "TABLE_FAMILIES", "FleetConfig", "FleetError", "FleetReader", "PromClient", "Results", "Sample", "Series",
    "SnapshotBuilder", "Watched", "build_snapshot", "check_url", "down_clause", "fleet_sources", "info_query",
    "log2_hist", "nodes_down", "parse_duration", "per_container", "refresh_queries", "sample_value",
    "selector_body", "series_points",
]
