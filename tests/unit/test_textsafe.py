"""The one sanitiser for text from other processes (docs/architecture.md, "Text from other processes is hostile")."""

from __future__ import annotations

import pytest

from gputop.textsafe import sanitize, sanitize_middle


@pytest.mark.parametrize(("raw", "shown"), [
    ("python3", "python3"),
    ("\x1b[2J\x1b[31mEVIL\a", "\\x1b[2J\\x1b[31mEVIL\\x07"),                  # ESC sequences, BEL
    ("a\x7fb\x9bc", "a\\x7fb\\x9bc"),                                         # DEL, C1 CSI
    ("tab\there\nnew", "tab\\x09here\\x0anew"),
    ("user\u202egnp.exe", "user\\u{202e}gnp.exe"),                           # bidi override
    ("a\u2066b\u2069", "a\\u{2066}b\\u{2069}"),                               # isolates
    ("zero\u200bwidth\ufeff", "zero\\u{200b}width\\u{feff}"),
    ("line\u2028sep", "line\\u{2028}sep"),
    ("l\u200er\u200fa\u061cb", "l\\u{200e}r\\u{200f}a\\u{061c}b"),      # bidi marks
    ("\u202a\u202b\u202c\u202d", "\\u{202a}\\u{202b}\\u{202c}\\u{202d}"),  # embeddings, pop, LTR override
    ("j\u200cn\u200dw\u2060", "j\\u{200c}n\\u{200d}w\\u{2060}"),       # zero-width non-joiner, joiner, word joiner
    ("nel\x85csi\x9b", "nel\\x85csi\\x9b"),                                # C1 controls as characters
    ("pua\ue000un\u0378", "pua\\u{e000}un\\u{0378}"),                     # private use, unassigned
    ("a\u3164b\u115fc\u034fd", "a\\u{3164}b\\u{115f}c\\u{034f}d"),        # invisible fillers
    ("soft\u00adhyphen", "soft\\xadhyphen"),
    ("naïve 名前 ", "naïve 名前 "),                                             # printable text is kept
])
def test_unsafe_characters_become_visible_escapes(raw: str, shown: str) -> None:
    assert sanitize(raw) == shown


def test_invalid_utf8_is_shown_as_the_bytes_never_as_surrogates() -> None:
    raw = b"ok\x9b\xff\xc3(".decode("utf-8", "surrogateescape")
    assert sanitize(raw) == "ok\\x9b\\xff\\xc3("
    raw_bytes = (b"k\xe2\x80\xaeX", b"bad\xed\xa0\x80")      # a valid bidi override; an encoded surrogate
    assert [sanitize(b.decode("utf-8", "surrogateescape")) for b in raw_bytes] == ["k\\u{202e}X",
                                                                                  "bad\\xed\\xa0\\x80"]


def test_length_is_capped_and_an_escape_is_never_cut() -> None:
    assert sanitize("x" * 10_000_000, 100) == "x" * 99 + "…"           # a megabyte command line stays a line
    assert sanitize("abc", 3) == "abc"
    assert sanitize("abcd", 3) == "ab…"
    assert sanitize("\x1b" * 10, 9) == "\\x1b\\x1b…"
    assert sanitize("ab\x1b", 5) == "ab…"
    assert sanitize("ab\x1b", 6) == "ab\\x1b"
    assert sanitize("anything", 0) == ""


def test_middle_cut_keeps_start_and_end_and_never_cuts_an_escape() -> None:
    assert sanitize_middle("short\x1b", 20) == "short\\x1b"
    assert sanitize_middle("a" * 100 + "END", 11) == "aaaaa…aaEND"     # 10 characters of room: 5 for the end
    cut = sanitize_middle("\x1b" * 40, 11)
    assert cut == "\\x1b…\\x1b" and len(cut) <= 11



HOSTILE = b"\x1b[2J\x1b[31mEVIL\x07\x9b\xe2\x80\xaeok".decode("utf-8", "surrogateescape")


