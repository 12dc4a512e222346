"""The fleet view's reading: ``Snapshot``s built from Prometheus's HTTP API (``gputop --prometheus URL``);
the feed that sends them is ``gputop.feeds.fleet.FleetFeed``.

Every node runs ``gputop exporter``; Prometheus scrapes them all; this feed reads them back with a
fixed number of queries per refresh, one per metric family, never one per process or node:

- ``gputop_build_info`` (each target's node name), ``gputop_source_up``, the GPU families (one
  query, by name) and the per-process gauges (one query, by name, with each process's Kubernetes
  pod and namespace from kube-state-metrics folded in: ``gputop.feeds.fleet_pods``);
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
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

from gputop import counters
from gputop.counters import BY_FIELD, GPU, PROC, SCALARS, Kind
from gputop.errors import EX_ERROR, GputopError
from gputop.feeds import bounded_http
from gputop.feeds.fleet_pods import Pod, add_pod, pods_expr
from gputop.model import (
    MEMCPY_DIRECTIONS,
    PREFETCH_DIRECTIONS,
    UVM_DIRECTIONS,
    CallBytes,
    Counts,
    GpuSample,
    KernelStat,
    ProcKey,
    ProcSample,
    Snapshot,
    SourceStatus,
)

Sample = dict[str, Any]   # one element of a Prometheus vector result: {"metric": {...}, "value": [t, "v"]}

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
#: the per-process levels (gputop/counters.py), then the process gauges of the exporter's
_LEVELS: dict[str, str] = {q.series: q.field for q in SCALARS if q.series is not None and q.kind is Kind.GAUGE}
PROC_GAUGES = (*_LEVELS, "gputop_process_gpu_memory_bytes", "gputop_process_sm_utilization_ratio",
               "gputop_process_launch_bound", "gputop_process_start_time_seconds", "gputop_process_exited")
#: GPU families: (series, GpuSample field, scale from base units back to the model's)
GPU_FIELDS: tuple[tuple[str, str, float], ...] = tuple((f.series, f.field, f.from_base) for f in GPU)
_INT_GPU_FIELDS = {f.field for f in GPU if f.integral}
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
        raise ValueError(f"bad port in {text!r}") from None
    return text.strip().rstrip("/")


# ---------------------------------------------------------------- the HTTP API


class FleetError(GputopError):
    """Prometheus did not answer as needed. ``kind``: unreachable, slow, refused, empty."""

    def __init__(self, kind: str, message: str, hint: str) -> None:
        super().__init__(message, hint, EX_ERROR)
        self.kind = kind


#: a PromQL feature this Prometheus lacks, as its parser says so
_MISSING_PROMQL = re.compile(r'unknown function with name "(\w+)"')


def _refusal_hint(detail: str) -> str:
    """What to do about a refused query: an older Prometheus than the fleet view needs, said as such
    (its parser names what it lacks); otherwise the user's own matchers and window."""
    m = _MISSING_PROMQL.search(detail)
    if m:
        return (f"this Prometheus lacks the PromQL function {m.group(1)}: the fleet view needs Prometheus "
                "2.26 or newer (docs/fleet.md, \"Which Prometheus\")")
    return "check --match (label matchers such as job=\"gputop\") and --window"


#: the most one answer may hold: a 64,000-process fleet's largest is tens of MiB (docs/fleet.md, "At scale")
MAX_ANSWER_BYTES = 256 << 20
#: the most of an error answer read (its message is shown cut to 200 characters)
MAX_ERROR_BYTES = 64 << 10


