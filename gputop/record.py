"""Record snapshots as JSON Lines and replay them.

- ``Recorder``: one snapshot per line (schema ``gputop/1``), flushed after each line, so a
  recording cut short by a crash or ^C is still readable up to its last complete line.
- ``read_recording(path)``: iterate the snapshots of a file (batch replay, baselines).
- ``ReplayFeed(path)``: a ``gputop.feed.Feed`` that plays a recording at its recorded pace
  (times ``speed``), with pause, step and speed controls for the dashboard.

Files ending in ``.gz`` are read and written compressed. A recording may come from anyone: every
field of every line is checked by the model (``gputop.model.snapshot_from_dict``). A bad line (not
JSON, nested too deeply, NaN, a field of the wrong type or out of range) is skipped with a notice
that names the file and the line, as a last line cut short (the recorder was killed mid-write)
is; a file without a good line raises ``RecordingError`` with the first bad line's message and a
hint. Memory stays bounded whatever the file's size: lines are streamed (batch) or indexed by
offset (dashboard), and a line longer than ``MAX_LINE_BYTES`` is refused rather than read.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

from gputop import safefiles
from gputop.errors import GputopError
from gputop.feed import SnapshotCallback
from gputop.model import SCHEMA, Snapshot, SnapshotError, snapshot_from_dict, snapshot_to_json

_REQUIRED = ("time", "interval_s", "host")

#: a snapshot line is kilobytes to a few megabytes; a longer "line" is some other file, and is
#: refused rather than held in memory
MAX_LINE_BYTES = 64 << 20


class RecordingError(GputopError):
    """A recording cannot be written or read. ``hint`` says what to do about it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint or "record one with: gputop --record FILE (JSON Lines, schema gputop/1)")


#: how every line of a recording starts (``snapshot_to_json``)
_LINE_START = b'{"schema":"gputop/'


def _last_line_start(fd: int, size: int) -> int | None:
    """The offset where the file's last line starts (None: further back than MAX_LINE_BYTES)."""
    end = size
    while end > 0 and size - end < MAX_LINE_BYTES:
        begin = max(0, end - (1 << 16))
        newline = os.pread(fd, end - begin, begin).rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        end = begin
    return 0 if end == 0 else None


def _end_cut_line(fd: int) -> None:
    """Make what is appended start a line of its own: a last line cut short by a recorder killed
    mid-write (a snapshot's start, no newline) is dropped; any other unterminated line is ended."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = _last_line_start(fd, size)
    if start is not None and os.pread(fd, len(_LINE_START), start) == _LINE_START:
        os.ftruncate(fd, start)
    else:
        os.write(fd, b"\n")


def _open_append(path: Path) -> tuple[IO[str], IO[bytes] | None]:
    """The text stream to append to ``path`` through ``safefiles.open_append``, and for ``.gz`` the
    file under the gzip stream (a new gzip member; closing the gzip stream does not close it)."""
    fd = safefiles.open_append(path, readable=True)      # readable: to find a cut last line
    try:
        if path.suffix != ".gz":
            _end_cut_line(fd)
        raw = os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise
    if path.suffix != ".gz":
        return io.TextIOWrapper(raw, encoding="utf-8"), None
    try:
        return io.TextIOWrapper(gzip.GzipFile(filename=str(path), mode="ab", fileobj=raw), encoding="utf-8"), raw
    except BaseException:
        raw.close()
        raise


class Recorder:
    """Append every snapshot to ``path`` as one JSON line, flushed at once. Thread-safe.

    The file is appended to (a recorder started again, by a systemd unit for one, adds to it) and
    created mode 0600, never through a symbolic link; as root only a regular file of root's with a
    single link is written (``safefiles.open_append``): never another user's file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._raw: IO[bytes] | None = None
        try:
            self._file: IO[str] | None
            self._file, self._raw = _open_append(self.path)
        except safefiles.UnsafePathError as e:
            raise RecordingError(
                f"cannot write recording {self.path}: {e}",
                "gputop writes a recording only into a regular file of its own, never through a link: "
                "choose another path (ls -l shows what is there)",
            ) from e
        except OSError as e:
            raise RecordingError(
                f"cannot write recording {self.path}: {e.strerror or e}",
                "choose a writable path for --record",
            ) from e
        self.count = 0

    def write(self, snap: Snapshot) -> None:
        """Append ``snap``; a snapshot that covers no time (the collector's "starting" one) is
        not a frame and is not written."""
        if snap.interval_s <= 0:
            return
        line = snapshot_to_json(snap) + "\n"
        with self._lock:
            if self._file is None:
                raise RecordingError(f"recording {self.path} is closed")
            try:
                self._file.write(line)
                self._file.flush()
            except OSError as e:
                raise RecordingError(
                    f"cannot write recording {self.path}: {e.strerror or e}",
                    "check free space on that file system",
                ) from e
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                finally:
                    self._file = None
                    if self._raw is not None:
                        self._raw.close()
                        self._raw = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Constant(Exception):
    """NaN, Infinity or -Infinity in a line: Python's json reads them, JSON has no such numbers."""