def test_json_keeps_raw_text_and_writes_invalid_utf8_as_visible_escapes() -> None:
    """JSON (batch -f json, recordings) keeps the raw value, escaped by JSON; a byte of invalid
    UTF-8 becomes the text \\xNN (Python's backslashreplace), never a lone \\udcNN escape."""
    import dataclasses
    import json
    from pathlib import Path

    from gputop.model import snapshot_from_json, snapshot_to_dict, snapshot_to_json

    line = (Path(__file__).resolve().parents[1] / "data" / "scenario.jsonl").read_text().splitlines()[2]
    snap = snapshot_from_json(line)
    p = snap.processes[0]
    kernel = dataclasses.replace(p.kernels[0], name=HOSTILE + "_kernel")
    p = dataclasses.replace(p, comm=HOSTILE, cmdline=HOSTILE + " --x", user="u\udcff", container="c\u202e",
                            kernels=(kernel, *p.kernels[1:]))
    text = snapshot_to_json(dataclasses.replace(snap, processes=(p, *snap.processes[1:])))
    assert text.isascii() and "\\udc" not in text
    text.encode("utf-8", "strict")                      # valid for every reader
    d = json.loads(text)["processes"][0]
    shown = "\x1b[2J\x1b[31mEVIL\x07\\x9b\u202eok"   # control characters raw (JSON escapes them); the byte as text
    assert (d["comm"], d["cmdline"], d["user"], d["container"]) == (shown, shown + " --x", "u\\xff", "c\u202e")
    assert d["kernels"][0]["name"] == shown + "_kernel"
    assert '"comm":"\\u001b[2J\\u001b[31mEVIL\\u0007\\\\x9b\\u202eok"' in text
    # displays show the same either way: live (a surrogate) or replayed (the text \\x9b)
    assert sanitize(d["comm"]) == sanitize(HOSTILE) == "\\x1b[2J\\x1b[31mEVIL\\x07\\x9b\\u{202e}ok"
    # text without lone surrogates is written as json.dumps writes it
    assert snapshot_to_json(snap) == json.dumps(snapshot_to_dict(snap), separators=(",", ":"))


@pytest.mark.parametrize(("raw", "shown"), [
    ("pyth\u043en", "pyth\\u{043e}n"),                  # a Cyrillic o among Latin letters
    ("pa\u0443pal", "pa\\u{0443}pal"),
    ("\u0414\u043c\u0438\u0442\u0440\u0438\u0439", "\u0414\u043c\u0438\u0442\u0440\u0438\u0439"),    # all Cyrillic
    ("\u0430\u0431\u0432a", "\u0430\u0431\u0432\\x61"),           # a Latin a among Cyrillic letters
    ("caf\u00e9 na\u00efve", "caf\u00e9 na\u00efve"),              # Latin with accents
    ("\u65e5\u672c\u8a9e\u30c6\u30ad\u30b9\u30c8", "\u65e5\u672c\u8a9e\u30c6\u30ad\u30b9\u30c8"),  # Han and katakana
    ("torch \u0440ython", "torch \\u{0440}ython"),           # words apart: only the mixed one
    ("a\ufe0fb", "a\\u{fe0f}b"),                            # variation selectors
    ("x\U000e0100y", "x\\u{e0100}y"),
    ("a\u180bb", "a\\u{180b}b"),                            # Mongolian free variation selector
    ("\u2800", "\\u{2800}"),                                # Braille blank
    ("a\u3000b", "a\\u{3000}b"),                            # ideographic space
    ("a\u00a0b", "a\\xa0b"),                                # no-break space
    ("e\u0301\u0301\u0301\u0301", "e\u0301\u0301\\u{0301}\\u{0301}"),   # a combining stack: two kept
])
def test_look_alike_and_invisible_characters_are_escaped(raw: str, shown: str) -> None:
    """Issue 40: these passed the sanitiser, so two names could read the same (a process named
    "pythоn" beside "python"); each is escaped, in both cutting modes."""
    assert sanitize(raw) == shown
    assert sanitize_middle(raw, 100) == shown


def test_two_names_that_read_the_same_are_shown_apart() -> None:
    names = ["python", "pyth\u043en", "python\ufe0f", "python\u2800", "py\u00adthon", "python\u3000"]
    assert len({sanitize(n) for n in names}) == len(names)