class PromClient:
    """Instant and range queries through Prometheus's HTTP API (POST, so long selectors fit)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        #: queries sent (tests and the benchmark count them)
        self.queries = 0
        self._lock = threading.Lock()

    def _post(self, path: str, params: Mapping[str, str]) -> Any:
        with self._lock:
            self.queries += 1
        data = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        where = f"Prometheus at {self.url}"
        slow = FleetError("slow", f"{where} did not answer within {self.timeout_s:g} s",
                          "check Prometheus's load (its /metrics, the query log) or narrow --match / --node")
        unreachable_hint = "check the URL and that Prometheus runs (curl URL/-/ready)"
        deadline = time.monotonic() + self.timeout_s     # for the whole answer, not each receive
        watchdog = bounded_http.Watchdog(deadline)       # the status line and headers too
        try:
            try:
                with bounded_http.opener(watchdog).open(req, timeout=self.timeout_s) as r:
                    body = bounded_http.read(r, MAX_ANSWER_BYTES, deadline)
            finally:
                watchdog.cancel()
            if watchdog.fired:                  # cut off: what was read is not the whole answer
                raise TimeoutError
        except urllib.error.HTTPError as e:
            try:
                body = bounded_http.read(e, MAX_ERROR_BYTES, deadline, cut=True)
            except (TimeoutError, OSError, http.client.HTTPException):
                body = b""
            try:
                detail = json.loads(body).get("error") or ""
            except (ValueError, AttributeError):
                detail = body[:200].decode("utf-8", "replace")
            if e.code in (400, 422):
                raise FleetError("refused", f"{where} refused the query {params.get('query', '')!r}: {detail}",
                                 _refusal_hint(str(detail))) from None
            raise FleetError("unreachable", f"{where} answered HTTP {e.code} {e.reason}: {detail}",
                             "check the URL (it is Prometheus's, e.g. http://prometheus:9090) and any proxy "
                             "in front of it") from None
        except bounded_http.TooLarge:
            raise FleetError("unreachable", f"{where} answered more than {MAX_ANSWER_BYTES >> 20} MiB to one "
                             f"query: not read", "give the URL of Prometheus itself (http://HOST:9090), and narrow "
                             "--match / --node") from None
        except TimeoutError:
            raise slow from None
        except urllib.error.URLError as e:
            reason = e.reason
            if watchdog.fired or isinstance(reason, (TimeoutError, socket.timeout)):
                raise slow from None
            text = getattr(reason, "strerror", None) or str(reason)
            raise FleetError("unreachable", f"{where} is unreachable: {text}", unreachable_hint) from None
        except http.client.HTTPException as e:   # not HTTP: a status line or header http.client refuses
            if watchdog.fired:
                raise slow from None
            raise FleetError("unreachable", f"{where} did not answer in HTTP: {type(e).__name__}",
                             "give the URL of Prometheus itself (http://HOST:9090)") from None
        except OSError as e:
            if watchdog.fired:
                raise slow from None
            raise FleetError("unreachable", f"{where} is unreachable: {e.strerror or e}", unreachable_hint) from None
        try:
            doc = json.loads(body)
            assert doc["status"] == "success"
            return doc["data"]["result"]
        except (ValueError, KeyError, TypeError, AssertionError):
            raise FleetError("unreachable", f"{self.url} did not answer as Prometheus's HTTP API does",
                             "give the URL of Prometheus itself (http://HOST:9090), not of an exporter") from None

    def query(self, expr: str, at: float) -> list[Sample]:
        result: list[Sample] = self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        return result

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[Sample]:
        result: list[Sample] = self._post("/api/v1/query_range", {
            "query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"})
        return result


# ---------------------------------------------------------------- snapshots from query results


@dataclass
class Results:
    """What one refresh read, by family name: the raw vector results."""

    build_info: list[Sample] = field(default_factory=list)
    source_up: list[Sample] = field(default_factory=list)
    gpus: list[Sample] = field(default_factory=list)
    totals: list[Sample] = field(default_factory=list)
    gauges: list[Sample] = field(default_factory=list)
    #: metric name -> increase() over the window
    increases: dict[str, list[Sample]] = field(default_factory=dict)
    #: histogram buckets and kernel launches of the watched processes
    watched: list[Sample] = field(default_factory=list)


def _value(s: Sample) -> float:
    return float(s["value"][1])


def _pkey(m: Mapping[str, str]) -> tuple[str, int] | None:
    try:
        return (m.get("instance", ""), int(m["pid"]))
    except (KeyError, ValueError):
        return None


class _Proc:
    """Counts of one process being gathered from the families."""

    __slots__ = ("gauges", "gpu", "hists", "interval", "kernels", "labels", "seen", "total", "windowed")

    def __init__(self, m: Mapping[str, str]) -> None:
        self.labels = {k: m[k] for k in ("comm", "cmdline", "container") if k in m}    # not the whole sample
        self.total: dict[str, Any] = {}
        self.interval: dict[str, Any] = {}
        self.gauges: dict[str, float] = {}
        self.gpu: int | None = None
        self.hists: dict[str, dict[str, list[tuple[float, float]]]] = {}
        self.kernels: dict[str, float] = {}
        #: unix time of the last sample of its launches counter (None: no such series)
        self.seen: float | None = None
        #: True when its launches counter had a sample a window before the refresh's instant
        self.windowed = False

    def learn(self, m: Mapping[str, str]) -> None:
        """Labels another series of the process carries where the first one had none (a series
        exported before the exporter knew the name is still there until its next scrape)."""
        for k in ("comm", "cmdline", "container"):
            if m.get(k) and not self.labels.get(k):
                self.labels[k] = m[k]


_COUNTER_FIELD = dict(PROC_COUNTERS)
_COUNTER_FIELDS = frozenset([*_COUNTER_FIELD.values(), *_LEVELS.values()])
_DIRECTED = {name: (fld, label, part) for name, fld, label, part in PROC_DIRECTED}
_FLOAT_FIELDS = {q.field for q in SCALARS if not q.integral}
#: every per-process counter family (the ``total:`` and ``inc:`` queries)
COUNTER_FAMILIES: tuple[str, ...] = (*(n for n, _ in PROC_COUNTERS), *(n for n, *_ in PROC_DIRECTED), *HIST_COUNTS)
_TOTAL_NAMES = frozenset(COUNTER_FAMILIES)
#: the families whose increases the process table shows (rates, grid and block averages): what the
#: dashboard reads for every process (``FleetConfig.table_only``)
TABLE_FAMILIES: tuple[str, ...] = (
    *(name for q in PROC if q.in_table for name, part in (q.directed_series() if q.directions else [(q.series, None)])
      if name is not None and part != "calls"), *HIST_COUNTS)


def _counts(c: dict[str, Any], integral: bool) -> Counts | None:
    """Counts from gathered values; increases (``integral``) are rounded to whole events."""
    if not c:
        return None

    def num(v: float | None, fld: str) -> Any:
        if v is None:
            return None
        return float(v) if fld in _FLOAT_FIELDS else round(v) if integral else int(v)

    kw: dict[str, Any] = {fld: (v if fld in _FLOAT_FIELDS else round(v) if integral else int(v))
                          for fld, v in c.items() if fld in _COUNTER_FIELDS}
    for fld, dirs in (("memcpy", MEMCPY_DIRECTIONS), ("prefetch", PREFETCH_DIRECTIONS)):
        parts = c.get(fld)
        if parts is not None:
            # None, not {}, when only one half was read (the table's scope reads copies' bytes only)
            kw[fld] = {d: CallBytes(num(parts[d]["calls"], "calls"), num(parts[d]["bytes"], "bytes"))
                       for d in dirs if d in parts and "calls" in parts[d] and "bytes" in parts[d]} or None
    mig = c.get("uvm_migrated")
    if mig is not None:
        kw["uvm_migrated"] = {d: num(mig[d]["value"], "b") for d in UVM_DIRECTIONS if d in mig}
    return Counts(**kw)


def _log2_hist(buckets: list[tuple[float, float]]) -> dict[str, int]:
    """The model's ``{"2^k": count}`` from cumulative ``le`` buckets (le = 2^(k+1) - 1, then +Inf)."""
    out: dict[str, int] = {}
    prev = 0.0
    finite = sorted((le, v) for le, v in buckets if le != float("inf"))
    everything = [v for le, v in buckets if le == float("inf")]
    for k, (_, cum) in enumerate(finite):
        n = round(cum - prev)
        if n:
            out[f"2^{k}"] = n
        prev = cum
    rest = round(everything[0] - prev) if everything else 0
    if rest:
        out[f"2^{len(finite)}"] = rest
    return out


