"""Sync latency buckets (gputop/latency.py) and the BPF side's (bpf/sync.bpf.h) held to each other, and the
figures read from them."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gputop import latency
from gputop.sources.bpf.common import abi

BPF = Path(__file__).resolve().parents[2] / "bpf"


def _function(path: Path, name: str) -> str:
    """The text of ``static __always_inline ... name(...) { ... }`` in a BPF header (braces balanced)."""
    text = path.read_text()
    start = re.search(rf"^static __always_inline \w+ {name}\(", text, re.M)
    assert start is not None, name
    depth, i = 0, text.index("{", start.start())
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            return text[start.start():i]


def _durations() -> list[int]:
    rng = random.Random(36)
    edges = [b for i in range(latency.BUCKETS - 1) for b in latency.bounds_ns(i) if b is not None]
    out = {0, 1, 7, 8, 1023, 1024, 1025, (1 << 41) - 1, 1 << 41, 1 << 63, (1 << 64) - 1}
    out |= {e + d for e in edges for d in (-1, 0, 1) if e + d >= 0}
    out |= {rng.randrange(1 << rng.randrange(1, 64)) for _ in range(5000)}
    return sorted(out)


def test_the_bpf_side_buckets_every_duration_as_python_does(tmp_path: Path) -> None:
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc is not None
    flags = [f for f in abi.cflags() if f.startswith("-D")]
    src = tmp_path / "slat.c"
    src.write_text("#include <stdio.h>\n#include <stdint.h>\n#define __always_inline inline\n"
                   "typedef uint64_t u64; typedef uint32_t u32;\n"
                   + _function(BPF / "bits.bpf.h", "log2_u64") + "\n" + _function(BPF / "sync.bpf.h", "slat_bucket")
                   + "\nint main(void) { unsigned long long v; while (scanf(\"%llu\", &v) == 1) "
                     "printf(\"%llu\\n\", (unsigned long long)slat_bucket(v)); return 0; }\n")
    exe = tmp_path / "slat"
    subprocess.run([cc, "-O1", "-o", str(exe), str(src), *flags], check=True)
    ds = _durations()
    out = subprocess.run([str(exe)], input="\n".join(map(str, ds)), capture_output=True, text=True, check=True)
    assert [int(x) for x in out.stdout.split()] == [latency.bucket_of(d) for d in ds]


def test_buckets_tile_every_duration_each_at_most_an_eighth_wide() -> None:
    assert latency.BUCKETS == 250 == abi.NSLAT
    for i in range(latency.BUCKETS - 1):
        low, high = latency.bounds_ns(i)
        assert high is not None and latency.bounds_ns(i + 1)[0] == high
        assert latency.bucket_of(low) == i == latency.bucket_of(high - 1)
        if i:
            assert (high - low) * 8 <= low
    assert latency.bounds_ns(latency.BUCKETS - 1) == (1 << 41, None)
    # each exported bound is a bucket's low bound: the exported counts are exact
    lows = {latency.bounds_ns(i)[0] for i in range(latency.BUCKETS)}
    assert set(latency.EXPORT_LE_NS) <= lows and latency.EXPORT_LE_NS[0] == 1024 and len(latency.EXPORT_LE_NS) == 14


def _hist(*durations: tuple[int, int]) -> tuple[int, ...]:
    b = [0] * latency.BUCKETS
    for ns, n in durations:
        b[latency.bucket_of(ns)] += n
    return tuple(b)


def test_percentiles_of_known_durations_within_their_bucket() -> None:
    """90 % of 1 ms, 9 % of 10 ms, 1 % of 100 ms: p50 and p90 1 ms, p99 10 ms, the maximum 100 ms, each within
    6.25 % (its bucket's midpoint)."""
    lat = latency.latency(_hist((1_000_000, 900), (10_000_000, 90), (100_000_000, 10)))
    assert lat.calls == 1000
    for got, true in ((lat.p50_s, 1e-3), (lat.p90_s, 1e-3), (lat.p99_s, 1e-2), (lat.max_s, 0.1)):
        assert got is not None and abs(got - true) <= 0.0625 * true
    # nearest rank: the 901st of 1000 is the first 10 ms one
    assert latency.percentile(_hist((1_000_000, 900), (10_000_000, 100)), 0.901) == latency.value_s(
        latency.bucket_of(10_000_000))
    assert latency.latency(()) == latency.Latency(0)


def test_the_interval_is_what_was_added_and_unknown_when_a_count_went_down() -> None:
    before = {"stream": (10, _hist((2_000_000, 5)))}
    now = {"stream": (30, _hist((2_000_000, 5), (50_000, 3))), "event": (7, _hist((3_000, 1)))}
    s = latency.sync_latency(now, before)
    assert s is not None
    assert s.interval["stream"].calls == 3 and s.interval["stream"].max_s == pytest.approx(
        latency.value_s(latency.bucket_of(50_000)))
    assert s.interval["event"].calls == 1 and s.interval["all"].calls == 4
    assert s.total["stream"].calls == 8 and s.total["all"].calls == 9
    assert s.histograms["stream"].calls == 8 and s.histograms["stream"].sum_s == 30e-9
    gone = latency.sync_latency({"stream": (1, _hist((2_000_000, 1)))}, before)
    assert gone is not None and "stream" not in gone.interval and "all" not in gone.interval
    assert latency.sync_latency({}, before) is None
