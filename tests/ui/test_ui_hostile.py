"""Every screen of the dashboard over snapshots whose every text from other processes is hostile
(issue 10): process names, command lines (one a megabyte long), users, container ids, kernel names,
the host and GPU names carry ESC sequences, BEL, a byte of invalid UTF-8, a right-to-left override
and a zero-width space. Whatever screen is open, nothing of it reaches the terminal raw: the one
sanitiser (gputop.textsafe) shows it as visible escapes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual.pilot import Pilot

from gputop.model import Snapshot
from gputop.ui.app import GputopApp
from gputop.ui.screens.compare import CompareScreen
from gputop.ui.screens.details import DetailsScreen
from gputop.ui.screens.main import MainScreen

from .test_ui_keys import push, run
from .ui_helpers import ManualFeed

EVIL = "\x1b[2J\x1b[31mEVIL\x07\udc9b\u202e\u200b"
SHOWN = "\\x1b[2J\\x1b[31mEVIL\\x07\\x9b\\u{202e}\\u{200b}"
#: what must never be drawn: C0 controls (the SVG's own newlines aside), DEL, C1, surrogates, bidi, zero-width
UNSAFE = ({chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x0A}
          | {chr(c) for c in range(0xDC80, 0xDD00)} | {"\u202e", "\u200b"})


def hostile(snap: Snapshot) -> Snapshot:
    procs = []
    for i, p in enumerate(snap.processes):
        tail = " --token " + "A" * 1_000_000 if i == 0 else ""
        procs.append(replace(p, comm=EVIL + (p.comm or ""), cmdline=EVIL + (p.cmdline or "x") + tail,
                             user=EVIL[:9] + "u", container=EVIL + "c" * 64,
                             kernels=tuple(replace(k, name=EVIL + (k.name or "")) for k in p.kernels)))
    gpus = tuple(replace(g, name=EVIL + (g.name or ""), uuid=EVIL) for g in snap.gpus)
    return replace(snap, host=EVIL + snap.host, processes=tuple(procs), gpus=gpus)


def drawn(app: GputopApp) -> str:
    return app.export_screenshot()


def test_every_screen_shows_hostile_text_as_visible_escapes(scenario: list[Snapshot]) -> None:
    seen: dict[str, str] = {}

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, *(hostile(s) for s in scenario[5:8]))
        assert isinstance(app.screen, MainScreen)
        seen["main"] = drawn(app)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        seen["details"] = drawn(app)
        await pilot.press("escape")
        await pilot.press("space", "down", "space", "c")
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen)
        seen["compare"] = drawn(app)
        await pilot.press("escape")
        await pilot.press("k")                   # the signal dialog lists the commands; Esc sends nothing
        await pilot.pause()
        seen["signal"] = drawn(app)
        await pilot.press("escape")
        await pilot.press("slash")
        await pilot.press(*"EVIL")               # the filter matches the raw text, shows the escaped one
        await pilot.pause()
        seen["filter"] = drawn(app)

    run(None, body)
    assert set(seen) == {"main", "details", "compare", "signal", "filter"}
    for name, svg in seen.items():
        assert not UNSAFE & set(svg), (name, sorted(UNSAFE & set(svg)))
        assert "\\x1b[2J" in svg, name                      # the name is there, as text
    assert SHOWN in seen["details"]                           # whole where there is room: every escape visible
    assert len(seen["main"]) < 2_000_000                      # the megabyte command line is capped for display
