"""The Textual application and the dashboard's entry point ``run_dashboard(feed, options)``.

Threads: the feed calls ``_on_feed_snapshot`` from its own thread; that callback only filters,
records, appends to the history and posts a ``SnapshotArrived`` message. Messages replace older
queued ones (``can_replace``, plus a sequence number so a stale one is dropped even when not
adjacent in the queue): the UI always draws the newest snapshot and never waits on the collector.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from textual.app import App
from textual.driver import Driver
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen

from gputop import config as config_mod
from gputop.feeds.base import Capabilities, Feed, MinimalFeed, adopt
from gputop.model import ProcKey, Snapshot
from gputop.record import Recorder, RecordingError
from gputop.ui import bindings, gcsettings, themes
from gputop.ui.exited import ExitedRows
from gputop.ui.options import (
    INTERVAL_STEPS,
    SORT_KEYS,
    THEME_NAMES,
    DashboardOptions,
    resolve_settings,
)
from gputop.ui.screens.base import LiveScreen
from gputop.ui.signals import send_checked
from gputop.ui.widgets.header import HeaderState
from gputop.view import columns
from gputop.view import format as fmt
from gputop.view.baseline import Baseline, load_baseline
from gputop.view.history import History, Point, points_of_series


class SnapshotArrived(Message):
    """A new snapshot from the feed; a newer one queued behind it replaces it."""

    def __init__(self, snapshot: Snapshot, seq: int) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.seq = seq

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotArrived)


class FeedFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class GputopApp(App[int]):
    TITLE = "gputop"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = bindings.of(bindings.GLOBAL + bindings.REPLAY + bindings.REPLAY_ONLY)
    CSS = """
    Screen { background: $background; }
    ModalScreen { background: $background 60%; }
    .-narrow FooterKey .footer-key--key { padding: 0 0 0 1; }
    .-narrow FooterKey .footer-key--description { padding: 0 0 0 1; }
    #banner { height: auto; background: $accent 25%; color: $foreground; text-style: bold; padding: 0 1; }
    /* a page that scrolls (details, compare): one column, as the process table's, and the thumb on a track
       of its own colour (htop's, nvitop's): Textual's track has the background's colour, so that its thumb
       alone showed, a block floating mid-screen */
    .page {
        scrollbar-size-vertical: 1;
        scrollbar-background: $panel; scrollbar-background-hover: $panel; scrollbar-background-active: $panel;
        scrollbar-color: $primary; scrollbar-color-hover: $primary; scrollbar-color-active: $accent;
        scrollbar-corner-color: $panel;
    }
    """

    def __init__(
        self, feed: Feed | MinimalFeed, options: DashboardOptions | None = None, *, config_path: Path | None = None
    ) -> None:
        self.options = options or DashboardOptions()
        self.config_path = config_path
        cfg, self.startup_warnings = config_mod.load_config(config_path)
        self.settings = resolve_settings(self.options, cfg, self.startup_warnings)  # may raise ValueError
        self.baseline: Baseline | None = None
        if self.options.baseline is not None:
            self.baseline = load_baseline(self.options.baseline, self.options.baseline_pid)  # RecordingError
        self.recorder = (Recorder(self.options.record, self.options.record_max_bytes, self.options.record_keep)
                         if self.options.record else None)     # RecordingError
        super().__init__()  # (Textual removes NO_COLOR from the environment here)
        # no toast rack on any screen: a message has a line of its own that covers nothing (say); a
        # rack hidden by CSS shows anyway (Textual sets its display inline when it has notifications)
        self._disable_notifications = True
        self.feed = adopt(feed)
        self.history = History(replay=self.caps.recorded)
        self.snapshot: Snapshot | None = None
        #: the rows of processes that exited, kept for a moment (``ExitedRows``)
        self.exited_rows = ExitedRows()
        self.paused = False
        self.filter_text = ""
        self.tags: list[ProcKey] = []
        #: the process table shows the tree of parents and children (F5)
        self.tree_view = False
        self.feed_error: str | None = None
        self.record_error: str | None = None
        self.exit_code = 0
        #: a replay runs at its recorded pace until an interval is given (-d, + or -)
        self.replay_paced = self.caps.recorded and self.options.interval_s is None
        self._seq = 0
        self._seq_lock = threading.Lock()
        #: settings changed but not yet written; a save worker takes them all under _save_file_lock, so the
        #: file always ends with the latest values even when two saves' threads run out of order
        self._unsaved: dict[str, object] = {}
        self._unsaved_lock = threading.Lock()
        self._save_file_lock = threading.Lock()
        self._themes = themes.load_themes()
        for t in self._themes.values():
            self.register_theme(t)
        self.theme = self.settings.theme

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, but on Linux one whose input thread sleeps until there is input
        (``gputop.ui.driver``); a driver named in TEXTUAL_DRIVER is left as it is."""
        from textual.drivers.linux_driver import LinuxDriver

        driver = super().get_driver_class()
        if driver is LinuxDriver:
            from gputop.ui.driver import QuietLinuxDriver

            return QuietLinuxDriver
        return driver

    # -- start-up and feed -----------------------------------------------------------------
    def on_mount(self) -> None:
        from gputop.ui.screens.main import MainScreen

        if self.options.quit_on_signals:
            # handled by the event loop, between its callbacks: a KeyboardInterrupt raised inside the app
            # instead left Python 3.9's terminal in the alternate screen with mouse reporting on
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, self.action_quit)
        self.push_screen(MainScreen())
        for w in [*self.startup_warnings, *self.feed.notices]:   # config; a replay's cut line
            self.say(w, "warning", timeout=8)
        if self.options.compare_pids is not None:
            a, b = self.options.compare_pids
            self.open_compare(a, b)
        self.run_worker(self._start_feed, thread=True, name="feed-start", exit_on_error=False)

    def _start_feed(self) -> None:
        try:
            if not self.replay_paced:
                self.feed.set_interval(self.settings.interval_s)
            self._tell_view()
            self.feed.start(self._on_feed_snapshot)
        except Exception as e:  # the collector could not start: say why, keep the UI up
            self.post_message(FeedFailed(f"{type(e).__name__}: {e}"))

    def _on_feed_snapshot(self, snap: Snapshot) -> None:
        """Called from the feed's thread: no widget access here."""
        snap = self.options.filters.apply(snap)
        if self.recorder is not None and self.record_error is None:
            try:
                self.recorder.write(snap)
            except RecordingError as e:
                self.record_error = e.message
        if self.paused:
            return
        self.history.add(snap)
        with self._seq_lock:
            self._seq += 1
            seq = self._seq
        self.post_message(SnapshotArrived(snap, seq))

    def on_snapshot_arrived(self, message: SnapshotArrived) -> None:
        if message.seq < self._seq or self.paused:
            return  # a newer snapshot is on its way, or the display is frozen
        self.show_snapshot(message.snapshot)

    def on_feed_failed(self, message: FeedFailed) -> None:
        self.feed_error = message.error
        self.exit_code = 1
        self.say(f"the collector failed to start: {message.error}", "error", timeout=30)
        self.refresh_views()

    def show_snapshot(self, snap: Snapshot) -> None:
        if not self.is_fleet:       # the fleet view's exporters keep exited processes themselves
            snap = self.exited_rows.apply(snap, self.settings.interval_s)
        self.snapshot = snap
        self.refresh_views()

    def refresh_views(self) -> None:
        """Redraw the visible live screens: the top one and those under a modal dialog. A screen pushed
        but not composed yet (the first snapshot of a fast replay can come first) is skipped: it draws
        the app's state itself once it is laid out (LiveScreen.on_resize). Nothing is drawn once the
        app shuts down: its screens' widgets are being removed (Textual's test harness shuts down while
        the message loop still delivers snapshots)."""
        if not self.is_running:
            return
        for screen in reversed(self.screen_stack):
            if isinstance(screen, LiveScreen) and screen.is_mounted:
                screen.update_view()
            if not isinstance(screen, ModalScreen):
                break

    # -- state shared by the screens -------------------------------------------------------
    @property
    def caps(self) -> Capabilities:
        """What the feed lets the dashboard offer (``gputop.feeds.base.Capabilities``)."""
        return self.feed.capabilities

    def header_state(self) -> HeaderState:
        progress = self.feed.progress()
        replay = None if progress is None else (progress[0], progress[1], float(self.feed.speed))
        error = (self.feed_error or self.feed.error
                 or (f"recording stopped: {self.record_error}" if self.record_error else None))
        interval = self.settings.interval_s
        if self.caps.recorded and self.snapshot is not None and self.snapshot.interval_s > 0:
            # the recording's own interval, and the speed it really plays at (a step of 0.25 s
            # through 1 s snapshots plays at ×4)
            interval = self.snapshot.interval_s
            if replay is not None and self.caps.paces:
                replay = (replay[0], replay[1], float(self.feed.playback_speed(interval)))
        return HeaderState(self.snapshot, interval, self.paused, replay, self.filter_text, error)

    def save_settings(self, **changed: object) -> None:
        """Persist the settings the user just changed, off the UI thread."""
        if self.caps.recorded and "interval_s" in changed:
            changed.pop("interval_s")  # a replay step is not a refresh preference
        if not changed:
            return
        with self._unsaved_lock:
            self._unsaved.update(changed)
        self.run_worker(self._save_config, thread=True, name="save-config", exit_on_error=False)

    def flush_settings(self) -> None:
        """Write what is not saved yet, after a save under way (a key pressed just before quitting:
        the save worker's thread does not outlive the process)."""
        self._save_config()

    def _save_config(self) -> None:
        with self._save_file_lock:
            with self._unsaved_lock:
                changed, self._unsaved = self._unsaved, {}
            if not changed:
                return  # an earlier worker already wrote these
            cfg = config_mod.Config(**changed)  # type: ignore[arg-type]
            try:
                backup = config_mod.save_config(cfg, self.config_path)
            except OSError as e:
                self.say(f"cannot save settings: {e}", "warning")
                return
        if backup is not None:
            self.say(f"settings saved; the file as it was (comments, or content gputop cannot read) is kept "
                     f"in {backup}", "warning", timeout=10)

    def set_sort(self, key: str, reverse: bool | None = None) -> None:
        self.settings.sort = columns.check_sort_key(key)
        if reverse is not None:
            self.settings.reverse = reverse
        self.save_settings(sort=self.settings.sort, reverse=self.settings.reverse)
        self._tell_view()
        self.refresh_views()

    def _tell_view(self) -> None:
        """The table's sort and filter to the feed (the fleet feed reads its top rows by them: now)."""
        s = self.settings
        self.feed.set_view(s.sort, columns.BY_KEY[s.sort].descending != s.reverse, self.filter_text)

    def set_columns(self, cols: Sequence[str], save: bool = True) -> None:
        """Show these columns; ``save``: write them to config.toml (the sort menu shows its changes at
        once and saves them on Enter only: Esc puts the columns back as they were, unsaved)."""
        self.settings.columns = columns.check_columns(cols)
        if save:
            self.save_settings(columns=self.settings.columns)
        self.refresh_views()

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._tell_view()
        self.refresh_views()

    def toggle_tag(self, key: ProcKey) -> None:
        if key in self.tags:
            self.tags.remove(key)
        else:
            self.tags.append(key)
        self.refresh_views()

    def untag_all(self) -> None:
        self.tags.clear()
        self.refresh_views()

    @property
    def is_fleet(self) -> bool:
        """Processes of several nodes (the fleet view): NODE, NAMESPACE and POD columns."""
        return self.caps.nodes

    def show_in_detail(self, keys: Sequence[ProcKey]) -> None:
        """The processes a screen shows in detail: the fleet feed reads their series and histograms."""
        self.feed.watch(keys)

    def points(self, key: ProcKey, until: float | None = None) -> list[Point]:
        """A process's chart points: the history's, or the feed's own series (fleet view)."""
        if not self.caps.own_series or not isinstance(key, tuple):
            return self.history.points(key, until=until)
        return [pt for pt in points_of_series(self.feed.series(key)) if until is None or pt.time <= until]

    def say(
        self, message: str, severity: SeverityLevel = "information", timeout: float | None = None
    ) -> None:
        """A notification (thread-safe); plain text, never markup, sanitised (it may quote a process's
        name, a path or an error about them: gputop.textsafe). It shows on the screen's message line, which
        covers nothing (the toast rack is hidden; notifications still record it)."""
        text = fmt.text(message)
        self.notify(text, severity=severity, timeout=timeout, markup=False)
        self.call_later(self._show_message, text, severity, timeout or self.NOTIFICATION_TIMEOUT)

    def _show_message(self, text: str, severity: str, timeout: float) -> None:
        from gputop.ui.widgets.message import line_of

        if self.is_running and self.screen_stack:
            line_of(self.screen).say(text, severity, timeout)

    # -- screens ---------------------------------------------------------------------------
    def open_details(self, key: ProcKey) -> None:
        from gputop.ui.screens.details import DetailsScreen

        self.push_screen(DetailsScreen(key))

    def open_compare(self, a: ProcKey | None, b: ProcKey) -> None:
        """Compare live processes ``a`` and ``b`` (PIDs, or keys in the fleet view), or (``a`` None)
        the baseline against live ``b``."""
        from gputop.ui.screens.compare import CompareScreen

        self.push_screen(CompareScreen(a, b))

    def action_help(self) -> None:
        from gputop.ui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(fleet=self.is_fleet))

    # -- global actions --------------------------------------------------------------------
    def action_quit(self) -> None:  # type: ignore[override]
        # the feed starts stopping now, while Textual restores the terminal (its input thread takes
        # 0.2 s to end): the collector's probes detach meanwhile; run_dashboard's feed.stop() waits for it
        threading.Thread(target=self.feed.stop, name="gputop-quit", daemon=True).start()
        self.exit(self.exit_code, return_code=self.exit_code)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.feed.set_paused(self.paused)
        self.refresh_views()

    def action_interval(self, direction: int) -> None:
        current = self.settings.interval_s
        if self.replay_paced and self.snapshot is not None and self.snapshot.interval_s > 0:
            current = self.snapshot.interval_s
        self.replay_paced = False
        if direction > 0:
            new = next((s for s in INTERVAL_STEPS if s > current + 1e-9), INTERVAL_STEPS[-1])
        else:
            new = next((s for s in reversed(INTERVAL_STEPS) if s < current - 1e-9), INTERVAL_STEPS[0])
        if new == current:
            return
        self.settings.interval_s = new
        self.feed.set_interval(new)
        self.save_settings(interval_s=new)
        self.refresh_views()

    def action_cycle_theme(self) -> None:
        names = list(self._themes)
        order = [n for n in themes.theme_names() if n in names]
        i = order.index(self.theme) if self.theme in order else -1
        self.settings.theme = order[(i + 1) % len(order)]
        self.theme = self.settings.theme
        self.save_settings(theme=self.settings.theme)
        self.say(f"theme: {self.settings.theme}", timeout=2)

    def action_step(self, n: int) -> None:
        if not self.caps.steps:
            return
        if not self.paused:
            self.paused = True
            self.feed.set_paused(True)
        try:
            snap = self.feed.step(n)
        except RecordingError as e:
            self.say(e.message, "error")
            return
        snap = self.options.filters.apply(snap)
        self.history.add(snap)      # a snapshot stepped to is charted like one played
        self.show_snapshot(snap)

    def action_speed(self, factor: float) -> None:
        if not self.caps.paces:
            return
        self.feed.set_speed(float(self.feed.speed) * factor)
        self.refresh_views()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "step":
            return self.caps.steps
        if action == "speed":
            return self.caps.paces
        if action == "replay_only":
            return not (self.caps.steps or self.caps.paces)
        return True

    def action_replay_only(self) -> None:
        self.say("live mode: . , [ ] step and pace a replay; record with --record FILE, "
                 "then open it with --replay FILE", "warning", timeout=5)

    # -- signals ---------------------------------------------------------------------------
    def signal_refusal(self) -> str | None:
        """Why `k` cannot send signals now, or None."""
        if self.options.readonly:
            return "read-only mode (--readonly): sending signals is disabled"
        return self.caps.signal_refusal

    def send_signal(self, targets: Sequence[tuple[int, str | None, float | None]], signum: int) -> None:
        """Send ``signum`` to each (pid, comm, start_time) after checking the PID still runs that process."""
        self.run_worker(
            partial(send_checked, list(targets), signum, self.say),
            thread=True,
            name="send-signal",
            exit_on_error=False,
        )

def run_dashboard(feed: Feed | MinimalFeed, options: DashboardOptions) -> int:
    """Run the dashboard over ``feed`` until the user quits; return the exit code.

    Raises ``ValueError`` (bad sort/theme/columns/interval, message lists the valid names) and
    ``gputop.record.RecordingError`` (unreadable ``baseline``, unwritable ``record``) before the
    UI starts. The feed is started from a worker thread once the UI shows "starting", and stopped
    (and the recording closed) when the UI exits.
    """
    try:
        app = GputopApp(feed, options)
    except BaseException:
        feed.stop()  # never started, but it may hold resources from its construction
        raise
    gcsettings.tune()
    try:
        code = app.run()
    finally:
        try:
            app.flush_settings()
            feed.stop()
        finally:
            if app.recorder is not None:
                app.recorder.close()
    if app.return_code is not None and app.return_code != 0:
        return app.return_code
    return int(code or 0) or app.exit_code


__all__ = ["SORT_KEYS", "THEME_NAMES", "DashboardOptions", "GputopApp", "run_dashboard"]
