"""The one sanitiser for text from other processes (DESIGN, "Text from other processes is hostile")."""

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
