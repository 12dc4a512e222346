"""Text formatting of model values for display. Pure functions, no Textual.

Unknown values (``None``) always become ``N/A``, never 0.
"""

from __future__ import annotations

import math
import time

from gputop.textsafe import sanitize

NA = "N/A"

_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BIN = ((1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K"))


def _finite(value: float | None) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def si(value: float | None, digits: int = 1) -> str:
    """A count or rate with SI suffixes: 950, 12.3k, 4.1M."""
    if not _finite(value):
        return NA
    assert value is not None
    mag = abs(value)
    for scale, suffix in _SI:
        if mag >= scale * 0.9995:
            return f"{value / scale:.{digits}f}{suffix}"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.{digits}f}"


def bytes_(value: float | None, digits: int = 1) -> str:
    """Bytes with binary suffixes (K, M, G, T = 1024^n): 512, 1.5M, 79.6G."""
    if not _finite(value):
        return NA
    assert value is not None
    mag = abs(value)
    for scale, suffix in _BIN:
        if mag >= scale * 0.97:  # 1000 of a unit already reads as the next one (0.98G, not 1003.5M)
            return f"{value / scale:.{digits}f}{suffix}"
    return f"{round(value)}"


def pct(value: float | None, digits: int = 0) -> str:
    if not _finite(value):
        return NA
    assert value is not None
    return f"{value:.{digits}f}%"


def num(value: float | None, digits: int = 0) -> str:
    """A plain number; large ones get SI suffixes so they fit a column."""
    if not _finite(value):
        return NA
    assert value is not None
    if abs(value) >= 100_000:
        return si(value)
    return f"{value:.{digits}f}"


def text(value: object | None) -> str:
    """Any value for display; text from other processes is sanitised (see gputop.textsafe)."""
    return NA if value is None else sanitize(str(value))


def seconds(value: float | None) -> str:
    if not _finite(value):
        return NA
    assert value is not None
    if value < 1e-3:
        return f"{value * 1e6:.0f}µs"
    if value < 1:
        return f"{value * 1e3:.1f}ms"
    return f"{value:.2f}s"


def clock(unix_s: float) -> str:
    """Local wall-clock time of a snapshot."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))


def cpu_share(ns_per_s: float | None) -> str:
    """CPU time spent per second of wall time, as % of one core (gputop's own BPF cost)."""
    if not _finite(ns_per_s):
        return NA
    assert ns_per_s is not None
    return f"{ns_per_s / 1e7:.2f}%"


def interval(seconds_: float) -> str:
    return f"{seconds_:g}s"


def fit(value: str, width: int) -> str:
    """Cut ``value`` to ``width`` cells, marking the cut with an ellipsis."""
    if width <= 0:
        return ""
    if len(value) <= width:
        return value
    return value[: width - 1] + "…" if width > 1 else value[:1]


def fit_middle(value: str, width: int) -> str:
    """Cut ``value`` to ``width`` cells in the middle, keeping its start and its end."""
    if len(value) <= width:
        return value
    if width < 8:
        return fit(value, width)
    tail = (width - 1) * 2 // 5
    return value[: width - 1 - tail] + "…" + value[len(value) - tail :]


_SPARK = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], width: int, top: float = 100.0) -> str:
    """The last ``width`` values as block characters scaled to ``top``; unknown values are blank."""
    if width <= 0:
        return ""
    tail = values[-width:]
    out = []
    for v in tail:
        if not _finite(v):
            out.append(" ")
            continue
        assert v is not None
        level = 0 if top <= 0 else max(0.0, min(1.0, v / top))
        out.append(_SPARK[1 + round(level * (len(_SPARK) - 2))])
    return " " * (width - len(tail)) + "".join(out)


def fraction(part: float | None, whole: float | None) -> float | None:
    """part / whole for a bar; unknown when either is unknown or the whole is 0."""
    if part is None or not whole:
        return None
    return part / whole


def bar(share: float | None, width: int) -> tuple[str, str]:
    """A horizontal bar as (filled, empty) strings of total ``width``; unknown → all empty."""
    if width <= 0:
        return "", ""
    if not _finite(share):
        return "", " " * width
    assert share is not None
    filled = round(max(0.0, min(1.0, share)) * width)
    return "█" * filled, "░" * (width - filled)


def _collapse(name: str, depth: int, kinds: str = "<(") -> str:
    """Replace the contents of brackets (of ``kinds``) nested ``depth`` or deeper with an ellipsis."""
    pairs = {"<": ">", "(": ")"}
    out = []
    level = 0
    hidden_from = 0  # level at which hiding started (0: not hiding)
    for ch in name:
        if ch in "<(":
            level += 1
            if not hidden_from and level >= depth and ch in kinds:
                hidden_from = level
                out.append(ch + "…")
            elif not hidden_from:
                out.append(ch)
            continue
        if ch in ">)":
            if hidden_from == level:
                out.append(ch)
                hidden_from = 0
            elif not hidden_from:
                out.append(ch)
            level -= 1
            continue
        if not hidden_from:
            out.append(ch)
    del pairs
    return "".join(out)


def _max_depth(name: str) -> int:
    level = deepest = 0
    for ch in name:
        if ch in "<(":
            level += 1
            deepest = max(deepest, level)
        elif ch in ">)":
            level -= 1
    return deepest


def kernel_name(name: str, width: int) -> str:
    """A demangled kernel name shortened to ``width``: drop a leading ``void`` and the parameter
    list, then collapse template arguments from the innermost out, then cut."""
    if name.startswith("void "):
        name = name[5:]
    if len(name) <= width:
        return name
    name = _collapse(name, 1, "(")
    depth = _max_depth(name)
    while depth >= 1 and len(name) > width:
        name = _collapse(name, depth)
        depth -= 1
    return fit(name, width)
