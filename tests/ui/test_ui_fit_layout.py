"""Issue 22, items 4-5: messages on a line of their own, dialogs over a dimmed screen, every text fits.

Each test runs the real app (Textual's run_test and Pilot) on the scenario recording and reads the
screen as the terminal would show it (the compositor's lines), at sizes from 200×60 to 80×24.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Footer, OptionList

from gputop.feeds.replay import ReplayFeed
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.screens.help import HelpScreen
from gputop.ui.screens.sort import SortScreen
from gputop.ui.widgets.message import MessageLine
from gputop.ui.widgets.proc_table import ProcTable
from gputop.view import columns

from .ui_helpers import SCENARIO, ManualFeed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from screenshots import frames

SIZES = [(200, 60), (160, 45), (120, 40), (100, 30), (80, 24)]

#: the main screen's footer at 80 columns: every key, one space apart
FOOTER_80_LIVE = " / Filter s Sort ⏎ Details ␣ Tag c Compare k Kill q Quit ? Help p Pause t Theme"
FOOTER_80_REPLAY = " / Filter s Sort ⏎ Details ␣ Tag c Compare q Quit ? Help p Pause t Theme ., Step"


def screen_lines(app: GputopApp) -> list[str]:
    """The screen as the terminal shows it, one string per row."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def run_live(size: tuple[int, int], body: Callable[[GputopApp, Pilot[Any]], Awaitable[None]],
             options: DashboardOptions | None = None, n: int = 30) -> None:
    feed = ManualFeed()
    app = GputopApp(feed, options or DashboardOptions(theme="dark"))

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.05)
            for snap in frames(n):
                feed.push(snap)
            await pilot.pause(0.1)
            await body(app, pilot)

    asyncio.run(main())


# -- item 4: messages cover nothing --------------------------------------------------------------------
def test_a_message_takes_a_line_of_its_own_above_the_footer() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        table = app.screen.query_one(ProcTable)
        rows_before = table.region.height
        before = screen_lines(app)
        await pilot.press("c")          # nothing tagged: says how to compare
        await pilot.pause(0.1)
        lines = screen_lines(app)
        assert lines[-2].rstrip() == (" warning: tag two processes with Space, then press c "
                                      "(or start with --baseline FILE)")
        assert lines[-1] == before[-1]                       # the footer stays where it was
        line = app.screen.query_one(MessageLine)
        assert line.region.y == 44 - 1 and line.region.height == 1
        # the table gave up one row for it: nothing is drawn over a row of the table
        assert table.region.height == rows_before - 1
        assert not table.region.overlaps(line.region)
        assert lines[: table.region.bottom] == [*before[: table.region.bottom - 1], lines[table.region.bottom - 1]]

    run_live((160, 45), body)


def test_the_message_line_goes_when_the_message_times_out() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        table = app.screen.query_one(ProcTable)
        height = table.region.height
        app.say("theme: dark", timeout=0.3)
        await pilot.pause(0.1)
        assert screen_lines(app)[-2].rstrip() == " theme: dark"
        assert table.region.height == height - 1
        await pilot.pause(0.5)
        assert not app.screen.query_one(MessageLine).display
        assert table.region.height == height
        assert "theme: dark" not in "\n".join(screen_lines(app))


def test_messages_said_together_each_get_a_line_and_their_own_timeout() -> None:
    """Startup notices come together (a cut recording and an unreadable config): both show, newest last,
    at most three; each goes when its own time is up."""
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        table = app.screen.query_one(ProcTable)
        height = table.region.height
        app.say("first", "warning", timeout=0.4)
        app.say("second", timeout=5)
        await pilot.pause(0.1)
        lines = screen_lines(app)
        assert [x.rstrip() for x in lines[-3:-1]] == [" warning: first", " second"]
        assert table.region.height == height - 2
        for word in ("third", "fourth"):
            app.say(word, timeout=5)
        await pilot.pause(0.1)
        lines = screen_lines(app)
        assert [x.rstrip() for x in lines[-4:-1]] == [" second", " third", " fourth"]   # the oldest gave way
        assert table.region.height == height - 3
        await pilot.pause(0.5)                    # "first" timed out while gone: nothing else goes with it
        assert [x.rstrip() for x in screen_lines(app)[-4:-1]] == [" second", " third", " fourth"]

    run_live((120, 40), body)

    run_live((120, 40), body)


def test_compare_b_without_a_baseline_says_so_whole_on_its_own_line() -> None:
    """Issue 22: `b` on compare cut 'no kernels seen y▌' under a toast."""
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        await pilot.press("b")
        await pilot.pause(0.1)
        lines = screen_lines(app)
        assert lines[-2].rstrip() == " warning: no baseline: start gputop with --baseline FILE"
        assert lines[-1].startswith(" Esc Back x Swap A/B b Baseline ? Help p Pause t Theme")
        # the compare table's rows are all still there, above the message
        assert any(line.startswith(" launches/s ") for line in lines[:-2])

    run_live((80, 24), body, DashboardOptions(theme="dark", compare_pids=(4242, 4243)))


def test_a_message_from_a_worker_thread_shows_too() -> None:
    """`sent SIGTERM to …` comes from the signal worker's thread."""
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, app.say, "sent SIGTERM to 4242 (python)")
        await pilot.pause(0.1)
        assert screen_lines(app)[-2].rstrip() == " sent SIGTERM to 4242 (python)"

    run_live((100, 30), body)


def test_a_message_is_cut_with_an_ellipsis_not_wrapped() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        app.say("x" * 200, "error")
        await pilot.pause(0.1)
        lines = screen_lines(app)
        assert lines[-2] == " error: " + "x" * 70 + "… "
        assert lines[-3].strip() != "x" * 10        # no second line of it

    run_live((80, 24), body)


