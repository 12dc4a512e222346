"""The one sanitiser for text that comes from other processes (names, command lines, user names,
container ids, kernel names) at every boundary where a person or another program's parser sees it:
the dashboard, the batch table, doctor, the exporter's labels.

Stdlib only. The model keeps the raw value (JSON escapes it); this makes it safe to show:

- control characters (C0, DEL, C1; ESC, BEL...) become ``\\xNN``;
- bytes of invalid UTF-8 (decoded by Python as lone surrogates ``U+DC80``-``U+DCFF`` under
  ``surrogateescape``) become ``\\xNN`` of the original byte, never a surrogate;
- format characters (bidirectional marks, overrides and isolates: U+200E/F, U+202A-202E,
  U+2066-2069, U+061C; zero-width spaces and joiners U+200B-200D, U+2060, BOM U+FEFF, soft
  hyphen), other surrogates, line/paragraph separators, private-use and unassigned code points,
  and the invisible fillers that render as nothing (U+034F, U+115F, U+1160, U+17B4, U+17B5,
  U+3164, U+FFA0) become ``\\u{XXXX}``;
- the result is capped at ``limit`` characters, the cut marked with ``…``.

A name can then never move the cursor, change colours, ring the bell or reorder what follows it.
"""

from __future__ import annotations

import re
import unicodedata

#: the display cap when a caller names none (a megabyte command line stays a line)
DEFAULT_LIMIT = 4096

# categories escaped: controls, format (bidi, zero-width), surrogates, private use, unassigned,
# line/paragraph separators
_ESCAPED = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
# printable by Unicode's categories, yet invisible: a name could hide in them
_INVISIBLE = "\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0"
_HAS_INVISIBLE = re.compile(f"[{_INVISIBLE}]")


def _escape(ch: str) -> str:
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if 0xDC80 <= cp <= 0xDCFF:          # surrogateescape: the original byte was cp - 0xDC00
        return f"\\x{cp - 0xDC00:02x}"
    return f"\\u{{{cp:04x}}}"


def _units(text: str) -> list[str]:
    """``text`` as display units: a safe character, or the escape of an unsafe one."""
    return [ch if ch == " " or (unicodedata.category(ch) not in _ESCAPED and ch not in _INVISIBLE) else _escape(ch)
            for ch in text]


def sanitize(value: str, limit: int = DEFAULT_LIMIT) -> str:
    """``value`` with every unsafe character escaped, cut to at most ``limit`` characters (an
    escape is never cut in two)."""
    if limit <= 0:
        return ""
    head = value[: limit + 1]
    # fast path: printable text (str.isprintable is false for Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs but space)
    if head.isprintable() and _HAS_INVISIBLE.search(head) is None:
        return head if len(value) <= limit else head[: limit - 1] + "…"
    parts: list[str] = []
    n = 0
    for part in _units(head):
        if n + len(part) > limit:
            break
        parts.append(part)
        n += len(part)
    else:
        if len(value) <= limit:
            return "".join(parts)
    while parts and n > limit - 1:      # room for the mark
        n -= len(parts.pop())
    return "".join(parts) + "…"


def sanitize_middle(value: str, limit: int) -> str:
    """Like ``sanitize``, but a value too long is cut in the middle, keeping its start and its end
    (kernel names: template arguments differ at the end); an escape is never cut in two."""
    units = _units(value[: 1 << 16])
    if sum(map(len, units)) <= limit:
        return "".join(units)
    tail_room = (limit - 1) // 2
    tail: list[str] = []
    n = 0
    for part in reversed(units):
        if n + len(part) > tail_room:
            break
        tail.append(part)
        n += len(part)
    head: list[str] = []
    for part in units:
        if n + len(part) > limit - 1:
            break
        head.append(part)
        n += len(part)
    return "".join(head) + "…" + "".join(reversed(tail))
