"""A recording's lines: the file opened (``.gz`` decompressed), its lines streamed one at a time and
never longer than ``MAX_LINE_BYTES``, a last line cut short told from a bad one, and each line
decoded as a JSON object of schema ``gputop/1`` (``decode``). ``RecordingError`` says what is wrong
and where (``FILE:LINE: ...``)."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from gputop.errors import GputopError
from gputop.model import SCHEMA

_REQUIRED = ("time", "interval_s", "host")

#: a snapshot line is kilobytes to a few megabytes; a longer "line" is some other file, and is
#: refused rather than held in memory
MAX_LINE_BYTES = 64 << 20


class RecordingError(GputopError):
    """A recording cannot be written or read. ``hint`` says what to do about it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint or "record one with: gputop --record FILE (JSON Lines, schema gputop/1)")


#: how every line of a recording starts (``snapshot_to_json``)
LINE_START = b'{"schema":"gputop/'


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


#: what decoding a line may build, estimated before it is decoded: bytes of Python objects per byte of
#: the line, beyond BUILD_SPARE. A snapshot's JSON builds about 2 (keys, numbers and text in objects of
#: tens of bytes); a line of many small objects or arrays builds up to 36 ({} is two bytes, a dict 64
#: and its slot 8: a 64 MiB line of them peaked at 1.73 GB, issue 40).
BUILD_PER_BYTE = 6
BUILD_SPARE = 16 << 20
_CONTAINER_BYTES, _VALUE_BYTES = 72, 8


def too_dense(line: str) -> bool:
    """Whether decoding ``line`` would build more than BUILD_PER_BYTE bytes of objects per byte of it
    (beyond BUILD_SPARE): an estimate from its brackets and commas, counted at C speed."""
    if len(line) * BUILD_PER_BYTE < BUILD_SPARE // 4:
        return False
    containers = line.count("{") + line.count("[")
    return _CONTAINER_BYTES * containers + _VALUE_BYTES * line.count(",") > BUILD_PER_BYTE * len(line) + BUILD_SPARE


def decode(path: Path, lineno: int, line: str) -> dict[str, Any]:
    where = f"{path}:{lineno}"
    hint = "a recording holds one JSON snapshot per line (gputop --record FILE)"
    if line.startswith("\ufeff"):
        raise RecordingError(f"{where}: not JSON (a byte order mark at column 1)", hint)
    if too_dense(line):
        raise RecordingError(f"{where}: more objects and arrays than a snapshot holds in {len(line)} characters "
                             "(decoding it would take many times its size in memory)", hint)
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


def open_binary(path: Path) -> IO[bytes]:
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


class CutStream(RecordingError):
    """A compressed recording that ends inside a line (the recorder was stopped mid-write): the
    lines before it are whole; ``lineno`` is the line the stream ends in."""

    def __init__(self, path: Path, lineno: int) -> None:
        super().__init__(f"{path}:{lineno}: the compressed recording ends inside this line, its first "
                         "(the recorder stopped mid-write): no complete snapshot")
        self.lineno = lineno


def read_line(f: IO[bytes]) -> bytes:
    """The next line of ``f`` with its newline, read no further than one byte past ``MAX_LINE_BYTES``
    (a longer one is not held in memory, and is refused)."""
    return f.readline(MAX_LINE_BYTES + 1)


def _raw_lines(path: Path, f: IO[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(line number, offset, bytes with the newline) of every line, blank ones too; one line in
    memory at a time, never more than ``MAX_LINE_BYTES``. A compressed file cut short raises
    ``CutStream`` after its whole lines."""
    offset = 0
    lineno = 0
    while True:
        try:
            raw = read_line(f)
        except EOFError as e:       # gzip: the stream ends before its end marker, inside a line
            raise CutStream(path, lineno + 1) from e
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


def line_text(path: Path, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordingError(f"{path}:{lineno}: not UTF-8 text: not a recording") from e


def whole_lines(path: Path, f: IO[bytes]) -> Iterator[tuple[int, int, bytes | None]]:
    """``_raw_lines``, and then (line number, offset, None) where a compressed stream ends inside a line."""
    lines = _raw_lines(path, f)
    while True:
        try:
            item = next(lines)
        except StopIteration:
            return
        except CutStream as e:
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


def looks_cut(raw: bytes) -> bool:
    """Whether a line without its newline is the start of a snapshot rather than something else: a JSON
    object's start, UTF-8 text up to a character the cut may have split."""
    if not raw.lstrip().startswith(b"{"):
        return False
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(raw) - 3 and e.reason == "unexpected end of data"
    return True


def cut_error(path: Path, lineno: int, raw: bytes) -> RecordingError:
    """The one line of a recording is cut short: not a recording yet."""
    col = len(raw.decode("utf-8", "replace")) + 1
    return RecordingError(f"{path}:{lineno}: the only line is cut short at column {col} (the recorder stopped "
                          "mid-write): no complete snapshot",
                          "a recording holds one JSON snapshot per line (gputop --record FILE)")


def is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return True
