"""Compare two processes side by side (fused vs unfused): every metric with B/A, overlaid time
series, and the top kernels of each. Side A is a live process or the ``--baseline`` recording."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Footer, Static

from gputop.model import ProcKey, ProcSample, Snapshot
from gputop.ui import bindings, charts
from gputop.ui.screens.base import LiveScreen
from gputop.ui.screens.details import key_label, state_label, warming_label, without_live_values
from gputop.ui.themes import ChartPalette
from gputop.ui.widgets.chart import Chart
from gputop.ui.widgets.header import HeaderBar
from gputop.ui.widgets.panels import KernelsPanel, TextPanel
from gputop.view import compare, fields
from gputop.view import format as fmt
from gputop.view.history import Point, Series, series

A_STYLE = "bold $chart-series-1"
B_STYLE = "bold $chart-series-2"


def metrics_content(a: ProcSample | None, b: ProcSample | None) -> Content:
    head = Content.assemble(
        ("metric".ljust(18), "bold"),
        ("A".rjust(10), A_STYLE),
        ("B".rjust(10), B_STYLE),
        ("B/A".rjust(10), "bold"),
    )
    lines = [head]
    for r in compare.rows(a, b):
        lines.append(
            Content.assemble(
                r.label.ljust(18),
                (r.a.rjust(10), "$foreground 55%" if r.a == fmt.NA else ""),
                (r.b.rjust(10), "$foreground 55%" if r.b == fmt.NA else ""),
                (
                    r.ratio.rjust(10),
                    "bold $warning" if r.notable else ("$foreground 55%" if r.ratio == fmt.NA else ""),
                ),
            )
        )
    return Content("\n").join(lines)


def sites_content(a: ProcSample | None, b: ProcSample | None, width: int = 160, fleet: bool = False) -> Content:
    """Call sites of A beside B (view/compare.site_rows): each side's estimated launches/s with its ±."""
    if fleet:
        return Content.styled("call sites: the fleet view has none (gputop on the node shows them)", "$foreground 60%")
    rows = compare.site_rows(a, b)
    if not rows:
        return Content.styled("call sites: no launch sampled in A or B yet", "$foreground 60%")
    num_w = 18
    label_w = max(12, min(max(len(r.label) for r in rows), width - 2 * (num_w + 1)))
    lines = [Content.assemble(("call sites (top 5 of each)".ljust(label_w), "bold $primary"),
                              (" A launch/s (est.)".rjust(num_w + 1), A_STYLE),
                              (" B launch/s (est.)".rjust(num_w + 1), B_STYLE))]
    for r in rows:
        lines.append(Content.assemble(
            fmt.fit(r.label, label_w).ljust(label_w),
            (f" {r.a.rjust(num_w)}", "$foreground 55%" if r.a == fmt.NA else ""),
            (f" {r.b.rjust(num_w)}", "$foreground 55%" if r.b == fmt.NA else ""),
        ))
    return Content("\n").join(lines)


def side_label(tag: str, style: str, p: ProcSample | None, pid: ProcKey | None, note: str = "",
               gone: bool = False, width: int = 160) -> Content:
    """``A 4242 [running] python train.py … --fused=0``: the command cut in the middle, so that two
    commands with the same start still differ on screen; ``[warming up]`` after the state while its rates
    read low (the fleet view)."""
    if p is None:
        what = f"{key_label(pid)}: waiting for it to appear…" if pid is not None else "—"
        return Content.assemble((f"{tag} ", style), (what, "$warning"))
    state = "" if note else state_label(p, gone)
    warming = warming_label(p, gone)
    head = Content.assemble(
        (f"{tag} ", style),
        (f"{p.pid} " if p.instance is None else f"{p.pid} on {fmt.text(p.node)} ", "bold"),
        (f"{state} " if state else "", "$success" if state == "[running]" else "$warning"),
        (f"{warming} " if warming else "", "$warning"),
    )
    tail = Content.styled(f" {note}" if note else "", "italic")
    room = max(16, width - head.cell_length - tail.cell_length)
    return Content.assemble(head, fmt.fit_middle(fmt.text(fields.command(p)), room), tail)


def _current(snap: Snapshot | None, pid: ProcKey, last: ProcSample | None) -> tuple[ProcSample | None, bool]:
    """The process as the snapshot has it, else its last sample without live values (gone)."""
    current = snap.process(pid) if snap else None
    if current is not None:
        return current, False
    if last is None:
        return None, False
    return (without_live_values(last) if last.rates is not None else last), True


