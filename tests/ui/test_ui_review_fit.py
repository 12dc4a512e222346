"""Issue 22's fresh-eyed review, the dashboard's items: the header stays one line when a replay is paused
(item 2), the sort menu and help use the width there is (item 3), COMMAND takes the width left over
(item 4), the kill dialog names the program and its arguments (item 5). Exact text read off the screen."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from gputop.ui.app import DashboardOptions, GputopApp

from .test_ui_fit_layout import SIZES, run_live, screen_lines
from .ui_helpers import ManualFeed, proc, snapshot


def _one_process(cmdline: str, size: tuple[int, int]) -> list[str]:
    """The signal dialog's title row (as on screen) for one process running ``cmdline``."""
    feed = ManualFeed()
    app = GputopApp(feed, DashboardOptions(theme="dark"))
    seen: list[str] = []

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause(0.05)
            feed.push(snapshot(proc(4242, "python3.11", cmdline=cmdline)))
            await pilot.pause(0.1)
            await pilot.press("k")
            await pilot.pause(0.1)
            title = app.screen.query_one("#signal-title")
            seen.append(title.render_line(0).text.rstrip())
            await pilot.press("escape")

    import asyncio
    asyncio.run(main())
    return seen


# -- item 5: the kill dialog -------------------------------------------------------------------------------
def test_the_kill_dialog_names_the_program_and_its_arguments() -> None:
    cmd = "/usr/lib/some/very/long/directory/of/a/virtualenv/bin/python3.11 train.py --epochs 3"
    assert _one_process(cmd, (100, 30)) == ["Send a signal to 4242 python3.11 train.py --epochs 3?"]


def test_the_kill_dialog_widens_for_a_long_command_and_cuts_only_at_its_end() -> None:
    args = " ".join(f"--option-{i}=value-{i}" for i in range(6))       # 114 characters of arguments
    cmd = f"/opt/conda/envs/train/bin/python3.11 train.py {args}"
    whole = f"Send a signal to 4242 python3.11 train.py {args}?"
    assert _one_process(cmd, (200, 60)) == [whole]                      # room enough: whole
    (cut,) = _one_process(cmd, (80, 24))
    assert cut.endswith("…") and whole.startswith(cut[:-1]) and len(cut) >= 70




# -- item 3: the sort menu and the help use the width there is ---------------------------------------------
def _dialog_rows(size: tuple[int, int], key: str) -> tuple[list[str], int]:
    """The rows of the dialog ``key`` opens, as on screen, and its width."""
    out: list[Any] = []

    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        await pilot.press(key)
        await pilot.pause(0.2)
        box = app.screen.query_one("SortScreen > Vertical, HelpScreen > VerticalScroll")
        r = box.region
        out.extend([[line[r.x:r.right] for line in screen_lines(app)[r.y:r.bottom]], r.width])
    run_live(size, body)
    return out[0], out[1]


