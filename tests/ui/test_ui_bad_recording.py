"""The dashboard over a crafted recording (issue 25): lines with ``time`` 1e999 and ``pid`` "x"
are skipped, playing or stepping either way, and the header says which line was skipped; the
dashboard keeps running."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gputop.feeds.replay import ReplayFeed
from gputop.model import snapshot_to_dict, snapshot_to_json
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.widgets.header import HeaderBar, header_content

from .ui_helpers import proc, snapshot

SIZE = (160, 45)
T0 = 1767258000.0


def _bad(time: float, change: str) -> str:
    d = snapshot_to_dict(snapshot(proc(7, "victim"), time=time))
    if change == "time":
        return json.dumps(d, separators=(",", ":")).replace(f'"time":{time}', '"time":1e999')
    d["processes"][0]["pid"] = "x"
    return json.dumps(d, separators=(",", ":"))


def _recording(path: Path) -> Path:
    lines = [snapshot_to_json(snapshot(proc(1, "first"), time=T0)), _bad(T0 + 1, "time"),
             snapshot_to_json(snapshot(proc(2, "second"), time=T0 + 2)), _bad(T0 + 3, "pid"),
             snapshot_to_json(snapshot(proc(3, "third"), time=T0 + 4))]
    assert '"time":1e999' in lines[1] and '"pid":"x"' in lines[3]
    path.write_text("\n".join(lines) + "\n")
    return path


def _header(app: GputopApp) -> str:
    return header_content(app.screen.query_one(HeaderBar).state).plain


def test_stepping_over_bad_lines_both_ways(tmp_path: Path) -> None:
    path = _recording(tmp_path / "crafted.jsonl")
    feed = ReplayFeed(path, preload=False)
    app = GputopApp(feed, DashboardOptions())  # type: ignore[arg-type]
    seen: list[tuple[float, int, str]] = []

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(300):
                if app.snapshot is not None:
                    break
                await pilot.pause(0.01)
            await pilot.press("comma")                  # pause, back to the first snapshot
            for key in ["full_stop"] * 3 + ["comma"] * 3 + ["full_stop"]:
                assert app.snapshot is not None
                seen.append((app.snapshot.time, feed.position, _header(app)))
                await pilot.press(key)
                await pilot.pause()
            assert app.snapshot is not None
            seen.append((app.snapshot.time, feed.position, _header(app)))
            assert app.is_running

    asyncio.run(main())
    feed.stop()
    assert [(t - T0, pos) for t, pos, _ in seen] == [
        (0, 1), (2, 3), (4, 5), (4, 5), (2, 3), (0, 1), (0, 1), (2, 3)]
    time_line = f"skipped a bad line ({path}:2: malformed snapshot (time is not finite))"
    pid_line = f"skipped a bad line ({path}:4: malformed snapshot (processes[0].pid is not an integer (text)))"
    assert pid_line in seen[2][2]                        # stepped over line 4 forward
    assert time_line in seen[5][2]                       # and over line 2 back


def test_a_cut_recording_names_its_cut_line_and_column(tmp_path: Path) -> None:
    """Issue 22 review, item 7: the message names the line the recorder stopped in and where it stops."""
    from gputop.ui.widgets.message import line_of

    path = tmp_path / "cut.jsonl"
    whole = [snapshot_to_json(snapshot(proc(i, "job"), time=T0 + i)) for i in (1, 2, 3)]
    path.write_text(whole[0] + "\n" + whole[1] + "\n" + whole[2][:120])     # killed 120 characters into line 3
    app = GputopApp(ReplayFeed(path), DashboardOptions())  # type: ignore[arg-type]
    shown: list[str] = []

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
            shown.append(line_of(app.screen).text)
            await pilot.press("q")
    asyncio.run(main())
    assert shown == [f"warning: {path}:3: the last line is cut short at column 121 (nothing follows: the recorder "
                     "stopped mid-write); replaying the 2 complete snapshot(s) before it"]
