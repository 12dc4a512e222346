"""The header line: host, time, refresh, source status and gputop's own cost; and the summary line
under it (htop's Tasks:)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from textual.content import Content
from textual.geometry import Size
from textual.reactive import Reactive
from textual.widget import Widget

from gputop.model import Snapshot, SourceStatus, Summary
from gputop.ui.flow import flow
from gputop.view import format as fmt
from gputop.view.summary import summary_pieces

_STATUS_STYLE = {"ok": "$success", "starting": "$warning"}
_MUTED = "$foreground 60%"
MAX_LINES = 4


@dataclass(frozen=True)
class HeaderState:
    snapshot: Snapshot | None = None
    interval_s: float = 1.0
    paused: bool = False
    #: (snapshots shown, snapshots in the recording, speed) when replaying
    replay: tuple[int, int, float] | None = None
    filter: str = ""
    error: str | None = None
    #: cells available (set by ``header_lines``)
    width: int = 10_000
    #: the fleet view's PROM said as ``degraded`` alone (``header_lines``: its reason on a line of its own)
    prom_brief: bool = False


def _source(name: str, st: SourceStatus | None, brief: bool = False) -> Content:
    key = {v: k for k, v in fmt.SOURCE_LABELS.items()}.get(name, name.lower())
    label = fmt.source_state(key, st)       # the words batch mode and doctor use too
    if st is None:
        return Content.assemble((f"{name} ", "bold"), (label, _MUTED))
    style = _STATUS_STYLE.get(st.status, _MUTED)
    if name == "PROM" and st.status == "degraded":              # the fleet view: "degraded: 1 of 2 nodes down: …"
        label, style = "degraded" if brief else f"degraded: {fmt.text(st.reason)}", "$error bold"
    elif name == "PROM" and st.status == "ok" and st.reason:    # notes: nodes that export per container…
        label, style = fmt.text(st.reason), "$warning"
    parts: list[tuple[str, str] | str] = [(f"{name} ", "bold"), (label, style)]
    if name == "BPF" and st.status == "ok":
        if st.probes is not None:
            parts.append((f" {st.probes}p/{fmt.text(st.objects)}obj", _MUTED))
        if st.probes_failed:
            parts.append((f" {st.probes_failed} failed", "$warning bold"))
        if st.dropped:
            parts.append((f" dropped {fmt.si(st.dropped)}", "$warning bold"))
            if st.dropped_by_tenant:        # the tenant that lost most (docs/SECURITY.md, "Fair share")
                tenant, n = max(((t, sum(kinds.values())) for t, kinds in st.dropped_by_tenant.items()),
                                key=lambda kv: (kv[1], kv[0]))
                parts.append((f" ({fmt.text(tenant)} {fmt.si(n)})", "$warning"))
    return Content.assemble(*parts)


#: from this width on the header is one line: what does not fit is said shorter (COMPACT levels), and
#: what still does not fit is cut at the end with an ellipsis; narrower, it wraps onto up to MAX_LINES
ONE_LINE_FROM = 80
#: the levels of ``header_pieces``: 0 says everything; 1 drops the probe counts and says the cost as
#: its CPU share; 2 drops the title; 3 puts one space between pieces; 4 says the interval without "every"
COMPACT = 4
#: a piece that does not fit the one line is cut where this many cells are left for it, else left out
CUT_PIECE_FROM = 16


def header_pieces(state: HeaderState, compact: int = 0) -> list[Content]:
    """The header's pieces in order of importance to keep on the first line; ``compact`` (0…COMPACT)
    says the same in fewer cells."""
    snap = state.snapshot
    pieces = [] if compact >= 2 else [Content.styled(" gputop", "bold $primary")]
    if snap is None:
        pieces += [Content.styled("starting…", "$warning"), Content.styled("loading probes and GPU handles", _MUTED)]
    else:
        every = "" if compact >= 4 else "every "
        pieces += [Content.styled(fmt.text(snap.host), "bold"), Content(fmt.clock(snap.time)),
                   Content.styled(f"{every}{fmt.interval(state.interval_s)}", _MUTED)]
        if state.replay is not None:     # paused or playing, one badge (the speed still says what ] [ did)
            shown, total, speed = state.replay
            mode = f"×{fmt.speed(speed)}" + (" PAUSED" if state.paused else "")
            pieces.append(Content.styled(f" REPLAY {shown}/{total} {mode} ",
                                         "reverse $warning bold" if state.paused else "reverse $accent"))
        elif state.paused:
            pieces.append(Content.styled(" PAUSED ", "reverse $warning bold"))
        for label, key in (("BPF", "bpf"), ("NVML", "nvml"), ("UVM", "uvm")):
            st = snap.sources.get(key)
            if st is None and "prometheus" in snap.sources:
                continue        # the fleet view: a source no node exports is not one (not "BPF n/a")
            if label == "BPF" and st is not None and st.status == "ok" and (state.width < 60 or compact >= 1):
                st = replace(st, probes=None)   # a narrow header keeps the states, not the counts
            pieces.append(_source(label, st))
        if "prometheus" in snap.sources:     # the fleet view: where the numbers come from
            pieces.append(_source("PROM", snap.sources["prometheus"], brief=state.prom_brief))
    if state.error:     # before the cost: a narrow header drops from its end
        pieces.append(Content.styled(fmt.text(state.error), "$error bold"))
    if snap is not None:
        if state.filter:
            pieces.append(Content.assemble(("filter: ", "bold"), (fmt.text(state.filter), "$accent")))
        bpf = snap.sources.get("bpf")
        if bpf is not None and bpf.status == "ok" and "prometheus" not in snap.sources:   # not the fleet's
            hits = fmt.si(bpf.probe_hits_per_s)
            # what the traced processes pay: uprobe traps (calibrated) + the BPF programs' run time
            if compact >= 1:
                pieces.append(Content.assemble(("cost ", "bold"), f"{fmt.cpu_share(bpf.cost_ns_per_s)} CPU"))
            else:
                pieces.append(Content.assemble(("cost ", "bold"),
                                               f"{hits} hits/s {fmt.cpu_share(bpf.cost_ns_per_s)} CPU "
                                               f"(traps {fmt.cpu_share(bpf.traps_ns_per_s)} + programs "
                                               f"{fmt.cpu_share(bpf.overhead_ns_per_s)})"))
    return pieces


def header_lines(state: HeaderState, width: int) -> list[Content]:
    """The header at ``width`` cells: from ONE_LINE_FROM on, one line (said shorter, then cut at the end,
    where it must be: the table never moves because of the header); narrower, up to MAX_LINES
    (sources first)."""
    state = replace(state, width=width)
    if width < ONE_LINE_FROM:
        return flow(header_pieces(state), max(1, width), indent=" ", max_lines=MAX_LINES)
    line = _one_line(state, width)
    extra: list[Content] = []
    prom = state.snapshot.sources.get("prometheus") if state.snapshot is not None else None
    if prom is not None and prom.status == "degraded" and prom.reason:
        said = _source("PROM", prom)            # "PROM degraded: 1 of 2 nodes down: …"
        if said.plain not in line.plain:
            # the fleet view with nodes down: which ones is never cut away (it says what is not current)
            state = replace(state, prom_brief=True)
            line = _one_line(state, width)
            extra.append(Content.assemble(" ", said).truncate(width, ellipsis=True))
    if state.error and fmt.text(state.error) not in line.plain:
        # an error (a bad line in a recording, the recorder stopped) is never cut away: where it does not
        # fit the line, it takes a second one of its own
        error = Content.assemble(" ", Content.styled(fmt.text(state.error), "$error bold"))
        return [_one_line(replace(state, error=None), width), *extra, error.truncate(width, ellipsis=True)]
    return [line, *extra]


def _one_line(state: HeaderState, width: int) -> Content:
    """The header said on one line of ``width`` cells: as shortly as needed, then cut."""
    for compact in range(COMPACT + 1):
        sep = " " if compact >= 3 else "  "
        pieces = header_pieces(state, compact)
        if compact >= 2:
            pieces = [Content.assemble(" ", pieces[0]), *pieces[1:]]     # the first column stays blank
        lines = flow(pieces, width, sep=sep, indent=" ")
        if len(lines) == 1:
            return lines[0]
    # the pieces that fit whole; the first that does not is cut where a useful part of it fits (an
    # error's start), else an ellipsis says that something follows
    line = Content("")
    for piece in (p for p in pieces if p.cell_length):
        room = width - line.cell_length - (len(sep) if line.cell_length else 0)
        if piece.cell_length <= room:
            line = Content.assemble(line, sep, piece) if line.cell_length else piece
            continue
        if room >= CUT_PIECE_FROM:
            line = Content.assemble(line, sep, piece.truncate(room, ellipsis=True))
        elif width - line.cell_length >= 2:
            line = Content.assemble(line, " …")
        break
    return line


def looks(lines: Sequence[Content]) -> list[tuple[str, tuple[object, ...]]]:
    """What ``lines`` draw: their text and styles (Content's ``==`` compares the text only)."""
    return [(line.plain, tuple(line.spans)) for line in lines]


def header_content(state: HeaderState, width: int = 10_000) -> Content:
    return Content("\n").join(header_lines(state, width))


class HeaderBar(Widget):
    auto_links = Reactive(False)     # no links: skips a per-segment meta decode each repaint
    DEFAULT_CSS = """
    HeaderBar {
        height: auto; max-height: 3; background: $panel; color: $foreground; text-wrap: nowrap;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._state = HeaderState()
        self._lines = 1     #: the height the last layout gave the header
        self._laid_out: tuple[HeaderState, int, list[Content]] | None = None

    def _lines_at(self, width: int) -> list[Content]:
        """``header_lines`` of the current state, kept: show, layout and render each need them."""
        cached = self._laid_out
        if cached is None or cached[0] is not self._state or cached[1] != width:
            cached = self._laid_out = (self._state, width, header_lines(self._state, width))
        return cached[2]

    def show(self, state: HeaderState) -> None:
        if state != self._state:
            width = self.content_region.width or 10_000
            before = self._laid_out
            self._state = state
            lines = self._lines_at(width)
            if before is not None and before[1] == width and looks(before[2]) == looks(lines):
                return      # the same text in the same styles (a frozen clock): nothing to redraw
            self.refresh(layout=len(lines) != self._lines)     # a new height only when the count changes
            self._lines = len(lines)

    @property
    def state(self) -> HeaderState:
        return self._state

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._lines = len(self._lines_at(width))   # the height laid out (resizes too)
        return self._lines

    def render(self) -> Content:
        return Content("\n").join(self._lines_at(self.content_region.width or 10_000))


def summary_lines(summary: Summary | None, width: int, tagged: int = 0, tree: bool = False,
                  note: str = "") -> list[Content]:
    """The summary line (htop's Tasks:; ``gputop.view.summary``) at ``width`` cells: labels bold, unknown
    values muted; on two lines where one is too narrow. ``tree``: the table shows the process tree (F5);
    ``note``: what the table leaves out (the fleet view's top rows of many: ``Feed.table_note``)."""
    if summary is None:
        return [Content.styled(" Tasks: waiting for the first sample…", _MUTED)]
    pieces: list[Content] = []
    for label, value in summary_pieces(summary, tagged):
        pieces.append(Content.assemble((label, "bold"), " ", (value, _MUTED if value == fmt.NA else "")))
    if tree:
        pieces.append(Content.styled("tree (F5)", "$accent bold"))
    if note:
        pieces.append(Content.styled(fmt.text(note), "$warning"))
    return flow([Content.assemble(" ", pieces[0]), *pieces[1:]], max(1, width), indent=" ", max_lines=2)


class SummaryBar(Widget):
    """The summary line under the header: the listed processes' counts and host-wide totals."""

    auto_links = Reactive(False)
    DEFAULT_CSS = """
    SummaryBar { height: auto; max-height: 2; background: $panel; color: $foreground; text-wrap: nowrap; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._state: tuple[Summary | None, int, bool] = (None, 0, False)
        self._note = ""
        self._laid_out: tuple[tuple[Summary | None, int, bool], str, int, list[Content]] | None = None

    def _lines_at(self, width: int) -> list[Content]:
        """``summary_lines`` of the current state, kept: show, layout and render each need them."""
        cached = self._laid_out
        if cached is None or cached[0] is not self._state or cached[1] != self._note or cached[2] != width:
            s, tagged, tree = self._state
            cached = self._laid_out = (self._state, self._note, width,
                                       summary_lines(s, width, tagged, tree, self._note))
        return cached[3]

    def show(self, summary: Summary | None, tagged: int = 0, tree: bool = False, note: str = "") -> None:
        state = (summary, tagged, tree)
        if state != self._state or note != self._note:
            width = self.content_region.width or 10_000
            before = self._lines_at(width)
            self._state = state
            self._note = note
            lines = self._lines_at(width)
            if looks(before) != looks(lines):      # redrawn only when its text or styles change
                self.refresh(layout=len(lines) != len(before))

    @property
    def state(self) -> tuple[Summary | None, int, bool]:
        return self._state

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines_at(width))

    def render(self) -> Content:
        return Content("\n").join(self._lines_at(self.content_region.width or 10_000))
