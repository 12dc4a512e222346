"""Record snapshots as JSON Lines and read them back.

- ``Recorder`` (``writer.py``): one snapshot per line (schema ``gputop/1``), flushed after each line,
  so a recording cut short by a crash or ^C is still readable up to its last complete line.
- ``read_recording(path)`` (``reader.py``): iterate the snapshots of a file (batch replay, baselines).
- ``LineIndex(path)`` (``reader.py``): a recording's lines by offset, decoded one at a time (what
  ``gputop.feeds.replay.ReplayFeed`` plays).

Files ending in ``.gz`` are read and written compressed. A recording may come from anyone: every
field of every line is checked by the model (``gputop.model.snapshot_from_dict``). A bad line (not
JSON, nested too deeply, NaN, a field of the wrong type or out of range) is skipped with a notice
that names the file and the line, as a last line cut short (the recorder was killed mid-write)
is; a file without a good line raises ``RecordingError`` with the first bad line's message and a
hint. Memory stays bounded whatever the file's size: lines are streamed (batch) or indexed by
offset (dashboard), and a line longer than ``MAX_LINE_BYTES`` is refused rather than read
(``lines.py``: the file's lines and their JSON).
"""

from __future__ import annotations

from gputop.record.lines import MAX_INT_DIGITS, MAX_LINE_BYTES, RecordingError, cut_notice
from gputop.record.reader import PRELOAD_BYTES, LineIndex, read_recording, skip_notice
from gputop.record.writer import Recorder

__all__ = ["MAX_INT_DIGITS", "MAX_LINE_BYTES", "PRELOAD_BYTES", "LineIndex", "Recorder", "RecordingError",
           "cut_notice", "read_recording", "skip_notice"]