def test_dialogs_show_the_screen_behind_them_dimmed() -> None:
    """Issue 22: modal dialogs blanked the whole table behind them."""
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        header = screen_lines(app)[0]
        for key in ("s", "h", "k"):
            await pilot.press(key)
            await pilot.pause(0.1)
            lines = screen_lines(app)
            assert lines[0] == header, key                  # the header behind, text unchanged
            # its colours are dimmed (blended 60% towards the background), not painted over
            behind = app.screen._compositor.get_style_at(2, 0)
            assert behind.bgcolor is not None and behind.color is not None, key
            await pilot.press("escape")
            await pilot.pause(0.1)
            assert app.screen._compositor.get_style_at(2, 0) != behind, key

    run_live((160, 45), body)


# -- item 5: every text fits ---------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_sort_menu_rows_fit_or_end_in_an_ellipsis(size: tuple[int, int]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        await pilot.press("s")
        await pilot.pause(0.1)
        assert isinstance(app.screen, SortScreen)
        menu = app.screen.query_one(OptionList).region        # the dialog; the dimmed table shows beside it
        rows = [line[menu.x: menu.right] for line in screen_lines(app)[menu.y: menu.bottom]]
        rows = [row for row in rows if "[✓] " in row or "[ ] " in row]
        shown = [c for c in columns.COLUMNS if c.key not in columns.FLEET_ONLY]
        # one line per column (no wrapped continuation), as many as the menu has room for
        assert 0 < len(rows) <= len(shown)
        # the key column is as wide as the longest key: every description starts at one column
        key_w = max(len(c.key) for c in shown) + 2
        starts = set()
        for row, col in zip(rows, shown):
            at = row.index(f" {col.key} ") + 1
            assert row[at + len(col.key): at + key_w] == " " * (key_w - len(col.key)), row
            starts.add(at + key_w)
            described = row[at + key_w:].rstrip(" ▎│")
            assert col.help.startswith(described.removesuffix("…")), row
            assert described == col.help or described.endswith("…"), row
        assert len(starts) == 1
        gkern = next(r for r in rows if "graph_kernels" in r)
        assert f"graph_kernels{' ' * (key_w - len('graph_kernels'))}kernels run inside CUDA graph launches" in gkern

    run_live(size, body)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_help_rows_fit_or_end_in_an_ellipsis(size: tuple[int, int]) -> None:
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        await pilot.press("h")
        await pilot.pause(0.1)
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.query_one("#help-text")
        width = text.content_region.width
        for y in range(text.region.height):
            strip = text.render_line(y)
            assert strip.cell_length <= text.region.width
            line = strip.text.rstrip()
            assert len(line) <= width, line
        # the help's own rows: none wraps (a wrapped one would start a line with a word, not two spaces)
        lines = [text.render_line(y).text for y in range(min(text.region.height, 14))]
        body_lines = [ln for ln in lines[3:] if ln.strip() and not ln.startswith("Process list")]
        assert all(ln.startswith("  ") for ln in body_lines if ln[0] == " "), lines

    run_live(size, body)


def test_help_says_once_how_numbers_read() -> None:
    from gputop.ui.screens.help import NUMBER_STYLE

    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        await pilot.press("h")
        await pilot.pause(0.1)
        widget = app.screen.query_one("#help-text")
        text = str(widget.render())
        assert text.count("KiB MiB GiB TiB") == 1
        for line in NUMBER_STYLE:
            assert f"  {line}" in text
            assert len(f"  {line}") <= widget.content_region.width, line     # whole at 80 columns too

    run_live((80, 24), body)


def test_footer_at_80_columns_keeps_every_key_live() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        assert screen_lines(app)[-1].rstrip() == FOOTER_80_LIVE
        await pilot.resize_terminal(120, 30)       # from 120 columns, the usual spacing
        await pilot.pause(0.1)
        assert screen_lines(app)[-1].rstrip() == (
            " / Filter  s Sort  ⏎ Details  ␣ Tag  c Compare  k Kill  q Quit  ? Help  p Pause  t Theme")

    run_live((80, 24), body)


def test_footer_at_80_columns_keeps_every_key_in_a_replay() -> None:
    app = GputopApp(ReplayFeed(SCENARIO, speed=16.0), DashboardOptions(theme="dark"))

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.5)
            for _ in range(100):        # the first frame: later on a loaded host (CI's UI tier runs niced)
                if screen_lines(app)[-1].strip():
                    break
                await pilot.pause(0.1)
            footer = app.screen.query_one(Footer)
            assert screen_lines(app)[-1].rstrip() == FOOTER_80_REPLAY
            assert footer.region.width == 80

    asyncio.run(main())


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_footer_fits_its_width(size: tuple[int, int]) -> None:
    """Main, details, compare, help and sort menu: the footer's last entry ends inside the screen."""
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        for keys in ((), ("enter",), ("s",)):
            await pilot.press(*keys)
            await pilot.pause(0.1)
            footer = app.screen.query_one(Footer)
            used = sum(w.outer_size.width for w in footer.children)
            assert used <= size[0], (keys, used, screen_lines(app)[-1])
            if keys:
                await pilot.press("escape")
                await pilot.pause(0.1)

    run_live(size, body)


def test_the_signal_dialog_cuts_a_long_command_on_one_line() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        await pilot.press("down", "k")      # 5120: tritonserver with a long command line
        await pilot.pause(0.1)
        title = app.screen.query_one("#signal-title")
        assert title.region.height == 1
        assert title.render_line(0).text.rstrip() == (
            "Send a signal to 5120 tritonserver --model-repository=/models --http-port 8…")   # the screen's width

    run_live((80, 24), body)
