"""Where a formatted number changes unit (gputop/view/format.py ``si``, ``bytes_``; docs/dashboard.md, "Number
style"). Issue 35: a steady rate near 1 GiB/s flipped between ``992M`` and ``0.97G`` frame to frame, as bytes
moved to the next unit at 97% of it, inside the range their own unit's digits still write. Now counts and bytes
alike move to the next unit where the value rounds to one of it, as htop and nvitop switch at 1024: 999.5k is
``1.00M``, 1023.5M is ``1.00G`` (1000M to 1023M keep four whole digits); a value is never written as a
fraction of the next unit, and both sides of a switch read the same (``999k``/``1.00M``, ``1023M``/``1.00G``)."""

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
    return len(m.group(1).replace(".", "").lstrip("0")) or 1


@pytest.mark.parametrize(("f", "units"), [(fmt.si, SI), (fmt.bytes_, BIN)], ids=["si", "bytes"])
@pytest.mark.parametrize("boundary", [1, 2, 3, 4])
def test_every_unit_boundary_is_where_the_value_rounds_to_one_of_the_next(f, units, boundary: int) -> None:  # type: ignore[no-untyped-def]
    below, scale = units[boundary - 1]
    up, up_scale = units[boundary]
    base = round(up_scale / scale)
    for x in (950.0, 990.0, 992.0, 993.3, 999.0, 999.49):
        assert f(x * scale) == f"{x:.0f}{below}", (x, below)
    assert f(base * 0.97 * scale) == f"{base * 0.97:.0f}{below}"        # where bytes used to switch: no more
    assert f((base - 0.51) * scale) == f"{base - 1}{below}"              # the last value of the unit below
    if base == 1024:                                                     # 1000 to 1023: four whole digits
        assert [f(x * scale) for x in (999.5, 1000, 1004, 1017.7, 1023.4)] == [
            f"1000{below}", f"1000{below}", f"1004{below}", f"1018{below}", f"1023{below}"]
    # from (base - 0.5) on: one of the next unit, three significant digits
    assert f((base - 0.5) * scale) == f"1.00{up}"
    assert f(up_scale) == f"1.00{up}"
    assert f(1.5 * up_scale) == f"1.50{up}"
    assert f(0.5 * up_scale).endswith(below)                              # never a fraction of the next unit


@pytest.mark.parametrize(("f", "units"), [(fmt.si, SI), (fmt.bytes_, BIN)], ids=["si", "bytes"])
def test_a_rate_jittering_near_a_boundary_keeps_its_unit(f, units) -> None:  # type: ignore[no-untyped-def]
    """Issue 35's rate (992M and 993.3M), and rates jittering ±1% around 97% of every next unit (where bytes
    used to switch), around the middle of a unit and, for bytes, around 1000 of a unit (a decimal target such
    as 1 GB/s): one unit across every frame; ±0.5% around 97%: one width too."""
    assert {fmt.bytes_(x * 2**20) for x in (991.6, 992.0, 992.4, 993.0, 993.3, 993.6)} <= {"992M", "993M", "994M"}
    for (unit, scale), (_, up_scale) in zip(units, units[1:]):
        centres = [(0.97 * up_scale / scale, 10), (500.0, 10), (0.97 * up_scale / scale, 5)]
        if f is fmt.bytes_:
            centres.append((1000.0, 10))
        for centre, spread in centres:
            shown = {f(centre * (1 + d / 1000) * scale) for d in range(-spread, spread + 1)}
            assert {t[-1] if t[-1].isalpha() else "" for t in shown} == {unit}, (centre, unit, shown)
            if spread == 5:
                assert len({len(t) for t in shown}) == 1, (centre, unit, shown)


@pytest.mark.parametrize(("f", "units"), [(fmt.si, SI), (fmt.bytes_, BIN)], ids=["si", "bytes"])
def test_three_significant_digits_five_cells_at_most_everywhere(f, units) -> None:  # type: ignore[no-untyped-def]
    """A sweep from 1 to 10^15 (1.3% apart): every value shows three significant digits at least (four whole
    digits from 1000 to 1023 of a binary unit), in five cells at most (``1023M``, ``12.3k``, ``1.00G``); the
    unit never goes down as the value grows, and what is shown reads back within half a unit of its last digit."""
    x = 1.0
    order = [u for u, _ in units]
    last = 0
    while x < 999 * units[-1][1]:
        text = f(x)
        m = NUMBER.match(text)
        assert m is not None, text
        assert len(text) <= 5 and not text.startswith("0."), (x, text)
        if x >= 100:
            assert significant(text) >= 3, (x, text)
        rank = order.index(m.group(2))
        assert rank >= last, (x, text)
        last = rank
        back = fmt.shown(text, binary=f is fmt.bytes_)
        assert back is not None and abs(back - x) <= 0.0051 * x + 0.5, (x, text, back)
        x *= 1.013


def test_negative_and_unknown_values() -> None:
    assert (fmt.si(-999.4), fmt.si(-999.5), fmt.si(-2500)) == ("-999", "-1.00k", "-2.50k")
    assert (fmt.bytes_(-1023.4 * 2**20), fmt.bytes_(-1023.5 * 2**20)) == ("-1023M", "-1.00G")
    assert fmt.bytes_(None) == fmt.si(float("nan")) == fmt.bytes_(float("inf")) == fmt.NA
    assert (fmt.bytes_(999.4), fmt.bytes_(1023.4), fmt.bytes_(1023.5), fmt.bytes_(512)) == ("999", "1023", "1.00K",
                                                                                          "512")


def test_axis_labels_cap_the_decimals_on_the_same_boundaries() -> None:
    assert fmt.si(999_400, 0) == "999k" and fmt.si(999_600, 0) == "1M"
    assert fmt.bytes_(1023.4 * 2**20, 0) == "1023M" and fmt.bytes_(2**30, 0) == "1G"


def test_the_largest_unit_has_no_next_one() -> None:
    assert fmt.si(999.4e12) == "999T" and fmt.si(1.5e15) == "1500T"
    assert fmt.bytes_(1023.4 * 2**40) == "1023T" and fmt.bytes_(1500 * 2**40) == "1500T"
