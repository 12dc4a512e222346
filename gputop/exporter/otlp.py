"""``gputop exporter --otlp-endpoint URL``: the metrics of /metrics pushed as OTLP/HTTP (protobuf) at every
refresh, through the OpenTelemetry SDK's ``OTLPMetricExporter`` (the optional extra ``gputop-ebpf[otlp]``).

One source of truth: a push is built from the very metric families /metrics renders (the registries of
``gputop.modes.exporter``: the snapshot's families, the exporter's process metrics, the liveness ones), read
at the push, so the two can never differ in a value, a label or a series. ``to_metrics`` turns each family
into its OpenTelemetry form (docs/metrics.md, "OTLP"):

- a counter is a cumulative monotonic Sum, a gauge a Gauge, a histogram an explicit-bucket cumulative
  Histogram (the cumulative ``le`` buckets back to per-bucket counts; exact: whole numbers);
- the name is the Prometheus one with its ``_total`` and unit suffix taken off and ``_`` written ``.``, the
  unit in UCUM (``gputop_sync_wait_seconds_total`` -> ``gputop.sync.wait``, ``s``), chosen so that
  Prometheus' own OTLP translation (``prometheus_name``, a port of it) gives the /metrics name back; a name it
  would not give back is sent as it is, underscores as dots, without a unit;
- the labels are the data points' attributes; the resource says who pushes (``resource_attributes``).

A cumulative point's start is when gputop first pushed its series (again after its value went down:
a process's counters begin anew under its PID). The push runs on a thread of its own (``OtlpPusher``):
the collector only flags that a refresh is there, and never waits for a receiver.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gputop import __version__
from gputop.errors import EX_ERROR, EX_USAGE, GputopError

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import Metric as OtelMetric
    from opentelemetry.sdk.metrics.export import MetricsData
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry

    from gputop.feeds.http_config import HttpConfig

#: where OTLP/HTTP puts metrics under a receiver's base URL
METRICS_PATH = "/v1/metrics"
#: the instrumentation scope of every metric
SCOPE = "gputop"
#: a push's deadline (the SDK's retries included) at most, and at least; between them, the refresh interval
MAX_PUSH_S = 10.0
MIN_PUSH_S = 1.0
INSTALL_HINT = "pip install 'gputop-ebpf[otlp]' (the OpenTelemetry SDK and its OTLP/HTTP exporter)"

#: Prometheus unit suffixes -> UCUM units, longest first; _ratio only for gauges (Prometheus' translation
#: adds it to gauges of unit "1" alone)
_UNITS = (("_bytes_per_second", "By/s"), ("_seconds_per_second", "s/s"), ("_per_second", "1/s"),
          ("_seconds", "s"), ("_bytes", "By"), ("_watts", "W"), ("_hertz", "Hz"), ("_celsius", "Cel"),
          ("_ratio", "1"))
#: Prometheus' translation of UCUM units (storage/remote/otlptranslator: unitMap, perUnitMap), those used here
_PROM_UNIT = {"s": "seconds", "By": "bytes", "W": "watts", "Hz": "hertz", "Cel": "celsius", "1": ""}
_PROM_PER_UNIT = {"s": "second"}
_TOKEN = re.compile(r"[^\W_]+")
#: a Kubernetes pod's cgroup (its UID with dashes, or underscores under the systemd driver)
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")


def need_sdk() -> None:
    """Raise the error a user sees when the OTLP extra is not installed."""
    try:
        import opentelemetry.exporter.otlp.proto.http.metric_exporter
        import opentelemetry.sdk.metrics.export  # noqa: F401
    except ImportError as e:
        hint = INSTALL_HINT if sys.version_info >= (3, 10) else "the OpenTelemetry SDK's exporter needs Python 3.10+"
        raise GputopError(f"--otlp-endpoint needs the OpenTelemetry SDK, which is not installed ({e.name or e})",
                          hint, EX_ERROR) from None


def metrics_url(endpoint: str) -> str:
    """The URL pushes go to: ``endpoint`` as OTEL_EXPORTER_OTLP_ENDPOINT reads, a receiver's base URL that
    ``/v1/metrics`` is added to (``http://collector:4318``, ``http://prometheus:9090/api/v1/otlp``), unless it
    ends with it already. A login in the URL is refused: it would show in ``ps`` and in every message."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(endpoint)
        parts.port                              # noqa: B018 (raises ValueError for a port out of range)
    except ValueError as e:
        raise GputopError(f"--otlp-endpoint: not a URL: {e}", "give http(s)://HOST:PORT[/PATH]", EX_USAGE) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GputopError(f"--otlp-endpoint: expected an http:// or https:// URL with a host, not {endpoint!r}",
                          "give the receiver's base URL, e.g. http://collector:4318 or "
                          "http://prometheus:9090/api/v1/otlp", EX_USAGE)
    if parts.username is not None or parts.password is not None:
        raise GputopError("--otlp-endpoint: a login in the URL is refused (it would show in ps and in messages)",
                          "give it in --otlp-http-config-file (basic_auth with password_file, or authorization "
                          "with credentials_file)", EX_USAGE)
    path = parts.path.rstrip("/")
    if not path.endswith(METRICS_PATH):
        path += METRICS_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def push_timeout(interval_s: float) -> float:
    """A push's deadline: the refresh interval, between MIN_PUSH_S and MAX_PUSH_S."""
    return min(MAX_PUSH_S, max(MIN_PUSH_S, interval_s))


# ------------------------------------------------------------------ names


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The name Prometheus' OTLP receiver gives a metric (its translation with suffixes, the default of
    Prometheus 2.x and 3.x and of VictoriaMetrics' -opentelemetry.usePrometheusNaming), for the units used here."""
    tokens = _TOKEN.findall(name)
    main, _, per = unit.partition("/")
    if main and "{" not in main:
        suffix = _PROM_UNIT.get(main, main)
        if suffix and suffix not in tokens:
            tokens.append(suffix)
    if per and "{" not in per:
        suffix = _PROM_PER_UNIT.get(per, per)
        if suffix not in tokens:
            tokens += ["per", suffix]
    if kind == "counter":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and kind == "gauge":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    return "_".join(tokens)


def otel_name(family: str, kind: str) -> tuple[str, str]:
    """(OpenTelemetry name, UCUM unit) of the Prometheus family ``family`` (a counter's without ``_total``)
    of type ``kind``: the unit suffix off the name into the unit, ``_`` as ``.``; as it is, without a unit,
    where Prometheus' translation would not give ``family`` back."""
    want = family + "_total" if kind == "counter" else family
    for suffix, unit in _UNITS:
        if family.endswith(suffix) and (unit != "1" or kind == "gauge"):
            name = family[:-len(suffix)].replace("_", ".")
            if prometheus_name(name, unit, kind) == want:
                return name, unit
            break
    name = family.replace("_", ".")
    if prometheus_name(name, "", kind) != want:     # a name Prometheus would change whatever the unit
        return family, ""
    return name, ""


# ------------------------------------------------------------------ families -> OpenTelemetry


class Starts:
    """The start time of each cumulative series: when a push first carried it, again after its value went
    down. Holds the series of the last push only."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int, float]] = {}
        self._next: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int, float]] = {}

    def start(self, name: str, labels: dict[str, str], value: float, now_ns: int) -> int:
        key = (name, tuple(sorted(labels.items())))
        old = self._seen.get(key)
        start = old[0] if old is not None and value >= old[1] else now_ns
        self._next[key] = (start, value)
        return start

    def done(self) -> None:
        """One push built: the series it did not carry are forgotten."""
        self._seen, self._next = self._next, {}


def _histogram_points(fam: Metric) -> Iterator[tuple[dict[str, str], list[float], list[int], int, float]]:
    """(labels, finite bounds, per-bucket counts, count, sum) of each series of a histogram family."""
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for s in fam.samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        one = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "le": [], "sum": 0.0,
                                                                "count": None})
        if s.name == fam.name + "_bucket":
            one["le"].append((float(s.labels["le"]), s.value))
        elif s.name == fam.name + "_sum":
            one["sum"] = s.value
        elif s.name == fam.name + "_count":
            one["count"] = s.value
    for one in series.values():
        les = sorted(one["le"])
        bounds = [le for le, _ in les if le != float("inf")]
        counts: list[int] = []
        below = 0
        for _, cumulative in les:
            counts.append(int(cumulative) - below)
            below = int(cumulative)
        if not les or les[-1][0] != float("inf"):
            counts.append(0)
        total = int(one["count"]) if one["count"] is not None else below
        yield one["labels"], bounds, counts, total, float(one["sum"])


def to_metrics(families: Iterable[Metric], now_ns: int, starts: Starts) -> list[OtelMetric]:
    """The OpenTelemetry metrics of Prometheus ``families`` (counters, gauges, histograms; families of
    other types, which gputop does not make, are left out)."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        HistogramDataPoint,
        NumberDataPoint,
        Sum,
    )
    from opentelemetry.sdk.metrics.export import Metric as OtelMetric

    cumulative = AggregationTemporality.CUMULATIVE
    out: list[OtelMetric] = []
    for fam in families:
        if fam.type not in ("counter", "gauge", "histogram"):
            continue
        name, unit = otel_name(fam.name, fam.type)
        data: Any
        if fam.type == "histogram":
            points = [HistogramDataPoint(attributes=labels, start_time_unix_nano=starts.start(name, labels, n, now_ns),
                                         time_unix_nano=now_ns, count=n, sum=total, bucket_counts=counts,
                                         explicit_bounds=bounds, min=None, max=None)    # type: ignore[arg-type]
                      for labels, bounds, counts, n, total in _histogram_points(fam)]
            data = Histogram(data_points=points, aggregation_temporality=cumulative)
        else:
            value_of = fam.name + "_total" if fam.type == "counter" else fam.name
            numbers = [NumberDataPoint(attributes=dict(s.labels), time_unix_nano=now_ns, value=s.value,
                                       start_time_unix_nano=(starts.start(name, s.labels, s.value, now_ns)
                                                             if fam.type == "counter" else 0))
                       for s in fam.samples if s.name == value_of]
            data = (Sum(data_points=numbers, aggregation_temporality=cumulative, is_monotonic=True)
                    if fam.type == "counter" else Gauge(data_points=numbers))
        if data.data_points:
            out.append(OtelMetric(name=name, description=fam.documentation, unit=unit, data=data))
    return out