@pytest.mark.parametrize("key", ["s", "question_mark"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_dialogs_cut_nothing_where_the_screen_has_room(size: tuple[int, int], key: str) -> None:
    rows, width = _dialog_rows(size, key)
    cut = [r for r in rows if "…" in r]
    if width < size[0]:          # narrower than the screen: it had room for every row
        assert cut == [], "\n".join(cut)
    else:                        # as wide as the screen: the rows too long end in an ellipsis
        assert all(r.rstrip().endswith("…") or "…" in r for r in cut)


# -- item 4: COMMAND takes the width left over -------------------------------------------------------------
def _table_rows(size: tuple[int, int]) -> list[str]:
    out: list[str] = []

    async def body(app: GputopApp, pilot: Pilot[Any]) -> None:
        lines = screen_lines(app)
        at = next(i for i, ln in enumerate(lines) if "COMMAND" in ln and "PID" in ln)
        out.extend(lines[at:at + 9])
    run_live(size, body)
    return out


@pytest.mark.parametrize(("size", "cells"), [
    # issue 35: COMMAND is fixed at the left with PID, USER and GPU while the others scroll; the cell kept for
    # the ◀ marker at every offset (so that ← → never change COMMAND's width) is one less for it
    ((100, 30), {4242: "python train.py --m…um --fused=0", 4243: "python train.py --m…um --fused=1",
                 12001: "python -m vllm.entr…l llama-3-8b"}),
    ((120, 40), {4242: "python train.py --mod…dium --fused=0", 7300: "python eval.py --ckpt step_12000.pt",
                 7007: "nbody -benchmark -numbodies=1048576"}),
], ids=["100x30", "120x40"])
def test_command_gets_the_width_left_over_where_columns_scroll(size: tuple[int, int], cells: dict[int, str]) -> None:
    """At 100 and 120 columns COMMAND was 16 cells ("python train.py -… --fused=0"): now it takes 30% of the
    width (at most 30 cells, plus what no other column can use) and the columns that no longer fit scroll."""
    rows = _table_rows(size)
    head = rows[0]
    start, end = head.index("COMMAND"), head.index("LAUNCH/s")
    assert end - start - 1 >= 30, head
    for pid, cell in cells.items():
        row = next(r for r in rows[1:] if r.split()[0] == str(pid))
        assert row[start:start + len(cell) + 1] == cell + " ", row


# -- item 2: the header stays one line, paused or not ------------------------------------------------------
def _replay_headers(size: tuple[int, int]) -> list[tuple[int, str, int]]:
    """(header height, header row, table's first row) playing, then paused, then playing again."""
    from gputop.feeds.replay import ReplayFeed
    from gputop.ui.widgets.header import HeaderBar
    from gputop.ui.widgets.proc_table import ProcTable

    from .ui_helpers import SCENARIO

    app = GputopApp(ReplayFeed(SCENARIO), DashboardOptions(theme="dark"))  # type: ignore[arg-type]
    seen: list[tuple[int, str, int]] = []

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            for _ in range(300):
                if app.snapshot is not None:
                    break
                await pilot.pause(0.01)
            for key in ("", "p", "p"):
                if key:
                    await pilot.press(key)
                await pilot.pause(0.15)
                header = app.screen.query_one(HeaderBar)
                seen.append((header.region.height, screen_lines(app)[0], app.screen.query_one(ProcTable).region.y))
            await pilot.press("q")

    import asyncio
    asyncio.run(main())
    return seen


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_pausing_a_replay_keeps_the_header_on_one_line(size: tuple[int, int]) -> None:
    (h1, line1, y1), (h2, line2, y2), (h3, _, y3) = _replay_headers(size)
    assert (h1, h2, h3) == (1, 1, 1), (line1, line2)
    assert y1 == y2 == y3                       # the table does not move
    assert " REPLAY " in line1 and "PAUSED" not in line1
    assert " REPLAY " in line2 and " PAUSED " in line2 and "BPF ok" in line2 and "UVM CPU only" in line2


def test_the_paused_replay_header_at_80_columns() -> None:
    from gputop.record import read_recording
    from gputop.ui.widgets.header import HeaderState, header_lines

    from .ui_helpers import SCENARIO

    snap = next(iter(read_recording(SCENARIO)))
    state = HeaderState(snap, 1.0, paused=True, replay=(6, 90, 1.0))
    assert [ln.plain for ln in header_lines(state, 80)] == [
        " gpu-node-07 09:00:00 1s  REPLAY 6/90 ×1 PAUSED  BPF ok NVML ok UVM CPU only …"]
    assert [ln.plain for ln in header_lines(state, 120)] == [
        " gputop  gpu-node-07  09:00:00  every 1s   REPLAY 6/90 ×1 PAUSED   BPF ok  NVML ok  UVM CPU only  "
        "cost 9.06% CPU"]
    playing = HeaderState(snap, 1.0, replay=(6, 90, 1.0))
    assert [ln.plain for ln in header_lines(playing, 200)] == [
        " gputop  gpu-node-07  09:00:00  every 1s   REPLAY 6/90 ×1   BPF ok 212p/7obj  NVML ok  UVM CPU only  "
        "cost 114k hits/s 9.06% CPU (traps 8.58% + programs 0.48%)"]
