"""The dashboard's pure parts: formatting, columns and sort orders, compare arithmetic, baselines,
history, themes, charts, layout."""

from __future__ import annotations

import math
import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.model import CallBytes, Counts, GpuSample, ProcSample, Rates, Snapshot, SourceStatus
from gputop.record import Recorder, RecordingError
from gputop.ui import themes
from gputop.ui.charts import _nice_ticks, bar_chart, line_chart
from gputop.ui.screens.details import hist_buckets, stats_content, stats_rows, title_content, without_live_values
from gputop.ui.widgets.gpu_panel import gpu_line, gpu_lines
from gputop.ui.widgets.header import HeaderState, header_content, header_lines
from gputop.ui.widgets.table_layout import GUTTER, SCROLL_MIN, col_width, layout
from gputop.view import columns, compare
from gputop.view import format as fmt
from gputop.view.baseline import load_baseline, summarize
from gputop.view.history import History, Series, series

from .ui_helpers import SCENARIO, proc, snapshot

ANSI = re.compile(r"\x1b\[[0-9;]*m")

# -- format -----------------------------------------------------------------------------------


def test_unknown_is_na_everywhere() -> None:
    for f in (fmt.si, fmt.bytes_, fmt.pct, fmt.num, fmt.seconds, fmt.cpu_share):
        assert f(None) == "N/A"
    assert fmt.si(float("nan")) == "N/A"
    assert fmt.text(None) == "N/A"


def test_zero_is_zero() -> None:
    assert fmt.si(0) == "0" and fmt.bytes_(0) == "0" and fmt.pct(0.0) == "0%"


@pytest.mark.parametrize(
    ("value", "text"),
    [(950, "950"), (953.3, "953"), (95.33, "95.3"), (12345, "12.3k"), (123456, "123k"), (4.1e6, "4.10M"),
     (999.96, "1.00k"), (999_700, "1.00M"), (2.5, "2.50"), (0.003, "0.003"), (-2500, "-2.50k"), (3e9, "3.00G")],
)
def test_si(value: float, text: str) -> None:
    assert fmt.si(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(512, "512"), (1536 * 1024, "1.50M"), (80 * 2**30, "80.0G"), (1017.7 * 2**20, "1018M"), (1023.9 * 2**20, "1.00G"),
     (2**40, "1.00T"), (50.2 * 2**20, "50.2M"), (512 * 1024, "512K")],
)
def test_bytes(value: float, text: str) -> None:
    assert fmt.bytes_(value) == text


def test_cpu_share_is_percent_of_one_core() -> None:
    assert fmt.cpu_share(1e7) == "1.00%"  # 10 ms per second
    assert fmt.cpu_share(4.7e6) == "0.47%"
    assert (fmt.cpu_share(1.696e8), fmt.cpu_share(1.532e9), fmt.cpu_share(9.06e7)) == ("17.0%", "153%", "9.06%")


def test_sparkline_and_bar() -> None:
    assert fmt.sparkline([0, 50, 100, None], 6) == "  ▁▅█ "
    assert fmt.sparkline([100] * 10, 3) == "███"
    assert fmt.bar(0.5, 10) == ("█" * 5, "░" * 5)
    assert fmt.bar(None, 4) == ("", "    ")
    assert fmt.bar(1.7, 4) == ("████", "")
    assert fmt.fraction(1, 4) == 0.25 and fmt.fraction(None, 4) is None and fmt.fraction(1, 0) is None


def test_fit_and_fit_middle() -> None:
    assert fmt.fit("abcdef", 4) == "abc…"
    assert fmt.fit("abc", 4) == "abc"
    cut = fmt.fit_middle("python train.py --model gpt2-medium --fused=0", 30)
    assert len(cut) == 30 and cut.startswith("python train") and cut.endswith("--fused=0")


def test_kernel_name_collapses_templates_before_cutting() -> None:
    name = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
            "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
    assert fmt.kernel_name("void k(int)", 40) == "k(int)"
    assert fmt.kernel_name(name, 60) == "at::native::vectorized_elementwise_kernel<…>(…)"
    assert len(fmt.kernel_name(name, 20)) == 20
    assert "CUDAFunctor_add<…>" in fmt.kernel_name(name, 110)


# -- columns ----------------------------------------------------------------------------------