def resource_attributes(node: str | None, cgroup_text: str | None) -> dict[str, str]:
    """What the resource says of the pusher: the service (gputop, its version, one instance per node), the
    host, and the container and Kubernetes pod gputop itself runs in, where its cgroup names them."""
    from gputop.sources.host import parse_container

    host = socket.gethostname()
    attrs = {"service.name": "gputop", "service.version": __version__, "service.instance.id": node or host,
             "host.name": host}
    container = parse_container(cgroup_text) if cgroup_text else None
    if container is not None and re.fullmatch(r"[0-9a-f]{64}", container):
        attrs["container.id"] = container
    for line in (cgroup_text or "").splitlines():
        for part in line.split("/"):
            m = _POD_UID.search(part)
            if m and "kubepods" in line:
                attrs["k8s.pod.uid"] = m.group(1).replace("_", "-")
                if node:
                    attrs["k8s.node.name"] = node
    return attrs


def make_resource(attributes: dict[str, str]) -> Resource:
    """The resource of every push: ``attributes``, overridden by OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    return Resource(attributes).merge(OTELResourceDetector().detect())


def metrics_data(families: Iterable[Metric], resource: Resource, now_ns: int, starts: Starts) -> MetricsData:
    """One push: ``families`` under ``resource``."""
    from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    metrics = to_metrics(families, now_ns, starts)
    scope = ScopeMetrics(scope=InstrumentationScope(SCOPE, __version__), metrics=metrics, schema_url="")
    return MetricsData(resource_metrics=[ResourceMetrics(resource=resource, scope_metrics=[scope], schema_url="")])


# ------------------------------------------------------------------ the pusher


@dataclass
class PushStats:
    pushes: int = 0
    failures: int = 0
    skipped: int = 0
    duration_s: float | None = None


class StatsCollector(Collector):
    """The pusher's own counts, served on /metrics (and pushed) with the exporter's other self-metrics."""

    def __init__(self, stats: PushStats) -> None:
        self._stats = stats

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        yield CounterMetricFamily("gputop_otlp_pushes", "OTLP pushes tried (--otlp-endpoint): one per refresh "
                                  "unless a push was still running.", value=float(s.pushes))
        yield CounterMetricFamily("gputop_otlp_push_failures", "OTLP pushes that failed: refused, unreachable or "
                                  "over their deadline (the SDK's retries within it included).",
                                  value=float(s.failures))
        yield CounterMetricFamily("gputop_otlp_pushes_skipped", "Refreshes not pushed: a newer one came while "
                                  "a push was running.", value=float(s.skipped))
        if s.duration_s is not None:
            yield GaugeMetricFamily("gputop_otlp_push_duration_seconds", "Seconds the last OTLP push took.",
                                    value=s.duration_s)


#: the loggers of the SDK's exporter and resources (a bad OTEL_RESOURCE_ATTRIBUTES item is said there)
_SDK_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk.resources")


class _LastLog(logging.Handler):
    """Keeps the SDK's last message instead of printing it: the pusher says why a push failed, once."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.last = record.getMessage().splitlines()[0][:300] if record.levelno >= logging.WARNING else self.last
        except Exception:           # a message that does not format: nothing kept
            self.last = None