def _no_constant(name: str) -> Any:
    raise _Constant(name)


#: json.loads, refusing NaN and the infinities (a number too large, 1e999, reads as inf: the model
#: refuses that where it matters)
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _decode(path: Path, lineno: int, line: str) -> dict[str, Any]:
    where = f"{path}:{lineno}"
    hint = "a recording holds one JSON snapshot per line (gputop --record FILE)"
    if line.startswith("\ufeff"):
        raise RecordingError(f"{where}: not JSON (a byte order mark at column 1)", hint)
    try:
        d = _DECODER.decode(line)
    except json.JSONDecodeError as e:
        # some of json's messages end in "at" ("Invalid control character at"): said once
        raise RecordingError(f"{where}: not JSON ({e.msg.removesuffix(' at')} at column {e.colno})", hint) from e
    except _Constant as e:
        raise RecordingError(f"{where}: not JSON ({e} is not a JSON number)", hint) from None
    except RecursionError:          # arrays or objects nested deeper than Python's recursion limit
        raise RecordingError(f"{where}: not JSON (nested too deeply)", hint) from None
    except ValueError as e:         # an integer of more digits than Python converts
        what = (f"a number of more than {sys.get_int_max_str_digits()} digits" if "digits" in str(e)
                else type(e).__name__)
        raise RecordingError(f"{where}: not JSON ({what})", hint) from None
    if not isinstance(d, dict):
        raise RecordingError(f"{where}: expected a JSON object, got {type(d).__name__}")
    schema = d.get("schema")
    newer = re.fullmatch(r"gputop/(\d{1,9})", schema) if isinstance(schema, str) else None
    if newer is not None and int(newer.group(1)) > int(SCHEMA.split("/")[1]):
        raise RecordingError(
            f"{where}: written by a newer gputop (schema {schema!a}; this gputop reads {SCHEMA!r})",
            "replay it with the gputop version that recorded it, or upgrade gputop",
        )
    if schema != SCHEMA:
        shown = (ascii(schema[:40]) if isinstance(schema, str) else "None" if schema is None
                 else f"of JSON type {type(schema).__name__}")
        raise RecordingError(
            f"{where}: unsupported schema {shown} (this gputop reads {SCHEMA!r})",
            "record it again with this version of gputop" if schema else None,
        )
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise RecordingError(f"{where}: snapshot lacks {', '.join(missing)}")
    return d


def _parse(path: Path, lineno: int, d: dict[str, Any], problems: list[str] | None = None) -> Snapshot:
    """The snapshot of a decoded line, every field checked by the model (``snapshot_from_dict``):
    values read as unknown or cut are described in ``problems``."""
    try:
        return snapshot_from_dict(d, problems)
    except SnapshotError as e:
        raise RecordingError(f"{path}:{lineno}: malformed snapshot ({e})") from None
    except (KeyError, TypeError, ValueError) as e:
        raise RecordingError(f"{path}:{lineno}: malformed snapshot ({type(e).__name__}: {e})") from e