class SnapshotBuilder:
    """Gathers one refresh's query results as they arrive (each result can go as soon as it is
    read: at 64,000 processes a family's answer is tens of megabytes), then builds the snapshot."""

    def __init__(self) -> None:
        self.node_of: dict[str, str] = {}
        self.procs: dict[tuple[str, str], _Proc] = {}     # (instance, pid as the label has it)
        self.gpu_samples: list[Sample] = []
        self.source_up: list[Sample] = []
        #: each target's ``up`` (the scrape jobs that scrape gputop exporters), by instance
        self.up: dict[str, float] = {}
        #: the node names of the last hour, by instance: the names of targets whose scrapes fail now
        self.known_node: dict[str, str] = {}
        #: each container id (or pod UID) gputop's processes carry: its pod (None: two pods claim it)
        self.pods: dict[str, Pod | None] = {}
        #: targets whose exporter runs with --aggregate container (no per-process series)
        self.per_container: set[str] = set()

    def _proc(self, m: Mapping[str, str]) -> _Proc:
        key = (m.get("instance", ""), m.get("pid", ""))
        p = self.procs.get(key)
        if p is None:
            p = self.procs[key] = _Proc(m)
        elif "comm" in m:
            p.learn(m)
        return p

    def add(self, job: str, samples: list[Sample]) -> None:
        """One query's result: ``build_info``, ``source_up``, ``gpus``, ``gauges``, ``watched``,
        ``total:METRIC`` (current values) or ``inc:METRIC`` (increase over the window)."""
        if job == "build_info":
            for s in samples:
                m = s["metric"]
                part = m.get(PART)
                if "instance" not in m:
                    continue
                if part is None and "node" in m:
                    self.node_of[m["instance"]] = m["node"]
                elif part == "known" and "node" in m:
                    self.known_node.setdefault(m["instance"], m["node"])
                elif part == "up":
                    self.up[m["instance"]] = _value(s)
                elif part == "containers":
                    self.per_container.add(m["instance"])
        elif job == "source_up":
            self.source_up = samples
        elif job == "gpus":
            self.gpu_samples = samples
        elif job == "gauges":
            for s in samples:
                m = s["metric"]
                part = m.get(PART)
                if part == "pods":
                    add_pod(self.pods, m)
                    continue
                if part is not None:        # only for processes some family knows (not one that went)
                    key = (m.get("instance", ""), m.get("pid", ""))
                    q = self.procs.get(key) or self.procs.setdefault(key, _Proc({}))
                    if part == "seen":
                        q.seen = _value(s)
                    elif part == "windowed":
                        q.windowed = True
                    continue
                p = self._proc(m)
                p.gauges[m.get("__name__", "")] = _value(s)
                if m.get("gpu", "").isdigit():
                    p.gpu = int(m["gpu"])
        elif job.startswith(("total:", "inc:")):
            # total launches come by name (a process renamed in the lookback has two: the larger is current)
            name = job.partition(":")[2]
            self._add_counter(job.startswith("total:"), name, samples, largest=name == PROC_COUNTERS[0][0])
        elif job == "watched_inc":          # increases of several families, each tagged with its name
            for s in samples:
                self._add_counter(False, s["metric"].get("family", ""), [s])
        elif job == "watched":
            for s in samples:
                m = s["metric"]
                p = self._proc(m)
                name = m.get("__name__", "")
                if name in _TOTAL_NAMES:        # the table's scope: totals of the watched processes only
                    self._add_counter(True, name, [s], largest=True)
                elif name == KERNEL_LAUNCHES:
                    p.kernels[m.get("kernel", "")] = _value(s)
                elif "le" in m:
                    le = float(m["le"])
                    p.hists.setdefault(name, {}).setdefault(m.get("direction", ""), []).append((le, _value(s)))

    def _add_counter(self, total: bool, name: str, samples: list[Sample], largest: bool = False) -> None:
        """One counter family's values: the hot loop (64,000 processes x 2 x 22 families a refresh).
        ``largest``: raw series, where a process renamed within the lookback has two of a counter
        (the older one stale): keep the larger value rather than the last one read."""
        fld = _COUNTER_FIELD.get(name) or (name if name in HIST_COUNTS else None)
        fld_d, label, part = _DIRECTED.get(name, ("", "", None))
        procs = self.procs
        for s in samples:
            m = s["metric"]
            key = (m.get("instance", ""), m.get("pid", ""))
            p = procs.get(key)
            if p is None:
                p = procs[key] = _Proc(m)
            elif "comm" in m:
                p.learn(m)
            counts = p.total if total else p.interval
            v = float(s["value"][1])
            if fld is not None:
                counts[fld] = max(v, counts.get(fld, v)) if largest else v
            elif fld_d:
                slot = counts.setdefault(fld_d, {}).setdefault(m.get(label, ""), {})
                k = part or "value"
                slot[k] = max(v, slot.get(k, v)) if largest else v

    def name(self, instance: str) -> str | None:
        """A target's node name: its ``gputop_build_info`` now, else the last one within NAME_LOOKBACK."""
        return self.node_of.get(instance) or self.known_node.get(instance)

    def down(self, nodes: frozenset[str] = frozenset()) -> tuple[list[str], int]:
        """The targets (instances) whose last scrape failed, and how many targets there are (of the
        nodes ``nodes`` when given)."""
        targets = [i for i in self.up if not nodes or self.name(i) in nodes]
        return sorted((i for i in targets if self.up[i] < 1), key=lambda i: (self.name(i) or i, i)), len(targets)

    def build(self, *, at: float, window_s: float, host: str, nodes: frozenset[str] = frozenset()) -> Snapshot:
        out: list[ProcSample] = []
        for (instance, pid), p in self.procs.items():
            if (not p.total and not p.gauges) or not pid.isdigit():
                continue            # only increases: the process exited (its counters are no longer current)
            node = self.node_of.get(instance)
            if nodes and node not in nodes:
                continue
            pod = self.pods.get(p.labels.get("container") or "")
            out.append(_proc_sample(p, int(pid), instance, node, window_s, pod))
        # in the order that breaks the table's ties (gputop.view.columns.identity): sorting rows that are
        # already in order is a linear pass for the dashboard's thread
        out.sort(key=lambda q: (q.node or "", q.instance or "", q.pid))
        gpus = _gpus(self.gpu_samples, self.node_of, nodes)
        sources = _sources(self.source_up, self.node_of, nodes)
        down, targets = self.down(nodes)
        said = [nodes_down(down, targets, self.name)] if down else []
        grouped = sorted(i for i in self.per_container if not nodes or self.node_of.get(i) in nodes)
        if grouped:
            said.append(per_container(grouped, self.name))
        sources["prometheus"] = SourceStatus("ok", reason="; ".join(said) or None)
        return Snapshot(time=at, interval_s=window_s, host=host, sources=sources, gpus=tuple(gpus),
                        processes=tuple(out))


