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
