"""The fleet view's PromQL: the metric names it reads back (docs/metrics.md, a contract; derived from the
quantity catalogue, gputop/counters.py), the syntax of its options (``--window``, ``--match``,
``--prometheus``) and the queries of one refresh (``refresh_queries``): a fixed number, one per metric
family, never one per process or node. Stdlib only."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Sequence

from gputop import counters
from gputop.counters import GPU, PROC, SCALARS, Kind
from gputop.feeds.fleet_client import FleetError, Sample
from gputop.feeds.fleet_pods import pods_expr

# ---------------------------------------------------------------- names (docs/metrics.md, a contract)

#: per-process counters: (series, Counts field); their values are ``total``, their increases ``interval``
#: (gputop/counters.py: the exporter's counters and the launch-shape histograms' sums)
PROC_COUNTERS: tuple[tuple[str, str], ...] = tuple(
    (q.series, q.field) for q in SCALARS if q.series is not None and q.kind in (Kind.COUNTER, Kind.SUM))
#: counters with a direction label: (series, Counts field, label, "calls" | "bytes" | None)
PROC_DIRECTED: tuple[tuple[str, str, str, str | None], ...] = tuple(
    (name, q.field, q.direction_label, part) for q in PROC if q.directions for name, part in q.directed_series())
#: launches counted by the histograms (the denominators of the grid and block averages)
HIST_COUNTS = ("gputop_kernel_grid_blocks_count", "gputop_kernel_block_threads_count")
#: the per-process levels (gputop/counters.py): series -> Counts field
LEVELS: dict[str, str] = {q.series: q.field for q in SCALARS if q.series is not None and q.kind is Kind.GAUGE}
#: the per-process levels, then the process gauges of the exporter's
PROC_GAUGES = (*LEVELS, "gputop_process_gpu_memory_bytes", "gputop_process_sm_utilization_ratio",
               "gputop_process_launch_bound", "gputop_process_start_time_seconds", "gputop_process_exited")
#: GPU families: (series, GpuSample field, scale from base units back to the model's)
GPU_FIELDS: tuple[tuple[str, str, float], ...] = tuple((f.series, f.field, f.from_base) for f in GPU)
#: histograms read for watched processes: (bucket metric, ProcSample field)
HISTOGRAMS = (("gputop_kernel_grid_blocks_bucket", "grid_blocks_hist"),
              ("gputop_kernel_block_threads_bucket", "block_threads_hist"),
              ("gputop_memcpy_size_bytes_bucket", "memcpy_size_hist"))
KERNEL_LAUNCHES = "gputop_kernel_function_launches_total"
#: the time series of details and compare: (name in ``gputop.view.history.PROC_SERIES``, PromQL of the
#: selector ``{S}`` and window ``W``), each one query_range for every watched process at once
SERIES_QUERIES: tuple[tuple[str, str], ...] = tuple(
    (q.field, q.rate.promql) for q in counters.RATED if q.rate is not None and q.rate.promql is not None)
#: points per chart of details and compare
SERIES_POINTS = 120
#: how far back the fleet looks for the name of a node whose scrapes fail now (its last
#: ``gputop_build_info``) and for the jobs that scrape exporters (``up`` of those jobs only)
NAME_LOOKBACK = "1h"
#: the label that tags the parts folded into one query (the build-info query: each target's ``up``
#: and the last known node names; the gauges query: each process's last sample and whether its
#: series reaches back over the window)
PART = "gputop_fleet_part"
#: process gauges of the exporter's state of a process (docs/metrics.md)
START_TIME = "gputop_process_start_time_seconds"
EXITED = "gputop_process_exited"

#: directed counter families: series -> (Counts field, label, "calls" | "bytes" | None)
DIRECTED = {name: (fld, label, part) for name, fld, label, part in PROC_DIRECTED}
#: every per-process counter family (the ``total:`` and ``inc:`` queries)
COUNTER_FAMILIES: tuple[str, ...] = (*(n for n, _ in PROC_COUNTERS), *(n for n, *_ in PROC_DIRECTED), *HIST_COUNTS)
#: the families whose increases the process table shows (rates, grid and block averages): what the
#: dashboard reads for every process (``FleetConfig.table_only``)
TABLE_FAMILIES: tuple[str, ...] = (
    *(name for q in PROC if q.in_table for name, part in (q.directed_series() if q.directions else [(q.series, None)])
      if name is not None and part != "calls"), *HIST_COUNTS)


# ---------------------------------------------------------------- option parsing

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration(text: str) -> float:
    """A Prometheus duration (``30s``, ``1m30s``, ``2h``) in seconds; ValueError otherwise."""
    t = text.strip()
    pos, total = 0, 0.0
    for m in _DURATION.finditer(t):
        if m.start() != pos:
            break
        total += int(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if not t or pos != len(t):
        raise ValueError(f"not a Prometheus duration (such as 30s, 2m, 1h30m): {text!r}")
    return total


def selector_body(text: str) -> str:
    """``--match``: label matchers, with or without braces (``job="gputop"``, ``{cluster=~"a|b"}``)."""
    t = text.strip()
    if t.startswith("{") and t.endswith("}"):
        t = t[1:-1].strip()
    matcher = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*".*"\s*(,.*)?'
    if "{" in t or "}" in t or not re.fullmatch(matcher, t or 'a=""'):
        raise ValueError(f'expected label matchers such as job="gputop" or cluster=~"a|b": {text!r}')
    return t


def check_url(text: str) -> str:
    """``--prometheus``: an http(s) URL of Prometheus (or of a path it is served under)."""
    u = urllib.parse.urlsplit(text.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"expected an http:// or https:// URL of Prometheus: {text!r}")
    try:
        u.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError:
        raise ValueError(f"bad port in {u.scheme}://{u.hostname}") from None
    if u.username is not None or u.password is not None:     # the secret itself stays out of the message
        raise ValueError(f"a user name or password in --prometheus's URL ({u.scheme}://…@{u.hostname}) is not "
                         "used: they would show in ps; give them in --http.config.file (basic_auth)")
    return urllib.parse.urlunsplit(u._replace(scheme=u.scheme.lower())).rstrip("/")


# ---------------------------------------------------------------- the queries of a refresh


def _tagged(expr: str, part: str) -> str:
    """``expr`` with its series tagged ``PART="part"`` (parts folded into one query stay apart)."""
    return f'label_replace({expr}, "{PART}", "{part}", "", "")'


def _regex_alt(values: Iterable[str]) -> str:
    """A PromQL regex matching exactly these values."""
    return "|".join(re.escape(v).replace("\\", "\\\\").replace('"', '\\"') for v in sorted(set(values)))


def selector(match: str, *extra: str) -> str:
    """The label matchers ``match`` (``--match``, without braces) and ``extra``, comma-joined."""
    return ",".join(p for p in (match, *extra) if p)


def watch_selector(keys: Sequence[tuple[str, int]]) -> str:
    """Matchers of the processes ``keys`` ((instance, pid)): details and compare."""
    instances = _regex_alt(k[0] for k in keys)
    pids = _regex_alt(str(k[1]) for k in keys)
    return f'instance=~"{instances}",pid=~"{pids}"'


def info_query(match: str) -> str:
    """Each target's node name, folded into one query with, for the jobs that scrape gputop
    exporters, each target's ``up``, and the node names of the last NAME_LOOKBACK (a target whose
    scrapes fail has no current ``gputop_build_info``: Prometheus marks its series stale); the targets
    that export per container, and those with processes over --max-processes (summed, not rows)."""
    m = match
    known = f"last_over_time(gputop_build_info{{{m}}}[{NAME_LOOKBACK}])"
    targets = f"(up{{{m}}} and on(job) {known})"
    grouped = f"count by (job, instance) (gputop_container_processes{{{m}}})"
    omitted = f"gputop_exporter_processes_omitted{{{m}}} > 0"
    return (f"gputop_build_info{{{m}}} or {_tagged(known, 'known')} or {_tagged(targets, 'up')}"
            f" or {_tagged(grouped, 'containers')} or {_tagged(omitted, 'omitted')}")


def last_scrape_query(match: str, instances: Iterable[str]) -> str:
    """The unix time of each target's last scrape within NAME_LOOKBACK (its last ``gputop_build_info``)."""
    sel = selector(match, f'instance=~"{_regex_alt(instances)}"')
    return (f"max by (instance) (max_over_time(timestamp(gputop_build_info{{{sel}}})"
            f"[{NAME_LOOKBACK}:1s]))")


