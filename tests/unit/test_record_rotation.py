"""Recordings rotate in the process (issue 38, item 6): before a snapshot would take the file past
``--record-max-size`` it becomes generation 1 and a new file starts; no snapshot is lost, cut or doubled, and
each file replays on its own (every snapshot carries the totals since first seen)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputop.record import Recorder, read_recording

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "tests" / "data" / "scenario.jsonl"


def test_batch_mode_rotates_its_recording_and_keeps_the_generations_asked(tmp_path: Path) -> None:
    rec = tmp_path / "snapshots.jsonl"
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "-b", "-f", "json", "--replay", str(SCENARIO),
                          "--record", str(rec), "--record-max-size", "256K", "--record-keep", "3"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    source = SCENARIO.read_text().splitlines(keepends=True)
    files = [tmp_path / "snapshots.jsonl.3", tmp_path / "snapshots.jsonl.2", tmp_path / "snapshots.jsonl.1", rec]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files)     # .4 and older dropped
    kept = [line for f in files for line in f.read_text().splitlines(keepends=True)]
    assert all(f.stat().st_size <= 256 << 10 for f in files)
    # the newest snapshots, each once, in order, whole: what the replay wrote, less the generations dropped
    times = [s.time for s in read_recording(SCENARIO)]
    got = [s.time for f in files for s in read_recording(f)]
    assert got == times[-len(got):] and len(got) == len(kept) and len(got) < len(source)
    assert all(line.endswith("\n") for line in kept)


def test_the_recorder_rotates_between_snapshots_and_keeps_none_when_asked(tmp_path: Path) -> None:
    snaps = list(read_recording(SCENARIO))[:12]
    one = len((SCENARIO.read_text().splitlines()[0] + "\n").encode())
    with Recorder(tmp_path / "r.jsonl", max_bytes=3 * one + one // 2, keep=0) as r:
        for s in snaps:
            r.write(s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]
    assert [s.time for s in read_recording(tmp_path / "r.jsonl")] == [s.time for s in snaps][-len(
        list(read_recording(tmp_path / "r.jsonl"))):]
    assert r.rotations >= 3


def test_a_compressed_recording_rotates_as_name_N_gz(tmp_path: Path) -> None:
    snaps = list(read_recording(SCENARIO))[:30]
    with Recorder(tmp_path / "r.jsonl.gz", max_bytes=128 << 10, keep=8) as r:
        for s in snaps:
            r.write(s)
    assert r.rotations >= 1 and (tmp_path / "r.jsonl.1.gz").exists()
    gens = sorted(tmp_path.glob("r.jsonl.*.gz"), key=lambda p: -int(p.name.split(".")[2]))
    got = [s.time for f in [*gens, tmp_path / "r.jsonl.gz"] for s in read_recording(f)]
    assert got == [s.time for s in snaps]


def test_a_recording_moved_away_meanwhile_starts_anew(tmp_path: Path) -> None:
    snaps = list(read_recording(SCENARIO))[:6]
    one = len((SCENARIO.read_text().splitlines()[0] + "\n").encode())
    with Recorder(tmp_path / "r.jsonl", max_bytes=2 * one + one // 2, keep=2) as r:
        r.write(snaps[0])
        (tmp_path / "r.jsonl").rename(tmp_path / "elsewhere.jsonl")     # logrotate, or a person
        for s in snaps[1:]:
            r.write(s)
    # the first went with the file moved away; from the next on, every snapshot once, in order
    moved = [s.time for s in read_recording(tmp_path / "elsewhere.jsonl")]
    here = [s.time for f in ("r.jsonl.2", "r.jsonl.1", "r.jsonl") if (tmp_path / f).exists()
            for s in read_recording(tmp_path / f)]
    assert moved[0] == snaps[0].time and moved + here == [s.time for s in snaps]


@pytest.mark.parametrize(("args", "message"), [
    (["--record-max-size", "1M"], "--record-max-size and --record-keep apply to --record"),
    (["--record", "x.jsonl", "--record-max-size", "10"], "must be at least 64K"),
    (["--record", "x.jsonl", "--record-max-size", "12Q"], "expected a size in bytes"),
    (["--record", "x.jsonl", "--record-keep", "-1"], "expected a whole number from 0 to 1000"),
    (["--record", "x.jsonl", "--record-keep", "2"], "--record-keep applies to a recording rotated"),
])
def test_rotation_options_are_checked(args: list[str], message: str) -> None:
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "-b", "-n", "1", "--no-bpf", "--no-nvml", *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 2 and message in res.stderr, res.stderr
