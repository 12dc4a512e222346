"""The dashboard in the fleet view: processes are (instance, PID), the same PID runs on three nodes of
the fixed fleet scenario (tests/data/fleet_scenario.py); selection, tags, details and compare follow
the node as well as the PID; `/` filters by node (table and GPU panel); `k` sends nothing; NAMESPACE and
POD show after NODE only once some process has a pod (hostile names escaped), and `/` finds a pod."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))

from fleet_scenario import NODES, FleetFrameFeed, fleet_frames

from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.screens.compare import CompareScreen
from gputop.ui.screens.details import DetailsScreen
from gputop.ui.widgets.gpu_panel import GpuPanel
from gputop.ui.widgets.proc_table import ProcTable

Body = Callable[[GputopApp, Pilot[Any], FleetFrameFeed], Awaitable[None]]
(NODE7, INST7, _), (NODE8, INST8, _), (NODE9, INST9, _) = NODES


def run(body: Body, frames: int = 20, feed: FleetFrameFeed | None = None) -> None:
    feed = feed or FleetFrameFeed(fleet_frames(frames))
    app = GputopApp(feed, DashboardOptions(), config_path=Path(tempfile.mkdtemp()) / "config.toml")

    async def main() -> None:
        async with app.run_test(size=(160, 45), notifications=True) as pilot:
            await feed.deliver(pilot)
            await body(app, pilot, feed)

    asyncio.run(main())


def table(app: GputopApp) -> ProcTable:
    return app.screen.query_one(ProcTable)


def test_rows_are_node_and_pid_sorted_by_launch_rate_across_the_fleet() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: FleetFrameFeed) -> None:
        rows = table(app).rows
        assert len(rows) == 3 * len({p.pid for p in rows})
        rates = [p.rates.launches_per_s for p in rows if p.rates and p.rates.launches_per_s is not None]
        assert rates == sorted(rates, reverse=True)
        assert [(p.node, p.pid) for p in rows[:3]] == [(NODE9, 4242), (NODE7, 4242), (NODE8, 4242)]
        header = "".join(s.text for s in table(app).render_line(0))
        assert header.split()[:3] == ["PID", "NODE", "GPU"] and "USER" not in header and "CPU%" not in header

    run(body)


def test_selection_details_and_compare_follow_the_node() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: FleetFrameFeed) -> None:
        await pilot.press("down")                       # 4242 on gpu-node-07 (the second row)
        assert table(app).selected_key == (INST7, 4242)
        feed.callback(feed.frames[-1])                  # a new refresh: the selection stays on that node's 4242
        await pilot.pause()
        assert table(app).selected_key == (INST7, 4242)
        await pilot.press("enter")
        await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, DetailsScreen) and screen.pid == (INST7, 4242)
        assert feed.watched == ((INST7, 4242),)         # its series and histograms are read
        assert screen.proc is not None and screen.proc.node == NODE7
        assert len(screen._points) == len(feed.frames)  # the charts' points are the feed's series
        await pilot.press("escape")
        await pilot.pause()
        assert feed.watched == ()
        await pilot.press("space", "space")             # tag 4242 on node-07 and on node-08
        await pilot.press("c")
        await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert (screen.a_pid, screen.b_pid) == ((INST7, 4242), (INST8, 4242))
        assert set(feed.watched) == {(INST7, 4242), (INST8, 4242)}
        assert screen.a is not None and screen.b is not None and (screen.a.node, screen.b.node) == (NODE7, NODE8)

    run(body)


def test_filter_by_node_narrows_the_table_and_the_gpu_panel() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: FleetFrameFeed) -> None:
        await pilot.press("slash", *"node-08", "enter")
        await pilot.pause()
        assert {p.node for p in table(app).rows} == {NODE8}
        panel = app.screen.query_one(GpuPanel)
        text = panel.render().plain
        assert NODE8 in text and NODE7 not in text and NODE9 not in text

    run(body)


def test_signals_are_refused_for_remote_processes() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: FleetFrameFeed) -> None:
        await pilot.press("k")
        await pilot.pause()
        notes = [str(n.message) for n in app._notifications]
        assert notes == ["fleet view (--prometheus): the processes run on other nodes, no signal sent"]
        assert app.screen.__class__.__name__ == "MainScreen"

    run(body)


def with_pods(frames: list[Any]) -> list[Any]:
    """The scenario's frames with gpu-node-07's processes in pods (one with a hostile name), the other
    nodes' on the host (no pod: N/A)."""
    def pod(p: Any) -> Any:
        if p.node != NODE7:
            return p
        name = "evil\x1b[31m\u202e" if p.pid == 4242 else f"trainer-{p.pid}"
        return replace(p, namespace="ml", pod=name)
    return [replace(f, processes=tuple(pod(p) for p in f.processes)) for f in frames]


