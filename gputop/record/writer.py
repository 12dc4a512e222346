"""Writing a recording: ``Recorder`` appends one snapshot a line (schema ``gputop/1``), flushed after
each, so a recording cut short by a crash or ^C is still readable up to its last complete line."""

from __future__ import annotations

import gzip
import io
import os
import threading
from pathlib import Path
from typing import IO

from gputop import safefiles
from gputop.model import Snapshot, snapshot_to_json
from gputop.record.lines import LINE_START, MAX_LINE_BYTES, RecordingError


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
    if start is not None and os.pread(fd, len(LINE_START), start) == LINE_START:
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

    def __init__(self, path: Path | str, max_bytes: int | None = None, keep: int = 4) -> None:
        self.path = Path(path)
        #: rotation (``--record-max-size``, ``--record-keep``): a line that would take the file past
        #: ``max_bytes`` goes to a new file, the full one becoming generation 1 (``snapshots.jsonl.1``;
        #: ``.gz``: ``snapshots.jsonl.1.gz``), ``keep`` generations kept; None: never rotated
        self.max_bytes = max_bytes
        self.keep = keep
        self.rotations = 0
        self._lock = threading.Lock()
        self._raw: IO[bytes] | None = None
        self._file: IO[str] | None = None
        self._open()
        self.count = 0

    def _open(self) -> None:
        try:
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

    def _size(self) -> int:
        f = self._raw if self._raw is not None else self._file
        assert f is not None
        return os.fstat(f.fileno()).st_size

    def generation(self, i: int) -> Path:
        """The name of generation ``i`` (1: the newest full one)."""
        if self.path.suffix == ".gz":
            return self.path.with_name(f"{self.path.name[:-3]}.{i}.gz")
        return self.path.with_name(f"{self.path.name}.{i}")

    def _rotate(self) -> None:
        """The full file becomes generation 1 (the oldest kept one dropped), a new one is opened: between
        two lines, so no snapshot is lost or cut. Renames in the recording's own directory."""
        assert self._file is not None
        self._file.close()
        if self._raw is not None:
            self._raw.close()
        self._file = self._raw = None
        failed: OSError | None = None
        try:
            for i in range(self.keep - 1, 0, -1):
                if self.generation(i).exists():
                    os.replace(self.generation(i), self.generation(i + 1))
            if self.keep > 0:
                os.replace(self.path, self.generation(1))
            else:
                os.unlink(self.path)
        except FileNotFoundError:
            pass                        # the recording was moved away meanwhile: a new one starts all the same
        except OSError as e:
            failed = e
        self._open()                    # whatever happened: recording goes on (appended, when not moved)
        if failed is not None:
            raise RecordingError(f"cannot rotate recording {self.path}: {failed.strerror or failed}",
                                 "check the permissions of its directory") from failed
        self.rotations += 1

    def write(self, snap: Snapshot) -> None:
        """Append ``snap``; a snapshot that covers no time (the collector's "starting" one) is
        not a frame and is not written."""
        if snap.interval_s <= 0:
            return
        line = snapshot_to_json(snap) + "\n"
        with self._lock:
            if self._file is None:
                raise RecordingError(f"recording {self.path} is closed")
            if self.max_bytes is not None:     # (a .gz file grows by less than the line: it rotates early)
                size = self._size()
                if size > 0 and size + len(line.encode()) > self.max_bytes:
                    self._rotate()
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


