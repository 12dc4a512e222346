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
- so do the characters that let two names read the same (issue 40): spaces other than U+0020
  (no-break, ideographic U+3000, the en and em spaces...), variation selectors (U+FE00-FE0F,
  U+E0100-E01EF, Mongolian U+180B-180F), the Braille blank U+2800, combining marks past the
  second on one character (a stack), and in a word whose letters are of more than one script
  (``pythоn`` with a Cyrillic ``о``), the letters not of the word's main script (its most letters;
  Latin on a tie): ``pyth\\u{043e}n``. A word all of one script (``Дмитрий``, ``café``; Han, kana and
  Hangul count as one) is shown as is;
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
# printable by Unicode's categories, yet invisible: a name could hide in them (and the Braille blank)
_INVISIBLE = "\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0\u2800"
_HAS_INVISIBLE = re.compile(f"[{_INVISIBLE}]")
# variation selectors: they change how the character before them looks, or nothing
_SELECTORS = re.compile("[\u180b-\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef]")
#: combining marks kept on one character; the rest of a stack is escaped
MAX_MARKS = 2


def _escape(ch: str) -> str:
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if 0xDC80 <= cp <= 0xDCFF:          # surrogateescape: the original byte was cp - 0xDC00
        return f"\\x{cp - 0xDC00:02x}"
    return f"\\u{{{cp:04x}}}"


#: scripts a word mixes as a matter of course (Japanese writes Han, Hiragana and Katakana together; Korean
#: Hangul and Han): one script here
_EAST_ASIAN = frozenset(("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO", "IDEOGRAPHIC"))


def _script(ch: str) -> str:
    """A letter's script, as the first word of its Unicode name (LATIN, CYRILLIC, GREEK, CJK...)."""
    name = unicodedata.name(ch, "")
    script = name.split(" ", 1)[0] if name else ""
    return "CJK" if script in _EAST_ASIAN else script


def _mixed(text: str) -> set[int]:
    """Positions of the letters to escape: in each word (a run of letters, digits and marks) with
    letters of more than one script, those not of its main script (the one with most letters; Latin
    on a tie, then the first seen)."""
    out: set[int] = set()
    word: list[tuple[int, str]] = []
    for i, ch in enumerate(text + " "):
        cat = unicodedata.category(ch) if i < len(text) else "Zs"
        if cat[0] in "LMN":
            if cat[0] == "L":
                word.append((i, _script(ch)))
            continue
        scripts = {sc for _, sc in word}
        if len(scripts) > 1:
            count = {sc: sum(1 for _, s in word if s == sc) for sc in scripts}
            main = max(count, key=lambda sc: (count[sc], sc == "LATIN", -next(i for i, s in word if s == sc)))
            out.update(i for i, sc in word if sc != main)
        word = []
    return out


def _units(text: str) -> list[str]:
    """``text`` as display units: a safe character, or the escape of an unsafe one."""
    mixed = set() if text.isascii() else _mixed(text)
    out: list[str] = []
    marks = 0
    for i, ch in enumerate(text):
        cat = unicodedata.category(ch)
        marks = marks + 1 if cat in ("Mn", "Me") else 0
        unsafe = (cat in _ESCAPED or ch in _INVISIBLE or (cat == "Zs" and ch != " ") or marks > MAX_MARKS
                  or i in mixed or _SELECTORS.match(ch) is not None)
        out.append(_escape(ch) if unsafe else ch)
    return out


def sanitize(value: str, limit: int = DEFAULT_LIMIT) -> str:
    """``value`` with every unsafe character escaped, cut to at most ``limit`` characters (an
    escape is never cut in two)."""
    if limit <= 0:
        return ""
    head = value[: limit + 1]
    # fast path: printable ASCII (str.isprintable is false for Cc and the rest), most of what is shown
    if head.isascii() and head.isprintable():
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