def cells(app: GputopApp, row: int) -> list[str]:
    return "".join(s.text for s in table(app).render_line(row)).split()


def test_namespace_and_pod_columns_show_only_once_some_process_has_a_pod() -> None:
    frames = fleet_frames(20)
    feed = FleetFrameFeed([*frames[:-1], *with_pods(frames[-1:])])

    async def body(app: GputopApp, pilot: Pilot[Any], feed: FleetFrameFeed) -> None:
        assert cells(app, 0)[:5] == ["PID", "NODE", "NAMESPACE", "POD", "GPU"]   # the last frame delivered has pods
        feed.callback(frames[-1])                                 # a refresh without any pod: columns gone
        await pilot.pause()
        assert cells(app, 0)[:3] == ["PID", "NODE", "GPU"] and "POD" not in cells(app, 0)
        feed.callback(with_pods(frames[-1:])[0])
        await pilot.pause()
        assert cells(app, 0)[:5] == ["PID", "NODE", "NAMESPACE", "POD", "GPU"]
        rows = table(app).rows
        assert [(p.node, p.pid) for p in rows[:3]] == [(NODE9, 4242), (NODE7, 4242), (NODE8, 4242)]
        assert cells(app, 1)[1:4] == [NODE9, "N/A", "N/A"]      # on the host: unknown
        # escaped, then cut in the middle to POD's 16 cells
        assert cells(app, 2)[1:4] == [NODE7, "ml", "evil\\x1b[…{202e}"]
        assert "\x1b" not in "".join(s.text for s in table(app).render_line(2))
        await pilot.press("slash", *"trainer-", "enter")
        await pilot.pause()
        assert {p.node for p in table(app).rows} == {NODE7} and all(
            (p.pod or "").startswith("trainer-") for p in table(app).rows)

    run(body, feed=feed)


def test_the_column_menu_says_which_fleet_column_cannot_be_hidden() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: FleetFrameFeed) -> None:
        from gputop.ui.screens.sort import SortScreen

        await pilot.press("s")
        assert isinstance(app.screen, SortScreen)
        said = []
        for key in ("node", "pod"):
            at = [c.key for c in app.screen.columns].index(key)
            app.screen.query_one("OptionList").highlighted = at
            await pilot.press("x")
            await pilot.pause()
            notes = [str(n.message) for n in app._notifications]
            said.append(notes[-1] if notes else None)
        assert said == ["NODE is shown in the fleet view only, and there always",
                        "POD is shown in the fleet view only, and there always (while some process has a pod)"]

    run(body, feed=FleetFrameFeed(with_pods(fleet_frames(20))))


def test_a_degraded_fleet_says_which_nodes_are_down_whole_at_80_columns() -> None:
    """Issue 35 item 1: with nodes down the header said `PROM 2 of 2 nodes …` cut at 80 columns. The
    degraded status and its nodes are never cut away: where they do not fit the first line, a line of
    their own; the sources no node exports are not shown as `N/A`."""
    from gputop.model import SourceStatus
    from gputop.ui.widgets.header import HeaderState, header_lines

    snap = fleet_frames(1)[0]
    down = "2 of 3 nodes down: " + ", ".join(n for n, _i, _g in NODES[1:])
    snap = replace(snap, sources={**{k: v for k, v in snap.sources.items() if k != "bpf"},
                                  "prometheus": SourceStatus("degraded", reason=down)})
    for width in (80, 100, 200):
        lines = [ln.plain for ln in header_lines(HeaderState(snapshot=snap), width)]
        assert all(len(ln) <= width for ln in lines)
        assert any(f"PROM degraded: {down}" in ln for ln in lines), (width, lines)
        assert "BPF N/A" not in "".join(lines)
    assert len(header_lines(HeaderState(snapshot=snap), 80)) == 2


