"""Pilot tests: every key of the dashboard, asserting its real effect."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest
from textual.pilot import Pilot

from gputop.feeds.replay import ReplayFeed
from gputop.model import Snapshot
from gputop.record import read_recording
from gputop.ui.app import DashboardOptions, GputopApp, SnapshotArrived, run_dashboard
from gputop.ui.screens.compare import CompareScreen
from gputop.ui.screens.details import DetailsScreen
from gputop.ui.screens.help import HelpScreen
from gputop.ui.screens.main import MainScreen
from gputop.ui.screens.signal import SignalScreen
from gputop.ui.screens.sort import SortScreen
from gputop.ui.widgets.header import HeaderBar, header_content
from gputop.ui.widgets.proc_table import ProcTable
from gputop.view.columns import BY_KEY

from .ui_helpers import SCENARIO, ManualFeed, proc, snapshot

SIZE = (160, 45)
Scenario = Callable[[GputopApp, Pilot[Any], ManualFeed], Awaitable[None]]


def run(app_or_options: DashboardOptions | None, body: Scenario, feed: ManualFeed | None = None) -> GputopApp:
    feed = feed or ManualFeed()
    app = GputopApp(feed, app_or_options or DashboardOptions())

    async def main() -> None:
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            for _ in range(200):
                if feed.started.is_set():
                    break
                await pilot.pause(0.01)
            await body(app, pilot, feed)

    asyncio.run(main())
    return app


async def push(pilot: Pilot[Any], feed: ManualFeed, *snaps: Snapshot) -> None:
    for s in snaps:
        feed.push(s)
        await pilot.pause()
    await pilot.pause()


def table(app: GputopApp) -> ProcTable:
    return app.screen.query_one(ProcTable)


def pids(app: GputopApp) -> list[int]:
    return [p.pid for p in table(app).rows]


def notes(app: GputopApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def three() -> Snapshot:
    return snapshot(
        proc(10, "alpha", 500.0, user="alice", grid_blocks_avg=8.0),
        proc(20, "beta", 9000.0, user="bob", grid_blocks_avg=64.0),
        proc(30, "gamma", 40.0, user="carol", grid_blocks_avg=4096.0),
    )


# -- display ---------------------------------------------------------------------------------


def test_starting_then_default_sort_launches_descending() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        assert "starting" in header_content(app.screen.query_one(HeaderBar).state).plain
        await push(pilot, feed, three())
        assert pids(app) == [20, 10, 30]
        header = header_content(app.screen.query_one(HeaderBar).state).plain
        assert "test-host" in header and "09:00:00" in header and "every 1s" in header
        assert "cost 5.00k hits/s 0.45% CPU (traps 0.35% + programs 0.10%)" in header

    run(None, body)


def test_unknown_is_na_never_zero_and_sorts_last() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(proc(1, "known", 0.0), proc(2, "unknown", None)))
        assert pids(app) == [1, 2]
        t = table(app)
        assert BY_KEY["launches"].render(t.rows[1]) == "N/A"
        assert BY_KEY["launches"].render(t.rows[0]) == "0"
        strip_text = "".join(seg.text for seg in t.render_line(2))
        assert "N/A" in strip_text

    run(None, body)


def test_exited_process_fades() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(proc(1, "live", 10.0), proc(2, "gone", 5.0, state="exited")))
        t = table(app)
        exited = t.get_component_rich_style("proc-table--exited")
        row = t.render_line(2)  # pid 2 is second (lower rate); the cursor is on row 1
        assert "gone" in "".join(s.text for s in row)
        assert all(seg.style == exited for seg in row if seg.text.strip() and "N/A" not in seg.text)
        live = t.render_line(1)
        assert not any(seg.style == exited for seg in live)

    run(None, body)


def test_banner_shown() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        assert "unfused vs fused" in str(app.screen.query_one("#banner").render())

    run(DashboardOptions(banner="demo: unfused vs fused"), body)


# -- sorting -----------------------------------------------------------------------------------


def test_sort_move_and_reverse_keys() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("greater_than_sign")  # launches -> grid
        assert app.settings.sort == "grid"
        assert pids(app) == [30, 20, 10]
        await pilot.press("r")
        assert pids(app) == [10, 20, 30]
        await pilot.press("less_than_sign")  # back to launches, natural order
        assert app.settings.sort == "launches" and not app.settings.reverse
        assert pids(app) == [20, 10, 30]

    run(None, body)


def test_sort_menu_picks_column() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("s")
        assert isinstance(app.screen, SortScreen)
        await pilot.press("home", "enter")  # the first column: PID, ascending
        assert isinstance(app.screen, MainScreen)
        assert app.settings.sort == "pid"
        assert pids(app) == [10, 20, 30]

    run(None, body)


def header_text(app: GputopApp) -> str:
    """The process table's header line, also under a dialog (the sort menu)."""
    main = next(s for s in app.screen_stack if isinstance(s, MainScreen))
    return "".join(s.text for s in main.query_one(ProcTable).render_line(0))


