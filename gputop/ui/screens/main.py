"""The main screen: header, GPU panel, process table, filter line and footer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual import on
from textual.app import ComposeResult
from textual.widgets import Footer, Input, Static

from gputop.model import ProcKey, ProcSample, Snapshot
from gputop.ui import bindings
from gputop.ui.screens.base import LiveScreen
from gputop.ui.widgets.gpu_panel import GpuPanel
from gputop.ui.widgets.header import HeaderBar, SummaryBar
from gputop.ui.widgets.proc_table import ProcTable
from gputop.view import columns, fields
from gputop.view import format as fmt
from gputop.view.tree import tree_order


def _label(key: ProcKey) -> str:
    """A process's key as a user reads it: PID 20; in the fleet view, PID 20 on its scrape target."""
    return f"PID {key}" if isinstance(key, int) else f"PID {key[1]} on {key[0]}"


class MainScreen(LiveScreen):
    BINDINGS = bindings.of(bindings.MAIN + bindings.SIGNAL_REFUSED)
    AUTO_FOCUS = "ProcTable"
    DEFAULT_CSS = """
    MainScreen #filter, MainScreen #search { height: 1; border: none; padding: 0 1; display: none;
                                             background: $panel; }
    MainScreen #filter.-shown, MainScreen #search.-shown { display: block; }
    """

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield SummaryBar(id="summary")
        if self.gapp.options.banner:
            yield Static(self.gapp.options.banner, id="banner", markup=False)
        yield GpuPanel(self.gapp.history.gpu_util, id="gpus")
        yield ProcTable(id="procs")
        what = "command, node or PID" if self.gapp.is_fleet else "command, user or PID"
        yield Input(placeholder=f"filter by {what} — Enter keeps it, Esc clears it", id="filter")
        yield Input(placeholder=f"search by {what} — F3 the next one, Enter keeps it selected, Esc closes",
                    id="search")
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
            if order is None or order.procs is not snap.processes:    # once a snapshot
                # rates sort by their mean over the last seconds (history.SMOOTHED: rows hold their places);
                # the fleet view's rates are over its --window already
                smooth = None if columns.is_fleet(snap.processes) else app.history.sort_values(snap.time)
                order = self._order = columns.ProcOrder(snap.processes, smooth)
            view = order.view(s.sort, s.reverse, app.filter_text)
            rows, find = view, view.position
            if rows:
                message = ""
            elif snap.processes:
                message = f"no process matches the filter {app.filter_text!r} (Esc clears it)"
            else:
                message = self._nothing_seen(snap)
        prefixes = None
        if app.tree_view and rows:       # F5: children under their parents, siblings in the sort's order
            ordered, prefixes = tree_order(list(rows))
            rows, find = ordered, {p.key: i for i, p in enumerate(ordered)}.get
        self.table.set_prefixes(prefixes)
        self._show_summary(rows)
        fleet = snap is not None and columns.is_fleet(snap.processes)
        pods = snap is not None and fleet and columns.has_pods(snap.processes)
        self.table.set_rows(rows, columns.visible(s.columns, fleet, pods), s.sort, descending, app.tags, message,
                            find)

    def _nothing_seen(self, snap: Snapshot) -> str:
        """What an empty table says (issue 35): why nothing can be seen, where that is the reason (BPF off:
        a user without the privileges saw an empty table and no word why); else what to run to see one."""
        app = self.gapp
        bpf = snap.sources.get("bpf")
        if app.is_fleet or app.caps.recorded:
            return "no CUDA process seen yet"
        if bpf is not None and bpf.status == "unavailable":
            why = f": {fmt.text(bpf.reason)}" if bpf.reason else ""
            return f"no CUDA process seen yet, and none can be: BPF is off{why} (gputop doctor says what to fix)"
        return "no CUDA process seen yet (gputop demo runs two to look at)"

    def _show_summary(self, rows: Sequence[ProcSample]) -> None:
        """The summary line: the listed rows' counts and totals (``model.summarize``), the tagged ones
        among the snapshot's processes, and whether the tree is shown."""
        app = self.gapp
        snap = app.snapshot
        bar = self.query_one(SummaryBar)
        if snap is None:
            bar.show(None, 0, app.tree_view)
            return
        # the fleet's top rows: the totals Prometheus summed over every process the filter finds
        summary = app.feed.summary_of(snap, app.filter_text) or (
            snap.summary if not app.filter_text.strip() else app.exited_rows.summary(snap, rows))
        live = {p.key for p in snap.processes} if app.tags else set()
        bar.show(summary, sum(1 for t in app.tags if t in live), app.tree_view, app.feed.table_note(snap) or "")

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
        search = self.query_one("#search", Input)
        if search.has_class("-shown"):          # Esc closes the search first; the filter stays
            self._close_search()
            return
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("-shown")
        self.gapp.set_filter("")
        self.table.focus()

    # -- search (htop's F3: the selection moves, every row stays) -------------------------------
    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        if box.has_class("-shown") and box.value:        # F3 again: the next match
            self._find(box.value, after=True)
            return
        box.add_class("-shown")
        box.focus()

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        if event.value:
            self._find(event.value, after=False)

    @on(Input.Submitted, "#search")
    def _search_done(self) -> None:
        self._close_search()

    def _find(self, query: str, *, after: bool) -> None:
        if not self.table.find(query, after=after):
            self.gapp.say(f"no process matches {query!r}", timeout=3)

    def _close_search(self) -> None:
        box = self.query_one("#search", Input)
        box.value = ""
        box.remove_class("-shown")
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

    def action_untag_all(self) -> None:
        app = self.gapp
        if not app.tags:
            app.say("no process is tagged (Space tags one)", timeout=3)
            return
        n = len(app.tags)
        app.untag_all()
        app.say(f"untagged {n} process{'es' if n > 1 else ''}", timeout=3)

    def action_tree(self) -> None:
        app = self.gapp
        app.tree_view = not app.tree_view
        app.say("tree view: children under their parent (by PPID)" if app.tree_view else "tree view off: a flat list",
                timeout=3)
        app.refresh_views()

    def action_compare(self) -> None:
        app = self.gapp
        live = {p.key for p in app.snapshot.processes} if app.snapshot else set()
        tags = [t for t in app.tags if t in live] or list(app.tags)
        selected = self.table.selected_key
        if len(tags) >= 2:
            a, b = tags[-2], tags[-1]       # the two tagged last
            if len(tags) > 2:
                app.say(f"{len(tags)} tagged: comparing the two tagged last, {_label(a)} and {_label(b)} "
                        f"(U untags all)", timeout=6)
            app.open_compare(a, b)
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
        selected = self.table.selected_pid
        pids = [t for t in app.tags if isinstance(t, int) and t in rows] or (
            [selected] if isinstance(selected, int) else []
        )
        if not pids:
            return
        targets = [(pid, rows[pid].comm, rows[pid].start_time) for pid in pids]
        # the program's base name and its arguments, as the COMMAND column: the dialog cuts at the end
        labels = [f"{pid} {fmt.text(fields.command(rows[pid]))}" for pid in pids]

        def sent(signum: int | None) -> None:
            if signum is not None:
                app.send_signal(targets, signum)

        self.app.push_screen(SignalScreen(labels), sent)