def nodes_down(down: Sequence[str], targets: int, name: Any) -> str:
    """``1 of 2 nodes down: node-b`` (``name``: a target's node name, or None: the target is named)."""
    shown = [name(i) or i for i in down[:DOWN_SHOWN]]
    more = ", …" if len(down) > DOWN_SHOWN else ""
    return f"{len(down)} of {targets} node{'s' if targets != 1 else ''} down: {', '.join(shown)}{more}"


_DOWN = re.compile(r"\d+ of \d+ nodes? down: ")


def down_clause(reason: str | None) -> str | None:
    """The ``N of M nodes down: …`` clause of the prometheus source's reason (its other clauses say
    something that is no failure, such as nodes that export per container)."""
    for part in (reason or "").split("; "):
        if _DOWN.match(part):
            return part
    return None


def per_container(instances: Sequence[str], name: Any) -> str:
    """``node-c exports per container (no process rows)``: exporters run with --aggregate container."""
    shown = [name(i) or i for i in instances[:DOWN_SHOWN]]
    more = ", …" if len(instances) > DOWN_SHOWN else ""
    verb = "exports" if len(instances) == 1 else "export"
    return f"{', '.join(shown)}{more} {verb} per container (no process rows)"


#: down nodes named in the message (then ", …")
DOWN_SHOWN = 5
#: refreshes read at down targets' last scrapes (one per distinct time) in one refresh, at most
LAST_READS = 3


