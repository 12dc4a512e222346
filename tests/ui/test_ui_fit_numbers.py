"""Issue 22, items 6-8 in the dashboard's text: one number style, the replay's interval rounded once,
one word for each state (header, batch, JSON), demo's help and errors like the rest of gputop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gputop import batch
from gputop.model import Counts, Rates, SourceStatus
from gputop.ui import charts
from gputop.ui.app import DashboardOptions, GputopApp
from gputop.ui.screens.compare import CompareScreen
from gputop.ui.screens.details import stats_rows
from gputop.ui.themes import ChartPalette
from gputop.ui.widgets.header import HeaderState, header_content
from gputop.view import compare
from gputop.view import format as fmt
from gputop.view.history import Series

from .ui_helpers import SCENARIO, proc, snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from screenshots import frames

ROOT = Path(__file__).resolve().parents[2]


# -- one number style ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "text"), [
    (1000.0, "1.00k"), (65536.0, "65.5k"), (80.0, "80"), (80.75, "80.8"), (146.3, "146"), (5.25, "5.25"),
    (123_456.0, "123k"),
    (0.5, "0.5"), (None, "N/A"),
])
def test_averages_are_whole_without_decimals_else_three_digits(value: float | None, text: str) -> None:
    assert fmt.num(value) == text


def test_precision_stays_three_digits_across_a_unit() -> None:
    """953.3 then 1.0k read as if the second were less precise: 953 then 1.00k."""
    assert [fmt.si(v) for v in (953.3, 999.4, 999.6, 1004.0, 12_345.0, 99_960.0)] == [
        "953", "999", "1.00k", "1.00k", "12.3k", "100k"]


@pytest.mark.parametrize(("value", "text"), [
    (0.000_85, "850µs"), (0.0125, "12.5ms"), (0.9996, "1.00s"), (23.24, "23.2s"), (512.3, "512s"), (None, "N/A"),
])
def test_durations(value: float | None, text: str) -> None:
    assert fmt.seconds(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (1.0, "1s"), (1.006, "1s"), (1.01, "1s"), (0.994, "1s"), (1.04, "1s"), (0.25, "0.25s"), (0.26, "0.25s"),
    (2.5, "2.5s"), (1.3, "1.3s"), (7.0, "7s"), (45.0, "45s"), (0.05, "0.05s"),
])
def test_an_interval_is_rounded_once(value: float, text: str) -> None:
    assert fmt.interval(value) == text


def test_the_replay_header_keeps_every_1s_when_the_recorded_interval_jitters(scenario: list[Any]) -> None:
    """Issue 22: the header switched between 'every 1s' and 'every 1.01s', wrapping and pushing the table."""
    texts = set()
    for i, jitter in enumerate((1.0, 1.006, 1.01, 0.993, 1.012, 0.998)):
        snap = replace(scenario[i], interval_s=jitter)
        state = HeaderState(snap, jitter, replay=(i + 1, 90, 1.0))
        line = header_content(state, 160).plain.splitlines()[0]
        texts.add(line[line.index("every"):].split("  ")[0])
        assert len(header_content(state, 80).plain.splitlines()) == len(
            header_content(replace(state, interval_s=1.0), 80).plain.splitlines())
    assert texts == {"every 1s"}


def test_a_chart_of_zeros_has_one_tick_and_no_invented_scale() -> None:
    pal = ChartPalette("#ffffff", ("#ff0000",))
    text = charts.line_chart([Series("x", (-3.0, -2.0, -1.0, 0.0), (0.0, 0.0, 0.0, 0.0))], 40, 8, pal,
                             title="launches/s", y_format=fmt.si, colorless=True)
    ticks = [line.split("┤")[0].strip() for line in text.splitlines() if "┤" in line]
    assert ticks == ["0"]
    hist = charts.bar_chart(["1", "2", "4"], [0.0, 0.0, 0.0], 40, 8, pal, title="h", colorless=True)
    assert [line.split("┤")[0].strip() for line in hist.splitlines() if "┤" in line] == ["0"]
    # with data the axis steps as before: 0 … the top, in the number style
    some = charts.line_chart([Series("x", (-1.0, 0.0), (0.0, 55_000.0))], 40, 10, pal, y_format=fmt.si,
                             colorless=True)
    assert [line.split("┤")[0].strip() for line in some.splitlines() if "┤" in line] == [
        "60.0k", "40.0k", "20.0k", "0"]


def test_details_say_calls_and_bytes_in_words() -> None:
    """Issue 22: 'allocations 1 calls, 0'."""
    p = proc(1, interval=Counts(launches=10, alloc_calls=1, alloc_bytes=0, free_calls=1, sync_calls=3),
             total=Counts(launches=100, alloc_calls=3, alloc_bytes=50 * 2**20 + 2**19, free_calls=2,
                          sync_calls=1, sync_wait_s=23.24), grid_blocks_avg=1000.0, block_threads_avg=128.0)
    rows = {label: (a, b) for label, a, b in stats_rows(p)}
    assert rows["allocations"] == ("1 call, 0 bytes", "3 calls, 50.5M bytes")
    assert rows["frees"] == ("1 call", "2 calls")
    assert rows["sync blocked"] == ("5.0%, 3 calls", "23.2s, 1 call")
    assert rows["avg grid×block"][0] == "1.00k × 128"


# -- one word for each state ---------------------------------------------------------------------------
STATES = [
    ("bpf", SourceStatus("ok", probes=10, objects=2), "ok"),
    ("bpf", SourceStatus("unavailable", "no privileges"), "off"),
    ("bpf", SourceStatus("starting"), "starting"),
    ("nvml", SourceStatus("unavailable", "no NVIDIA driver"), "off"),
    ("uvm", SourceStatus("ok", "CPU faults only", scope="cpu"), "CPU only"),
    ("uvm", SourceStatus("ok", scope="cpu+gpu"), "ok"),
]


@pytest.mark.parametrize(("key", "status", "word"), STATES)
def test_the_header_and_batch_use_one_word_per_state(key: str, status: SourceStatus, word: str) -> None:
    """Issue 22: batch said uvm:ok where the dashboard said UVM CPU only."""
    label = fmt.SOURCE_LABELS[key]
    snap = replace(snapshot(), sources={**snapshot().sources, key: status})
    assert fmt.source_state(key, status) == word
    assert f"{label} {word}" in header_content(HeaderState(snap, 1.0)).plain
    assert f"  {label} {word}" in batch.table(snap).splitlines()[0]


def test_batch_status_line_is_the_headers(scenario: list[Any]) -> None:
    assert batch.table(scenario[0]).splitlines()[0] == (
        "gputop - 09:00:00  gpu-node-07  every 1s  BPF ok  NVML ok  UVM CPU only  cost 114k hits/s 9.06% CPU "
        "(traps 8.58% + programs 0.48%)")
    header = header_content(HeaderState(scenario[0], 1.0), 200).plain
    assert "every 1s  BPF ok 212p/7obj  NVML ok  UVM CPU only  cost 114k hits/s 9.06% CPU (traps 8.58% + " \
           "programs 0.48%)" in header


# -- compare: baseline and live read alike ---------------------------------------------------------------
def test_kernels_run_is_the_launches_where_no_graph_ran() -> None:
    """Issue 22: a baseline showed 'kernels run/s N/A' beside 'launches/s 3.0k' (no graph kernel field)."""
    p = proc(1, launches=3000.0, interval=Counts(launches=3000, graph_launches=0),
             rates=Rates(launches_per_s=3000.0, graph_kernel_launches_per_s=None),
             total=Counts(launches=30_000, graph_launches=0, graph_kernel_launches=None))
    rows = {r.label: r for r in compare.rows(p, p)}
    assert (rows["launches/s"].a, rows["kernels run/s"].a, rows["kernels run total"].a) == ("3.00k", "3.00k", "30.0k")
    # a graph launched whose kernels are unknown: unknown, never a guess
    g = replace(p, interval=Counts(launches=3000, graph_launches=2), total=Counts(launches=30_000, graph_launches=5))
    rows = {r.label: r for r in compare.rows(g, g)}
    assert (rows["kernels run/s"].a, rows["kernels run total"].a) == ("N/A", "N/A")


def test_the_baseline_compare_charts_end_at_0s_like_the_live_one() -> None:
    from screenshots import FrameFeed

    feed = FrameFeed(frames(61))
    app = GputopApp(feed, DashboardOptions(theme="dark", baseline=SCENARIO))

    async def main() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await feed.deliver(pilot)
            await pilot.press("down", "down", "down", "c")
            await pilot.pause(0.2)
            screen = app.screen
            assert isinstance(screen, CompareScreen) and screen.uses_baseline
            a, b = screen._pair("launches")
            assert a.xs[-1] == 0.0 and b.xs[-1] == 0.0
            assert a.xs[0] < -50 and b.xs[0] < -50

    asyncio.run(main())


# -- demo: help and errors like gputop's --------------------------------------------------------------
def _gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_demo_help_describes_every_option_with_its_default() -> None:
    r = _gputop("demo", "--help")
    assert r.returncode == 0
    # Python 3.13's argparse names a short option's metavar once: "-n, --iterations N"
    text = " ".join(r.stdout.split()).replace("-n, --iterations", "-n N, --iterations").replace(
        "-d, --delay", "-d SECONDS, --delay")
    for part in ("--rate STEPS steps per second of each workload (default 2000)",
                 "-n N, --iterations N batch mode: stop after N refreshes (default 5)",
                 "-d SECONDS, --delay SECONDS refresh interval (default 1)",
                 "--theme THEME colour theme of the compare screen (default: the one saved in config.toml, "
                 "else dark)",
                 "-b, --batch batch mode: print the two workloads' refreshes to stdout instead of the compare screen"):
        assert part in text, part


@pytest.mark.parametrize(("args", "error", "hint"), [
    (["--rate", "0"], "gputop: error: argument --rate: must be above 0 and at most 1e+06 steps per second: '0'",
     "hint: see 'gputop demo --help'"),
    (["-n", "x"], "gputop: error: argument -n/--iterations: not an integer: 'x'", "hint: see 'gputop demo --help'"),
    (["--theme", "nope"], "gputop: error: unknown theme 'nope'",
     "hint: choose one of: dark, light, high-contrast, monochrome"),
])
def test_demo_usage_errors_are_an_error_and_a_hint(args: list[str], error: str, hint: str) -> None:
    r = _gputop("demo", *args)
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [error, hint])
