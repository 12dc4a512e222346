"""The main screen: header, GPU panel, process table, filter line and footer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual import on
from textual.app import ComposeResult
from textual.widgets import Footer, Input, Static

from gputop.model import ProcKey, ProcSample
from gputop.ui import bindings, columns
from gputop.ui import format as fmt
from gputop.ui.screens.base import LiveScreen
from gputop.ui.widgets.gpu_panel import GpuPanel
from gputop.ui.widgets.header import HeaderBar
from gputop.ui.widgets.proc_table import ProcTable


class MainScreen(LiveScreen):
    BINDINGS = bindings.of(bindings.MAIN + bindings.SIGNAL_REFUSED)
    AUTO_FOCUS = "ProcTable"
    DEFAULT_CSS = """
    MainScreen #filter { height: 1; border: none; padding: 0 1; display: none; background: $panel; }
    MainScreen #filter.-shown { display: block; }
    """

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        if self.gapp.options.banner:
            yield Static(self.gapp.options.banner, id="banner", markup=False)
        yield GpuPanel(self.gapp.history.gpu_util, id="gpus")
        yield ProcTable(id="procs")
        what = "command, node or PID" if self.gapp.is_fleet else "command, user or PID"
        yield Input(placeholder=f"filter by {what} — Enter keeps it, Esc clears it", id="filter")
        yield Footer()

    #: the shown snapshot's processes, sorted and filtered (``update_view``)
    _order: columns.ProcOrder | None = None

    def on_screen_resume(self) -> None:
        self.gapp.show_in_detail(())     # no process shown in detail

    @property
    def table(self) -> ProcTable:
        return self.query_one(ProcTable)

    def update_view(self) -> None:
        app = self.gapp
        self.query_one(HeaderBar).show(app.header_state())
        snap = app.snapshot
        if snap is not None:
            self.query_one(GpuPanel).show(snap, app.filter_text)
        s = app.settings
        descending = columns.BY_KEY[s.sort].descending != s.reverse
        rows: Sequence[ProcSample] = []
        find: Callable[[ProcKey], int | None] | None = None
        if snap is None:
            message = "waiting for the first sample…"
        else:
            order = self._order
            if order is None or order.procs is not snap.processes:
                order = self._order = columns.ProcOrder(snap.processes)    # once a snapshot
            view = order.view(s.sort, s.reverse, app.filter_text)
            rows, find = view, view.position
            if rows:
                message = ""
            elif snap.processes:
                message = f"no process matches the filter {app.filter_text!r} (Esc clears it)"
            else:
                message = "no CUDA process seen yet"
        fleet = snap is not None and columns.is_fleet(snap.processes)
        self.table.set_rows(rows, columns.visible(s.columns, fleet), s.sort, descending, app.tags, message, find)

    # -- filter ----------------------------------------------------------------------------
    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.gapp.filter_text
        box.add_class("-shown")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.gapp.set_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        box = self.query_one("#filter", Input)
        if not box.value:
            box.remove_class("-shown")
        self.table.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("-shown")
        self.gapp.set_filter("")
        self.table.focus()

    # -- sorting ---------------------------------------------------------------------------
    def action_sort_menu(self) -> None:
        from gputop.ui.screens.sort import SortScreen

        self.app.push_screen(SortScreen())

    def action_sort_move(self, step: int) -> None:
        s = self.gapp.settings
        self.gapp.set_sort(columns.neighbour(s.sort, s.columns, step), reverse=False)

    def action_reverse(self) -> None:
        s = self.gapp.settings
        self.gapp.set_sort(s.sort, reverse=not s.reverse)

    def on_proc_table_sort_clicked(self, message: ProcTable.SortClicked) -> None:
        s = self.gapp.settings
        if message.key == s.sort:
            self.gapp.set_sort(s.sort, reverse=not s.reverse)
        else:
            self.gapp.set_sort(message.key, reverse=False)

    # -- selection -------------------------------------------------------------------------
    def action_details(self) -> None:
        key = self.table.selected_key
        if key is not None:
            self.gapp.open_details(key)

    def on_proc_table_activated(self, message: ProcTable.Activated) -> None:
        self.gapp.open_details(message.key)

    def action_tag(self) -> None:
        key = self.table.selected_key
        if key is None:
            return
        self.gapp.toggle_tag(key)
        self.table.action_cursor(1)

    def action_compare(self) -> None:
        app = self.gapp
        live = {p.key for p in app.snapshot.processes} if app.snapshot else set()
        tags = [t for t in app.tags if t in live] or list(app.tags)
        selected = self.table.selected_key
        if len(tags) >= 2:
            app.open_compare(tags[0], tags[1])
        elif app.baseline is not None and selected is not None:
            app.open_compare(None, selected)
        elif len(tags) == 1 and selected is not None and selected != tags[0]:
            app.open_compare(tags[0], selected)
        else:
            self.gapp.say(
                "tag two processes with Space, then press c (or start with --baseline FILE)",
                "warning",
            )

    # -- signals ---------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`k` is not offered (nor in the footer) where no signal can be sent; pressed anyway, it says why."""
        refused = self.gapp.signal_refusal() is not None
        if action == "signal":
            return not refused
        if action == "signal_refused":
            return refused
        return True

    def action_signal_refused(self) -> None:
        refusal = self.gapp.signal_refusal()
        if refusal:
            self.gapp.say(refusal, "error")

    def action_signal(self) -> None:
        from gputop.ui.screens.signal import SignalScreen

        app = self.gapp
        refusal = app.signal_refusal()
        if refusal:
            self.gapp.say(refusal, "error")
            return
        rows = {p.pid: p for p in self.table.rows}
        pids = [t for t in app.tags if t in rows] or (
            [self.table.selected_pid] if self.table.selected_pid is not None else []
        )
        if not pids:
            return
        targets = [(pid, rows[pid].comm, rows[pid].start_time) for pid in pids]
        labels = [f"{pid} {fmt.text(rows[pid].cmdline or rows[pid].comm)}" for pid in pids]

        def sent(signum: int | None) -> None:
            if signum is not None:
                app.send_signal(targets, signum)

        self.app.push_screen(SignalScreen(labels), sent)