def build_snapshot(res: Results, *, at: float, window_s: float, host: str,
                   nodes: frozenset[str] = frozenset()) -> Snapshot:
    """The snapshot of one refresh, from its query results (pure: no I/O)."""
    b = SnapshotBuilder()
    b.add("build_info", res.build_info)
    b.add("source_up", res.source_up)
    b.add("gpus", res.gpus)
    b.add("gauges", res.gauges)
    for s in res.totals:
        b.add(f"total:{s['metric'].get('__name__', '')}", [s])
    for name, samples in res.increases.items():
        b.add(f"inc:{name}", samples)
    b.add("watched", res.watched)
    return b.build(at=at, window_s=window_s, host=host, nodes=nodes)


def _increase(inc: Mapping[str, Any], name: str) -> Any:
    """``counters.rates``' value of a Counts field from a process's increases: a directed quantity's bytes
    by direction (the directions whose bytes Prometheus answered), else the number; None: not answered."""
    v = inc.get(name)
    if v is not None and BY_FIELD[name].paired:
        return {d: pair["bytes"] for d, pair in v.items() if "bytes" in pair}
    return v


def _proc_sample(p: _Proc, pid: int, instance: str, node: str | None, window_s: float,
                 pod: Pod | None = None) -> ProcSample:
    m = p.labels
    for series, fld in _LEVELS.items():
        level = p.gauges.get(series)
        if level is not None:
            p.total[fld] = level
    total = _counts(p.total, integral=False)
    interval = _counts(p.interval, integral=True)
    inc = p.interval
    per_s = 1.0 / window_s if window_s > 0 else 0.0
    rates = None
    if inc:
        rates = counters.rates(lambda name: _increase(inc, name), per_s)

    def avg(sum_field: str, count_name: str) -> float | None:
        n = inc.get(count_name)
        s = inc.get(sum_field)
        return s / n if s is not None and n else None

    hists: dict[str, Any] = {}
    for bucket_name, fld in HISTOGRAMS:
        by_dir = p.hists.get(bucket_name)
        if by_dir is None:
            continue
        if fld == "memcpy_size_hist":
            hists[fld] = {d: _log2_hist(b) for d, b in by_dir.items()}
        else:
            hists[fld] = _log2_hist(by_dir.get("", []))
    kernels = tuple(KernelStat(name, int(n), None, None) for name, n in
                    sorted(p.kernels.items(), key=lambda kv: (-kv[1], kv[0])))
    sm = p.gauges.get("gputop_process_sm_utilization_ratio")
    gpu_mem = p.gauges.get("gputop_process_gpu_memory_bytes")
    bound = p.gauges.get("gputop_process_launch_bound")
    exited = p.gauges.get(EXITED)
    start = p.gauges.get(START_TIME)
    return ProcSample(
        pid=pid, comm=m.get("comm") or None, state="exited" if exited is not None and exited >= 0.5 else "running",
        start_time=start if start is not None and start > 0 else None, last_seen=p.seen,
        stale=False, warming_up=(not p.windowed) if p.seen is not None else None,
        cmdline=m.get("cmdline") or None, container=m.get("container") or None,
        interval=interval, total=total, rates=rates,
        grid_blocks_avg=avg("grid_blocks_sum", HIST_COUNTS[0]),
        block_threads_avg=avg("block_threads_sum", HIST_COUNTS[1]),
        kernels=kernels, gpu_index=p.gpu, gpu_mem_bytes=None if gpu_mem is None else int(gpu_mem),
        gpu_util_pct=None if sm is None else sm * 100.0, launch_bound=None if bound is None else bound >= 0.5,
        node=node, instance=instance, namespace=pod[0] if pod else None, pod=pod[1] if pod else None, **hists)


