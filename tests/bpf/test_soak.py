"""The churn soak (bench/soak.py) in two minutes: the real `gputop -b` traces 64 long-lived processes
while 300 short-lived ones come and go; counts exact, and gputop's resources back to the baseline."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gputop.sources.bpf import has_privileges

BENCH = Path(__file__).resolve().parent.parent.parent / "bench" / "soak.py"


def _soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gputop_bench_soak", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not has_privileges(), reason="BPF tests need root (or CAP_BPF + CAP_PERFMON)")
def test_two_minute_churn_soak(testbed, workloads) -> None:
    soak = _soak()
    args = soak.parser().parse_args(["--long", "64", "--short", "300", "--duration-s", "60", "--warmup-s", "15",
                                     "--settle-s", "10", "--sample-s", "10", "--tail-s", "10"])
    res = soak.run(args, log=print)
    print("short-lived not exact:", res.short_wrong)
    print("descriptors:", res.baseline and res.baseline.fd_kinds, res.after and res.after.fd_kinds)
    b, a = res.baseline, res.after
    assert b is not None and a is not None
    # every long-lived process exact: 100 launches every 5 s from the start to the end
    assert res.long_expected == args.burst * 20
    assert (res.long_exact, res.long_wrong, res.long_regressions) == (64, {}, 0)
    # every short-lived process shown once exited, with its 7 launches
    assert (res.short_started, res.short_exact, res.short_wrong) == (300, 300, {})
    # gputop after the churn: no descriptor or thread more, the maps hold exactly what they held
    assert a.fds <= b.fds and a.threads <= b.threads
    assert a.objects != b.objects or a.probe_fds == b.probe_fds
    # (the call sites of the long-lived processes fill as their launches are sampled: one stack and one kernel
    # each, so at most 64; those of the 300 short-lived ones went with them)
    assert {k: v for k, v in a.maps.items() if "(lru)" not in k and k not in soak.SAMPLED} == \
        {k: v for k, v in b.maps.items() if "(lru)" not in k and k not in soak.SAMPLED}
    assert all(b.maps[k] <= a.maps[k] <= 64 for k in soak.SAMPLED), a.maps
    assert b.maps["procs"] == 64 and b.maps["kernels"] == 64
    assert a.rss_bytes - b.rss_bytes <= soak.RSS_TOLERANCE_BYTES
    assert res.failures == []
