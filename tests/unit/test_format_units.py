"""Where a formatted number changes unit (gputop/view/format.py ``si``, ``bytes_``; docs/dashboard.md, "Number
style"). Issue 35: a steady rate of about 1 GiB/s flipped between ``992M`` and ``0.97G`` frame to frame, as
bytes moved to the next unit at 97% of it, inside the range three digits of their own unit can still write.
Now counts and bytes alike change unit only where three digits run out, at 999.5 of a unit: every value
below reads in its unit with three significant digits, every value from there on in the next one, three
significant digits too (``999M``, then ``0.98G``; ``999k``, then ``1.00M``)."""

from __future__ import annotations

import re

import pytest

from gputop.view import format as fmt

SI = [("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)]
BIN = [("", 1.0), ("K", 2.0**10), ("M", 2.0**20), ("G", 2.0**30), ("T", 2.0**40)]
NUMBER = re.compile(r"^-?(\d+(?:\.\d+)?)([kKMGT]?)$")


def significant(text: str) -> int:
    """How many significant digits ``text`` (a formatted number, its suffix dropped) shows."""
    m = NUMBER.match(text)
    assert m is not None, text
    digits = m.group(1).replace(".", "").lstrip("0")
    return len(digits) if "." in m.group(1) else len(digits.rstrip("0")) if digits else 1


@pytest.mark.parametrize(("f", "units"), [(fmt.si, SI), (fmt.bytes_, BIN)], ids=["si", "bytes"])
@pytest.mark.parametrize("boundary", [1, 2, 3, 4])
def test_every_unit_boundary_is_at_999_5_of_the_unit_below(f, units, boundary: int) -> None:  # type: ignore[no-untyped-def]
    below, scale = units[boundary - 1]
    up, up_scale = units[boundary]
    cases = {
        990.0: f"990{below}", 992.0: f"992{below}", 993.3: f"993{below}", 999.0: f"999{below}",
        999.49: f"999{below}",
    }
    for x, text in cases.items():
        assert f(x * scale) == text, (x, below)
    # from 999.5 on: the next unit, three significant digits
    first = f(999.5 * scale)
    assert first.endswith(up) and significant(first) == 3, first
    assert first == ("1.00" + up if up_scale / scale == 1000 else "0.98" + up)
    assert f(up_scale) == f"1.00{up}"
    assert f(1.5 * up_scale) == f"1.50{up}"
    if up_scale / scale == 1024:        # 1000 to 1023 of the unit below: 0.98 to 1.00 of the next, never 4 digits
        assert [f(x * scale) for x in (1000, 1004, 1017.7, 1023, 1023.9)] == [
            f"0.98{up}", f"0.98{up}", f"0.99{up}", f"1.00{up}", f"1.00{up}"]


@pytest.mark.parametrize(("f", "units"), [(fmt.si, SI), (fmt.bytes_, BIN)], ids=["si", "bytes"])
def test_a_rate_jittering_near_a_boundary_keeps_its_unit_and_width(f, units) -> None:  # type: ignore[no-untyped-def]
    """Issue 35's rate, and one jittering ±1% around 97% of every next unit (where bytes used to switch) or
    around the middle of a unit's range: one unit and one width across every frame."""
    for (unit, scale), (_, up_scale) in zip(units, units[1:]):
        for centre in (0.97 * up_scale / scale, 0.95 * up_scale / scale, 500.0):
            shown = {f(centre * (1 + d / 1000) * scale) for d in range(-10, 11)}
            suffixes = {t[-1] if t[-1].isalpha() else "" for t in shown}
            assert suffixes == {unit}, (centre, unit, shown)
            assert len({len(t) for t in shown}) == 1, (centre, unit, shown)
    assert {fmt.bytes_(x * 2**20) for x in (991.6, 992.0, 992.4, 993.0, 993.3, 993.6)} <= {"992M", "993M", "994M"}


@pytest.mark.parametrize(("f", "units"), [(fmt.si, SI), (fmt.bytes_, BIN)], ids=["si", "bytes"])
def test_three_significant_digits_five_cells_at_most_everywhere(f, units) -> None:  # type: ignore[no-untyped-def]
    """A sweep from 1 to 10^15 (1.3% apart): every value but whole numbers below 1000 shows three significant
    digits, in five cells at most (four digits and a point, or three and a suffix: ``0.98G``, ``12.3k``); the
    unit never goes down as the value grows, and what is shown reads back within half a unit of its last digit."""
    x = 1.0
    order = [u for u, _ in units]
    last = 0
    while x < 999 * units[-1][1]:
        text = f(x)
        m = NUMBER.match(text)
        assert m is not None, text
        assert len(text) <= 5, (x, text)
        if not (x < 999.5 and float(text).is_integer()):
            assert significant(text) == 3 or text.startswith("0."), (x, text)
        rank = order.index(m.group(2))
        assert rank >= last, (x, text)
        last = rank
        back = fmt.shown(text, binary=f is fmt.bytes_)
        assert back is not None and abs(back - x) <= 0.0051 * x + 0.5, (x, text, back)
        x *= 1.013


def test_negative_and_unknown_values() -> None:
    assert (fmt.si(-999.4), fmt.si(-999.5), fmt.si(-2500)) == ("-999", "-1.00k", "-2.50k")
    assert (fmt.bytes_(-999.4 * 2**20), fmt.bytes_(-999.5 * 2**20)) == ("-999M", "-0.98G")
    assert fmt.bytes_(None) == fmt.si(float("nan")) == fmt.bytes_(float("inf")) == fmt.NA
    assert (fmt.bytes_(999.4), fmt.bytes_(999.5), fmt.bytes_(512)) == ("999", "0.98K", "512")


def test_axis_labels_cap_the_decimals_on_the_same_boundaries() -> None:
    assert fmt.si(999_400, 0) == "999k" and fmt.si(999_600, 0) == "1M"
    assert fmt.bytes_(999.4 * 2**20, 0) == "999M" and fmt.bytes_(2**30, 0) == "1G"


def test_the_largest_unit_has_no_next_one() -> None:
    assert fmt.si(999.4e12) == "999T" and fmt.si(1.5e15) == "1500T"
    assert fmt.bytes_(999.4 * 2**40) == "999T" and fmt.bytes_(1500 * 2**40) == "1500T"