def nodes_matcher(info: Sequence[Sample], url: str, nodes: frozenset[str]) -> str:
    """``--node``'s matcher: the named nodes' targets (``info``: the answer to ``info_query``); "" without
    it. Raises ``FleetError`` when no node is named ``nodes``."""
    if not nodes:
        return ""
    instances = [s["metric"].get("instance", "") for s in info if s["metric"].get("node") in nodes]
    if not instances:
        raise FleetError("empty", f"no node named {', '.join(sorted(nodes))} in Prometheus at "
                         f"{url}", "check --node against the node label of gputop_build_info")
    return f'instance=~"{_regex_alt(instances)}"'


def refresh_queries(info: Sequence[Sample], watched: Sequence[tuple[str, int]], *, url: str, match: str,
                    window: str, nodes: frozenset[str], table_only: bool,
                    procs: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """The refresh's instant queries and its ``query_range`` ones, by job name (``SnapshotBuilder.add``):
    ``info`` is the answer to ``info_query``; ``watched``, the processes shown in details or compare;
    ``table_only``: ``FleetConfig.table_only``; ``procs``: matchers narrowing the per-process queries
    (the top K rows' instances and PIDs: ``gputop.feeds.fleet_topk``). Raises ``FleetError`` when no node
    is named ``nodes``."""
    extra = nodes_matcher(info, url, nodes)
    sel = selector(match, extra, procs)
    w = window

    def by(name: str) -> str:
        # only the labels that identify a value: smaller answers
        return "instance,pid" + (f",{DIRECTED[name][1]}" if name in DIRECTED else "")

    def increase(name: str, within: str) -> str:
        return f"sum by ({by(name)}) (increase({name}{{{within}}}[{w}]))"

    launches = PROC_COUNTERS[0][0]
    jobs: dict[str, str] = {
        "source_up": f"gputop_source_up{{{selector(match, extra)}}}",
        "gpus": "{" + selector(match, extra, '__name__=~"gputop_gpu_.+"') + "}",
        # each gauge family by its name: one selector of the six by a regular expression on __name__ cost
        # Prometheus twice the CPU at 64,000 processes (docs/PERFORMANCE.md, "Fleet view at scale"), and
        # six run side by side
        **{f"gauges:{name}": f"{name}{{{sel}}}" for name in PROC_GAUGES},
        # each process's last sample and whether its series reaches back a window (warming up)
        "gauges:state": f"{_tagged(f'max by (instance,pid) (timestamp({launches}{{{sel}}}))', 'seen')}"
                        + f" or {_tagged(f'max by (instance,pid) ({launches}{{{sel}}} offset {w})', 'windowed')}"
                        # and the pods of the processes' containers (kube-state-metrics; none without it)
                        + f" or {_tagged(pods_expr(sel), 'pods')}",
        # the launches keep comm & co.: every process's names
        f"total:{launches}": f"max by (instance,pid,comm,cmdline,container) ({launches}{{{sel}}})",
    }
    for name in COUNTER_FAMILIES:
        if not table_only and name != launches:
            jobs[f"total:{name}"] = f"sum by ({by(name)}) ({name}{{{sel}}})"
        if not table_only or name in TABLE_FAMILIES:
            jobs[f"inc:{name}"] = increase(name, sel)
    ranges: dict[str, str] = {}
    if watched:
        wsel = selector(match, extra, watch_selector(watched))
        names = [*(b for b, _ in HISTOGRAMS), KERNEL_LAUNCHES]
        if table_only:
            names += COUNTER_FAMILIES
            # the other families' increases in one query, each series tagged with its family
            jobs["watched_inc"] = " or ".join(f'label_replace({increase(n, wsel)}, "family", "{n}", "", "")'
                                              for n in COUNTER_FAMILIES if n not in TABLE_FAMILIES)
        jobs["watched"] = "{" + selector(match, wsel, f'__name__=~"{"|".join(names)}"') + "}"
        for name, expr in SERIES_QUERIES:
            ranges[f"range:{name}"] = expr.replace("{S", "{" + wsel).replace("[W]", f"[{w}]")
    return jobs, ranges