def _snapshot(path: Path, lineno: int, raw: bytes) -> tuple[Snapshot, str | None]:
    """The snapshot of one line, and the notice of what was read as unknown or cut in it (None:
    nothing); ``RecordingError`` for a line that holds no snapshot."""
    problems: list[str] = []
    snap = _parse(path, lineno, _decode(path, lineno, _text(path, lineno, raw)), problems)
    return snap, _problems_notice(path, lineno, problems) if problems else None


def _problems_notice(path: Path, lineno: int, problems: list[str]) -> str:
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return f"{path}:{lineno}: {'; '.join(problems[:3])}{more}"


def skip_notice(error: RecordingError) -> str:
    """What is said of a line skipped because of ``error`` (batch mode's stderr, the dashboard)."""
    return f"skipped a bad line ({error.message})"


def _open_binary(path: Path) -> IO[bytes]:
    try:
        if path.suffix == ".gz":
            return cast("IO[bytes]", gzip.open(path, "rb"))
        return path.open("rb")
    except FileNotFoundError as e:
        raise RecordingError(f"no such recording: {path}", "check the path given to --replay/--baseline") from e
    except IsADirectoryError as e:
        raise RecordingError(f"{path} is a directory, not a recording") from e
    except PermissionError as e:
        raise RecordingError(f"cannot read recording {path}: permission denied",
                             "make it readable to this user (ls -l shows its owner and mode)") from e
    except OSError as e:
        raise RecordingError(f"cannot read recording {path}: {e.strerror or e}") from e


class _CutStream(RecordingError):
    """A compressed recording that ends inside a line (the recorder was stopped mid-write): the
    lines before it are whole; ``lineno`` is the line the stream ends in."""

    def __init__(self, path: Path, lineno: int) -> None:
        super().__init__(f"{path}:{lineno}: the compressed recording ends inside this line, its first "
                         "(the recorder stopped mid-write): no complete snapshot")
        self.lineno = lineno