def test_sort_menu_hides_and_shows_a_column(config_file: Path) -> None:
    """`x` shows its effect at once behind the menu; Enter keeps it (saved, and sorts by the highlighted
    column), and `x` again then Enter shows the column again."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("s", "home", "down", "x")  # USER
        assert "user" not in app.settings.columns
        assert "USER" not in header_text(app)         # at once, behind the menu
        await pilot.press("down", "enter")            # Enter on GPU: keep the columns, sort by GPU
        assert isinstance(app.screen, MainScreen)
        header = header_text(app)
        assert "USER" not in header and "PID" in header and app.settings.sort == "gpu"
        await pilot.pause(0.3)
        assert "user" not in tomllib.loads(config_file.read_text())["columns"]
        await pilot.press("s", "home", "down", "x", "enter")
        assert "user" in app.settings.columns and "USER" in header_text(app) and app.settings.sort == "user"
        await pilot.pause(0.3)
        assert "user" in tomllib.loads(config_file.read_text())["columns"]

    run(None, body)


def test_sort_menu_escape_puts_the_columns_back_and_saves_nothing(config_file: Path) -> None:
    """Issue 35: a column hidden with `x` stayed hidden after Esc, and was saved. Esc cancels everything done in
    the menu: the columns are those of when it opened, on screen and in config.toml (never written)."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        before = app.settings.columns
        head = header_text(app)
        await pilot.press("s", "home", "down", "x", "down", "x", "down", "down", "down", "x")   # USER, GPU, GRID off
        assert not {"user", "gpu", "grid"} & set(app.settings.columns)
        assert "USER" not in header_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        assert app.settings.columns == before and app.settings.sort == "launches"
        assert header_text(app) == head
        await pilot.pause(0.3)
        # a column hidden, shown again, hidden: Esc still restores the opening state
        await pilot.press("s", "home", "down", "x", "x", "x", "escape")
        assert app.settings.columns == before
        await pilot.pause(0.3)

    run(None, body)
    assert not config_file.exists()         # nothing was saved


