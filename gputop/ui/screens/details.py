"""Details of one process: counters, top kernels, time series and launch-shape histograms."""

from __future__ import annotations

from collections.abc import Mapping

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Footer

from gputop.model import ProcSample
from gputop.ui import bindings, charts, fields
from gputop.ui import format as fmt
from gputop.ui.history import Point, series
from gputop.ui.screens.base import LiveScreen
from gputop.ui.themes import ChartPalette
from gputop.ui.widgets.chart import Chart
from gputop.ui.widgets.header import HeaderBar
from gputop.ui.widgets.panels import KernelsPanel, TextPanel, key_values


def hist_buckets(hist: Mapping[str, int] | None, limit: int = 24) -> tuple[list[str], list[float]]:
    """Log2 buckets ``{"2^k": n}`` as labels and counts from the lowest to the highest k, gaps as 0."""
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
    ks = range(lo, hi + 1)
    return [fmt.si(2**k, 0) for k in ks], [float(by_k.get(k, 0)) for k in ks]


def _pair(a: str, b: str) -> str:
    return f"{a} / {b}"


def stats_rows(p: ProcSample) -> list[tuple[str, str]]:
    iv = p.interval
    tot = p.total

    def ic(name: str) -> str:
        return fmt.si(fields.interval_count(p, name))

    migrated = " ".join(
        f"{d.upper()} {fmt.bytes_(fields.interval_uvm_migrated(p, d))}" for d in ("h2d", "d2h")
    )
    prefetch = " ".join(
        f"{arrow} {fmt.bytes_(fields.interval_prefetch_bytes(p, d))}"
        for d, arrow in (("to_device", "→GPU"), ("to_host", "→CPU"))
    )
    memcpy = "  ".join(f"{d.upper()} {fmt.bytes_(fields.memcpy_per_s(p, d))}" for d in ("h2d", "d2h", "d2d"))
    other = "  ".join(
        f"{d.upper() if d == 'h2h' else d} {fmt.bytes_(fields.memcpy_per_s(p, d))}"
        for d in ("h2h", "unknown")
    )
    return [
        ("launches/s", f"{fmt.si(fields.launches_per_s(p))}   total {fmt.si(fields.total_launches(p))}"),
        ("graph/captured", _pair(ic("graph_launches"), ic("captured_launches")) + " this interval"),
        ("grid × block", f"{fmt.num(p.grid_blocks_avg, 1)} × {fmt.num(p.block_threads_avg, 1)}"),
        ("memcpy B/s", memcpy),
        ("", other),
        (
            "alloc",
            f"{ic('alloc_calls')} calls {fmt.bytes_(fields.interval_count(p, 'alloc_bytes'))}  "
            f"free {ic('free_calls')}",
        ),
        ("live alloc", fmt.bytes_(fields.live_alloc_bytes(p))),
        (
            "managed",
            f"{fmt.si(tot.managed_alloc_calls if tot else None)} calls "
            f"{fmt.bytes_(tot.managed_alloc_bytes if tot else None)} total",
        ),
        (
            "UVM faults/s",
            f"{fmt.si(fields.uvm_faults_per_s(p))}  (CPU {ic('uvm_cpu_faults')} GPU {ic('uvm_gpu_faults')})",
        ),
        ("UVM migrated", migrated + f"  thrash {ic('uvm_thrashing')}"),
        ("prefetch", prefetch),
        (
            "sync",
            f"{fmt.pct(fields.sync_wait_pct(p), 1)} blocked  {ic('sync_calls')} calls "
            f"{fmt.seconds(iv.sync_wait_s if iv else None)}",
        ),
        ("GPU mem / SM", _pair(fmt.bytes_(p.gpu_mem_bytes), fmt.pct(p.gpu_util_pct))),
        ("CPU / RSS", _pair(fmt.pct(p.cpu_pct), fmt.bytes_(p.rss_bytes))),
    ]


def title_content(p: ProcSample | None, pid: int, gone: bool) -> Content:
    if p is None:
        return Content.styled(f"PID {pid}: waiting for it to appear…", "$warning")
    state = "gone" if gone else p.state
    lb = "  ◆ launch-bound" if p.launch_bound else ""
    return Content.assemble(
        (f"PID {p.pid}", "bold $primary"),
        "  ",
        (fmt.text(p.user), "bold"),
        "  ",
        (fmt.text(p.cmdline or p.comm), ""),
        "  ",
        (f"[{state}]", "$warning" if state != "running" else "$success"),
        f"  GPU {fmt.text(p.gpu_index)}",
        f"  container {p.container}" if p.container else "",
        (lb, "$warning bold"),
    )


class DetailsScreen(LiveScreen):
    BINDINGS = bindings.of(bindings.DETAILS)
    DEFAULT_CSS = """
    DetailsScreen #title { height: 1; background: $surface; }
    DetailsScreen #top { height: 16; }
    DetailsScreen #stats { width: 62; height: 100%; }
    DetailsScreen #kernels { width: 1fr; height: 100%; }
    DetailsScreen #series, DetailsScreen #hists { height: 1fr; }
    """

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid
        self.proc: ProcSample | None = None
        self._points: list[Point] = []
        self._now = 0.0

    def compose(self) -> ComposeResult:
        yield HeaderBar()
        yield TextPanel(id="title")
        with Horizontal(id="top"):
            yield TextPanel(id="stats")
            yield KernelsPanel(limit=14, id="kernels")
        with Horizontal(id="series"):
            yield Chart(self._draw_launches, id="chart-launches")
            yield Chart(self._draw_memcpy, id="chart-memcpy")
        with Horizontal(id="hists"):
            yield Chart(self._draw_grid_hist, id="chart-grid")
            yield Chart(self._draw_block_hist, id="chart-block")
        yield Footer()

    def update_view(self) -> None:
        app = self.gapp
        self.query_one(HeaderBar).show(app.header_state())
        snap = app.snapshot
        current = snap.process(self.pid) if snap else None
        if current is not None:
            self.proc = current
        gone = current is None and self.proc is not None
        self.query_one("#title", TextPanel).show(title_content(self.proc, self.pid, gone))
        if self.proc is None:
            return
        self.query_one("#stats", TextPanel).show(key_values(stats_rows(self.proc)))
        self.query_one(KernelsPanel).show(self.proc.kernels)
        self._points = app.history.points(self.pid)
        self._now = snap.time if snap else 0.0
        for chart in self.query(Chart):
            chart.redraw()

    # -- charts (called by the Chart widgets with their size) ----------------------------------
    def _draw_launches(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        s = series(self._points, "launches", origin=self._now)
        return charts.line_chart(
            [s], w, h, palette, title="launches/s", y_format=fmt.si, colorless=colorless, labels=["launches"]
        )

    def _draw_memcpy(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        ss = [series(self._points, d, origin=self._now) for d in ("h2d", "d2h", "d2d")]
        return charts.line_chart(
            ss,
            w,
            h,
            palette,
            title="memcpy B/s",
            y_format=fmt.bytes_,
            y_binary=True,
            colorless=colorless,
            labels=["H2D", "D2H", "D2D"],
        )

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
            p.grid_blocks_hist if p else None, "launches by grid blocks", w, h, palette, colorless
        )

    def _draw_block_hist(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        p = self.proc
        return self._draw_hist(
            p.block_threads_hist if p else None, "launches by threads per block", w, h, palette, colorless
        )