def _gpus(samples: list[Sample], node_of: Mapping[str, str], nodes: frozenset[str]) -> list[GpuSample]:
    fields_of = {name: (fld, scale) for name, fld, scale in GPU_FIELDS}
    gathered: dict[tuple[str, int, str], dict[str, Any]] = {}
    for s in samples:
        m = s["metric"]
        spec = fields_of.get(m.get("__name__", ""))
        if spec is None or not m.get("gpu", "").isdigit():
            continue
        key = (m.get("instance", ""), int(m["gpu"]), m.get("mig", ""))
        g = gathered.setdefault(key, {"uuid": m.get("uuid") or None, "name": m.get("name") or None})
        fld, scale = spec
        v = _value(s) * scale
        g[fld] = round(v) if fld in _INT_GPU_FIELDS else v
    out = []
    for (instance, index, mig), kw in gathered.items():
        node = node_of.get(instance)
        if nodes and node not in nodes:
            continue
        out.append(GpuSample(index=index, mig_instance=int(mig) if mig.isdigit() else None, node=node, **kw))
    out.sort(key=lambda g: (g.node or "", g.index, g.mig_instance or -1))
    return out


def _sources(samples: list[Sample], node_of: Mapping[str, str], nodes: frozenset[str]) -> dict[str, SourceStatus]:
    """Each source once for the fleet: ok when every node reports it up, else which nodes do not."""
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    for s in samples:
        m = s["metric"]
        instance = m.get("instance", "")
        node = node_of.get(instance) or instance
        if nodes and node_of.get(instance) not in nodes:
            continue
        (up if _value(s) >= 1 else down).setdefault(m.get("source", "?"), []).append(node)
    out: dict[str, SourceStatus] = {}
    for name in sorted(set(up) | set(down)):
        off = sorted(down.get(name, []))
        if not off:
            out[name] = SourceStatus("ok")
        else:
            n = len(off) + len(up.get(name, []))
            shown = ", ".join(off[:3]) + (", …" if len(off) > 3 else "")
            out[name] = SourceStatus("unavailable", reason=f"off on {len(off)} of {n} nodes: {shown}")
    return out