def test_sort_menu_enter_on_a_column_hidden_in_it_shows_it_again() -> None:
    """Sorting by a column shows it: hidden with `x`, then chosen with Enter, it is shown (the sort column is
    never hidden, as `x` refuses to hide it)."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("s", "home", "down", "x", "enter")     # USER hidden, then chosen
        assert app.settings.sort == "user" and "user" in app.settings.columns
        assert "USER▲" in header_text(app)

    run(None, body)


def test_click_header_sorts_and_click_again_reverses() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        t = table(app)
        header = "".join(s.text for s in t.render_line(0))
        x = header.index("PID")
        await pilot.click(ProcTable, offset=(x, 0))
        await pilot.pause()
        assert app.settings.sort == "pid"
        assert pids(app) == [10, 20, 30]
        await pilot.click(ProcTable, offset=(x, 0))
        await pilot.pause()
        assert pids(app) == [30, 20, 10]

    run(None, body)


def test_selection_follows_the_process_across_resorts() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("down")
        assert table(app).selected_pid == 10
        await push(pilot, feed, snapshot(proc(10, "alpha", 99999.0), proc(20, "beta", 1.0), proc(30, "gamma", 2.0)))
        assert pids(app)[0] == 10
        assert table(app).selected_pid == 10

    run(None, body)


def test_cursor_keys() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(*[proc(100 + i, "p", float(1000 - i)) for i in range(80)]))
        t = table(app)
        assert t.selected_pid == 100
        await pilot.press("down", "down")
        assert t.selected_pid == 102
        await pilot.press("up")
        assert t.selected_pid == 101
        await pilot.press("end")
        assert t.selected_pid == 179
        await pilot.press("home")
        assert t.selected_pid == 100
        await pilot.press("pagedown")
        assert t.cursor_row > 20
        await pilot.press("pageup")
        assert t.cursor_row == 0

    run(None, body)


# -- filter ------------------------------------------------------------------------------------


def test_filter_by_user_command_and_pid() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("slash", *"bob")
        await pilot.pause()
        assert pids(app) == [20]
        await pilot.press("enter")
        assert app.filter_text == "bob" and pids(app) == [20]
        assert isinstance(app.focused, ProcTable)
        await push(pilot, feed, three())  # the filter stays on new snapshots
        assert pids(app) == [20]
        await pilot.press("escape")
        assert app.filter_text == "" and pids(app) == [20, 10, 30]
        await pilot.press("slash", *"gam", "enter")
        assert pids(app) == [30]
        await pilot.press("slash", "ctrl+u", *"10", "enter")
        assert pids(app) == [10]
        await pilot.press("slash", "ctrl+u", *"nomatch", "enter")
        assert pids(app) == []

    run(None, body)


def test_filter_typing_q_does_not_quit() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("slash", "q")
        await pilot.pause()
        assert app.is_running and app.filter_text == "q"

    run(None, body)


# -- refresh control ---------------------------------------------------------------------------


def test_pause_stops_updates_and_resume_restarts_them() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("p")
        assert app.paused and feed.paused
        assert "PAUSED" in header_content(app.screen.query_one(HeaderBar).state).plain
        await push(pilot, feed, snapshot(proc(99, "new", 1e6)))
        assert pids(app) == [20, 10, 30]
        await pilot.press("p")
        assert not app.paused and not feed.paused
        await push(pilot, feed, snapshot(proc(99, "new", 1e6)))
        assert pids(app) == [99]

    run(None, body)


def test_interval_keys(config_file: Path) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        assert feed.interval == 1.0
        await pilot.press("plus")
        assert feed.interval == 2.0 and app.settings.interval_s == 2.0
        assert "every 2s" in header_content(app.screen.query_one(HeaderBar).state).plain
        await pilot.press("minus", "minus")
        assert feed.interval == 0.5
        await pilot.pause(0.2)

    run(None, body)
    assert tomllib.loads(config_file.read_text())["interval_s"] == 0.5


def test_theme_key_cycles_and_persists(config_file: Path) -> None:
    seen = []

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        seen.append(app.theme)
        for _ in range(4):
            await pilot.press("t")
            seen.append(app.theme)
        await pilot.pause(0.2)

    run(None, body)
    assert seen == ["dark", "light", "high-contrast", "monochrome", "dark"]
    assert tomllib.loads(config_file.read_text())["theme"] == "dark"


def test_settings_saved_out_of_order_still_end_with_the_last_choice(config_file: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Each key press saves in a thread of its own; a first save that is slow (a busy disk, a loaded
    host) must not land after, and so undo, the later ones."""
    from gputop import config as config_mod

    real_save = config_mod.save_config
    calls: list[str | None] = []
    first_started = threading.Event()

    def slow_first(cfg: config_mod.Config, path: Path | None = None) -> Path | None:
        calls.append(cfg.theme)
        if len(calls) == 1:
            first_started.set()
            threading.Event().wait(0.5)  # the later presses' workers start while this one sleeps
        return real_save(cfg, path)

    monkeypatch.setattr(config_mod, "save_config", slow_first)

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.press("t")
        assert await asyncio.to_thread(first_started.wait, 5)
        for _ in range(2):
            await pilot.press("t")
        await pilot.pause(1.0)
        assert app.theme == "monochrome"

    run(None, body)
    assert tomllib.loads(config_file.read_text())["theme"] == "monochrome"
    assert calls[0] == "light" and calls[-1] == "monochrome"


