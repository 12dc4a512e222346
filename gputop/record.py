"""Record snapshots as JSON Lines and read them back.

- ``Recorder``: one snapshot per line (schema ``gputop/1``), flushed after each line, so a
  recording cut short by a crash or ^C is still readable up to its last complete line.
- ``read_recording(path)``: iterate the snapshots of a file (batch replay, baselines).
- ``LineIndex(path)``: a recording's lines by offset, decoded one at a time (what
  ``gputop.feeds.replay.ReplayFeed`` plays).

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
import threading
from array import array
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO, Any, cast

from gputop import safefiles
from gputop.errors import GputopError
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


#: the most digits of an integer read: Python 3.11's own default limit, on every Python (3.9 and 3.10
#: convert any length, in time quadratic in it)
MAX_INT_DIGITS = 4300


class _TooManyDigits(ValueError):
    pass


def _int(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        raise _TooManyDigits(text[:20])
    return int(text)


#: json.loads, refusing NaN and the infinities (a number too large, 1e999, reads as inf: the model
#: refuses that where it matters) and integers of more than MAX_INT_DIGITS digits
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_int=_int)


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
    except _TooManyDigits:
        raise RecordingError(f"{where}: not JSON (a number of more than {MAX_INT_DIGITS} digits)", hint) from None
    except ValueError as e:
        raise RecordingError(f"{where}: not JSON ({type(e).__name__})", hint) from None
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


def cut_notice(path: Path, lineno: int, kept: int, raw: bytes | None) -> str:
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


def read_recording(path: Path | str, notice: Callable[[str], None] | None = None) -> Generator[Snapshot, None, None]:
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
                    notice(cut_notice(path, lineno, seen, None))
                break
            if not raw.strip():
                continue
            # only the last line can lack its newline; cut short after complete snapshots, it is
            # skipped (alone, it is an error below: a file of one broken line is not a recording)
            if not raw.endswith(b"\n") and not _is_json(raw):
                if seen:
                    if notice is not None:
                        notice(cut_notice(path, lineno, seen, raw))
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


class LineIndex:
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
