"""Details of one process: counters, top kernels, time series and launch-shape histograms."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.widgets import Footer

from gputop import latency
from gputop.counters import PROC, Quantity, Shown
from gputop.model import Counts, ProcKey, ProcSample
from gputop.ui import bindings, charts
from gputop.ui.screens.base import LiveScreen
from gputop.ui.themes import ChartPalette
from gputop.ui.widgets.chart import Chart
from gputop.ui.widgets.header import HeaderBar
from gputop.ui.widgets.panels import KernelsPanel, TextPanel
from gputop.ui.widgets.sites import SitesPanel
from gputop.view import fields, sites
from gputop.view import format as fmt
from gputop.view.history import Point, series

_MUTED = "$foreground 60%"


def hist_buckets(hist: Mapping[str, int] | None, limit: int = 24, min_span: int = 8) -> tuple[list[str], list[float]]:
    """Log2 buckets ``{"2^k": n}`` as labels and counts from the lowest to the highest k, gaps as 0; at
    least ``min_span`` buckets (empty ones on either side, none below 2^0 unless the data goes there),
    so that one block size reads as one bar among its neighbours, not a block the chart's width."""
    if not hist:
        return [], []
    by_k: dict[int, int] = {}
    for key, n in hist.items():
        try:
            by_k[int(str(key).split("^", 1)[1])] = int(n)
        except (IndexError, ValueError):
            continue
    if not by_k:
        return [], []
    lo, hi = min(by_k), max(by_k)
    lo = max(lo, hi - limit + 1)
    short = min(min_span, limit) - (hi - lo + 1)
    if short > 0:
        lo = max(min(lo, 0), lo - short // 2)
        hi = lo + min(min_span, limit) - 1
    ks = range(lo, hi + 1)
    return [fmt.si(2**k, 0) for k in ks], [float(by_k.get(k, 0)) for k in ks]


def _pair(a: str, b: str) -> str:
    return f"{a} / {b}"


#: what a cell does to each number it shows: the last-interval column marks those that read low
#: (``fmt.reads_low``: a process warming up in the fleet view), the total column keeps them
Mark = Callable[[str], str]


def _as_is(value: str) -> str:
    return value


def _calls(calls: float | None, mark: Mark = _as_is) -> str:
    """``1 call``, ``3 calls``, ``N/A calls``."""
    return f"{mark(fmt.si(calls))} {'call' if calls == 1 else 'calls'}"


def _calls_bytes(calls: float | None, nbytes: float | None, mark: Mark = _as_is) -> str:
    """``1 call, 0 bytes``, ``3 calls, 50.2M bytes`` (K, M, G of bytes: KiB, MiB, GiB)."""
    return f"{_calls(calls, mark)}, {mark(fmt.bytes_(nbytes))} bytes"


def _cb(c: Counts | None, group: str, key: str) -> tuple[int | None, int | None]:
    """(calls, bytes) of ``key`` in a memcpy or prefetch group of ``c``."""
    table = getattr(c, group) if c is not None else None
    if table is None:
        return None, None
    cb = table.get(key)
    return (cb.calls, cb.bytes) if cb is not None else (None, None)


def _per_s(text: str) -> str:
    return text if text == fmt.NA else f"{text}/s"


def _avg(total: int | None, n: int | None) -> float | None:
    return total / n if total is not None and n else None


#: the stats table's column headers
STATS_HEAD = ("", "last interval", "since first seen")


def _get(c: Counts | None, name: str | None) -> int | float | None:
    return getattr(c, name) if c is not None and name is not None else None


def _special_rows(p: ProcSample, q: Quantity, low: Mark = _as_is) -> list[tuple[str, str, str]]:
    """The rows of a quantity the catalogue marks ``Shown.SPECIAL``: rates, averages, directions, levels;
    ``low`` marks the last interval's rates and counts (not its averages and levels)."""
    iv, tot = p.interval, p.total
    label = q.label or q.field

    def n(c: Counts | None, name: str) -> str:
        return fmt.si(_get(c, name))

    def rate(value: str) -> str:
        return _per_s(low(value))

    def copies(c: Counts | None, d: str, mark: Mark = _as_is) -> str:
        return _calls_bytes(*_cb(c, q.field, d), mark)

    def prefetch(c: Counts | None, mark: Mark = _as_is) -> str:
        return " ".join(f"{arrow} {mark(fmt.bytes_(_cb(c, q.field, d)[1]))}"
                        for d, arrow in zip(q.directions, ("→GPU", "→CPU")))

    def migrated(c: Counts | None, mark: Mark = _as_is) -> str:
        m = getattr(c, q.field) if c is not None else None
        return " ".join(f"{d.upper()} {mark(fmt.bytes_(m.get(d) if m is not None else None))}"
                        for d in ("h2d", "d2h"))

    if q.field in ("launches", "graph_launches", "graph_kernel_launches"):
        return [(label, rate(fmt.si(fields.rate_in(p, q.field))), n(tot, q.field))]
    if q.field == "grid_blocks_sum":
        tot_grid = _avg(tot.grid_blocks_sum, tot.launches) if tot else None
        tot_block = _avg(tot.block_threads_sum, tot.launches) if tot else None
        return [(label, f"{fmt.num(p.grid_blocks_avg)} × {fmt.num(p.block_threads_avg)}",
                 f"{fmt.num(tot_grid)} × {fmt.num(tot_block)}")]
    if q.field == "memcpy":
        return [(f"{label} {d}" if d == "unknown" else f"{label} {d.upper()}",
                 rate(fmt.bytes_(fields.rate_in(p, q.field, d))), copies(tot, d)) for d in q.directions]
    if q.field == "live_alloc_bytes":
        return [(label, "", fmt.bytes_(fields.live_alloc_bytes(p)))]
    if q.field == "prefetch":
        return [(label, prefetch(iv, low), prefetch(tot))]
    if q.field == "uvm_cpu_faults":
        return [(label, rate(fmt.si(fields.rate_in(p, q.field))),
                 f"CPU {n(tot, q.field)} GPU {n(tot, 'uvm_gpu_faults')}")]
    if q.field == "uvm_migrated":
        return [(label, migrated(iv, low), migrated(tot))]
    if q.field == "nccl":
        used = [d for d in q.directions if (_cb(tot, q.field, d)[0] or 0) > 0]
        return [(label, f"{rate(fmt.si(fields.rate_in(p, 'nccl_calls')))}, "
                        f"{rate(fmt.bytes_(fields.rate_in(p, 'nccl_bytes')))}",
                 _calls_bytes(_get(tot, "nccl_calls"), _get(tot, "nccl_bytes"))),
                *((f"  {d}", copies(iv, d, low), copies(tot, d)) for d in used)]
    if q.field == "nccl_comms":
        comm = fmt.NA if p.nccl_comm_size is None else f"rank {p.nccl_comm_rank} of {p.nccl_comm_size}"
        return [(label, "", f"{comm}, {fmt.si(_get(tot, q.field))} created")]
    if q.field == "sync_wait_s":
        return [(label, f"{low(fmt.pct(fields.rate_in(p, q.field), 1))}, {_calls(_get(iv, 'sync_calls'), low)}",
                 f"{fmt.seconds(_get(tot, q.field))}, {_calls(_get(tot, 'sync_calls'))}"), *_latency_rows(p)]
    raise ValueError(f"no details row for {q.field}")


def _latency_rows(p: ProcSample) -> list[tuple[str, str, str]]:
    """Sync latency: p50 / p99 and p90 / max of all syncs, then p50 / p99 of each API the process used."""
    def two(a: str, b: str, api: str, total: bool) -> str:
        return (f"{fmt.seconds(fields.sync_latency_s(p, a, api, total))} / "
                f"{fmt.seconds(fields.sync_latency_s(p, b, api, total))}")

    apis = [api for api in latency.APIS if p.sync_latency is not None and api in p.sync_latency.total]
    rows = [("sync p50 / p99", two("p50_s", "p99_s", latency.ALL, False), two("p50_s", "p99_s", latency.ALL, True)),
            ("sync p90 / max", two("p90_s", "max_s", latency.ALL, False), two("p90_s", "max_s", latency.ALL, True))]
    if len(apis) > 1:
        rows += [(f"  {api}", two("p50_s", "p99_s", api, False), two("p50_s", "p99_s", api, True)) for api in apis]
    return rows


def stats_rows(p: ProcSample) -> list[tuple[str, str, str]]:
    """(label, this interval, since gputop first saw the process) for every quantity of the catalogue
    (gputop/counters.py, in its order), then the process's GPU and CPU use.

    The interval column shows the model's rates (``/s``) and the interval's counts, each with ``~`` before
    it while the process is warming up (the fleet view: its series is younger than the window, so they
    read low); the total column keeps its meaning when the process goes idle or exits."""
    iv, tot = p.interval, p.total
    low: Mark = partial(fmt.reads_low, low=p.warming_up)
    rows: list[tuple[str, str, str]] = []
    for q in PROC:
        label = q.label or q.field
        if q.shown is Shown.COUNT:
            rows.append((label, low(fmt.si(_get(iv, q.field))), fmt.si(_get(tot, q.field))))
        elif q.shown is Shown.CALLS:
            rows.append((label, _calls(_get(iv, q.field), low), _calls(_get(tot, q.field))))
        elif q.shown is Shown.CALLS_BYTES:
            rows.append((label, _calls_bytes(_get(iv, q.field), _get(iv, q.bytes_field), low),
                         _calls_bytes(_get(tot, q.field), _get(tot, q.bytes_field))))
        elif q.shown is Shown.SPECIAL:
            rows += _special_rows(p, q, low)
    rows += [
        ("GPU mem / SM", _pair(fmt.bytes_(p.gpu_mem_bytes), fmt.pct(p.gpu_util_pct)), ""),
        ("CPU / RSS", _pair(fmt.pct(p.cpu_pct), fmt.bytes_(p.rss_bytes)), ""),
    ]
    return rows


def stats_content(p: ProcSample) -> Content:
    # the last interval's widest value, "2.05k calls, 1.00G bytes", takes 24 cells, 26 with its marks while the
    # process warms up: its column is two wider then (the panel's 66 cells still hold the total's 24)
    return table3([STATS_HEAD, *stats_rows(p)], (15, 27) if p.warming_up else (15, 25))


def table3(rows: list[tuple[str, str, str]], widths: tuple[int, int] = (15, 25)) -> Content:
    """Three columns: a bold label, then two values; the first row is the column heads."""
    lines = []
    for i, (label, a, b) in enumerate(rows):
        if i == 0:
            lines.append(Content.styled(f"{label:<{widths[0]}}{a:<{widths[1]}}{b}", "bold $primary"))
            continue
        lines.append(Content.assemble(
            (label.ljust(widths[0]), "bold"),
            ((a or "").ljust(widths[1]), _MUTED if fmt.NA in a else ""),
            (b or "", _MUTED if fmt.NA in b else ""),
        ))
    return Content("\n").join(lines)


def state_label(p: ProcSample, gone: bool) -> str:
    """[running], [stopped], [exited] (its last interval) or [gone] (no longer reported)."""
    return "[gone]" if gone else f"[{p.state}]"


def warming_label(p: ProcSample, gone: bool) -> str:
    """``[warming up]`` while the process's rates read low (the fleet view: its series is younger than the
    window, docs/fleet.md "Warming up"), else empty; a process gone has no rates to read."""
    return fmt.WARMING_UP if p.warming_up and not gone else ""


def key_label(key: ProcKey) -> str:
    """``PID 123``, or in the fleet view ``PID 123 at node-7:9464`` (its scrape target)."""
    return f"PID {key}" if isinstance(key, int) else f"PID {key[1]} at {fmt.text(key[0])}"


def title_content(p: ProcSample | None, pid: ProcKey, gone: bool, width: int = 160) -> Content:
    if p is None:
        return Content.styled(f"{key_label(pid)}: waiting for it to appear…", "$warning")
    state = state_label(p, gone)
    warming = warming_label(p, gone)
    lb = "  ◆ launch-bound" if p.launch_bound else ""
    where = f" on {fmt.text(p.node)}" if p.instance is not None else ""
    user = "" if p.instance is not None else fmt.text(p.user)    # the fleet view has no user names
    head = Content.assemble((f"PID {p.pid}{where}", "bold $primary"), "  ", (user, "bold"), "  " if user else "")
    tail = Content.assemble(
        "  ",
        (state, "$success" if state == "[running]" else "$warning"),
        (f"  {warming}" if warming else "", "$warning"),
        f"  GPU {fmt.text(p.gpu_index)}",
        f"  container {fmt.text(p.container[:12])}" if p.container else "",
        (lb, "$warning bold"),
    )
    room = max(16, width - head.cell_length - tail.cell_length)
    return Content.assemble(head, fmt.fit_middle(fmt.text(fields.command(p)), room), tail)


def without_live_values(p: ProcSample) -> ProcSample:
    """A process no longer reported: its totals stay, its rates and levels are no longer known
    (never frozen at its last, partial interval), nor whether they would read low (``warming_up``)."""
    return replace(
        p, interval=None, rates=None, warming_up=None, grid_blocks_avg=None, block_threads_avg=None, gpu_mem_bytes=None,
        gpu_util_pct=None, cpu_pct=None, rss_bytes=None, launch_bound=None,
        kernels=tuple(replace(k, interval_launches=None, launches_per_s=None, interval_graph_launches=None,
                              graph_launches_per_s=None) for k in p.kernels),
        call_sites=sites.without_rates(p.call_sites),
    )


#: the call-sites panel in the fleet view (the exporter exports none)
FLEET_SITES = "call sites: the fleet view has none (gputop on the node shows them)"


class DetailsScreen(LiveScreen):
    BINDINGS = bindings.of(bindings.DETAILS)
    NARROW = 140        # below, the kernels table would leave its names too few cells
    AUTO_FOCUS = ""     # the call-sites panel takes the focus on mount, without scrolling the page to it
    DEFAULT_CSS = """
    DetailsScreen #title { height: 1; background: $surface; }
    DetailsScreen #body { height: 1fr; overflow-x: auto; }
    DetailsScreen #top { height: auto; }
    DetailsScreen #stats { width: 68; height: auto; text-wrap: nowrap; }
    DetailsScreen #kernels { width: 1fr; height: auto; }
    DetailsScreen #sites { margin-top: 1; }
    DetailsScreen #series, DetailsScreen #hists, DetailsScreen #latency { height: 1fr; min-height: 10; }
    DetailsScreen.-narrow #top { layout: vertical; min-width: 70; }
    DetailsScreen.-narrow #stats, DetailsScreen.-narrow #kernels { width: 100%; min-width: 68; }
    DetailsScreen.-narrow #series, DetailsScreen.-narrow #hists, DetailsScreen.-narrow #latency {
        layout: vertical; height: auto; }
    DetailsScreen.-narrow Chart { width: 100%; height: 12; }
    """

    def __init__(self, pid: ProcKey) -> None:
        super().__init__()
        self.pid = pid      #: the process's key: its PID, or (instance, PID) in the fleet view
        self.proc: ProcSample | None = None
        self._points: list[Point] = []
        self._now = 0.0

    def compose(self) -> ComposeResult:
        yield HeaderBar()
        yield TextPanel(id="title")
        with VerticalScroll(id="body", classes="page"):
            with Horizontal(id="top"):
                yield TextPanel(id="stats")
                yield KernelsPanel(limit=14, id="kernels")
            yield SitesPanel(limit=10, id="sites")
            with Horizontal(id="series"):
                yield Chart(self._draw_launches, id="chart-launches")
                yield Chart(self._draw_memcpy, id="chart-memcpy")
            with Horizontal(id="hists"):
                yield Chart(self._draw_grid_hist, id="chart-grid")
                yield Chart(self._draw_block_hist, id="chart-block")
            with Horizontal(id="latency"):
                yield Chart(self._draw_sync_latency, id="chart-sync")
        yield Footer()

    def on_mount(self) -> None:
        # the call-sites panel has the focus (↑ ↓ move its cursor at once); the page scrolls with PgUp PgDn
        # (and ↑ ↓ past its first or last row); the fleet view has no call sites: the page has the focus
        target = self.query_one("#body") if self.gapp.is_fleet else self.query_one(SitesPanel)
        self.set_focus(target, scroll_visible=False)

    def on_screen_resume(self) -> None:
        self.gapp.show_in_detail([self.pid])    # the fleet view reads its series and histograms

    def update_view(self) -> None:
        app = self.gapp
        self.query_one(HeaderBar).show(app.header_state())
        snap = app.snapshot
        current = snap.process(self.pid) if snap else None
        gone = current is None and self.proc is not None
        if current is not None:
            self.proc = current
        elif self.proc is not None and self.proc.rates is not None:
            self.proc = without_live_values(self.proc)
        title = self.query_one("#title", TextPanel)
        title.show(title_content(self.proc, self.pid, gone, title.content_region.width or 160))
        if self.proc is None:
            return
        self.query_one("#stats", TextPanel).show(stats_content(self.proc))
        self.query_one(KernelsPanel).show(self.proc.kernels)
        self.query_one(SitesPanel).show(self.proc.call_sites, FLEET_SITES if app.is_fleet else None)
        self._points = app.points(self.pid, until=snap.time if snap else None)
        self._now = snap.time if snap else 0.0
        for chart in self.query(Chart):
            chart.redraw()

    def action_stack(self) -> None:
        """The selected call site's whole stack, in a modal screen."""
        from gputop.ui.screens.stack import StackScreen

        site = self.query_one(SitesPanel).selected
        if site is None:
            self.gapp.say("no call site to show: none sampled" if not self.gapp.is_fleet else FLEET_SITES,
                          "warning")
            return
        self.app.push_screen(StackScreen(site, key_label(self.pid)))

    # -- charts (called by the Chart widgets with their size) ----------------------------------
    @property
    def _low(self) -> bool:
        """Whether the process is warming up: its rate charts read low (their titles say so)."""
        return self.proc is not None and bool(self.proc.warming_up)

    def _draw_launches(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        s = series(self._points, "launches", origin=self._now)
        return charts.line_chart(
            [s], w, h, palette, title=fmt.low_title("launches/s", self._low), y_format=fmt.si, colorless=colorless,
            labels=["launches"]
        )

    def _draw_memcpy(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        ss = [series(self._points, d, origin=self._now) for d in ("h2d", "d2h", "d2d")]
        return charts.line_chart(
            ss,
            w,
            h,
            palette,
            title=fmt.low_title("memcpy B/s", self._low),
            y_format=fmt.bytes_,
            y_binary=True,
            colorless=colorless,
            labels=["H2D", "D2H", "D2D"],
        )

    def _draw_sync_latency(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        ss = [series(self._points, name, origin=self._now) for name in ("sync_p50_s", "sync_p99_s")]
        return charts.line_chart(ss, w, h, palette, title="sync latency (each interval, all APIs)",
                                 y_format=fmt.seconds, colorless=colorless, labels=["p50", "p99"])

    def _draw_hist(
        self,
        hist: Mapping[str, int] | None,
        title: str,
        w: int,
        h: int,
        palette: ChartPalette,
        colorless: bool,
    ) -> str:
        labels, values = hist_buckets(hist, limit=max(4, (w - 8) // 4))
        return charts.bar_chart(labels, values, w, h, palette, title=title, colorless=colorless)

    def _draw_grid_hist(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        p = self.proc
        return self._draw_hist(
            p.grid_blocks_hist if p else None, "launches by grid blocks (since first seen)", w, h, palette, colorless
        )

    def _draw_block_hist(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        p = self.proc
        return self._draw_hist(
            p.block_threads_hist if p else None, "launches by threads per block (since first seen)", w, h, palette,
            colorless,
        )
