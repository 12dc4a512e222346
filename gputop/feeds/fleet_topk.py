"""The dashboard's fleet reading at scale: the table's top K rows by its sort column, and the fleet's totals
summed by Prometheus (``FleetConfig.top``; docs/fleet.md, "The table's top rows").

The dashboard shows a screenful of rows sorted by one column. Reading every family of every process to
sort 64,000 rows client-side costs Prometheus some 21 CPU seconds a refresh; instead a refresh asks:

1. ``topk(K, E)`` (``bottomk`` for an ascending sort) of the sort column's value ``E`` by (instance, pid),
   evaluated by Prometheus (``sort_expr``: the same increases, levels and ratios the client computes),
   within the filter's processes (``filter_expr``: the dashboard's ``/`` text as label matchers on
   command, command line, user, PID, the node names' targets and the pods' containers, so that a
   filter finds any process of the fleet, not only the top K); where fewer than K processes have a
   value, up to K of the others (their value is unknown: they sort last);
2. the exited processes (a handful: their rates are not summed) and the fleet's totals, aggregated by
   Prometheus (``totals_queries``: process count, launches/s, graph kernels/s, copies by direction, how
   many are warming up, and how many processes carry each summed family, so that a total is unknown
   (None) where a process's value is, as the client's sum would be);
3. every other column for those K processes (and the watched and exited ones) only: the table's usual
   queries, their selector narrowed to the processes' instances and PIDs; of the GPUs, over GPU_LINES
   at the last refresh and without a filter, only the families the panel's lines per node show.

A sort column whose value is a label (PID, node, command, user, namespace, pod, GPU; and the columns the
fleet view never knows, CPU, RSS and the like, and S: unknown but for the exited processes) is ranked by the
client instead (``LABEL_SORTS``): step 1 is one query of just the identifying labels of the filter's
processes (``label_query``: ``group by (instance, pid, <the column's labels>)`` of the launches counter,
and for a GPU or pod sort the gauges' ``gpu`` labels or the pods of the containers), sorted by the
table's own comparison (``rank_labels``: ``gputop.view.columns.sort_processes`` over rows that carry
those labels only, so the ties' order, lowered strings and unknown-last are the table's), its top K taken;
steps 2 and 3 are as above. Every other column is a value Prometheus orders by. Stdlib only."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gputop.counters import SHOWS, Per
from gputop.feeds.fleet_client import Sample, sample_value
from gputop.feeds.fleet_pods import Pod, add_pod, pods_expr
from gputop.feeds.fleet_queries import EXITED, LEVELS, PART, PROC_GAUGES, selector
from gputop.model import ProcSample, Snapshot, Summary, summarize
from gputop.view.columns import BY_KEY, sort_processes

#: rows read for the table: what it shows (about 40 lines) with room to page through several screens
TOP_K = 500

LAUNCHES = "gputop_kernel_launches_total"
#: the summed families of the summary line: (Summary field, series, direction label value or "")
SUMMED: tuple[tuple[str, str, str], ...] = (
    ("launches_per_s", LAUNCHES, ""),
    ("graph_kernel_launches_per_s", "gputop_graph_kernel_launches_total", ""),
    ("h2d_bytes_per_s", "gputop_memcpy_bytes_total", "h2d"),
    ("d2h_bytes_per_s", "gputop_memcpy_bytes_total", "d2h"),
    ("d2d_bytes_per_s", "gputop_memcpy_bytes_total", "d2d"),
)
#: the fleet's GPU panel shows each GPU while there are at most this many, else a line per node
#: (``gputop.ui.widgets.gpu_panel.FLEET_GPU_LINES``)
GPU_LINES = 16
#: the GPU families a node's line shows (utilisation, memory, hottest, power, XID errors): what a top-K
#: refresh reads of the GPUs while the last one had more than GPU_LINES and no filter narrows the panel
NODE_LINE_GPU = ("gputop_gpu_utilization_ratio", "gputop_gpu_memory_used_bytes", "gputop_gpu_memory_total_bytes",
                 "gputop_gpu_temperature_celsius", "gputop_gpu_power_watts", "gputop_gpu_xid_errors_total")
#: the sort columns the client ranks (labels, not values): the labels of the launches counter each needs
#: besides (instance, pid) (the node is the target's, from the build-info query; GPU and pod: see
#: ``label_query``); CPU, CPU time, RSS and %MEM are unknown for every process of the fleet (the ties'
#: order), S for all but the exited ones (the exited query's)
LABEL_SORTS: dict[str, tuple[str, ...]] = {
    "pid": (), "node": (), "command": ("comm", "cmdline"), "user": ("user",), "namespace": ("container",),
    "pod": ("container",), "gpu": (), "state": (), "cpu": (), "cpu_time": (), "rss": (), "mem": ()}
_RATE_FIELD = {"launches_per_s": "launches_per_s", "graph_kernel_launches_per_s": "graph_kernel_launches_per_s"}


@dataclass(frozen=True)
class View:
    """What the table shows: its sort column (``-s`` key), direction and filter text (``/``)."""

    sort: str
    descending: bool = True
    query: str = ""


@dataclass(frozen=True)
class Scope:
    """What a top-K refresh read: the table holds ``rows`` of the ``processes`` matching ``view.query``
    (the fleet's, without one), the top ``top`` by ``view.sort``."""

    view: View
    top: int
    processes: int
    rows: int
    summary: Summary

    @property
    def partial(self) -> bool:
        """Whether the table leaves processes out (more match than it holds)."""
        return self.processes > self.top


# ---------------------------------------------------------------- PromQL


def _rate_sort(key: str, sel: str, w: str, w_s: float) -> str | None:
    q, shows = SHOWS[key]
    if q.directions:
        name = next((n for n, part in q.directed_series() if part in ("bytes", None)), None)
        extra = f'{q.direction_label}="{shows.direction}"'
    else:
        name, extra = q.series, ""
    if name is None:
        return None
    e = f"sum by (instance,pid) (increase({name}{{{selector(sel, extra)}}}[{w}]))"
    assert q.rate is not None
    # the client's percentage is min(100, 100 x increase / window): the same order, ties at the cap included
    return f"clamp_max({e}, {w_s:g})" if q.rate.per is Per.PERCENT else e


def sort_expr(key: str, sel: str, w: str, w_s: float) -> str | None:
    """PromQL of column ``key``'s value by (instance, pid), in the client's order (a positive multiple of
    it: the increase for a rate); None: a column Prometheus cannot order by (labels)."""
    if key in SHOWS:
        return _rate_sort(key, sel, w, w_s)
    avg = {"grid": "gputop_kernel_grid_blocks", "block": "gputop_kernel_block_threads"}.get(key)
    if avg is not None:     # the client's average: None where no launch was counted, so is this
        return (f"sum by (instance,pid) (increase({avg}_sum{{{sel}}}[{w}])) / "
                f"(sum by (instance,pid) (increase({avg}_count{{{sel}}}[{w}])) > 0)")
    gauge = {"gpu_mem": "gputop_process_gpu_memory_bytes", "sm": "gputop_process_sm_utilization_ratio",
             "launch_bound": "gputop_process_launch_bound",
             "live_mem": next(k for k, v in LEVELS.items() if v == "live_alloc_bytes")}.get(key)
    if gauge is None:
        return None
    if key == "launch_bound":       # the client's flag: >= 0.5
        return f"max by (instance,pid) ({gauge}{{{sel}}} >= bool 0.5)"
    return f"max by (instance,pid) ({gauge}{{{sel}}})"


def _regex(text: str) -> str:
    """``text`` as an RE2 literal inside a PromQL string (its metacharacters escaped, then the string's)."""
    out = "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in text)
    return out.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def filter_expr(query: str, sel: str, instances: Iterable[str] = ()) -> str:
    """The processes ``query`` finds (``gputop.view.columns.matches``: a case-insensitive part of the
    command, command line, user, node, pod or namespace, or the PID), as PromQL of (instance, pid): a
    superset of the client's matches (the client filters the rows read again). ``instances``: the
    targets whose node name it finds (the client knows the names: the build-info query). "": no filter."""
    q = query.strip()
    if not q:
        return ""
    r = f'"(?i).*{_regex(q)}.*"'
    s = f"{sel}," if sel else ""
    parts = [f"count by (instance,pid) ({LAUNCHES}{{{s}{label}=~{r}}})" for label in ("comm", "cmdline", "user")]
    if q.isdigit():
        parts.append(f'count by (instance,pid) ({LAUNCHES}{{{s}pid="{int(q)}"}})')
    found = sorted(set(instances))
    if found:
        alt = "|".join(_regex(i) for i in found)
        parts.append(f'count by (instance,pid) ({LAUNCHES}{{{s}instance=~"{alt}"}})')
    pods = (f'(label_replace(kube_pod_container_info{{container_id!="",{m}=~{r}}}, "container", "$1", '
            f'"container_id", "[^:]+://(.+)") or label_replace(kube_pod_info{{uid!="",{m}=~{r}}}, "container", '
            f'"$1", "uid", "(.+)"))' for m in ("namespace", "pod"))
    parts.append(f'count by (instance,pid) ({LAUNCHES}{{{s}container!=""}} and on(container) '
                 f'({" or ".join(pods)}))')
    return "(" + " or ".join(parts) + ")"


def _within(expr: str, where: str) -> str:
    return f"({expr} and on(instance,pid) {where})" if where else expr


def top_query(view: View, k: int, sel: str, w: str, w_s: float, where: str) -> str | None:
    """``topk(k, E)`` (``bottomk`` ascending) of the sort column within the filter's processes ``where``."""
    e = sort_expr(view.sort, sel, w, w_s)
    if e is None:
        return None
    return f"{'topk' if view.descending else 'bottomk'}({k}, {_within(e, where)})"


def _tagged(expr: str, part: str) -> str:
    return f'label_replace({expr}, "{PART}", "{part}", "", "")'


def label_query(key: str, sel: str, where: str) -> str | None:
    """The identifying labels of the filter's processes (``where``) that the table's sort by column ``key``
    compares (``LABEL_SORTS``), tagged by part: ``procs``, a series per process and label set of its
    launches counter (every process the table reads: those without the labels are unknown, sorted last);
    for a GPU sort ``gpu``, the GPU indices its gauges carry (as the snapshot takes them); for a namespace
    or pod sort ``pods``, the pods of the containers (``fleet_pods.pods_expr``). None: not a label sort."""
    labels = LABEL_SORTS.get(key)
    if labels is None:
        return None
    by = ",".join(("instance", "pid", *labels))
    parts = [_tagged(_within(f"group by ({by}) ({LAUNCHES}{{{sel}}})", where), "procs")]
    if key == "gpu":
        gpus = selector(sel, f'__name__=~"{"|".join(PROC_GAUGES)}"', 'gpu=~"[0-9]+"')
        parts.append(_tagged(_within(f"group by (instance,pid,gpu) ({{{gpus}}})", where), "gpu"))
    elif key in ("namespace", "pod"):
        parts.append(_tagged(pods_expr(sel), "pods"))
    return " or ".join(parts)


def rank_labels(view: View, k: int, answer: Iterable[Sample], node_of: Mapping[str, str],
                exited: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The top ``k`` processes (instance, pid) of ``label_query``'s answer by the table's sort ``view``:
    each process as a row of its labels only (node: ``node_of``, the targets' names; S: ``exited``), sorted
    by ``sort_processes`` (the table's comparison and ties). A process with two label sets (renamed within
    the lookback, gauges on two GPUs: the snapshot keeps one of them) ranks by the higher one."""
    pods: dict[str, Pod | None] = {}
    procs: list[Mapping[str, str]] = []
    gpus: dict[tuple[str, str], list[int]] = {}
    for s in answer:
        m = s["metric"]
        part = m.get(PART)
        if part == "pods":
            add_pod(pods, m)
        elif m.get("pid", "").isdigit():
            if part == "gpu":
                gpus.setdefault((m.get("instance", ""), m["pid"]), []).append(int(m["gpu"]))
            else:
                procs.append(m)
    gone = set(exited)
    rows: list[ProcSample] = []
    for m in procs:
        instance, pid = m.get("instance", ""), int(m["pid"])
        container = m.get("container") or None
        pod = pods.get(container or "")
        fields = {"pid": pid, "comm": m.get("comm") or None, "cmdline": m.get("cmdline") or None,
                  "user": m.get("user") or None, "container": container, "node": node_of.get(instance),
                  "instance": instance, "state": "exited" if (instance, pid) in gone else "running",
                  "namespace": pod[0] if pod else None, "pod": pod[1] if pod else None}
        on: list[int | None] = [*gpus.get((instance, m["pid"]), ())] or [None]
        for g in on:
            rows.append(_row({**fields, "gpu_index": g}))
    out: dict[tuple[str, int], None] = {}
    for p in sort_processes(rows, view.sort, BY_KEY[view.sort].descending != view.descending):
        out[(p.instance or "", p.pid)] = None
        if len(out) >= k:
            break
    return list(out)


def _row(fields: dict[str, object]) -> ProcSample:
    """A ``ProcSample`` of these fields, the others their defaults (the class's attributes): without the
    frozen dataclass's ``__init__`` (a quarter of the cost at 64,000 rows: they are ranked, then dropped;
    every field of ``ProcSample`` has a plain default, no factory)."""
    row = object.__new__(ProcSample)
    row.__dict__.update(fields)
    return row


def rest_query(view: View, k: int, sel: str, w: str, w_s: float, where: str) -> str:
    """Up to ``k`` processes without a value of the sort column (they sort last)."""
    e = sort_expr(view.sort, sel, w, w_s)
    procs = _within(f"count by (instance,pid) ({LAUNCHES}{{{sel}}})", where)
    return f"bottomk({k}, {procs} unless on(instance,pid) {e})"


def exited_query(sel: str, where: str) -> str:
    """The processes the exporters say exited (their rates are not summed): a handful."""
    return _within(f"count by (instance,pid) ({EXITED}{{{sel}}} >= 0.5)", where)


def totals_queries(sel: str, w: str, where: str) -> list[str]:
    """The fleet's totals, every process included (the exited ones are taken out by the client: their
    values are read with the rows), as two queries of tagged parts run side by side (Prometheus evaluates
    a query on one core): ``n`` processes (those with a launches counter), ``warming`` (no sample a
    window ago), and for each summed family its sum of increases (``sum:SERIES``, by direction where it has
    one: the copies' sum a query of its own, the dearest part) and how many processes carry it
    (``count:SERIES``): the launches' increases (a process without any has no rates: every sum is
    unknown), the other families' series (they are scraped with the launches; a copy family's first
    direction's: the exporter exports all its directions or none)."""
    procs = _within(f"count by (instance,pid) ({LAUNCHES}{{{sel}}})", where)
    first = [(f"count({procs})", "n"),
             (f"count({procs} unless on(instance,pid) {LAUNCHES}{{{sel}}} offset {w})", "warming")]
    queries: list[list[tuple[str, str]]] = [first]
    for series in dict.fromkeys(s for _, s, _ in SUMMED):
        direction = next((d for _, s, d in SUMMED if s == series and d), "")
        # by series, not summed by process first (that costs Prometheus half as much again): a process
        # renamed within the lookback has two series, and may count twice
        summed = "|".join(d for _, s, d in SUMMED if s == series)
        dirs = selector(sel, f'direction=~"{summed}"') if direction else sel
        inc = _within(f"increase({series}{{{dirs}}}[{w}])", where)
        one = selector(sel, 'direction="' + direction + '"' if direction else "")
        have = inc if series == LAUNCHES else _within(f"{series}{{{one}}}", where)
        first.append((f"count({have})", f"count:{series}"))
        if direction:
            queries.append([(f"sum by (direction) ({inc})", f"sum:{series}")])
        else:
            first.append((f"sum({inc})", f"sum:{series}"))
    return [" or ".join(f'label_replace({e}, "{PART}", "{tag}", "", "")' for e, tag in q) for q in queries]


def node_line_gpus(sel: str) -> str:
    """The GPUs' node-line families (``NODE_LINE_GPU``) of the targets ``sel``: half the GPU panel's series."""
    return "{" + selector(sel, f'__name__=~"{"|".join(NODE_LINE_GPU)}"') + "}"


def keys_of(samples: Iterable[Sample]) -> list[tuple[str, int]]:
    """The processes of an answer by (instance, pid), in its order."""
    out = []
    for s in samples:
        m = s["metric"]
        if m.get("pid", "").isdigit():
            out.append((m.get("instance", ""), int(m["pid"])))
    return out


# ---------------------------------------------------------------- the totals


def fleet_summary(totals: Sequence[Sample], snap: Snapshot, exited: Sequence[ProcSample], window_s: float) -> Summary:
    """The summary line of the whole fleet (or the filter's processes) from ``totals_queries``' answers:
    ``exited``, the exited processes' rows (their values taken out of the sums, as the client does not
    sum them), and the down nodes' stale rows of ``snap`` (counted, not summed, as ``summarize`` does)."""
    got: dict[str, dict[str, float]] = {}
    for s in totals:
        m = s["metric"]
        got.setdefault(m.get(PART, ""), {})[m.get("direction", "")] = sample_value(s)
    n = round(got.get("n", {}).get("", 0.0))
    stale = [p for p in snap.processes if p.stale]
    base = summarize(snap, stale)           # the GPUs, and the stale rows' states
    n_exited = len(exited)
    current = n - n_exited
    warming = round(got.get("warming", {}).get("", 0.0)) - sum(1 for p in exited if p.warming_up)
    sums: dict[str, float | None] = {}
    # every row a down node's, or a current process without rates (no increase of its launches: a single
    # sample in the window): the sums are unknown, as the client's would be
    rated = round(got.get(f"count:{LAUNCHES}", {}).get("", 0.0)) - sum(1 for p in exited if p.rates is not None)
    unknown = (current <= 0 and bool(stale)) or rated < current
    for fld, series, d in SUMMED:
        have = round(got.get(f"count:{series}", {}).get("", 0.0))
        total = got.get(f"sum:{series}", {}).get(d, 0.0)
        for p in exited:        # their increases are read with the rows; out of the sums
            v = _exited_increase(p, fld, d, window_s)
            if v is not None:
                have -= 1
                total -= v
        # a current process without the family: its rate is unknown, so is the sum (as the client's)
        sums[fld] = None if unknown or have < current else total / window_s
    return replace(base, processes=n + base.processes, running=current + base.running,
                   exited=n_exited + base.exited, warming_up=max(0, warming),
                   launches_per_s=sums["launches_per_s"],
                   graph_kernel_launches_per_s=sums["graph_kernel_launches_per_s"],
                   h2d_bytes_per_s=sums["h2d_bytes_per_s"], d2h_bytes_per_s=sums["d2h_bytes_per_s"],
                   d2d_bytes_per_s=sums["d2d_bytes_per_s"])


def _exited_increase(p: ProcSample, fld: str, direction: str, window_s: float) -> float | None:
    """An exited process's increase of a summed family over the window (from its rates), None: none."""
    r = p.rates
    if r is None:
        return None
    v = r.memcpy_bytes_per_s.get(direction) if direction and r.memcpy_bytes_per_s else (
        None if direction else getattr(r, _RATE_FIELD[fld], None))
    return None if v is None else v * window_s

