"""Reading a recording back: ``read_recording`` streams its snapshots (batch replay, baselines),
``LineIndex`` holds where each line starts and decodes one on demand (the replay feed); every field
of every line is checked by the model (``snapshot_from_dict``), a bad line skipped with a notice
that names the file and the line."""

from __future__ import annotations

import gzip
import io
import threading
from array import array
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from gputop.model import Snapshot, SnapshotError, snapshot_from_dict
from gputop.record.lines import (
    CutStream,
    RecordingError,
    cut_error,
    cut_notice,
    decode,
    is_json,
    line_text,
    looks_cut,
    open_binary,
    read_line,
    whole_lines,
)


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
    snap = _parse(path, lineno, decode(path, lineno, line_text(path, lineno, raw)), problems)
    return snap, _problems_notice(path, lineno, problems) if problems else None


def _problems_notice(path: Path, lineno: int, problems: list[str]) -> str:
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return f"{path}:{lineno}: {'; '.join(problems[:3])}{more}"


def skip_notice(error: RecordingError) -> str:
    """What is said of a line skipped because of ``error`` (batch mode's stderr, the dashboard)."""
    return f"skipped a bad line ({error.message})"


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
    with open_binary(path) as f:
        for lineno, _, raw in whole_lines(path, f):
            if raw is None:         # a compressed stream ends inside line ``lineno``
                if not seen:
                    raise first_error or CutStream(path, lineno)
                if notice is not None:
                    notice(cut_notice(path, lineno, seen, None))
                break
            if not raw.strip():
                continue
            # only the last line can lack its newline; cut short after complete snapshots, it is
            # skipped (alone, it is an error below: a file of one broken line is not a recording)
            if not raw.endswith(b"\n") and not is_json(raw):
                if seen:
                    if notice is not None:
                        notice(cut_notice(path, lineno, seen, raw))
                    break
                if first_error is None and looks_cut(raw):
                    raise cut_error(path, lineno, raw)
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
        self._file = open_binary(path)
        self.offsets = array("q")
        self.linenos = array("q")
        #: the line skipped because the recorder was stopped in the middle of it, and what of it was
        #: written (None: a compressed stream that ends inside it)
        self.cut_line: int | None = None
        self.cut_raw: bytes | None = None
        self.size = 0
        try:
            last = b""
            for lineno, offset, raw in whole_lines(path, self._file):
                if raw is None:
                    if not len(self.offsets):
                        raise CutStream(path, lineno)
                    self.cut_line = lineno
                    break
                if raw.strip():
                    self.offsets.append(offset)
                    self.linenos.append(lineno)
                    last = raw
                self.size = offset + len(raw)
            if self.cut_line is None and not last.endswith(b"\n") and not is_json(last):
                if len(self.offsets) == 1 and looks_cut(last):
                    raise cut_error(path, self.linenos[0], last)
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
                raw = read_line(self._file)
        except (OSError, EOFError) as e:
            raise RecordingError(f"{self.path}:{lineno}: cannot read it again ({e})") from e
        snap, problems = _snapshot(self.path, lineno, raw)
        return snap, len(raw), problems

    def close(self) -> None:
        with self._lock:
            self._file.close()