class CompareScreen(LiveScreen):
    BINDINGS = bindings.of(bindings.COMPARE)
    DEFAULT_CSS = """
    CompareScreen #sides { height: 2; background: $surface; padding: 0 1; }
    CompareScreen #body { height: 1fr; }
    CompareScreen #upper { height: 1fr; min-height: 28; }
    CompareScreen #metrics { width: 52; height: auto; }
    CompareScreen #charts { width: 1fr; }
    CompareScreen #kernels { height: auto; }
    CompareScreen #kernels-a, CompareScreen #kernels-b { width: 1fr; height: auto; }
    CompareScreen #sites { margin-top: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    CompareScreen.-narrow #upper { layout: vertical; height: auto; }
    CompareScreen.-narrow #metrics { width: 100%; }
    CompareScreen.-narrow #charts { width: 100%; height: auto; }
    CompareScreen.-narrow Chart { height: 12; }
    CompareScreen.-narrow #kernels { layout: vertical; }
    CompareScreen.-narrow #kernels-a, CompareScreen.-narrow #kernels-b { width: 100%; }
    """

    def __init__(self, a: ProcKey | None, b: ProcKey) -> None:
        """``a`` None: side A is the baseline recording (``b`` cycles through its processes)."""
        super().__init__()
        self.a_pid = a
        self.b_pid = b
        self.baseline_index = 0
        self.a: ProcSample | None = None
        self.b: ProcSample | None = None
        self._a_points: list[Point] = []
        self._b_points: list[Point] = []
        self._now = 0.0

    @property
    def uses_baseline(self) -> bool:
        return self.a_pid is None

    def compose(self) -> ComposeResult:
        yield HeaderBar()
        if self.gapp.options.banner:      # `gputop demo`: which kind of workload runs
            yield Static(self.gapp.options.banner, id="banner", markup=False)
        yield TextPanel(id="sides")
        with VerticalScroll(id="body", classes="page"):
            with Horizontal(id="upper"):
                yield TextPanel(id="metrics")
                with Vertical(id="charts"):
                    yield Chart(self._draw_launches, id="chart-launches")
                    yield Chart(self._draw_memcpy, id="chart-memcpy")
            with Horizontal(id="kernels"):
                yield KernelsPanel(limit=11, id="kernels-a")
                yield KernelsPanel(limit=11, id="kernels-b")
            yield TextPanel(id="sites")
        yield Footer()

    def on_screen_resume(self) -> None:
        self.gapp.show_in_detail([k for k in (self.a_pid, self.b_pid) if k is not None])

    def update_view(self) -> None:
        app = self.gapp
        self.query_one(HeaderBar).show(app.header_state())
        snap = app.snapshot
        note_a = ""
        if self.uses_baseline:
            baseline = app.baseline
            if baseline is None or not baseline.candidates:
                return
            cand = baseline.candidates[self.baseline_index % len(baseline.candidates)]
            self.a = cand.summary
            self._a_points = cand.points()
            note_a = f"(baseline {fmt.text(baseline.path.name)}, mean of {len(cand.samples)} samples)"
        until = snap.time if snap else None
        gone_a = False
        if not self.uses_baseline:
            assert self.a_pid is not None
            self.a, gone_a = _current(snap, self.a_pid, self.a)
            self._a_points = app.points(self.a_pid, until=until)
        self.b, gone_b = _current(snap, self.b_pid, self.b)
        self._b_points = app.points(self.b_pid, until=until)
        self._now = snap.time if snap else 0.0
        sides = self.query_one("#sides", TextPanel)
        width = sides.content_region.width or 160
        sides.show(
            Content("\n").join(
                [
                    side_label("A", A_STYLE, self.a, self.a_pid, note_a, gone_a, width),
                    side_label("B", B_STYLE, self.b, self.b_pid, gone=gone_b, width=width),
                ]
            )
        )
        self.query_one("#metrics", TextPanel).show(metrics_content(self.a, self.b))
        for panel_id, p, tag in (("#kernels-a", self.a, "A"), ("#kernels-b", self.b, "B")):
            self.query_one(panel_id, KernelsPanel).show(p.kernels if p else (), title=f"{tag}: top kernels")
        panel = self.query_one("#sites", TextPanel)
        panel.show(sites_content(self.a, self.b, panel.content_region.width or 160, app.is_fleet))
        for chart in self.query(Chart):
            chart.redraw()

    # -- actions ---------------------------------------------------------------------------
    def action_swap(self) -> None:
        if self.uses_baseline:
            self.gapp.say("the baseline is always side A", "warning")
            return
        assert self.a_pid is not None
        self.a_pid, self.b_pid = self.b_pid, self.a_pid
        self.a, self.b = self.b, self.a
        self.update_view()

    def action_next_baseline(self) -> None:
        baseline = self.gapp.baseline
        if not self.uses_baseline or baseline is None:
            self.gapp.say("no baseline: start gputop with --baseline FILE", "warning")
            return
        self.baseline_index = (self.baseline_index + 1) % len(baseline.candidates)
        self.update_view()

    # -- charts ----------------------------------------------------------------------------
    def _pair(self, name: str) -> tuple[Series, Series]:
        if self.uses_baseline:  # both end at 0 s, as the live compare's (−60 s … 0 s): the recording at its last sample
            a_end = self._a_points[-1].time if self._a_points else None
            b_end = self._b_points[-1].time if self._b_points else None
            return series(self._a_points, name, origin=a_end), series(self._b_points, name, origin=b_end)
        return series(self._a_points, name, origin=self._now), series(self._b_points, name, origin=self._now)

    @property
    def _low(self) -> bool:
        """Whether A or B is warming up: the rate charts read low (their titles say so)."""
        return any(p is not None and bool(p.warming_up) for p in (self.a, self.b))

    def _draw_launches(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        a, b = self._pair("launches")
        return charts.line_chart(
            [a, b], w, h, palette, title=fmt.low_title("launches/s", self._low), y_format=fmt.si,
            colorless=colorless, labels=["A", "B"]
        )

    def _draw_memcpy(self, w: int, h: int, palette: ChartPalette, colorless: bool) -> str:
        ah, bh = self._pair("h2d")
        ad, bd = self._pair("d2h")
        return charts.line_chart(
            [ah, bh, ad, bd],
            w,
            h,
            palette,
            title=fmt.low_title("memcpy B/s", self._low),
            y_format=fmt.bytes_,
            y_binary=True,
            colorless=colorless,
            labels=["A H2D", "B H2D", "A D2H", "B D2H"],
        )
