"""The limits of schema ``gputop/1``: the range of every integer and number, the length of every text,
list and keyed object a snapshot may hold (docs/SECURITY.md, "Recordings").

A field of ``schema.py`` whose annotation alone does not say its range carries one of the bounds
below in its metadata (``bound``); ``validate.py`` reads each field by its annotation and that bound.
Without one, an ``int`` is a count (``COUNT``), a ``float`` any number (``NUMBER``), a ``str`` text of
at most ``MAX_TEXT`` characters; every keyed object has at most ``MAX_ENTRIES`` keys of at most
``MAX_KEY`` characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Union

#: Linux's PID_MAX_LIMIT on 64-bit (``pid_max`` can be raised up to it, never beyond)
PID_MAX = 1 << 22
#: pid_t's range: the other ids of a process (ppid, nspid), GPU and MIG indices
ID_MAX = (1 << 31) - 1
#: counts are the BPF side's unsigned 64-bit counters
COUNT_LIMIT = 1 << 64
#: unix seconds (time, start_time): below 2^37, the year 6325 (Python's dates end at 9999)
TIME_LIMIT = 1 << 37
#: the seconds a snapshot covers (the fleet view's --window included): above 0, below 2^32
INTERVAL_LIMIT = 1 << 32
#: any other number (a rate, a percentage, an average, a temperature): finite, |x| below 2^64
NUMBER_LIMIT = float(1 << 64)
#: characters of a command line: Linux allows 6 MiB of arguments
MAX_CMDLINE = 8 << 20
#: characters of any other text (a name, a path, a reason)
MAX_TEXT = 1 << 16
#: characters of a kernel name: the live side cuts one at 4096 characters and a "…" (ELF symbols
#: and c++filt's output: ``elfread.NAME_MAX_BYTES``, ``symbols.DEMANGLED_MAX``); twice that leaves
#: room, and keeps the dashboard's shortening of names (``ui.format.kernel_name``, whose time grows
#: with the square of a name's bracket depth) within a second a name
MAX_KERNEL_NAME = 8192
#: characters of a key of a keyed object (a direction, a source's name, a field's name), and its entries
MAX_KEY = 64
MAX_ENTRIES = 64
#: kernels per process: the snapshot keeps the top 20 (feeds/live_counts.py), the exporter at most these;
#: more are cut to 20
MAX_KERNELS = 20
MAX_GPUS = 1 << 16
#: call sites per process the schema keeps (the top ones: gputop/callsites.py's TOP_SITES), and frames of a
#: call site's stack (the BPF side walks 32: bpf/sites.bpf.h)
MAX_CALL_SITES = 20
MAX_FRAMES = 32
#: bounds of a latency histogram as the exporter publishes it (gputop/latency.py: 14)
MAX_LATENCY_LE = 32
MAX_PROCESSES = 1 << 20
#: the keys of a log2 histogram
HIST_KEYS = frozenset(f"2^{k}" for k in range(64))


class Ints(NamedTuple):
    """Integers from ``lo`` to ``hi``, both included; ``label`` says the range in a message."""

    lo: int
    hi: int
    label: str


class Numbers(NamedTuple):
    """Numbers (an integer or a float) from ``lo`` (excluded when ``lo_open``) to below ``hi``; an
    integer stays one unless ``to_float``."""

    lo: float
    hi: float
    label: str
    lo_open: bool = False
    to_float: bool = False


class Chars(NamedTuple):
    """Text of at most ``most`` characters; longer text is cut (and the cut reported)."""

    most: int


class Entries(NamedTuple):
    """A list of at most as many entries as this module's attribute ``limit`` says (looked up at each
    read: a test can lower it); with ``cut``, a longer one is cut to that many (the first ones: the
    list is sorted by importance), else refused."""

    limit: str
    cut: bool = False


class Log2Hist(NamedTuple):
    """A ``Mapping[str, int]`` that is a log2 histogram: keys ``HIST_KEYS``, values counts."""


#: a field's bound: on its integers, numbers, text, list or (innermost) ``Mapping[str, int]``
Bound = Union[Ints, Numbers, Chars, Entries, Log2Hist]

COUNT = Ints(0, COUNT_LIMIT - 1, "0 to 2^64-1")
#: allocations minus frees: a signed 64-bit counter
SIGNED = Ints(-(1 << 63), (1 << 63) - 1, "-2^63 to 2^63-1")
PID = Ints(1, PID_MAX, f"1 to {PID_MAX}")
ID = Ints(0, ID_MAX, f"0 to {ID_MAX}")
NUMBER = Numbers(-NUMBER_LIMIT, NUMBER_LIMIT, "-2^64 to 2^64")
UNIX_TIME = Numbers(0, TIME_LIMIT, "0 to 2^37")
#: a snapshot's own time, always read as a float
TIME = Numbers(0, TIME_LIMIT, "0 to 2^37", to_float=True)
INTERVAL = Numbers(0, INTERVAL_LIMIT, "above 0, below 2^32", lo_open=True, to_float=True)
TEXT = Chars(MAX_TEXT)
KERNEL_NAME = Chars(MAX_KERNEL_NAME)
#: one letter: the kernel's state of a process (``/proc/PID/stat``'s third field)
STATE_LETTER = Chars(1)
CMDLINE = Chars(MAX_CMDLINE)
LOG2_HIST = Log2Hist()
KERNELS = Entries("MAX_KERNELS", cut=True)
GPUS = Entries("MAX_GPUS")
CALL_SITES = Entries("MAX_CALL_SITES", cut=True)
FRAMES = Entries("MAX_FRAMES", cut=True)
LATENCY_LE = Entries("MAX_LATENCY_LE")
PROCESSES = Entries("MAX_PROCESSES")

#: the key of a field's metadata that holds its bound
BOUND = "gputop.bound"


def bound(b: Bound) -> Mapping[str, Any]:
    """A field's metadata (``dataclasses.field(metadata=...)``) giving its bound."""
    return {BOUND: b}