def series_points(samples: Iterable[Sample], name: str) -> dict[ProcKey, dict[str, list[tuple[float, float]]]]:
    """query_range results of the rate of quantity ``name`` (``SERIES_QUERIES``) as ``{key: {series name:
    [(t, v)]}}``, the series named as the catalogue's rate shows them (a directed one by its direction)."""
    rate = BY_FIELD[name].rate
    assert rate is not None
    out: dict[ProcKey, dict[str, list[tuple[float, float]]]] = {}
    for s in samples:
        m = s["metric"]
        k = _pkey(m)
        series = next((sh.key for sh in rate.shows if sh.direction in (None, m.get("direction"))), None)
        if k is None or series is None:
            continue
        out.setdefault(k, {})[series] = [(float(t), float(v)) for t, v in s["values"]]
    return out


# ---------------------------------------------------------------- the feed


def _tagged(expr: str, part: str) -> str:
    """``expr`` with its series tagged ``PART="part"`` (parts folded into one query stay apart)."""
    return f'label_replace({expr}, "{PART}", "{part}", "", "")'


def _regex_alt(values: Iterable[str]) -> str:
    """A PromQL regex matching exactly these values."""
    return "|".join(re.escape(v).replace("\\", "\\\\").replace('"', '\\"') for v in sorted(set(values)))


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


