"""The replay feed: a recording (``gputop.record``) played at its recorded pace (times ``speed``),
with pause, step and speed controls for the dashboard."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gputop.feeds.base import Feed, FeedKind, SnapshotCallback
from gputop.model import Snapshot
from gputop.record import PRELOAD_BYTES, LineIndex, RecordingError, cut_notice, skip_notice

#: a larger recording keeps at most this many decoded snapshots, of at most this many bytes of JSON
CACHE_SNAPSHOTS = 64
CACHE_BYTES = 8 << 20


#: bad lines before the first good one said one by one when a replay starts (then counted)
_SAID_AT_START = 3
#: the replay thread waits for the next snapshot in steps of at most this (a recording's interval
#: can be years: a wait beyond threading.TIMEOUT_MAX raises)
_LONGEST_WAIT_S = 3600.0


class ReplayFeed(Feed):
    """A ``Feed`` over a recording: snapshots at the recorded pace divided by ``speed``.

    Building it indexes the file and decodes its first good snapshot (``RecordingError`` for a
    file that is not a recording: the first bad line's error when it has no good one), so it starts
    at once whatever the file's size; bad lines before it are said in ``notices``. A bad line found
    later (by playing, stepping either way or preloading) is skipped and described in ``error``, as
    are values read as unknown or cut (``gputop.model.snapshot_from_dict``). At the end it stays on
    the last snapshot (or loops). Files up to ``PRELOAD_BYTES`` are decoded in the background after
    ``start``.
    """

    kind = FeedKind.REPLAY

    def __init__(
        self, path: Path | str, *, speed: float = 1.0, loop: bool = False, preload: bool | None = None
    ) -> None:
        self.path = Path(path)
        self._index = LineIndex(self.path)
        if not len(self._index):
            self._index.close()
            raise RecordingError(f"{self.path}: empty recording (no snapshots)")
        #: what the dashboard says once at start (a last line cut short, bad lines before the first good one)
        self.notices: list[str] = []
        if self._index.cut_line is not None:
            self.notices.append(cut_notice(self.path, self._index.cut_line, len(self._index), self._index.cut_raw))
        self._cache: dict[int, Snapshot] = {}
        self._cache_sizes: dict[int, int] = {}
        self._cache_bytes = 0
        self._preload = self._index.size <= PRELOAD_BYTES if preload is None else preload
        #: the last problem met while playing (a bad line skipped, values read as unknown), for the UI
        self.error: str | None = None
        try:
            self._first_good()
        except RecordingError:
            self._index.close()
            raise
        self.speed = speed
        self.loop = loop
        self._interval_override: float | None = None
        self._pos = 0  # snapshots shown so far (index of the next one)
        self._paused = False
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loader: threading.Thread | None = None
        self._callback: SnapshotCallback | None = None
        self.emitted = 0

    def _load(self, i: int) -> Snapshot:
        snap = self._cache.get(i)
        if snap is None:
            snap, size, problems = self._index.snapshot(i)
            if problems is not None:
                self.error = problems
            self._cache[i] = snap
            self._cache_sizes[i] = size
            self._cache_bytes += size
            # a large recording keeps the last few snapshots only, by count and by size (a line can
            # hold a megabyte command line)
            while not self._preload and len(self._cache) > 1 and (
                    len(self._cache) > CACHE_SNAPSHOTS or self._cache_bytes > CACHE_BYTES):
                oldest = next(iter(self._cache))
                del self._cache[oldest]
                self._cache_bytes -= self._cache_sizes.pop(oldest)
        return snap

    def _get(self, i: int, direction: int = 1) -> tuple[int, Snapshot] | None:
        """The first decodable snapshot from ``i`` in ``direction``; bad lines are skipped and noted."""
        while 0 <= i < len(self._index):
            try:
                return i, self._load(i)
            except RecordingError as e:
                self.error = skip_notice(e)
                i += direction
        return None

    def _first_good(self) -> None:
        """Decode the first good snapshot; say the bad lines before it in ``notices`` (the first
        few); none good: the first one's error."""
        first: RecordingError | None = None
        for i in range(len(self._index)):
            try:
                self._load(i)
            except RecordingError as e:
                first = first or e
                if i < _SAID_AT_START:
                    self.notices.append(skip_notice(e))
                continue
            if i > _SAID_AT_START:
                self.notices.append(f"{self.path}: {i - _SAID_AT_START} more bad line(s) skipped before line "
                                    f"{self._index.linenos[i]}")
            return
        assert first is not None
        raise first

    def _preload_all(self) -> None:
        for i in range(len(self._index)):
            if self._stop.is_set():
                return
            if i not in self._cache:
                self._get(i)

    # -- Feed ------------------------------------------------------------------------------
    def start(self, on_snapshot: SnapshotCallback) -> None:
        if self._thread is not None:
            return
        self._callback = on_snapshot
        self._thread = threading.Thread(target=self._run, name="gputop-replay", daemon=True)
        self._thread.start()
        if self._preload:
            self._loader = threading.Thread(target=self._preload_all, name="gputop-replay-load", daemon=True)
            self._loader.start()

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for t in (self._thread, self._loader):
            if t is not None and t is not threading.current_thread():
                t.join(timeout=2)
        self._index.close()

    def set_interval(self, interval_s: float) -> None:
        """Play one snapshot every ``interval_s`` / speed seconds instead of the recorded pace."""
        with self._wake:
            self._interval_override = interval_s
            self._wake.notify_all()

    def set_paused(self, paused: bool) -> None:
        with self._wake:
            self._paused = paused
            self._wake.notify_all()

    # -- replay controls -------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._index)

    def progress(self) -> tuple[int, int]:
        return self.position, len(self)

    @property
    def position(self) -> int:
        """1-based index of the snapshot shown last (0 before the first)."""
        with self._wake:
            return self._pos

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def at_end(self) -> bool:
        with self._wake:
            return self._pos >= len(self._index) and not self.loop

    def set_speed(self, speed: float) -> None:
        with self._wake:
            self.speed = max(1 / 64, min(64.0, speed))
            self._wake.notify_all()

    def step(self, n: int) -> Snapshot:
        """Move ``n`` snapshots forward (or back) from the one shown last and return it.

        Meant for a paused replay; the caller shows the snapshot (``on_snapshot`` is not called).
        Raises ``RecordingError`` when no decodable snapshot is left in that direction.
        """
        with self._wake:
            target = max(1, min(len(self._index), self._pos + n))
            found = self._get(target - 1, -1 if n < 0 else 1) or self._get(target - 1, 1 if n < 0 else -1)
            if found is None:
                raise RecordingError(f"{self.path}: no readable snapshot left")
            self._pos = found[0] + 1
            self._wake.notify_all()
            return found[1]

    # -- thread ----------------------------------------------------------------------------
    def playback_speed(self, interval_s: float) -> float:
        """How fast the recording really plays: recorded seconds per second of playback."""
        base = self._interval_override if self._interval_override is not None else interval_s
        return interval_s * self.speed / max(0.01, base)

    def _delay(self, snap: Snapshot) -> float:
        base = self._interval_override if self._interval_override is not None else snap.interval_s
        return max(0.01, base) / self.speed

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                while not self._stop.is_set() and (self._paused or (self._pos >= len(self._index) and not self.loop)):
                    self._wake.wait()
                if self._stop.is_set():
                    return
                if self._pos >= len(self._index):
                    self._pos = 0
                found = self._get(self._pos)
                if found is None:  # only bad lines left before the end
                    self._pos = len(self._index)
                    continue
                self._pos = found[0] + 1
                snap = found[1]
            assert self._callback is not None
            emitted_at = time.monotonic()
            self._callback(snap)
            self.emitted += 1
            with self._wake:
                while not self._stop.is_set():
                    remaining = emitted_at + self._delay(snap) - time.monotonic()
                    if remaining <= 0:
                        break
                    self._wake.wait(min(remaining, _LONGEST_WAIT_S))