def warming(frames: list[Any]) -> list[Any]:
    """The scenario's frames with 4242 on gpu-node-07 warming up (its series younger than the window), the
    rest not."""
    return [replace(f, processes=tuple(replace(p, warming_up=p.key == (INST7, 4242)) for p in f.processes))
            for f in frames]


def test_a_process_warming_up_is_marked_wherever_its_rates_show() -> None:
    """Issue 35 item 2: a young series' rates read low, and were marked in the table only. Now its details
    say `[warming up]`, mark the last interval's rates and counts and title the rate charts so; the summary
    line marks the totals that sum it; compare marks its side. Another process shows no mark."""
    from gputop.ui.widgets.header import SummaryBar
    from gputop.view import format as fmt

    async def body(app: GputopApp, pilot: Pilot[Any], feed: FleetFrameFeed) -> None:
        snap = app.snapshot
        assert snap is not None and snap.summary.warming_up == 1
        s = snap.summary
        bar = app.screen.query_one(SummaryBar).render().plain
        for total in (f"Launches: ~{fmt.si(s.launches_per_s)}/s", f"H2D ~{fmt.bytes_(s.h2d_bytes_per_s)}/s"):
            assert total in bar, bar
        young, old = snap.process((INST7, 4242)), snap.process((INST8, 4242))
        assert young is not None and old is not None and young.rates and old.rates
        rate = fmt.si(young.rates.launches_per_s)
        assert [cells(app, row)[:2] for row in (2, 3)] == [["4242", NODE7], ["4242", NODE8]]
        assert f" ~{rate} " in " ".join(cells(app, 2))          # the table marked it already
        assert f" {fmt.si(old.rates.launches_per_s)} " in " ".join(cells(app, 3)) and "~" not in "".join(cells(app, 3))

        async def details(down: int) -> DetailsScreen:
            await pilot.press(*["down"] * down, "enter")
            await pilot.pause(0.1)
            assert isinstance(app.screen, DetailsScreen)
            return app.screen

        def panel(screen: Any, name: str) -> str:
            return str(screen.query_one(name).content.plain)

        def stat(screen: Any, label: str) -> str:
            """The first value of the last interval's cell of row ``label`` (after its 15 cells)."""
            return next(ln[15:].split()[0] for ln in panel(screen, "#stats").splitlines() if ln.startswith(label))

        def chart_title(screen: Any, name: str) -> str:
            return str(screen.query_one(name).render().plain.splitlines()[0])

        screen = await details(1)                           # 4242 on gpu-node-07: warming up
        assert f"[running]  {fmt.WARMING_UP}  GPU 0" in panel(screen, "#title")
        assert stat(screen, "launches") == f"~{rate}/s"
        assert stat(screen, "memsets") == f"~{fmt.si(young.interval.memset_calls if young.interval else None)}"
        assert stat(screen, "avg grid×block") == fmt.num(young.grid_blocks_avg)   # an average: not low
        assert "launches/s (warming up: reads low)" in chart_title(screen, "#chart-launches")
        assert "memcpy B/s (warming up: reads low)" in chart_title(screen, "#chart-memcpy")
        await pilot.press("escape")
        screen = await details(1)                           # 4242 on gpu-node-08: not warming up
        assert screen.pid == (INST8, 4242)
        assert fmt.WARMING_UP not in panel(screen, "#title") and "[running]" in panel(screen, "#title")
        assert "~" not in panel(screen, "#stats")
        assert stat(screen, "launches") == f"{fmt.si(old.rates.launches_per_s)}/s"
        assert "warming up" not in chart_title(screen, "#chart-launches")
        await pilot.press("escape", "up", "space", "space", "c")     # compare node-07's 4242 (A) with node-08's
        await pilot.pause(0.1)
        screen = app.screen
        assert isinstance(screen, CompareScreen) and (screen.a_pid, screen.b_pid) == ((INST7, 4242), (INST8, 4242))
        a_side, b_side = panel(screen, "#sides").splitlines()
        assert f"[running] {fmt.WARMING_UP} python" in a_side and fmt.WARMING_UP not in b_side
        row = next(ln for ln in panel(screen, "#metrics").splitlines() if ln.startswith("launches/s"))
        assert row.split()[1:3] == [f"~{rate}", fmt.si(old.rates.launches_per_s)]
        assert "launches/s (warming up: reads low)" in chart_title(screen, "#chart-launches")

    run(body, feed=FleetFrameFeed(warming(fleet_frames(20))))
