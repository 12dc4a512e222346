"""Call sites on the dashboard (issue 37): the details screen's panel (its rows from the snapshot, its
cursor, Enter for the whole stack, Esc back), a process without samples, a gone one, the fleet view,
hostile frames; compare (A beside B, matched by name) and the baseline's mean."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Static

from gputop.model import CallSite, CallSites, Counts, Frame, ProcSample
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.screens.compare import CompareScreen, sites_content
from gputop.ui.screens.details import DetailsScreen, without_live_values
from gputop.ui.screens.stack import StackScreen
from gputop.ui.widgets.sites import SitesPanel, sites_table
from gputop.view import compare, sites
from gputop.view import format as fmt
from gputop.view.baseline import summarize

from .test_ui_hostile import EVIL, SHOWN, UNSAFE
from .test_ui_keys import push, run
from .ui_helpers import ManualFeed, proc, snapshot

LONG_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
               "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
TRAIN = (Frame("/home/a/gpt2/train.py", 214, "train_step"), Frame("/home/a/gpt2/train.py", 305, "<module>"))


def site(file: str, line: int, function: str, rate: float | None, err: float | None, share: float | None,
         kernel: str | None, *, samples: int = 100, kind: str = "python", deeper: tuple[Frame, ...] = TRAIN,
         truncated: bool = False) -> CallSite:
    return CallSite(kind=kind, frames=(Frame(file, line, function), *deeper), truncated=truncated, samples=samples,
                    total_samples=samples * 10, launches_per_s=rate, launches_per_s_error=err, share_pct=share,
                    share_pct_error=None if share is None else 1.25, top_kernel=kernel)


def call_sites() -> CallSites:
    return CallSites(samples=400, total_samples=4000, period=128, sites=(
        site("/home/a/gpt2/model.py", 88, "MLP.forward", 12_345.0, 400.0, 41.2, LONG_KERNEL),
        site("/opt/torch/nn/functional.py", 2910, "layer_norm", 5_000.0, 250.0, 30.0, "layer_norm_kernel"),
        site("/home/a/gpt2/model.py", 61, "Attn.forward", None, None, None, None),      # unknown: N/A
        CallSite("native", (Frame("libnvinfer.so.10", None, "enqueueV3"), Frame("libtriton.so", None, "Run")),
                 samples=5, total_samples=50, launches_per_s=150.0, launches_per_s_error=60.0, share_pct=1.5,
                 share_pct_error=0.4, top_kernel="sm80_xmma_gemm"),
    ))


def with_sites(pid: int = 10, cs: CallSites | None = None, **kw: Any) -> ProcSample:
    return proc(pid, "python", 20_000.0, call_sites=call_sites() if cs is None else cs, **kw)


def panel(app: GputopApp) -> SitesPanel:
    return app.screen.query_one(SitesPanel)


def lines(app: GputopApp) -> list[str]:
    return panel(app).render().plain.splitlines()


# -- the pure parts ----------------------------------------------------------------------------


def test_rows_read_site_estimate_share_and_kernel_shortened_like_the_kernels_panel() -> None:
    text = sites_table(call_sites(), 150).plain.splitlines()
    assert text[0] == "call sites: 400 samples this interval, 4,000 in all, 1 launch in 128 sampled"
    assert text[1].split()[:2] == ["CALL", "SITE"] and "LAUNCH/s (est.)" in text[1] and "TOP KERNEL" in text[1]
    first, second, unknown, native = text[2:]
    assert first.startswith("gpt2/model.py:88 MLP.forward ") and "12.3k ±400" in first and "41.2% ±1.2" in first
    kern_w = len(first) - first.index("at::")
    assert first.endswith(fmt.kernel_names([LONG_KERNEL], kern_w)[0]) and len(first) <= 150
    assert "nn/functional.py:2910 layer_norm" in second and "5.00k ±250" in second and "layer_norm_kernel" in second
    assert unknown.split()[-3:] == ["N/A", "N/A", "N/A"]                 # unknown, never 0
    assert native.startswith("enqueueV3 (libnvinfer.so.10)") and "150 ±60" in native


def test_one_line_without_samples_and_the_fleet_note() -> None:
    assert sites_table(None, 120).plain == "call sites: no launch sampled yet"
    assert sites_table(call_sites(), 120, note="none here").plain == "none here"


def test_a_gone_process_keeps_shares_and_loses_its_estimates() -> None:
    gone = without_live_values(with_sites())
    assert gone.call_sites is not None
    rows = sites.site_rows(gone.call_sites, 10)
    assert [r[1] for r in rows] == ["N/A"] * 4 and rows[0][2] == "41.2% ±1.2"


def test_stack_lines_innermost_first_with_full_names() -> None:
    s = site("/home/a/gpt2/model.py", 88, "MLP.forward", 1.0, 0.1, 1.0, "k", truncated=True)
    assert sites.stack_lines(s) == ["#0  MLP.forward  /home/a/gpt2/model.py:88",
                                    "#1  train_step  /home/a/gpt2/train.py:214",
                                    "#2  <module>  /home/a/gpt2/train.py:305",
                                    "    … deeper frames not kept (the first 3 are)"]


def test_compare_rows_match_sites_by_name_top_five_of_each() -> None:
    a_sites = [site("/m/model.py", 80 + i, "f", 1000.0 * (10 - i), 10.0, 10.0, "k") for i in range(7)]
    b_sites = [site("/m/model.py", 88, "f", 50_000.0, 500.0, 50.0, "k"),        # A's 8th: A lists it beyond its 5
               site("/m/model.py", 81, "f", 300.0, 30.0, 5.0, "k"),
               site("/m/other.py", 5, "g", 200.0, None, 5.0, "k")]
    a = with_sites(1, CallSites(10, 100, tuple(a_sites)))
    b = with_sites(2, CallSites(10, 100, tuple(b_sites)))
    rows = compare.site_rows(a, b)
    assert [r.label for r in rows] == ["m/model.py:88 f", "m/model.py:80 f", "m/model.py:81 f", "m/model.py:82 f",
                                       "m/model.py:83 f", "m/model.py:84 f", "m/other.py:5 g"]
    assert (rows[0].a, rows[0].b) == ("N/A", "50.0k ±500")     # A lists :88 only beyond its top 5: not kept
    assert (rows[2].a, rows[2].b) == ("9.00k ±10", "300 ±30")
    assert (rows[-1].a, rows[-1].b) == ("N/A", "200")
    assert compare.site_rows(a, proc(3)) == [
        compare.SiteRow(f"m/model.py:{80 + i} f", f"{fmt.si(1000.0 * (10 - i))} ±10", "N/A") for i in range(5)]
    assert sites_content(proc(1), proc(2)).plain == "call sites: no launch sampled in A or B yet"
    assert "fleet view" in sites_content(a, b, fleet=True).plain


def test_the_baseline_means_each_sites_estimates() -> None:
    one = with_sites(1, CallSites(10, 100, (site("/m/a.py", 1, "f", 100.0, 30.0, 60.0, "k1"),
                                            site("/m/b.py", 2, "g", 50.0, 40.0, 40.0, "k"))))
    two = with_sites(1, CallSites(20, 300, (site("/m/b.py", 2, "g", 250.0, 30.0, 45.0, "k2"),
                                            site("/m/a.py", 1, "f", 300.0, 40.0, 55.0, "k1"))))
    none = proc(1, "python", 20_000.0)
    mean = summarize([one, none, two]).call_sites
    assert mean is not None and mean.samples == 15 and mean.total_samples == 300
    a, b = mean.sites
    assert (sites.site_label(a), a.launches_per_s, a.launches_per_s_error, a.share_pct) == ("m/a.py:1 f", 200.0, 25.0,
                                                                                            55.0)
    assert (b.launches_per_s, b.launches_per_s_error, b.top_kernel) == (150.0, 25.0, "k2")
    assert summarize([none]).call_sites is None


# -- the details screen ------------------------------------------------------------------------


def test_details_panel_has_the_focus_arrows_move_enter_opens_the_stack_esc_closes() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(with_sites(10), proc(20)))
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailsScreen) and screen.focused is panel(app)
        text = lines(app)
        assert text[0].startswith("call sites: 400 samples") and len(text) == 2 + 4
        assert "gpt2/model.py:88 MLP.forward" in text[2] and "12.3k ±400" in text[2]
        assert panel(app).cursor_row == 0
        await pilot.press("up")                     # at the first row: the page's key (scrolls), the cursor stays
        assert panel(app).cursor_row == 0
        await pilot.press("down", "down", "down", "down")   # the fourth is past the last row: stays
        assert panel(app).cursor_row == 3 and panel(app).selected is not None
        assert panel(app).selected.kind == "native"
        await pilot.press("up", "up")
        assert panel(app).cursor_row == 1
        await pilot.press("enter")
        await pilot.pause()
        stack = app.screen
        assert isinstance(stack, StackScreen)
        shown = stack.query_one("#stack-text", Static).render()
        plain = str(shown)
        assert "call site of PID 10: nn/functional.py:2910 layer_norm" in plain
        assert "5.00k ±250" in plain and "30.0% ±1.2" in plain and "layer_norm_kernel" in plain
        for line in sites.stack_lines(call_sites().sites[1]):
            assert line in plain
        await pilot.press("escape")
        assert app.screen is screen and screen.focused is panel(app)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, StackScreen) and "N/A" in str(app.screen.query_one("#stack-text").render())
        await pilot.press("q")                      # closes the stack, not the details
        assert app.screen is screen
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailsScreen)

    run(None, body)


def test_the_cursor_follows_its_site_when_the_order_changes_and_the_page_still_pages() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        cs = call_sites()
        await push(pilot, feed, snapshot(with_sites(10, cs)))
        await pilot.press("enter", "down")
        await pilot.pause()
        assert sites.site_label(panel(app).selected) == "nn/functional.py:2910 layer_norm"   # type: ignore[arg-type]
        swapped = replace(cs, sites=(cs.sites[1], cs.sites[0], *cs.sites[2:]))
        await push(pilot, feed, snapshot(with_sites(10, swapped), time=1767258001.0))
        assert panel(app).cursor_row == 0
        assert sites.site_label(panel(app).selected) == "nn/functional.py:2910 layer_norm"   # type: ignore[arg-type]
        assert lines(app)[2].startswith("nn/functional.py:2910 layer_norm")
        body_ = app.screen.query_one("#body")
        await pilot.press("pagedown")
        await pilot.pause()
        assert body_.scroll_y > 0 and app.screen.focused is panel(app)

    run(None, body)


def test_a_click_selects_a_row_a_double_click_opens_its_stack() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(with_sites(10)))
        await pilot.press("enter")
        await pilot.pause()
        await pilot.click(SitesPanel, offset=(5, 2 + 2))
        assert panel(app).cursor_row == 2
        await pilot.double_click(SitesPanel, offset=(5, 2 + 3))
        await pilot.pause()
        assert isinstance(app.screen, StackScreen) and app.screen.site.kind == "native"
        assert "native callers" in str(app.screen.query_one("#stack-text").render())

    run(None, body)


def test_no_sampled_launch_one_line_and_enter_says_so() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(proc(10)))
        await pilot.press("enter")
        await pilot.pause()
        assert lines(app) == ["call sites: no launch sampled yet"]
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        assert any("no call site to show" in str(n.message) for n in app._notifications)

    run(None, body)


def test_a_gone_process_shows_its_sites_without_estimates() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(with_sites(10, total=Counts(launches=5))))
        await pilot.press("enter")
        await push(pilot, feed, snapshot(time=1767258001.0))
        text = lines(app)
        assert "0 samples this interval, 4,000 in all" in text[0]
        assert text[2].split()[2:4] == ["N/A", "41.2%"]

    run(None, body)


def test_compare_screen_shows_sites_of_a_beside_b() -> None:
    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        b_sites = CallSites(10, 100, (site("/home/a/gpt2/model.py", 88, "MLP.forward", 900.0, 90.0, 80.0, "k"),))
        await push(pilot, feed, snapshot(with_sites(1), with_sites(2, b_sites)))
        await pilot.pause(0.2)
        assert isinstance(app.screen, CompareScreen)
        text = app.screen.query_one("#sites").render().plain.splitlines()   # type: ignore[attr-defined]
        assert "A launch/s (est.)" in text[0] and "B launch/s (est.)" in text[0]
        assert text[1].split() == ["gpt2/model.py:88", "MLP.forward", "12.3k", "±400", "900", "±90"]
        assert text[3].split()[-1] == "N/A"

    run(DashboardOptions(compare_pids=(1, 2)), body)


def test_hostile_frames_are_shown_as_visible_escapes() -> None:
    evil = CallSites(10, 100, (
        CallSite("python", (Frame("/x/" + EVIL + ".py", 7, EVIL), Frame(EVIL, None, EVIL)),
                 samples=10, total_samples=100, launches_per_s=5.0, launches_per_s_error=1.0, share_pct=100.0,
                 share_pct_error=0.0, top_kernel=EVIL),
        CallSite("native", (Frame(EVIL, None, EVIL),), samples=1, total_samples=2, top_kernel=EVIL)))
    seen: dict[str, str] = {}

    async def body(app: GputopApp, pilot: Pilot[Any], feed: ManualFeed) -> None:
        await push(pilot, feed, snapshot(with_sites(10, evil)))
        await pilot.press("enter")
        await pilot.pause()
        seen["details"] = app.export_screenshot()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, StackScreen)
        seen["stack"] = app.export_screenshot()

    run(None, body)
    for name, svg in seen.items():
        assert not UNSAFE & set(svg), (name, sorted(UNSAFE & set(svg)))
        assert "\\x1b[2J" in svg, name
    assert SHOWN in seen["stack"]


def test_the_fleet_view_says_it_has_no_call_sites() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
    from .test_ui_fleet import run as fleet_run

    async def body(app: GputopApp, pilot: Pilot[Any], feed: Any) -> None:
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)
        assert lines(app) == ["call sites: the fleet view has none (gputop on the node shows them)"]
        assert app.screen.focused is not panel(app)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailsScreen)

    fleet_run(body)
