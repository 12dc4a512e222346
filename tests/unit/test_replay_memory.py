"""A recording of any size replays in bounded memory (issue 10): the peak RSS of a replay does not
grow with the file. Proven between two sizes, 16 MiB and 160 MiB, so that no test writes gigabytes:
a replay that held the file (or its snapshots) would grow by more than the 144 MiB between them."""

from __future__ import annotations

import dataclasses
import gzip
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from gputop.model import snapshot_from_json, snapshot_to_json

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "data" / "scenario.jsonl"
MIB = 1 << 20
#: what one snapshot line may add to the peak (the line, its text, its snapshot) plus the allocator's noise
ALLOWED_GROWTH_MIB = 16


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=1)
    return path.open("w", encoding="utf-8")


def _write(path: Path, mib: int) -> int:
    """``mib`` MiB of snapshots whose first process has a 1 MiB command line (a real one can be
    that long); cheap to parse, so that the test spends its time on size, not on JSON."""
    base = snapshot_from_json(SCENARIO.read_text().splitlines()[2])
    with _open(path) as f:
        for i in range(mib):
            p = dataclasses.replace(base.processes[0], cmdline=f"train.py --run {i} " + "x" * (MIB - 30_000))
            f.write(snapshot_to_json(dataclasses.replace(base, time=base.time + i, processes=(p,))) + "\n")
    return mib


def _peak_rss_mib(argv: list[str]) -> float:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, err
    return usage.ru_maxrss / 1024


_FEED = """
import sys
from gputop.feeds.replay import ReplayFeed
feed = ReplayFeed(sys.argv[1], preload=False if sys.argv[3] == "small" else None)
assert not feed._preload                    # above PRELOAD_BYTES (64 MiB) a snapshot is decoded at a time
n = 0
while not (feed.position == len(feed)):
    feed.step(1)
    n += 1
assert n == len(feed) == int(sys.argv[2]), (n, len(feed))
"""


@pytest.mark.parametrize(("mode", "suffix"), [("batch", ".jsonl"), ("dashboard", ".jsonl"), ("dashboard", ".jsonl.gz")])
def test_replay_memory_does_not_grow_with_the_file(tmp_path: Path, mode: str, suffix: str) -> None:
    peaks = []
    for mib in (16, 160):
        path = tmp_path / f"r{mib}{suffix}"
        n = _write(path, mib)
        if mode == "batch":
            argv = [sys.executable, "-m", "gputop.cli", "-b", "-f", "table", "--replay", str(path)]
        else:   # the dashboard's feed: offsets indexed, snapshots decoded on demand
            argv = [sys.executable, "-c", _FEED, str(path), str(n), "small" if mib == 16 else "large"]
        peaks.append(_peak_rss_mib(argv))
        path.unlink()
    small, large = peaks
    print(f"{mode} {suffix}: peak RSS {small:.1f} MiB at 16 MiB, {large:.1f} MiB at 160 MiB")
    assert large - small < ALLOWED_GROWTH_MIB, f"peak RSS {small:.1f} MiB at 16 MiB, {large:.1f} MiB at 160 MiB"
