"""The rates of the quantity catalogue (gputop/counters.py: ``Quantity.rate``) end to end: each field of
``Rates`` is one row's rate; the live feed and the fleet view derive them through ``counters.rates``; the
process table's rate columns, the history's series, the compare rows and the baseline's means come from the
same rows (a rate added to the catalogue appears in each, one left out of one of them is a failure here)."""

from __future__ import annotations

import dataclasses

import pytest

from gputop import counters
from gputop.counters import RATED, SERIES, SHOWS, Per
from gputop.feeds.prometheus import SERIES_QUERIES, series_points
from gputop.model import CallBytes, Counts, ProcSample, Rates
from gputop.view import baseline, columns, compare, fields, history


def _counts(**kw: object) -> Counts:
    base: dict[str, object] = {f.name: None for f in dataclasses.fields(Counts)}
    base.update(kw)
    return Counts(**base)  # type: ignore[arg-type]


def test_each_field_of_rates_is_the_rate_of_one_row() -> None:
    named = [q.rate.field for q in RATED if q.rate is not None]
    assert sorted(named) == sorted(f.name for f in dataclasses.fields(Rates))
    assert len(set(named)) == len(named)


def test_rates_of_an_interval_exactly() -> None:
    c = _counts(launches=500, graph_launches=50, graph_kernel_launches=None, sync_wait_s=0.25, uvm_cpu_faults=3,
                memcpy={"h2d": CallBytes(2, 1 << 20), "d2h": CallBytes(1, 4096), "d2d": CallBytes(0, 0),
                        "h2h": CallBytes(0, 0), "unknown": CallBytes(0, 0)})
    r = counters.rates(counters.counts_value(c), 2.0)          # a 0.5 s interval
    assert r.launches_per_s == 1000.0
    assert r.graph_launches_per_s == 100.0      # a process that only replays graphs is not idle (issue 35)
    assert r.graph_kernel_launches_per_s is None                 # unknown stays unknown, never 0
    assert r.sync_wait_pct == 50.0
    assert r.uvm_faults_per_s == 6.0
    assert r.memcpy_bytes_per_s == {"h2d": 2097152.0, "d2h": 8192.0, "d2d": 0.0, "h2h": 0.0, "unknown": 0.0}
    # blocked longer than the interval (a sync that began before it): at most 100 %
    assert counters.rates(counters.counts_value(_counts(sync_wait_s=0.75)), 2.0).sync_wait_pct == 100.0


def test_every_shown_rate_is_a_column_a_series_and_a_sort_order() -> None:
    for key, (q, shows) in SHOWS.items():
        col = columns.BY_KEY[key]
        assert (col.header, col.width, col.help) == (shows.header, shows.width, shows.help)
        assert key in history.PROC_SERIES and history.SMOOTHED[key] == key
        p = ProcSample(pid=1, comm="x", rates=_rates(7.0))
        value = fields.rate(p, key)
        assert value == (100.0 if q.rate is not None and q.rate.per is Per.PERCENT else 7.0)
        assert history.point_of(0.0, p).get(key) == value
        assert col.value(p) == value
    # each follows the column its row names, in the table's default order
    keys = [c.key for c in columns.COLUMNS]
    for key, (_, shows) in SHOWS.items():
        assert keys.index(key) > keys.index(shows.after)
    assert keys[:9] == ["pid", "user", "gpu", "command", "launches", "grid", "block", "graph_launches",
                        "graph_kernels"]


def _rates(v: float) -> Rates:
    kw: dict[str, object] = {}
    for q in RATED:
        assert q.rate is not None
        kw[q.rate.field] = (dict.fromkeys(q.directions, v) if q.directions
                            else min(100.0, v * 100) if q.rate.per is Per.PERCENT else v)
    return Rates(**kw)  # type: ignore[arg-type]


def test_compare_shows_every_rate_the_catalogue_compares() -> None:
    labels = [m.label for m in compare.METRICS]
    for _, shows in SHOWS.values():
        if shows.compare is not None:
            assert labels.count(shows.compare) == 1


def test_a_baseline_means_every_rate() -> None:
    samples = [ProcSample(pid=1, comm="x", rates=_rates(v)) for v in (2.0, 4.0)]
    mean = baseline.summarize(samples).rates
    assert mean is not None
    for q in RATED:
        assert q.rate is not None
        got = getattr(mean, q.rate.field)
        if q.directions:
            assert got == dict.fromkeys(q.directions, 3.0)
        elif q.rate.per is Per.PERCENT:
            assert got == 100.0
        else:
            assert got == 3.0, q.rate.field          # graph kernels/s was left out before the catalogue


@pytest.mark.parametrize("name", [name for name, _ in SERIES_QUERIES])
def test_the_fleet_charts_each_rate_under_the_name_the_history_keeps(name: str) -> None:
    q = counters.BY_FIELD[name]
    assert q.rate is not None
    metric = {"pid": "42", "instance": "n:9464", "__name__": "x"}
    samples = [{"metric": {**metric, **({"direction": s.direction} if s.direction else {})},
                "values": [[1.0, "5"]]} for s in q.rate.shows]
    got = series_points(samples, name)
    assert len(got) == 1
    (by_name,) = got.values()
    assert sorted(by_name) == sorted(s.key for s in q.rate.shows)
    assert set(by_name) <= set(SERIES)
    points = history.points_of_series(by_name)
    assert [pt.get(s.key) for pt in points for s in q.rate.shows] == [5.0] * len(q.rate.shows)