def test_quit_key() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running

    app = run(None, body)
    assert app.return_code == 0


def test_ctrl_c_quits_even_from_the_filter_line() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.press("slash", "a", "ctrl+c")
        await pilot.pause()
        assert not app.is_running

    run(None, body)


# -- an empty table says why (issue 35 items 4 and 6) -----------------------------------------


def test_an_empty_table_says_why_or_what_to_run() -> None:
    """With BPF on: what to run to see a process (gputop demo); with BPF off (a user without the
    privileges saw an empty table and no word why): that none can be seen, why, and where to look."""
    from gputop.model import SourceStatus

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot())
        assert table(app)._message == "no CUDA process seen yet (gputop demo runs two to look at)"
        off = snapshot()
        off = replace(off, sources={**off.sources, "bpf": SourceStatus(
            "unavailable", "needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE")})
        await push(pilot, feed, off)
        assert table(app)._message == (
            "no CUDA process seen yet, and none can be: BPF is off: needs root, or CAP_BPF, CAP_PERFMON and "
            "CAP_SYS_PTRACE (gputop doctor says what to fix)")

    run(None, body)


# -- htop's function keys (issue 35 item 3) ---------------------------------------------------


def test_htops_function_keys_do_what_htops_do() -> None:
    """F1 help (F1 again closes it), F4 filter, F6 sort menu, F9 kill, F10 quits from any screen."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, MainScreen)
        await pilot.press("f4", *"bob", "enter")
        assert app.filter_text == "bob" and pids(app) == [20]
        await pilot.press("escape", "backslash", *"gam", "enter")    # htop's other filter key
        assert pids(app) == [30]
        await pilot.press("escape", "f6")
        assert isinstance(app.screen, SortScreen)
        await pilot.press("escape", "f9")
        assert isinstance(app.screen, SignalScreen)
        await pilot.press("escape")
        await pilot.press("enter")                                  # details, then F10 quits from there
        assert isinstance(app.screen, DetailsScreen)
        await pilot.press("f10")
        await pilot.pause()
        assert not app.is_running

    app = run(None, body)
    assert app.return_code == 0


def test_f3_search_selects_the_next_match_and_hides_nothing() -> None:
    """htop's F3 beside its F4: typing moves the selection to the first match from it, F3 to the next one
    (wrapping), every row still listed; Enter keeps the selection, Esc closes the search and leaves the
    filter as it was; no match says so and the selection stays."""
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(
            proc(10, "alpha", 500.0, user="alice"), proc(20, "beta", 9000.0, user="bob"),
            proc(30, "gamma", 40.0, user="carol"), proc(40, "alphabet", 20.0, user="dave")))
        assert pids(app) == [20, 10, 30, 40] and table(app).selected_pid == 20
        await pilot.press("f3", *"alph")
        await pilot.pause()
        assert table(app).selected_pid == 10 and pids(app) == [20, 10, 30, 40]
        await pilot.press("f3")
        assert table(app).selected_pid == 40
        await pilot.press("f3")                                     # wraps
        assert table(app).selected_pid == 10
        await pilot.press("enter")
        assert isinstance(app.focused, ProcTable) and table(app).selected_pid == 10
        await pilot.press("f3", *"carol")
        await pilot.pause()
        assert table(app).selected_pid == 30
        await pilot.press("escape")                                 # closes the search only
        assert app.filter_text == "" and pids(app) == [20, 10, 30, 40] and table(app).selected_pid == 30
        await pilot.press("f3", *"nobody")
        await pilot.pause()
        assert table(app).selected_pid == 30 and any("no process matches 'nobody'" in n for n in notes(app))
        await pilot.press("escape", "slash", *"a", "enter", "f3", *"40")    # searching within a filter
        await pilot.pause()
        assert app.filter_text == "a" and table(app).selected_pid == 40
        await pilot.press("escape")
        assert app.filter_text == "a"

    run(None, body)


def test_mouse_click_selects_and_double_click_opens_details() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.click(ProcTable, offset=(10, 3))  # the third row
        assert table(app).selected_pid == 30
        await pilot.double_click(ProcTable, offset=(10, 2))
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen) and app.screen.pid == 10

    run(None, body)


def test_charts_follow_size_and_theme(scenario: list[Snapshot]) -> None:
    from gputop.ui.widgets.chart import Chart

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, *scenario[:20])
        await pilot.press("enter")
        await pilot.pause()
        chart = app.screen.query_one("#chart-launches", Chart)
        text = chart.render()
        assert max(len(line) for line in text.plain.splitlines()) == chart.size.width
        dark_colour = str(text.spans[0].style) + str([s.style for s in text.spans])
        wide = chart.size.width
        await pilot.resize_terminal(100, 40)    # narrow: the charts stack, each as wide as the screen
        await pilot.pause()
        text = chart.render()
        assert chart.size.width != wide and chart.size.width > 90
        assert max(len(line) for line in text.plain.splitlines()) == chart.size.width
        await pilot.press("t")  # light
        await pilot.pause()
        light_colour = str(chart.render().spans[0].style) + str([s.style for s in chart.render().spans])
        assert "#1f62c7" in light_colour.lower() and light_colour != dark_colour

    run(None, body)


def test_help_lists_every_binding() -> None:
    from gputop.ui import bindings

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.press("h")
        assert isinstance(app.screen, HelpScreen)
        text = str(app.screen.query_one("#help-text").render())
        for _, group in bindings.SECTIONS:
            for b in group:
                assert b.tooltip and b.tooltip in text
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")  # closes the help, does not quit
        assert isinstance(app.screen, MainScreen) and app.is_running

    run(None, body)


# -- details, tags, compare --------------------------------------------------------------------


def test_enter_opens_details_of_the_selected_process(scenario: list[Snapshot]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, *scenario[:5])
        expected = pids(app)[1]
        await pilot.press("down", "enter")
        screen = app.screen
        assert isinstance(screen, DetailsScreen)
        assert screen.pid == expected
        await push(pilot, feed, scenario[5])
        assert screen.proc is not None and screen.proc.pid == expected
        assert str(expected) in str(screen.query_one("#title").render())
        assert "top kernels" in str(screen.query_one("#kernels").render())
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)

    run(None, body)


def test_tag_two_then_compare_opens_them(scenario: list[Snapshot]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, *scenario[:5])
        first = table(app).selected_pid
        await pilot.press("space")  # tags and moves down
        second = table(app).selected_pid
        await pilot.press("space")
        assert app.tags == [first, second]
        await pilot.press("c")
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert (screen.a_pid, screen.b_pid) == (first, second)
        assert screen.a is not None and screen.a.pid == first
        assert "B/A" in str(screen.query_one("#metrics").render())
        await pilot.press("x")
        assert (screen.a_pid, screen.b_pid) == (second, first)
        await pilot.press("escape")
        await pilot.press("up", "space")  # untag
        assert app.tags == [first]

    run(None, body)


def test_compare_without_tags_says_how() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert any("tag two processes" in n for n in notes(app))

    run(None, body)


def test_compare_pids_option_opens_compare_at_start(scenario: list[Snapshot]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert "waiting" in str(screen.query_one("#sides").render())
        await push(pilot, feed, *scenario[:3])
        assert screen.a is not None and screen.b is not None
        assert (screen.a.pid, screen.b.pid) == (4242, 4243)

    run(DashboardOptions(compare_pids=(4242, 4243)), body)


def test_demo_banner_on_the_compare_screen(scenario: list[Snapshot]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert str(screen.query_one("#banner").render()) == "demo without a GPU: traced only"

    run(DashboardOptions(compare_pids=(4242, 4243), banner="demo without a GPU: traced only"), body)


def test_compare_against_baseline(scenario: list[Snapshot]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, *scenario[:3])
        await pilot.press("c")  # the selected process (4242) against the baseline
        screen = app.screen
        assert isinstance(screen, CompareScreen) and screen.uses_baseline
        assert screen.a is not None and screen.a.pid == 4242  # the busiest recorded process
        assert screen.b is not None and screen.b.pid == 4242
        sides = str(screen.query_one("#sides").render())
        assert "baseline scenario.jsonl" in sides
        await pilot.press("b")  # next recorded process
        assert screen.a is not None and screen.a.pid != 4242

    run(DashboardOptions(baseline=SCENARIO), body)


# -- signals -----------------------------------------------------------------------------------


@pytest.fixture
def sleeper() -> Any:
    child = subprocess.Popen(["sleep", "60"])
    yield child
    if child.poll() is None:
        child.kill()
        child.wait()


def _sleep_snapshot(pid: int) -> Snapshot:
    return snapshot(proc(pid, "sleep", 10.0, cmdline="sleep 60"), proc(1, "init", 1.0))


def test_k_confirms_then_sends_the_signal(sleeper: subprocess.Popen[bytes]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, _sleep_snapshot(sleeper.pid))
        assert table(app).selected_pid == sleeper.pid
        await pilot.press("k")
        assert isinstance(app.screen, SignalScreen)
        assert sleeper.poll() is None  # nothing sent before confirming
        await pilot.press("enter")  # SIGTERM is highlighted
        for _ in range(100):
            if sleeper.poll() is not None:
                break
            await pilot.pause(0.02)

    run(None, body)
    assert sleeper.wait(5) == -signal.SIGTERM


def test_k_can_send_another_signal(sleeper: subprocess.Popen[bytes]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, _sleep_snapshot(sleeper.pid))
        await pilot.press("k", "down", "down", "enter")  # SIGKILL
        for _ in range(100):
            if sleeper.poll() is not None:
                break
            await pilot.pause(0.02)

    run(None, body)
    assert sleeper.wait(5) == -signal.SIGKILL


def test_k_cancelled_sends_nothing(sleeper: subprocess.Popen[bytes]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, _sleep_snapshot(sleeper.pid))
        await pilot.press("k", "escape")
        await pilot.pause(0.2)
        assert isinstance(app.screen, MainScreen)

    run(None, body)
    assert sleeper.poll() is None


def test_k_refuses_a_reused_pid(sleeper: subprocess.Popen[bytes]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(proc(sleeper.pid, "python", 10.0)))
        await pilot.press("k", "enter")
        await pilot.pause(0.3)
        assert any("PID reused" in n for n in notes(app))

    run(None, body)
    assert sleeper.poll() is None


def test_k_checks_the_start_time_when_the_command_is_the_same(sleeper: subprocess.Popen[bytes]) -> None:
    """A PID reused by another process of the same name (the usual case on a fleet host: one more
    `python`) is told apart by its start time."""
    import psutil

    started = psutil.Process(sleeper.pid).create_time()

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        earlier = replace(proc(sleeper.pid, "sleep", 10.0), start_time=started - 30.0)
        await push(pilot, feed, snapshot(earlier))
        await pilot.press("k", "enter")
        await pilot.pause(0.3)
        assert any("started +30.00 s later (PID reused)" in n for n in notes(app))
        assert sleeper.poll() is None
        await push(pilot, feed, snapshot(replace(earlier, start_time=started)))
        await pilot.press("k", "enter")
        for _ in range(100):
            if sleeper.poll() is not None:
                break
            await pilot.pause(0.02)

    run(None, body)
    assert sleeper.wait(5) == -signal.SIGTERM


def test_k_refuses_a_process_whose_command_is_unknown(sleeper: subprocess.Popen[bytes]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(replace(proc(sleeper.pid, "sleep", 10.0), comm=None, cmdline=None)))
        assert BY_KEY["command"].render(table(app).rows[0]) == "N/A"
        await pilot.press("k", "enter")
        await pilot.pause(0.3)
        assert any("is unknown" in n for n in notes(app))

    run(None, body)
    assert sleeper.poll() is None


def test_readonly_refuses_signals(sleeper: subprocess.Popen[bytes]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, _sleep_snapshot(sleeper.pid))
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        assert any("--readonly" in n for n in notes(app))
        await pilot.press("enter")  # would open details, not send anything
        await pilot.pause(0.2)

    run(DashboardOptions(readonly=True), body)
    assert sleeper.poll() is None


# -- replay keys ---------------------------------------------------------------------------------


def test_replay_step_back_and_speed_keys() -> None:
    feed = ReplayFeed(SCENARIO)
    app = GputopApp(feed, DashboardOptions())  # type: ignore[arg-type]

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(200):
                if app.snapshot is not None:
                    break
                await pilot.pause(0.01)
            await pilot.press("full_stop")
            assert app.paused and feed.paused
            shown = app.snapshot
            assert shown is not None
            pos = feed.position
            await pilot.press("full_stop", "full_stop")
            assert feed.position == pos + 2
            assert app.snapshot is not None and app.snapshot.time == shown.time + 2
            await pilot.press("comma")
            assert feed.position == pos + 1 and app.snapshot.time == shown.time + 1
            await pilot.press("right_square_bracket")
            assert feed.speed == 2.0
            await pilot.press("left_square_bracket", "left_square_bracket")
            assert feed.speed == 0.5
            header = header_content(app.screen.query_one(HeaderBar).state).plain
            assert f"REPLAY {pos + 1}/90 ×0.5" in header
            await pilot.press("k")
            await pilot.pause()
            assert isinstance(app.screen, MainScreen)  # no signals to recorded processes

    asyncio.run(main())
    feed.stop()


def test_replay_keys_inactive_for_live_feeds() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        await pilot.press("full_stop")
        assert not app.paused

    run(None, body)


# -- threading and the message contract ---------------------------------------------------------


def test_newer_snapshot_replaces_queued_older_one() -> None:
    shown: list[float] = []

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        original = app.show_snapshot

        def counting(snap: Snapshot) -> None:
            shown.append(snap.time)
            original(snap)

        app.show_snapshot = counting  # type: ignore[method-assign]
        for i in range(5):  # queued back to back, before the app handles any
            feed.push(snapshot(proc(1, "x", float(i)), time=1000.0 + i))
        await pilot.pause()
        await pilot.pause()
        assert shown == [1004.0]
        assert app.snapshot is not None and app.snapshot.time == 1004.0
        assert len(app.history.points(1)) == 5  # every snapshot kept for the charts

    run(None, body)
    assert SnapshotArrived(snapshot(), 1).can_replace(SnapshotArrived(snapshot(), 2))


def test_feed_starts_on_a_worker_thread_while_ui_shows_starting() -> None:
    gate = threading.Event()
    feed = ManualFeed(block_start=gate)

    async def body(app: GputopApp, pilot: Pilot[Any], feed_: ManualFeed) -> None:
        await pilot.pause(0.1)
        assert not feed.started.is_set()
        assert "starting" in header_content(app.screen.query_one(HeaderBar).state).plain
        assert app.is_running
        gate.set()
        for _ in range(100):
            if feed.started.is_set():
                break
            await pilot.pause(0.01)
        assert feed.start_thread != threading.main_thread().name
        await push(pilot, feed, three())
        assert pids(app) == [20, 10, 30]

    app = GputopApp(feed, DashboardOptions())

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await body(app, pilot, feed)

    asyncio.run(main())


def test_snapshots_from_another_thread() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        t = threading.Thread(target=lambda: [feed.push(three()) for _ in range(20)])
        t.start()
        t.join()
        for _ in range(50):
            await pilot.pause(0.01)
            if pids(app):
                break
        assert pids(app) == [20, 10, 30]

    run(None, body)


def test_record_option_writes_every_snapshot(tmp_path: Path, scenario: list[Snapshot]) -> None:
    out = tmp_path / "rec.jsonl"

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, *scenario[:7])

    app = run(DashboardOptions(record=out), body)
    assert app.recorder is not None
    app.recorder.close()
    assert [s.time for s in read_recording(out)] == [s.time for s in scenario[:7]]


def test_filters_option_applies() -> None:
    from gputop.feeds.base import Filters

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, three())
        assert pids(app) == [30]

    run(DashboardOptions(filters=Filters(user="carol")), body)


# -- options and config --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (DashboardOptions(sort="nope"), "launches"),
        (DashboardOptions(theme="nope"), "high-contrast"),
        (DashboardOptions(columns=("pid", "nope")), "launches"),
    ],
)
def test_bad_options_raise_before_the_feed_starts(options: DashboardOptions, needle: str) -> None:
    feed = ManualFeed()
    with pytest.raises(ValueError, match=needle):
        run_dashboard(feed, options)
    assert feed.callback is None


def test_config_is_used_and_options_win(config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text('theme = "light"\nsort = "grid"\ninterval_s = 3.0\nreverse = true\n')
    app = GputopApp(ManualFeed(), DashboardOptions())
    assert (app.settings.theme, app.settings.sort, app.settings.interval_s, app.settings.reverse) == (
        "light", "grid", 3.0, True)
    app = GputopApp(ManualFeed(), DashboardOptions(theme="dark", sort="pid", interval_s=1.0))
    assert (app.settings.theme, app.settings.sort, app.settings.interval_s) == ("dark", "pid", 1.0)


def test_bad_config_values_warn_and_fall_back(config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text('theme = "nope"\nsort = 3\n')
    app = GputopApp(ManualFeed(), DashboardOptions())
    assert app.settings.theme == "dark" and app.settings.sort == "launches"
    assert len(app.startup_warnings) == 2


def test_sort_change_is_saved_and_reloaded(config_file: Path) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await pilot.press("greater_than_sign", "r")
        await pilot.pause(0.3)

    run(None, body)
    saved = tomllib.loads(config_file.read_text())
    assert saved["sort"] == "grid" and saved["reverse"] is True
    app = GputopApp(ManualFeed(), DashboardOptions())
    assert app.settings.sort == "grid" and app.settings.reverse


def test_no_color_picks_monochrome(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = GputopApp(ManualFeed(), DashboardOptions())
    assert app.theme == "monochrome"
    monkeypatch.setenv("NO_COLOR", "1")
    app = GputopApp(ManualFeed(), DashboardOptions(theme="light"))
    assert app.theme == "light"


def test_python_m_gputop_ui_rejects_a_bad_recording(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    r = subprocess.run([sys.executable, "-m", "gputop.ui", "--replay", str(bad)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("gputop: error:") and "hint:" in r.stderr


class FailingFeed(ManualFeed):
    def start(self, on_snapshot: Any) -> None:
        self.started.set()
        raise PermissionError("CAP_BPF missing")


def test_a_feed_that_cannot_start_is_reported_and_exit_code_is_1() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        for _ in range(50):
            await pilot.pause(0.01)
            if app.feed_error:
                break
        assert app.feed_error == "PermissionError: CAP_BPF missing"
        assert "CAP_BPF missing" in header_content(app.screen.query_one(HeaderBar).state).plain
        await pilot.press("q")

    app = run(None, body, feed=FailingFeed())
    assert app.return_code == 1