class FleetReader:
    """The queries of one refresh and the snapshot built from their answers: in the feed's own
    process, or in the child process of ``gputop.feeds.fleet_worker``."""

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self.window_s = parse_duration(config.window)
        self.client = PromClient(config.url, config.timeout_s or max(10.0, 2 * config.interval_s))
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

    def _selector(self, *extra: str) -> str:
        return ",".join(p for p in (self.config.match, *extra) if p)

    def jobs(self, info: list[Sample], watched: Watched) -> tuple[dict[str, str], dict[str, str]]:
        """The refresh's instant queries and its ``query_range`` ones, by job name (``SnapshotBuilder.add``)."""
        cfg = self.config
        extra = ""
        if cfg.nodes:
            instances = [s["metric"].get("instance", "") for s in info if s["metric"].get("node") in cfg.nodes]
            if not instances:
                raise FleetError("empty", f"no node named {', '.join(sorted(cfg.nodes))} in Prometheus at "
                                 f"{cfg.url}", "check --node against the node label of gputop_build_info")
            extra = f'instance=~"{_regex_alt(instances)}"'
        sel = self._selector(extra)
        w = cfg.window

        def by(name: str) -> str:
            # only the labels that identify a value: smaller answers
            return "instance,pid" + (f",{_DIRECTED[name][1]}" if name in _DIRECTED else "")

        def increase(name: str, selector: str) -> str:
            return f"sum by ({by(name)}) (increase({name}{{{selector}}}[{w}]))"

        launches = PROC_COUNTERS[0][0]
        jobs: dict[str, str] = {
            "source_up": f"gputop_source_up{{{sel}}}",
            "gpus": "{" + self._selector(extra, '__name__=~"gputop_gpu_.+"') + "}",
            # with each process's last sample and whether its series reaches back a window (warming up)
            "gauges": "{" + self._selector(extra, f'__name__=~"{"|".join(PROC_GAUGES)}"') + "}"
                      + f" or {_tagged(f'max by (instance,pid) (timestamp({launches}{{{sel}}}))', 'seen')}"
                      + f" or {_tagged(f'max by (instance,pid) ({launches}{{{sel}}} offset {w})', 'windowed')}"
                      # and the pods of the processes' containers (kube-state-metrics; none without it)
                      + f" or {_tagged(pods_expr(sel), 'pods')}",
            # the launches keep comm & co.: every process's names
            f"total:{launches}": f"max by (instance,pid,comm,cmdline,container) ({launches}{{{sel}}})",
        }
        for name in COUNTER_FAMILIES:
            if not cfg.table_only and name != launches:
                jobs[f"total:{name}"] = f"sum by ({by(name)}) ({name}{{{sel}}})"
            if not cfg.table_only or name in TABLE_FAMILIES:
                jobs[f"inc:{name}"] = increase(name, sel)
        ranges: dict[str, str] = {}
        if watched:
            wsel = self._selector(extra, self._watch_selector(watched))
            names = [*(b for b, _ in HISTOGRAMS), KERNEL_LAUNCHES]
            if cfg.table_only:
                names += COUNTER_FAMILIES
                # the other families' increases in one query, each series tagged with its family
                jobs["watched_inc"] = " or ".join(f'label_replace({increase(n, wsel)}, "family", "{n}", "", "")'
                                                  for n in COUNTER_FAMILIES if n not in TABLE_FAMILIES)
            jobs["watched"] = "{" + self._selector(wsel, f'__name__=~"{"|".join(names)}"') + "}"
            for name, expr in SERIES_QUERIES:
                ranges[f"range:{name}"] = expr.replace("{S", "{" + wsel).replace("[W]", f"[{w}]")
        return jobs, ranges

    def read(self, at: float, watched: Watched, interval_s: float) -> tuple[Snapshot, Series]:
        """One refresh: every query at ``at``; raises ``FleetError`` when Prometheus fails."""
        q = self.client.query
        info = q(self.info_query(), at)
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
        sel = self._selector(f'instance=~"{_regex_alt(instances)}"')
        last = self.client.query(f"max by (instance) (max_over_time(timestamp(gputop_build_info{{{sel}}})"
                                 f"[{NAME_LOOKBACK}:1s]))", at)
        by_time: dict[float, list[str]] = {}
        for s in last:
            by_time.setdefault(_value(s), []).append(s["metric"].get("instance", ""))
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
        """Each target's node name, folded into one query with, for the jobs that scrape gputop
        exporters, each target's ``up``, and the node names of the last NAME_LOOKBACK (a target whose
        scrapes fail has no current ``gputop_build_info``: Prometheus marks its series stale)."""
        m = self.config.match
        known = f"last_over_time(gputop_build_info{{{m}}}[{NAME_LOOKBACK}])"
        targets = f"(up{{{m}}} and on(job) {known})"
        grouped = f"count by (job, instance) (gputop_container_processes{{{m}}})"
        return (f"gputop_build_info{{{m}}} or {_tagged(known, 'known')} or {_tagged(targets, 'up')}"
                f" or {_tagged(grouped, 'containers')}")

    @staticmethod
    def _watch_selector(keys: Sequence[tuple[str, int]]) -> str:
        instances = _regex_alt(k[0] for k in keys)
        pids = _regex_alt(str(k[1]) for k in keys)
        return f'instance=~"{instances}",pid=~"{pids}"'