def test_a_deeply_nested_kernel_name_is_shortened_in_two_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40: 14 names of 4,095 nested brackets kept the details screen busy (Esc took 6.8 s): the
    templates were collapsed one level at a time, each pass over the whole name. Now the level that
    fits is found in one pass and the name collapsed once (besides the parameter list), whatever the
    depth, with the same result as level by level."""
    calls: list[int] = []
    collapse = fmt._collapse
    monkeypatch.setattr(fmt, "_collapse", lambda name, depth, kinds="<(": calls.append(depth) or collapse(
        name, depth, kinds))
    deep = "k" + "<" * 4095 + "int" + ">" * 4095 + "(float*)"
    assert fmt.kernel_name(deep, 60) == "k" + "<" * 27 + "…" + ">" * 27 + "(…)"     # the deepest level that fits
    assert calls == [1, 27], calls                  # the parameter list, then the level found
    mid = "k<" + "a<" * 10 + "int" + ">" * 10 + ", b<c>>(int)"
    assert fmt.kernel_name(mid, 30) == "k<a<a<a<a<a<…>>>>>, b<c>>(…)"
    assert fmt.kernel_name(mid, 14) == "k<…>(…)"
    assert fmt.kernel_name("a<b<c<d>>, e<f>>(x)", 12) == "a<…>(…)"
    # the one-pass lengths are those of collapsing level by level
    for name in (deep[:-8], "a<b<c<d>>, e<f>>", ">>x<y<z>", "k<a<b>>>(c<d)"):
        lengths = fmt._collapsed_lengths(name)
        assert lengths == {d: len(collapse(name, d)) for d in lengths}, name

def test_every_issue_column_exists_and_sort_keys_are_their_names() -> None:
    headers = [c.header for c in columns.COLUMNS]
    assert headers == ["PID", "USER", "GPU", "COMMAND", "LAUNCH/s", "GRID", "BLOCK", "GRAPH/s", "GKERN/s", "H2D/s",
                       "D2H/s", "D2D/s", "MSET/s", "NCCL/s", "NCCL B/s",
                       "LIVE MEM", "UVM f/s", "SYNC%", "GPU MEM", "SM%", "S", "CPU%", "TIME+", "RSS",
                       "%MEM", "LB", "NODE", "NAMESPACE", "POD"]
    assert tuple(c.key for c in columns.COLUMNS) == columns.SORT_KEYS
    assert columns.DEFAULT_SORT == "launches"


def test_check_sort_key_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"launches.*gpu_mem"):
        columns.check_sort_key("bogus")


def test_check_columns_keeps_pid_and_order() -> None:
    assert columns.check_columns(["launches", "user", "launches"]) == ("pid", "launches", "user")


def test_sort_unknown_last_both_directions_and_ties_by_pid() -> None:
    ps = [proc(3, launches=None), proc(1, launches=10.0), proc(2, launches=10.0), proc(4, launches=99.0)]
    assert [p.pid for p in columns.sort_processes(ps, "launches")] == [4, 1, 2, 3]
    assert [p.pid for p in columns.sort_processes(ps, "launches", reverse=True)] == [1, 2, 4, 3]
    assert [p.pid for p in columns.sort_processes(ps, "pid")] == [1, 2, 3, 4]
    users = [proc(1, user="bob"), proc(2, user="Alice"), proc(3, user=None)]
    assert [p.pid for p in columns.sort_processes(users, "user")] == [2, 1, 3]


@pytest.mark.parametrize("key", columns.SORT_KEYS)
def test_every_column_sorts_the_scenario(key: str, scenario: list[Snapshot]) -> None:
    rows = columns.sort_processes(scenario[40].processes, key)
    assert sorted(p.pid for p in rows) == sorted(p.pid for p in scenario[40].processes)
    for p in rows:
        columns.BY_KEY[key].render(p)


def test_filter() -> None:
    ps = [proc(10, "alpha", user="alice"), proc(20, "beta", user="bob", cmdline="beta --job 2"),
          proc(123, "gamma", user=None, cmdline=None)]
    assert [p.pid for p in columns.filter_processes(ps, "ALP")] == [10]
    assert [p.pid for p in columns.filter_processes(ps, "bob")] == [20]
    assert [p.pid for p in columns.filter_processes(ps, "123")] == [123]
    assert [p.pid for p in columns.filter_processes(ps, "12")] == []
    assert [p.pid for p in columns.filter_processes(ps, "--job 2")] == [20]  # the command line
    assert len(columns.filter_processes(ps, "  ")) == 3


def test_neighbour() -> None:
    vis = ("pid", "user", "launches")
    assert columns.neighbour("user", vis, 1) == "launches"
    assert columns.neighbour("launches", vis, 1) == "launches"
    assert columns.neighbour("pid", vis, -1) == "pid"
    assert columns.neighbour("grid", vis, 1) == "user"


def test_command_column_drops_the_program_directory() -> None:
    p = proc(1, cmdline="/usr/bin/dcgm-exporter -f x.csv")
    assert columns.BY_KEY["command"].render(p) == "dcgm-exporter -f x.csv"
    assert columns.BY_KEY["command"].render(proc(1, "kworker", cmdline=None)) == "kworker"


def test_launch_bound_marker() -> None:
    col = columns.BY_KEY["launch_bound"]
    assert col.render(proc(1, launch_bound=True)) == "◆"
    assert col.render(proc(1, launch_bound=False)) == ""
    assert col.render(proc(1, launch_bound=None)) == "N/A"


# -- table layout -------------------------------------------------------------------------------


def test_layout_flexes_command_and_drops_right_columns() -> None:
    cols = columns.SORT_KEYS
    wide = layout(cols, 200)
    # with NODE, NAMESPACE and POD not all fit in 200: MSET/s, NCCL/s, NCCL B/s, S, TIME+, RSS, %MEM start
    # scrolled off behind ▶
    assert wide.hidden_right == 7 and [c.key for c, _ in wide][-1] == "pod"
    assert sum(w for _, w in wide) + len(wide) - 1 + GUTTER + 1 == 200
    assert dict((c.key, w) for c, w in wide)["command"] > 16
    narrow = layout(cols, 80)
    assert [c.key for c, _ in narrow][:4] == ["pid", "user", "gpu", "command"]
    assert sum(w for _, w in narrow) + len(narrow) - 1 + GUTTER <= 80
    assert len(narrow) < len(cols)


# -- compare --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "r"),
    [(10.0, 5.0, 0.5), (None, 5.0, None), (5.0, None, None), (0.0, 0.0, 1.0), (0.0, 3.0, math.inf), (4.0, 0.0, 0.0)],
)
def test_ratio(a: float | None, b: float | None, r: float | None) -> None:
    assert compare.ratio(a, b) == r


@pytest.mark.parametrize(
    ("r", "text"),
    [(None, "N/A"), (math.inf, "∞"), (1.0, "="), (0.0753, "0.075×"), (0.5, "0.50×"), (13.33, "13.33×"),
     (250.0, "250×")],
)
def test_format_ratio(r: float | None, text: str) -> None:
    assert compare.format_ratio(r) == text


def test_notable() -> None:
    assert compare.notable(2.0) and compare.notable(0.5) and compare.notable(0.0)
    assert not compare.notable(1.2) and not compare.notable(None)


def test_compare_rows_fused_vs_unfused(scenario: list[Snapshot]) -> None:
    s = scenario[30]
    unfused, fused = s.process(4242), s.process(4243)
    rows = {r.label: r for r in compare.rows(unfused, fused)}
    assert len(rows) == len(compare.METRICS)
    launches = rows["launches/s"]
    assert launches.notable and float(launches.ratio.rstrip("×")) < 0.1
    assert rows["GPU mem"].ratio != "N/A"
    missing = {r.label: r for r in compare.rows(unfused, None)}
    assert all(r.b == "N/A" and r.ratio == "N/A" for r in missing.values())


# -- baseline -------------------------------------------------------------------------------------


def test_summarize_means_known_values_and_keeps_last_totals() -> None:
    a = proc(1, launches=100.0, cpu_pct=None, gpu_mem_bytes=10,
             interval=Counts(launches=100, memcpy={"h2d": CallBytes(2, 200)}))
    b = proc(1, launches=300.0, cpu_pct=50.0, gpu_mem_bytes=30, kernels=(),
             interval=Counts(launches=300, memcpy={"h2d": CallBytes(4, 400)}), total=Counts(launches=999))
    s = summarize([a, b])
    assert s.rates is not None and s.rates.launches_per_s == 200.0
    assert s.cpu_pct == 50.0 and s.gpu_mem_bytes == 20
    assert s.interval is not None and s.interval.memcpy == {"h2d": CallBytes(3, 300)}
    assert s.total == Counts(launches=999)
    assert summarize([replace(a, rates=None)]).rates is None


def test_load_baseline_picks_the_busiest_process() -> None:
    b = load_baseline(SCENARIO)
    assert b.candidates[0].pid == 4242 and b.host == "gpu-node-07"
    first = b.candidates[0]
    assert all(p.pid == 4242 and p.state == "running" for _, p in first.samples)
    totals = [c.total_launches or -1 for c in b.candidates]
    assert totals == sorted(totals, reverse=True)
    assert first.summary.rates is not None and 45_000 < (first.summary.rates.launches_per_s or 0) < 60_000


def test_load_baseline_by_pid_and_errors(tmp_path: Path) -> None:
    assert load_baseline(SCENARIO, pid=4243).candidates[0].pid == 4243
    with pytest.raises(RecordingError, match=r"no process 77.*busiest: 4242"):
        load_baseline(SCENARIO, pid=77)
    empty = tmp_path / "empty.jsonl"
    with Recorder(empty) as r:
        r.write(snapshot())
    with pytest.raises(RecordingError, match="no processes"):
        load_baseline(empty)


# -- history --------------------------------------------------------------------------------------


def test_history_keeps_bounded_series_and_forgets_gone_processes() -> None:
    h = History(maxlen=5)
    for i in range(8):
        procs = [proc(1, launches=float(i))] + ([proc(2)] if i < 2 else [])
        h.add(replace(snapshot(*procs, time=100.0 + i),
                      gpus=(GpuSample(index=0, util_pct=float(i)),)))
    pts = h.points(1)
    assert [p.get("launches") for p in pts] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert h.points(2) == []  # not seen for longer than the window
    assert h.gpu_util(0) == [3.0, 4.0, 5.0, 6.0, 7.0]
    s = series(pts, "launches", origin=107.0)
    assert s.xs == (-4.0, -3.0, -2.0, -1.0, 0.0)


def test_history_starts_again_when_time_goes_back() -> None:
    h = History()
    h.add(replace(snapshot(proc(1), time=10.0), gpus=(GpuSample(index=0, util_pct=1.0),)))
    h.add(snapshot(proc(1), time=11.0))
    h.add(replace(snapshot(proc(1), time=5.0), gpus=(GpuSample(index=0, util_pct=2.0),)))
    assert [p.time for p in h.points(1)] == [5.0]
    assert h.gpu_util(0) == [2.0]


def test_history_restarts_a_reused_pid() -> None:
    h = History()
    h.add(snapshot(proc(1, "old"), time=1.0))
    h.add(snapshot(proc(1, "new"), time=2.0))
    assert len(h.points(1)) == 1


def test_history_is_thread_safe() -> None:
    h = History(maxlen=50)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            h.add(snapshot(*[proc(p) for p in range(20)], time=float(i)))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(2000):
            h.points(3)
    finally:
        stop.set()
        t.join()


# -- themes ---------------------------------------------------------------------------------------


def test_builtin_themes_load() -> None:
    names = themes.theme_names()
    assert names[:4] == ("dark", "light", "high-contrast", "monochrome")
    loaded = themes.load_themes()
    assert set(names) <= set(loaded)
    assert loaded["light"].dark is False and loaded["dark"].dark is True
    for t in loaded.values():
        palette = themes.chart_palette(t)
        assert len(palette.series) >= 2 and palette.text.startswith("#")


def test_themes_dir_in_dev_and_wheel_layouts(tmp_path: Path) -> None:
    assert (themes.builtin_themes_dir() / "dark.toml").is_file()  # this checkout: <repo>/themes
    wheel = tmp_path / "site-packages" / "gputop"
    (wheel / "_data" / "themes").mkdir(parents=True)
    assert themes.builtin_themes_dir(wheel) == wheel / "_data" / "themes"
    dev = tmp_path / "repo" / "gputop"
    dev.mkdir(parents=True)
    assert themes.builtin_themes_dir(dev) == tmp_path / "repo" / "themes"


def test_user_themes_extend_and_bad_ones_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "config" / "gputop" / "themes"
    d.mkdir(parents=True)
    (d / "solar.toml").write_text('primary = "#ffaa00"\ndark = false\n')
    (d / "broken.toml").write_text("primary = \n")
    assert "solar" in themes.theme_names()
    loaded = themes.load_themes()
    assert loaded["solar"].primary == "#ffaa00" and "broken" not in loaded
    with pytest.raises(ValueError, match="choose one of: dark, light, high-contrast, monochrome"):
        themes.check_theme_name("nope")


def test_theme_without_primary_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "x.toml"
    p.write_text('background = "#000000"\n')
    with pytest.raises(themes.ThemeError, match="primary"):
        themes.load_theme(p)


def test_no_color_follows_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "")
    assert not themes.no_color()
    monkeypatch.setenv("NO_COLOR", "1")
    assert themes.no_color()


# -- charts ---------------------------------------------------------------------------------------

PALETTE = themes.ChartPalette("#aaaaaa", ("#ff0000", "#00ff00"))


def test_line_chart_has_the_requested_size_and_legend() -> None:
    s = Series("launches", tuple(float(x) for x in range(-30, 1)), tuple(float(x * x) for x in range(31)))
    out = line_chart([s], 70, 15, PALETTE, title="launches/s", y_format=fmt.si)
    lines = ANSI.sub("", out).splitlines()
    assert len(lines) == 15 and max(len(line) for line in lines) == 70
    assert lines[0].startswith("launches/s  ■ launches")
    assert "\x1b[38;2;255;0;0m" in out  # the theme's first series colour
    assert "-30s" in ANSI.sub("", out)


def test_line_chart_gaps_and_empty() -> None:
    s = Series("x", (0.0, 1.0, 2.0, 3.0), (1.0, None, None, 2.0))
    assert "no data yet" in line_chart([Series("x", (0.0,), (None,))], 40, 8, PALETTE)
    out = line_chart([s], 40, 8, PALETTE, colorless=True)
    assert "\x1b" not in out


def test_nice_ticks() -> None:
    assert _nice_ticks(95) == [0, 25, 50, 75, 100]
    assert _nice_ticks(3 * 2**30, base=1024)[-1] >= 3 * 2**30
    assert all(t % 2**30 == 0 for t in _nice_ticks(3 * 2**30, base=1024))
    assert _nice_ticks(0) == [0.0, 1.0]


def test_bar_chart() -> None:
    out = ANSI.sub("", bar_chart(["1", "2", "4"], [5.0, 50.0, 0.0], 40, 10, PALETTE, title="grid"))
    assert "grid" in out and "40┤" in out and "█" in out
    assert "no data" in bar_chart([], [], 40, 10, PALETTE)


def test_hist_buckets_fill_gaps_in_order() -> None:
    labels, values = hist_buckets({"2^7": 10, "2^4": 3, "bad": 1}, min_span=1)
    assert labels == ["16", "32", "64", "128"] and values == [3.0, 0.0, 0.0, 10.0]
    # fewer buckets than min_span: empty neighbours on both sides, the data where it was
    labels, values = hist_buckets({"2^7": 10, "2^4": 3})
    assert labels == ["4", "8", "16", "32", "64", "128", "256", "512"]
    assert values == [0.0, 0.0, 3.0, 0.0, 0.0, 10.0, 0.0, 0.0]
    assert hist_buckets(None) == ([], [])
    labels, _ = hist_buckets({"2^0": 1, "2^30": 1}, limit=5)
    assert len(labels) == 5
    # one bucket (every block of 256 threads): one bar among seven empty ones, not the chart's width
    labels, values = hist_buckets({"2^8": 40})
    assert labels == ["32", "64", "128", "256", "512", "1k", "2k", "4k"] and values == [0.0] * 3 + [40.0] + [0.0] * 4
    # none below 2^0: the empty buckets go above
    labels, values = hist_buckets({"2^0": 5})
    assert labels == ["1", "2", "4", "8", "16", "32", "64", "128"] and values == [5.0] + [0.0] * 7
    assert len(hist_buckets({"2^3": 1}, limit=4)[0]) == 4           # never more than the limit


# -- text builders ------------------------------------------------------------------------------


def test_header_shows_status_and_cost(scenario: list[Snapshot]) -> None:
    text = header_content(HeaderState(scenario[0], 1.0, paused=True, replay=(1, 90, 2.0), filter="py")).plain
    for needle in ("gpu-node-07", "09:00:00", "every 1s", "PAUSED", "REPLAY 1/90 ×2", "BPF ok 212p/7obj",
                   "NVML ok", "UVM CPU only", "hits/s", "% CPU", "filter: py"):
        assert needle in text, needle
    off = replace(scenario[0], sources={"bpf": replace(scenario[0].sources["bpf"], status="unavailable")})
    text = header_content(HeaderState(off)).plain
    assert "BPF off" in text and "cost" not in text and "NVML N/A" in text
    assert "failed" not in header_content(HeaderState(scenario[0])).plain
    bpf = replace(scenario[0].sources["bpf"], probes_failed=2, dropped=5)
    text = header_content(HeaderState(replace(scenario[0], sources={**scenario[0].sources, "bpf": bpf}))).plain
    assert "BPF ok 212p/7obj 2 failed dropped 5" in text
    # the tenant that lost most, all kinds summed (docs/SECURITY.md, "Fair share")
    bpf = replace(bpf, dropped=2030, dropped_by_tenant={"uid:65534": {"events": 1000, "procs": 1000},
                                                        "cgroup:77": {"kernels": 30}})
    text = header_content(HeaderState(replace(scenario[0], sources={**scenario[0].sources, "bpf": bpf}))).plain
    assert "dropped 2.03k (uid:65534 2.00k)" in text


def test_gpu_line_shows_na_for_unknowns() -> None:
    text = gpu_line(GpuSample(index=3), [], 160).plain
    assert text.count("N/A") >= 5 and " 3 " in text
    full = gpu_line(GpuSample(index=0, name="A100", util_pct=50.0, mem_used_bytes=2**30, mem_total_bytes=2**32,
                              temp_c=60.0, power_w=100.0, power_limit_w=400.0, pcie_rx_bytes_per_s=2**30,
                              pcie_tx_bytes_per_s=0.0, xid_errors=2), [10.0, 90.0], 200).plain
    for needle in ("50%", "1.00G/4.00G", "60°C", "100/400W", "↓1.00G/s", "XID 2", "▂▇"):
        assert needle in full, needle


def test_details_stats_rows_cover_the_issue_items(scenario: list[Snapshot]) -> None:
    p = scenario[30].process(6001)
    assert p is not None
    rows = {label: (now, total) for label, now, total in stats_rows(p)}
    for needle in ("allocations", "frees", "live alloc", "UVM faults", "prefetch", "sync blocked"):
        assert needle in rows
    # every count says what it counts: no bare numbers side by side ("alloc 2 calls 0 free 1")
    assert rows["allocations"][1].endswith(" calls, " + fmt.bytes_(p.total.alloc_bytes if p.total else None) + " bytes")
    assert rows["frees"][1].endswith(" calls")
    bare = {label: (now, total) for label, now, total in stats_rows(ProcSample(pid=1, comm="x"))}
    assert bare["launches"] == ("N/A", "N/A")
    assert bare["live alloc"][1] == "N/A"
    assert "N/A" in bare["sync blocked"][0] and "N/A" in bare["sync blocked"][1]


def test_details_totals_stay_beside_rates_of_an_idle_process() -> None:
    p = proc(1, launches=0.0, total=Counts(launches=12345, grid_blocks_sum=12345 * 80,
                                           block_threads_sum=12345 * 256))
    rows = {label: (now, total) for label, now, total in stats_rows(p)}
    assert rows["launches"] == ("0/s", "12.3k")
    assert rows["avg grid×block"][1] == "80 × 256"
    gone = without_live_values(p)
    rows = {label: (now, total) for label, now, total in stats_rows(gone)}
    assert rows["launches"] == ("N/A", "12.3k")


def test_kernel_names_stay_distinct() -> None:
    names = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::mul_kernel<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::mul_kernel<float>, at::detail::Array<char*, 3>)",
        "ampere_sgemm_128x64_nn",
    ]
    for width in (20, 30, 45, 60, 80):
        short = fmt.kernel_names(names, width)
        assert len(set(short)) == 3, (width, short)
        assert all(len(s) <= width for s in short)
        assert short[2] == fmt.fit("ampere_sgemm_128x64_nn", width)
    # the same name twice (one module loaded per context) is numbered, not merged
    assert fmt.kernel_names(["k", "k"], 10) == ["k", "k #2"]


def test_compare_ratio_follows_the_values_shown() -> None:
    a = proc(1, launches=1022.0, rates=Rates(launches_per_s=1022.0, sync_wait_pct=0.04))
    b = proc(2, launches=19990.0, rates=Rates(launches_per_s=19990.0, sync_wait_pct=0.05))
    rows = {r.label: r for r in compare.rows(a, b)}
    assert (rows["launches/s"].a, rows["launches/s"].b, rows["launches/s"].ratio) == ("1.02k", "20.0k", "19.61×")
    assert (rows["sync wait %"].a, rows["sync wait %"].b, rows["sync wait %"].ratio) == ("0.0%", "0.1%", "∞")
    c = proc(3, rates=Rates(launches_per_s=1.0, sync_wait_pct=0.04))
    assert compare.rows(c, a)[compare_index("sync wait %")].ratio == "="


def compare_index(label: str) -> int:
    return [m.label for m in compare.METRICS].index(label)


def test_rates_from_model_are_shown_not_recomputed() -> None:
    p = proc(1, rates=Rates(launches_per_s=7.0, memcpy_bytes_per_s=None), interval=Counts(launches=1000))
    assert columns.BY_KEY["launches"].render(p) == "7"
    assert columns.BY_KEY["h2d"].render(p) == "N/A"


def test_header_wraps_and_keeps_its_sources_when_narrow(scenario: list[Snapshot]) -> None:
    error = "skipped a bad line (/var/tmp/a-very-long-recording-name.jsonl:17: not JSON: Expecting value)"
    state = HeaderState(scenario[0], 1.0, replay=(1, 90, 1.0), error=error)
    for width in (160, 100, 80, 60):
        lines = header_lines(state, width)
        assert 1 <= len(lines) <= 4
        assert all(line.cell_length <= width for line in lines), width
        text = "\n".join(line.plain for line in lines)
        for needle in ("BPF ok", "NVML ok", "UVM CPU only", "REPLAY 1/90"):
            assert needle in text, (width, needle)
        assert "skipped a bad line" in text


def test_uvm_label_says_what_is_traced() -> None:
    snap = snapshot()
    for status, label in ((SourceStatus("ok", scope="cpu"), "UVM CPU only"),
                          (SourceStatus("ok", scope="cpu+gpu"), "UVM ok"),
                          (SourceStatus("unavailable", "no kprobes"), "UVM off")):
        text = header_content(HeaderState(replace(snap, sources={**snap.sources, "uvm": status}))).plain
        assert label in text


def test_interval_and_speed_read_as_a_person_says_them() -> None:
    assert [fmt.interval(s) for s in (1.0003, 0.25, 2.5, 0.999, 30.2)] == ["1s", "0.25s", "2.5s", "1s", "30s"]
    assert [fmt.speed(x) for x in (1.0, 4.0, 0.5, 1.333, 64.0)] == ["1", "4", "0.5", "1.3", "64"]


def test_scenario_follows_the_live_semantics(scenario: list[Snapshot]) -> None:
    """Histograms count since first seen (they add up to the total launches); GPU-side UVM is null."""
    checked = 0
    for snap in scenario:
        for p in snap.processes:
            assert p.total is not None and p.total.launches is not None
            assert sum((p.grid_blocks_hist or {}).values()) == p.total.launches
            assert sum((p.block_threads_hist or {}).values()) == p.total.launches
            assert p.total.uvm_gpu_faults is None and p.total.uvm_migrated is None
            checked += 1
    assert checked > 500
    assert scenario[0].sources["uvm"].scope == "cpu"


def test_gpu_panel_wraps_instead_of_cutting() -> None:
    g = GpuSample(index=0, name="NVIDIA H100 80GB HBM3", util_pct=50.0, mem_used_bytes=2**30,
                  mem_total_bytes=2**32, temp_c=61.0, power_w=300.0, power_limit_w=700.0,
                  pcie_rx_bytes_per_s=2**30, pcie_tx_bytes_per_s=2**20, xid_errors=0)
    for width in (200, 120, 80, 60):
        lines = gpu_lines(g, [], width)
        assert all(line.cell_length <= width for line in lines), width
        text = " ".join(line.plain for line in lines)
        for needle in ("61°C", "300/700W", "PCIe ↓1.00G/s ↑1.00M/s", "XID 0", "50%"):
            assert needle in text, (width, needle)
    assert len(gpu_lines(g, [], 200)) == 1 and len(gpu_lines(g, [], 80)) == 2


def test_every_header_fits_its_sort_arrow() -> None:
    for c in columns.COLUMNS:
        assert col_width(c) >= len(c.header) + 1, c.key


def test_narrow_layout_scrolls_and_never_hides_the_sort_column() -> None:
    cols = columns.visible(columns.SORT_KEYS, fleet=False)
    for width in (120, 80, 40):
        for sort in cols:
            for offset in range(len(cols)):
                lay = layout(cols, width, sort, offset)
                keys = [c.key for c, _ in lay]
                assert sort in keys and keys[0] == "pid"
                used = sum(w for _, w in lay) + len(lay) - 1 + GUTTER
                assert used + bool(lay.hidden_left) + bool(lay.hidden_right) <= width or len(lay) <= 2
                assert len(keys) + lay.hidden_left + lay.hidden_right == len(cols)
    # scrolling right reaches the last column, then stops
    lay = layout(cols, 80, "launches", 0)
    assert lay.hidden_right and not lay.hidden_left
    far = layout(cols, 80, "launches", len(cols))
    # MSET/s, NCCL/s, NCCL B/s, TIME+, RSS and %MEM (columns.OPTIONAL) come last where space is short
    assert far.cols[-1][0].key == "mem" and not far.hidden_right and far.hidden_left
    assert [c.key for c, _ in far.cols[-3:]] == ["cpu_time", "rss", "mem"]


@pytest.mark.parametrize("width", [80, 100, 120, 160])
@pytest.mark.parametrize("sort", ["launches", "sync", "mem", "user", "command"])
def test_scrolling_keeps_the_columns_that_tell_rows_apart(width: int, sort: str) -> None:
    """Issue 35: scrolled right, only PID told rows apart. PID, USER, GPU and COMMAND stay fixed at the left at
    every offset, with the same widths (← → never move them); each step right shows something new (the sort
    column, pinned, is not a step); the last step shows the last column."""
    cols = columns.visible(columns.SORT_KEYS, fleet=False)
    seen: list[tuple[str, ...]] = []
    fixed: set[tuple[tuple[str, int], ...]] = set()
    starts: set[int] = set()
    offset = 0
    while True:
        lay = layout(cols, width, sort, offset)
        keys = tuple(c.key for c, _ in lay)
        assert keys[:4] == ("pid", "user", "gpu", "command"), (offset, keys)
        assert sort in keys
        fixed.add(tuple((c.key, w) for c, w in lay.cols[:4]))
        used = (sum(w for _, w in lay) + len(lay) - 1 + GUTTER + bool(lay.hidden_left or lay.gap)
                + bool(lay.hidden_right))
        assert used <= width
        if lay.gap or lay.hidden_left:      # the scrolled columns start at the same place at every offset
            starts.add(GUTTER + sum(w + 1 for _, w in lay.cols[:lay.fixed]) + 1)
        if offset:
            assert keys != seen[-1], offset           # a step that changes nothing on the screen: none
        seen.append(keys)
        if not lay.hidden_right:
            break
        offset = lay.offset + 1
    assert len(fixed) <= 2      # unscrolled where every other column fits (160: no ◀ ▶ at offset 0), then one
    assert len(starts) <= (2 if sort in ("sync", "mem") else 1), starts     # a column pinned from offset 1 on
    assert seen[-1][-1] == "mem" or sort == "mem"
    shown = {k for keys in seen for k in keys}
    assert shown == set(cols)


def test_narrow_and_fleet_views_keep_what_tells_rows_apart_first() -> None:
    """Where keeping every identity column fixed would leave the others fewer than SCROLL_MIN cells, the least
    telling scroll first: at 50 columns PID and COMMAND stay; the fleet view with pods keeps PID, POD and
    COMMAND at 80 columns (NAMESPACE, GPU and NODE scroll), without pods PID, NODE, GPU and COMMAND."""
    local = columns.visible(columns.SORT_KEYS, fleet=False)
    for offset in range(4):
        keys = [c.key for c, _ in layout(local, 50, "launches", offset)]
        assert keys[:2] == ["pid", "command"], keys
    pods = columns.visible(columns.SORT_KEYS, fleet=True, pods=True)
    nodes = columns.visible(columns.SORT_KEYS, fleet=True, pods=False)
    for offset in range(4):
        assert [c.key for c, _ in layout(pods, 80, "launches", offset)][:3] == ["pid", "pod", "command"]
        assert [c.key for c, _ in layout(nodes, 80, "launches", offset)][:4] == ["pid", "node", "gpu", "command"]
    lay = layout(pods, 80, "launches", 0)
    assert 80 - GUTTER - sum(w + 1 for _, w in lay.cols[:3]) + 1 >= SCROLL_MIN     # what PID POD COMMAND leave


def test_a_gpu_name_drops_its_vendor_words_before_it_is_cut() -> None:
    """Issue 35: at 80 columns ``NVIDIA H100 80GB HBM3`` read ``NVIDIA H100 8…``; the model's words go last."""
    from gputop.ui.widgets.gpu_panel import gpu_name

    assert gpu_name("NVIDIA H100 80GB HBM3", 14) == "H100 80GB HBM3"
    assert gpu_name("NVIDIA H100 80GB HBM3", 22) == "NVIDIA H100 80GB HBM3"
    assert gpu_name("NVIDIA GeForce RTX 4090", 14) == "RTX 4090"
    assert gpu_name("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 14) == "RTX PRO 6000 …"
    assert gpu_name("H200", 14) == "H200"


# -- warming up (the fleet view: a series younger than the window reads low; issue 35 item 2) -----------


def test_details_mark_the_last_interval_of_a_process_warming_up(scenario: list[Snapshot]) -> None:
    p = scenario[0].process(4242)
    assert p is not None and p.warming_up is None
    plain = {label: (now, total) for label, now, total in stats_rows(p)}
    young = {label: (now, total) for label, now, total in stats_rows(replace(p, warming_up=True))}
    assert young["launches"] == ("~" + plain["launches"][0], plain["launches"][1]) == ("~51.3k/s", "51.3k")
    assert young["memcpy H2D"][0] == "~1.65G/s" and young["captured"][0] == "~0"
    assert young["memsets"][0] == "~2.05k calls, ~1.00G bytes"
    assert young["NCCL"][0] == "~12/s, ~300M/s" and young["  allreduce"][0] == "~12 calls, ~300M bytes"
    assert young["sync blocked"][0] == "~37.5%, ~2.37k calls" and young["prefetch"][0] == "→GPU ~0 →CPU ~0"
    # averages, levels, latencies and GPU and CPU use do not read low; unknown stays N/A; totals unmarked
    for label in ("avg grid×block", "live alloc", "sync p50 / p99", "GPU mem / SM", "CPU / RSS", "UVM migrated",
                  "UVM thrashing"):
        assert young[label][0] == plain[label][0], label
    assert young["UVM thrashing"][0] == "N/A"
    assert [total for _now, total in young.values()] == [total for _now, total in plain.values()]
    assert not any("~" in now for now, _total in plain.values())
    # its column is two wider: the widest marked cell keeps a space before the total
    text = stats_content(replace(p, warming_up=True)).plain
    assert next(ln for ln in text.splitlines() if ln.startswith("memsets")) == (
        "memsets".ljust(15) + "~2.05k calls, ~1.00G bytes".ljust(27) + "2.05k calls, 1.00G bytes")
    assert title_content(replace(p, warming_up=True), p.pid, False).plain.endswith(
        "[running]  [warming up]  GPU 0  ◆ launch-bound")
    assert "[warming up]" not in title_content(replace(p, warming_up=True), p.pid, True).plain   # gone
    assert "[warming up]" not in title_content(replace(p, warming_up=False), p.pid, False).plain
    assert without_live_values(replace(p, warming_up=True)).warming_up is None


def test_compare_marks_the_rates_and_counts_of_a_side_warming_up() -> None:
    a = proc(1, launches=7730.0, warming_up=True, interval=Counts(launches=7730, sync_calls=40))
    b = proc(2, launches=20_000.0, warming_up=False, interval=Counts(launches=20_000, sync_calls=80))
    rows = {r.label: r for r in compare.rows(a, b)}
    assert (rows["launches/s"].a, rows["launches/s"].b, rows["launches/s"].ratio) == ("~7.73k", "20.0k", "~2.59×")
    assert (rows["sync calls"].a, rows["sync calls"].b, rows["sync calls"].ratio) == ("~40", "80", "~2.00×")
    assert (rows["H2D B/s"].a, rows["kernels run/s"].a) == ("~977K", "N/A")             # unknown: unmarked
    assert (rows["launches total"].a, rows["launches total"].ratio) == ("77.3k", "2.59×")   # totals: not low
    assert (rows["avg grid blocks"].a, rows["GPU mem"].a) == ("32", "N/A")
    settled = compare.rows(replace(a, warming_up=False), b)
    assert not any("~" in r.a + r.b + r.ratio for r in settled)


def test_a_rate_column_marks_a_known_rate_of_a_process_warming_up() -> None:
    launches = columns.BY_KEY["launches"]
    assert launches.render(proc(1, launches=7730.0, warming_up=True)) == "~7.73k"
    assert launches.render(proc(1, launches=7730.0, warming_up=False)) == "7.73k"
    assert launches.render(proc(1, launches=None, warming_up=True)) == "N/A"        # unknown: N/A as ever
