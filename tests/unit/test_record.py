"""gputop.record: the JSON Lines recorder, read_recording's errors and the replay feed."""

from __future__ import annotations

import gzip
import threading
import time
from pathlib import Path

import pytest

from gputop.feeds.replay import ReplayFeed
from gputop.model import ProcSample, Snapshot, SourceStatus, snapshot_to_json
from gputop.record import Recorder, RecordingError, read_recording


def snap(i: int, interval: float = 1.0) -> Snapshot:
    return Snapshot(time=1000.0 + i, interval_s=interval, host="h",
                    sources={"bpf": SourceStatus("ok", probes=3)},
                    processes=(ProcSample(pid=10 + i, comm="x"),))


def write(path: Path, n: int, interval: float = 1.0) -> Path:
    with Recorder(path) as rec:
        for i in range(n):
            rec.write(snap(i, interval))
    return path


def test_round_trip(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl", 3)
    got = list(read_recording(path))
    assert got == [snap(0), snap(1), snap(2)]
    assert path.read_text().count("\n") == 3


def test_each_line_is_flushed_at_once(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rec = Recorder(path)
    rec.write(snap(0))
    assert list(read_recording(path)) == [snap(0)]  # readable while the recorder is still open
    rec.write(snap(1))
    assert len(list(read_recording(path))) == 2
    rec.close()
    assert rec.count == 2


def test_gzip(tmp_path: Path) -> None:
    path = write(tmp_path / "r.jsonl.gz", 2)
    with gzip.open(path, "rt") as f:
        assert f.read().count("\n") == 2
    assert list(read_recording(path)) == [snap(0), snap(1)]


def test_recorder_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with Recorder(path) as rec:
        threads = [threading.Thread(target=lambda: [rec.write(snap(i)) for i in range(50)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(list(read_recording(path))) == 200


def test_unwritable_recording(tmp_path: Path) -> None:
    with pytest.raises(RecordingError) as e:
        Recorder(tmp_path / "missing-dir" / "r.jsonl")
    assert "cannot write recording" in e.value.message and e.value.hint


def test_write_after_close(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "r.jsonl")
    rec.close()
    with pytest.raises(RecordingError):
        rec.write(snap(0))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty recording"),
        ("\n\n", "empty recording"),
        ("hello\n", ":1: not JSON"),
        ("[1, 2]\n", ":1: expected a JSON object"),
        ('{"schema": "gputop/9", "time": 1, "interval_s": 1, "host": "h"}\n',
         "written by a newer gputop (schema 'gputop/9'; this gputop reads 'gputop/1')"),
        ('{"schema": "other/1", "time": 1}\n', "unsupported schema 'other/1'"),
        ('{"time": 1}\n', "unsupported schema None"),
        ('{"schema": "gputop/1", "time": 1}\n', ":1: snapshot lacks interval_s, host"),
        ('{"schema": "gputop/1", "time": "x", "interval_s": 1, "host": "h"}\n', ":1: malformed snapshot"),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(RecordingError) as e:
        list(read_recording(path))
    assert message in str(e.value)
    assert str(path) in str(e.value)
    assert e.value.hint


def test_bad_line_is_named_by_number(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(snapshot_to_json(snap(0)) + "\n" + snapshot_to_json(snap(1)) + "\n{oops\n"
                    + snapshot_to_json(snap(3)) + "\n")
    it = read_recording(path)
    assert next(it) == snap(0) and next(it) == snap(1)
    with pytest.raises(RecordingError, match=":3: not JSON"):
        next(it)


def test_last_line_cut_short_is_skipped_with_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(snapshot_to_json(snap(0)) + "\n" + snapshot_to_json(snap(1))[:40])
    notices: list[str] = []
    assert list(read_recording(path, notice=notices.append)) == [snap(0)]
    # its own line number, and the column where it stops (40 characters written)
    cut = (f"{path}:2: the last line is cut short at column 41 (nothing follows: the recorder stopped mid-write); "
           "replaying the 1 complete snapshot(s) before it")
    assert notices == [cut]
    for preload in (True, False):
        feed = ReplayFeed(path, preload=preload)
        assert (len(feed), feed.notices) == (1, [cut])
        feed.stop()
    path.write_text(snapshot_to_json(snap(0)) + "\n")
    assert ReplayFeed(path).notices == []


def test_a_file_of_one_cut_line_is_an_error_not_an_empty_recording(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(snapshot_to_json(snap(0))[:40])
    said = f"{path}:1: the only line is cut short at column 41 (the recorder stopped mid-write): no complete snapshot"
    for read in (lambda: list(read_recording(path)), lambda: list(read_recording(path, notice=print)),
                 lambda: ReplayFeed(path)):
        with pytest.raises(RecordingError) as e:
            read()
        assert e.value.message == said and e.value.hint


def test_a_compressed_recording_cut_short_replays_its_whole_lines(tmp_path: Path) -> None:
    """A recorder killed while writing a .gz leaves a stream without its end: the lines before the one
    it ends in replay, and the notice names that line (its number: the column is lost with the stream)."""
    import gzip

    whole = tmp_path / "whole.jsonl.gz"
    with open(whole, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as f:
        f.write("".join(snapshot_to_json(snap(i)) + "\n" for i in range(2)).encode())
        f.flush()                                   # what a recorder flushed before it was killed
        flushed = raw.tell()
        f.write(snapshot_to_json(snap(2)).encode() + b"\n")
    path = tmp_path / "r.jsonl.gz"
    data = whole.read_bytes()
    path.write_bytes(data[:flushed + 12])             # the rest of the third line and the stream's end gone
    notices: list[str] = []
    assert list(read_recording(path, notice=notices.append)) == [snap(0), snap(1)]
    cut = (f"{path}:3: the last line is cut short (the compressed recording ends inside it: the recorder "
           "stopped mid-write); replaying the 2 complete snapshot(s) before it")
    assert notices == [cut]
    for preload in (True, False):
        feed = ReplayFeed(path, preload=preload)
        assert (len(feed), feed.notices) == (2, [cut])
        feed.stop()
    path.write_bytes(data[:30])                       # inside the first line: nothing to replay
    with pytest.raises(RecordingError, match=":1: the compressed recording ends inside this line"):
        list(read_recording(path, notice=notices.append))
    with pytest.raises(RecordingError, match=":1: the compressed recording ends inside this line"):
        ReplayFeed(path)


def test_a_line_longer_than_the_limit_is_refused_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A multi-gigabyte file without newlines is not held in memory: reading stops at the limit."""
    from gputop.record import lines

    monkeypatch.setattr(lines, "MAX_LINE_BYTES", 4096)
    path = tmp_path / "r.jsonl"
    path.write_text(snapshot_to_json(snap(0)) + "\n" + "x" * 5000 + "\n")
    message = f"{path}:2: a line longer than 4096 bytes: not a recording"
    it = read_recording(path)
    assert next(it) == snap(0)
    with pytest.raises(RecordingError) as e:
        next(it)
    assert e.value.message == message
    with pytest.raises(RecordingError) as e:
        ReplayFeed(path)
    assert e.value.message == message


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="no such recording"):
        list(read_recording(tmp_path / "nope.jsonl"))
    with pytest.raises(RecordingError, match="is a directory"):
        list(read_recording(tmp_path))


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"\xff\xfe\x00\x81" * 10)
    with pytest.raises(RecordingError):
        list(read_recording(path))


# -- ReplayFeed ----------------------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.got: list[Snapshot] = []
        self.threads: set[str] = set()
        self.event = threading.Event()

    def __call__(self, s: Snapshot) -> None:
        self.got.append(s)
        self.threads.add(threading.current_thread().name)
        self.event.set()

    def wait_for(self, n: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(self.got) >= n, f"got {len(self.got)} of {n}"


def test_replay_feed_plays_in_order_on_its_thread(tmp_path: Path) -> None:
    feed = ReplayFeed(write(tmp_path / "r.jsonl", 5, interval=0.02))
    assert feed.kind == "replay" and len(feed) == 5
    sink = Sink()
    feed.start(sink)
    sink.wait_for(5)
    time.sleep(0.1)
    feed.stop()
    assert [s.time for s in sink.got] == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]  # stops at the end
    assert sink.threads == {"gputop-replay"}
    assert feed.at_end and feed.position == 5


def test_replay_paces_by_recorded_interval_and_speed(tmp_path: Path) -> None:
    feed = ReplayFeed(write(tmp_path / "r.jsonl", 4, interval=0.2), speed=2.0)
    sink = Sink()
    t0 = time.monotonic()
    feed.start(sink)
    sink.wait_for(4)
    elapsed = time.monotonic() - t0
    feed.stop()
    assert 0.25 <= elapsed < 1.0  # three gaps of 0.2 s / 2


def test_replay_set_interval_overrides_the_pace(tmp_path: Path) -> None:
    feed = ReplayFeed(write(tmp_path / "r.jsonl", 3, interval=60.0))
    feed.set_interval(0.02)
    sink = Sink()
    feed.start(sink)
    sink.wait_for(3, timeout=2)
    feed.stop()


def test_replay_pause_and_step(tmp_path: Path) -> None:
    feed = ReplayFeed(write(tmp_path / "r.jsonl", 10, interval=0.02))
    feed.set_paused(True)
    sink = Sink()
    feed.start(sink)
    time.sleep(0.1)
    assert sink.got == []
    assert feed.step(1).time == 1000.0 and feed.position == 1
    assert feed.step(3).time == 1003.0 and feed.position == 4
    assert feed.step(-2).time == 1001.0
    assert feed.step(-50).time == 1000.0
    assert feed.step(500).time == 1009.0
    assert sink.got == []  # steps are returned, not called back
    feed.step(-9)
    feed.set_paused(False)
    sink.wait_for(9)
    feed.stop()
    assert sink.got[0].time == 1001.0  # resumes after the snapshot shown last


def test_replay_loop_and_speed_limits(tmp_path: Path) -> None:
    feed = ReplayFeed(write(tmp_path / "r.jsonl", 3, interval=0.01), loop=True)
    feed.set_speed(1000)
    assert feed.speed == 64
    sink = Sink()
    feed.start(sink)
    sink.wait_for(7)
    feed.stop()
    assert [s.time for s in sink.got[:7]] == [1000.0, 1001.0, 1002.0, 1000.0, 1001.0, 1002.0, 1000.0]
    assert not feed.at_end


def test_replay_stop_is_prompt_and_idempotent(tmp_path: Path) -> None:
    feed = ReplayFeed(write(tmp_path / "r.jsonl", 3, interval=30.0))
    sink = Sink()
    feed.start(sink)
    sink.wait_for(1)
    t0 = time.monotonic()
    feed.stop()
    feed.stop()
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize(("content", "message"), [("nope\n", "not JSON"), ("", "empty recording"),
                                                 ("\n \n", "empty recording")])
def test_replay_feed_rejects_bad_file_up_front(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(content)
    with pytest.raises(RecordingError, match=message):
        ReplayFeed(path)
    with pytest.raises(RecordingError, match="no such recording"):
        ReplayFeed(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("preload", [True, False])
def test_replay_skips_a_bad_line_later_and_says_so(tmp_path: Path, preload: bool) -> None:
    path = tmp_path / "r.jsonl"
    good = [snapshot_to_json(snap(i, 0.01)) for i in range(4)]
    path.write_text("\n".join([good[0], good[1], "{broken", good[3]]) + "\n" + good[2][:30])
    feed = ReplayFeed(path, preload=preload)
    assert len(feed) == 4  # the cut last line is dropped, the broken one is only found when played
    sink = Sink()
    feed.start(sink)
    sink.wait_for(3)
    time.sleep(0.05)
    feed.stop()
    assert [s.time for s in sink.got] == [1000.0, 1001.0, 1003.0]
    assert feed.error is not None and ":3: not JSON" in feed.error


def test_replay_step_skips_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    good = [snapshot_to_json(snap(i)) for i in range(3)]
    path.write_text("\n".join([good[0], "{broken", good[2]]) + "\n")
    feed = ReplayFeed(path, preload=False)
    assert feed.step(1).time == 1000.0
    assert feed.step(1).time == 1002.0 and feed.position == 3
    assert feed.step(-1).time == 1000.0
    feed.stop()


def test_replay_gzip_and_large_file_mode(tmp_path: Path) -> None:
    feed = ReplayFeed(write(tmp_path / "r.jsonl.gz", 100, interval=0.001), preload=False, speed=64)
    sink = Sink()
    feed.start(sink)
    sink.wait_for(100)
    feed.stop()
    assert [s.time for s in sink.got] == [1000.0 + i for i in range(100)]
    assert len(feed._cache) <= 65  # bounded when not preloading