def _raw_lines(path: Path, f: IO[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(line number, offset, bytes with the newline) of every line, blank ones too; one line in
    memory at a time, never more than ``MAX_LINE_BYTES``. A compressed file cut short raises
    ``_CutStream`` after its whole lines."""
    offset = 0
    lineno = 0
    while True:
        try:
            raw = f.readline(MAX_LINE_BYTES + 1)
        except EOFError as e:       # gzip: the stream ends before its end marker, inside a line
            raise _CutStream(path, lineno + 1) from e
        except OSError as e:       # gzip.BadGzipFile is an OSError
            raise RecordingError(f"{path}: not a readable recording ({e})") from e
        if not raw:
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            limit = f"{MAX_LINE_BYTES >> 20} MiB" if MAX_LINE_BYTES >= 1 << 20 else f"{MAX_LINE_BYTES} bytes"
            raise RecordingError(f"{path}:{lineno}: a line longer than {limit}: not a recording")
        yield lineno, offset, raw
        offset += len(raw)


def _text(path: Path, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordingError(f"{path}:{lineno}: not UTF-8 text: not a recording") from e


def _whole_lines(path: Path, f: IO[bytes]) -> Iterator[tuple[int, int, bytes | None]]:
    """``_raw_lines``, and then (line number, offset, None) where a compressed stream ends inside a line."""
    lines = _raw_lines(path, f)
    while True:
        try:
            item = next(lines)
        except StopIteration:
            return
        except _CutStream as e:
            yield e.lineno, 0, None
            return
        yield item


def _cut_notice(path: Path, lineno: int, kept: int, raw: bytes | None) -> str:
    """What is said of the last line ``lineno``, cut short: where it stops (the column after its
    last character, counted as an editor does: ``raw``'s characters), or None for a compressed
    stream that ends inside the line (its start is lost with the stream's end)."""
    if raw is None:
        where = "is cut short (the compressed recording ends inside it"
    else:
        where = f"is cut short at column {len(raw.decode('utf-8', 'replace')) + 1} (nothing follows"
    return (f"{path}:{lineno}: the last line {where}: the recorder stopped mid-write); "
            f"replaying the {kept} complete snapshot(s) before it")


def _looks_cut(raw: bytes) -> bool:
    """Whether a line without its newline is the start of a snapshot rather than something else: a JSON
    object's start, UTF-8 text up to a character the cut may have split."""
    if not raw.lstrip().startswith(b"{"):
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(raw) - 3 and e.reason == "unexpected end of data"
    return True


def _cut_error(path: Path, lineno: int, raw: bytes) -> RecordingError:
    """The one line of a recording is cut short: not a recording yet."""
    col = len(raw.decode("utf-8", "replace")) + 1
    return RecordingError(f"{path}:{lineno}: the only line is cut short at column {col} (the recorder stopped "
                          "mid-write): no complete snapshot",
                          "a recording holds one JSON snapshot per line (gputop --record FILE)")


#: notices of bad lines before the first good one that are held (said once a good one comes; a
#: recording of bad lines only is the first one's error instead); more are counted
_HELD_NOTICES = 20


def read_recording(path: Path | str, notice: Callable[[str], None] | None = None) -> Iterator[Snapshot]:
    """Yield the snapshots of a recording in order, reading one line at a time.

    With ``notice``, a bad line (not JSON, or not a snapshot of schema gputop/1: see
    ``gputop.model.snapshot_from_dict``) is skipped and said to ``notice``, as are the values of a
    line read as unknown or cut; without, a bad line raises ``RecordingError``. A last line cut
    short (no newline, not valid JSON: the recorder was killed mid-write) is skipped (and said to
    ``notice``). A recording without a good line raises: the first bad line's error, or "empty".
    """
    path = Path(path)
    seen = 0
    first_error: RecordingError | None = None
    held: list[str] = []
    held_more = 0
    with _open_binary(path) as f:
        for lineno, _, raw in _whole_lines(path, f):
            if raw is None:         # a compressed stream ends inside line ``lineno``
                if not seen:
                    raise first_error or _CutStream(path, lineno)
                if notice is not None:
                    notice(_cut_notice(path, lineno, seen, None))
                break
            if not raw.strip():
                continue
            # only the last line can lack its newline; cut short after complete snapshots, it is
            # skipped (alone, it is an error below: a file of one broken line is not a recording)
            if not raw.endswith(b"\n") and not _is_json(raw):
                if seen:
                    if notice is not None:
                        notice(_cut_notice(path, lineno, seen, raw))
                    break
                if first_error is None and _looks_cut(raw):
                    raise _cut_error(path, lineno, raw)
            try:
                snap, problems = _snapshot(path, lineno, raw)
            except RecordingError as e:
                if notice is None:
                    raise
                if seen:
                    notice(skip_notice(e))
                    continue
                first_error = first_error or e
                if len(held) < _HELD_NOTICES:
                    held.append(skip_notice(e))
                else:
                    held_more += 1
                continue
            if notice is not None:
                if not seen:
                    for message in held:
                        notice(message)
                    if held_more:
                        notice(f"{path}: {held_more} more bad line(s) skipped before line {lineno}")
                if problems is not None:
                    notice(problems)
            seen += 1
            yield snap
    if seen == 0:
        if first_error is not None:
            raise first_error
        raise RecordingError(f"{path}: empty recording (no snapshots)")


#: recordings up to this size are decoded completely in the background once a replay starts
#: (then playing costs no parsing); larger ones are decoded a snapshot at a time as they play
PRELOAD_BYTES = 64 << 20
#: a larger recording keeps at most this many decoded snapshots, of at most this many bytes of JSON
CACHE_SNAPSHOTS = 64
CACHE_BYTES = 8 << 20


class _LineIndex:
    """Where each snapshot line of a recording starts, so any one can be decoded on demand: two
    integers per line in memory, whatever the file's size. A compressed recording is kept
    decompressed in memory only up to ``PRELOAD_BYTES``; a larger one is read through gzip's
    seeking (forward is cheap, a step back decompresses again from the start)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = _open_binary(path)
        self.offsets = array("q")
        self.linenos = array("q")
        #: the line skipped because the recorder was stopped in the middle of it, and what of it was
        #: written (None: a compressed stream that ends inside it)
        self.cut_line: int | None = None
        self.cut_raw: bytes | None = None
        self.size = 0
        try:
            last = b""
            for lineno, offset, raw in _whole_lines(path, self._file):
                if raw is None:
                    if not len(self.offsets):
                        raise _CutStream(path, lineno)
                    self.cut_line = lineno
                    break
                if raw.strip():
                    self.offsets.append(offset)
                    self.linenos.append(lineno)
                    last = raw
                self.size = offset + len(raw)
            if self.cut_line is None and not last.endswith(b"\n") and not _is_json(last):
                if len(self.offsets) == 1 and _looks_cut(last):
                    raise _cut_error(path, self.linenos[0], last)
                if len(self.offsets) > 1:
                    self.offsets.pop()
                    self.cut_line = self.linenos.pop()
                    self.cut_raw = last
            if isinstance(self._file, gzip.GzipFile) and self.size <= PRELOAD_BYTES:
                self._file.seek(0)
                data = self._file.read(self.size)      # a stream cut short ends after its whole lines
                self._file.close()
                self._file = io.BytesIO(data)
        except BaseException:
            self._file.close()
            raise
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.offsets)

    def snapshot(self, i: int) -> tuple[Snapshot, int, str | None]:
        """The ``i``-th snapshot, the length of its line in bytes, and the notice of what was read
        as unknown or cut in it (None: nothing)."""
        lineno = self.linenos[i]
        try:
            with self._lock:
                self._file.seek(self.offsets[i])
                raw = self._file.readline(MAX_LINE_BYTES + 1)
        except (OSError, EOFError) as e:
            raise RecordingError(f"{self.path}:{lineno}: cannot read it again ({e})") from e
        snap, problems = _snapshot(self.path, lineno, raw)
        return snap, len(raw), problems

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return True


#: bad lines before the first good one said one by one when a replay starts (then counted)
_SAID_AT_START = 3
#: the replay thread waits for the next snapshot in steps of at most this (a recording's interval
#: can be years: a wait beyond threading.TIMEOUT_MAX raises)
_LONGEST_WAIT_S = 3600.0


class ReplayFeed:
    """A ``Feed`` over a recording: snapshots at the recorded pace divided by ``speed``.

    Building it indexes the file and decodes its first good snapshot (``RecordingError`` for a
    file that is not a recording: the first bad line's error when it has no good one), so it starts
    at once whatever the file's size; bad lines before it are said in ``notices``. A bad line found
    later (by playing, stepping either way or preloading) is skipped and described in ``error``, as
    are values read as unknown or cut (``gputop.model.snapshot_from_dict``). At the end it stays on
    the last snapshot (or loops). Files up to ``PRELOAD_BYTES`` are decoded in the background after
    ``start``.
    """

    kind = "replay"

    def __init__(
        self, path: Path | str, *, speed: float = 1.0, loop: bool = False, preload: bool | None = None
    ) -> None:
        self.path = Path(path)
        self._index = _LineIndex(self.path)
        if not len(self._index):
            self._index.close()
            raise RecordingError(f"{self.path}: empty recording (no snapshots)")
        #: what the dashboard says once at start (a last line cut short, bad lines before the first good one)
        self.notices: list[str] = []
        if self._index.cut_line is not None:
            self.notices.append(_cut_notice(self.path, self._index.cut_line, len(self._index), self._index.cut_raw))
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