class OtlpPusher:
    """Pushes the registries' families to ``url`` after each refresh (``offer``), on a thread of its own:
    the newest refresh is pushed, one at a time; a refresh that comes while a push runs replaces the one
    waiting (``skipped``). A push ends by its deadline; its failure is counted and said on stderr when the
    state changes (working, or failing and why), never a traceback."""

    def __init__(self, registries: Sequence[CollectorRegistry], url: str, *, interval_s: float,
                 http_config: HttpConfig | None = None, node: str | None = None,
                 say: Callable[[str], None] = lambda _: None, cgroup_text: str | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        from gputop.exporter.otlp_http import BoundedSession

        self.url = url
        self.timeout_s = push_timeout(interval_s)
        self.stats = PushStats()
        self._registries = registries
        self._say = say
        self._starts = Starts()
        self._log = _LastLog()
        for name in _SDK_LOGGERS:           # the SDK's messages are said here, once per state, not at each push
            sdk_log = logging.getLogger(name)
            sdk_log.addHandler(self._log)
            sdk_log.propagate = False
        self.resource = make_resource(resource_attributes(node, cgroup_text))
        self.session = BoundedSession(http_config, self.timeout_s)
        headers: dict[str, str] = {}
        for name, value in http_config.headers if http_config else ():
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self._exporter = OTLPMetricExporter(endpoint=url, headers=headers or None, timeout=self.timeout_s,
                                            session=self.session)
        self._lock = threading.Lock()
        self._pending = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._failing: str | None = None           # why pushes fail now; None while they work (or before one)
        self._failed_in_row = 0
        self._thread = threading.Thread(target=self._run, name="gputop-otlp", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def offer(self) -> None:
        """A refresh is there (the collector's thread): push it when the pusher is free; never waits."""
        with self._lock:
            if self._pending:
                self.stats.skipped += 1
            self._pending = True
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                self._pending = False
            try:
                self.push()
            except Exception as e:          # a bug: said once, the pusher goes on with the next refresh
                self._failed(f"{type(e).__name__}: {e}")

    def push(self) -> bool:
        """One push of the registries' families as they are now; True when the receiver took it."""
        from opentelemetry.sdk.metrics.export import MetricExportResult

        families = [m for r in self._registries for m in r.collect()]
        data = metrics_data(families, self.resource, time.time_ns(), self._starts)
        self._starts.done()
        self._log.last = None
        self.session.last_error = None
        t0 = time.monotonic()
        result = self._exporter.export(data, timeout_millis=self.timeout_s * 1000)
        duration = time.monotonic() - t0
        if self._stop.is_set():
            return False                    # cut short by the exporter's stop: not counted
        self.stats.pushes += 1
        self.stats.duration_s = duration
        if result is MetricExportResult.SUCCESS:
            if self._failing is not None:
                self._say(f"exporter: OTLP pushes to {self.url} work again (after {self._failed_in_row} failed)")
            elif self.stats.pushes == 1:
                self._say(f"exporter: the first OTLP push to {self.url} was taken")
            self._failing, self._failed_in_row = None, 0
            return True
        why = self.session.last_error or self._log.last or "the OpenTelemetry SDK did not send it"
        self._failed(why)
        return False

    def _failed(self, why: str) -> None:
        self.stats.failures += 1
        self._failed_in_row += 1
        if why != self._failing:
            self._say(f"warning: exporter: OTLP push to {self.url} failed: {why}; counted in "
                      "gputop_otlp_push_failures_total, tried again at the next refresh")
        self._failing = why

    def stop(self) -> None:
        """Stop pushing: a push under way ends by its deadline (its retries are cut short now)."""
        self._stop.set()
        self._wake.set()
        with contextlib.suppress(Exception):     # the SDK's own shutdown failing: nothing more to do
            self._exporter.shutdown()
        if self._thread.is_alive():
            self._thread.join(self.timeout_s + 1.0)
        for name in _SDK_LOGGERS:
            logging.getLogger(name).removeHandler(self._log)
