"""Text formatting of model values for display. Pure functions, no Textual.

Unknown values (``None``) always become ``N/A``, never 0.
"""

from __future__ import annotations

import math
import time

from gputop.model import SourceStatus
from gputop.textsafe import DEFAULT_LIMIT, sanitize

NA = "N/A"

_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BIN = ((1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K"))


def _finite(value: float | None) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def _sig3(x: float, cap: int | None = None, scaled: bool = False) -> str:
    """``x`` (0 <= x < 1000) with three significant digits: 953, 95.3, 9.53, 0.953 (a scaled value
    below 1, 0.98 of the next unit: two decimals); ``cap`` limits the decimals (an axis label asks for 0)."""
    decimals = 2 if x < 10 else 1 if x < 100 else 0
    if cap is not None:
        decimals = min(decimals, cap)
    if x < 1 and x != 0 and cap is None and not scaled:
        return f"{x:.3g}"
    text = f"{x:.{decimals}f}"
    if decimals and float(text) >= (10 if decimals == 2 else 100):     # 9.996 rounds to 10.00: 10.0
        text = f"{x:.{decimals - 1}f}"
    return text


def _scaled(value: float, scales: tuple[tuple[int | float, str], ...], next_at: float, digits: int | None,
            base: int = 1000) -> str:
    """The number style shared by ``si`` and ``bytes_`` (see docs/dashboard.md, Number style); ``base``: the
    ratio of one unit to the next (1000, 1024)."""
    mag = abs(value)
    sign = "-" if value < 0 else ""
    for i, (scale, suffix) in enumerate(scales):
        if mag >= scale * next_at:
            text = _sig3(mag / scale, digits, scaled=True)
            if float(text) >= base and i > 0:       # 999.7k rounds to 1000k: one unit up, 1.00M
                bigger, up = scales[i - 1]
                text = _sig3(mag / bigger, digits, scaled=True)
                suffix = up
            return f"{sign}{text}{suffix}"
    if float(value).is_integer():
        return f"{int(value)}"
    text = _sig3(mag, digits)
    if float(text) >= 1000 * next_at:               # 999.7 rounds to 1000: 1.00k
        scale, suffix = scales[-1]
        return f"{sign}{_sig3(mag / scale, digits, scaled=True)}{suffix}"
    return f"{sign}{text}"


def si(value: float | None, digits: int | None = None) -> str:
    """A count or rate, three significant digits with SI suffixes: 5, 95.3, 953, 1.00k, 12.3k, 4.10M.
    Integers below 1000 have no decimals. A value moves to the next unit where it rounds to one of it
    (999.4k is 999k, 999.5k is 1.00M). ``digits`` caps the decimals (axis labels: 0)."""
    if not _finite(value):
        return NA
    assert value is not None
    return _scaled(value, _SI, 0.9995, digits)


def bytes_(value: float | None, digits: int | None = None) -> str:
    """Bytes, three significant digits with binary suffixes (K, M, G, T = KiB, MiB, GiB, TiB: 1024^n):
    512, 1.50K, 50.2M, 79.6G. As ``si``, a value moves to the next unit where it rounds to one of it:
    1023.4M is 1023M (from 1000 to 1023 of a unit, four whole digits), 1023.5M is 1.00G, as htop and nvitop
    switch at 1024; never a fraction of the next unit. (A switch at 97% of the next unit, inside what the
    unit's own digits write, made a steady rate near 1 GiB/s flip between 992M and 0.97G frame to frame:
    issue 35.) The help and docs/dashboard.md say once that K/M/G/T of bytes are 1024-based."""
    if not _finite(value):
        return NA
    assert value is not None
    if abs(value) < 1023.5:
        return f"{round(value)}"
    return _scaled(value, _BIN, 1023.5 / 1024, digits, base=1024)


def shown(text: str, binary: bool = False) -> float | None:
    """The number a formatted value shows (``si``, ``bytes_``, ``pct``, ``num``): "1.5k" → 1500,
    "1.5M" → 1.5 × 2^20 (``binary``: a byte value), "45%" → 45; None for N/A. Arithmetic on what the screen
    shows (the compare screen's ratios) stays consistent with it."""
    text = text.strip().rstrip("%")
    if not text or text == NA:
        return None
    scale = 1.0
    for factor, suffix in _BIN if binary else _SI:
        if text.endswith(suffix):
            scale = factor
            text = text[: -len(suffix)]
            break
    try:
        return float(text) * scale
    except ValueError:
        return None


def pct(value: float | None, digits: int = 0) -> str:
    if not _finite(value):
        return NA
    assert value is not None
    return f"{value:.{digits}f}%"


def num(value: float | None, digits: int | None = None) -> str:
    """A plain number (an average), as ``si``: three significant digits (31.2, 953, 1.00k, 65.5k,
    123k), whole numbers below 1000 without decimals (80, not 80.0); ``digits`` caps the decimals."""
    return si(value, digits)


#: the mark before a value that reads low: in the fleet view, a rate (or the window's count) of a process whose
#: Prometheus series is younger than the window, or a total that sums one (docs/fleet.md, "Warming up")
LOW = "~"
#: the tag of such a process (the details' title, the compare screen's sides)
WARMING_UP = "[warming up]"


def reads_low(value: str, low: bool | None) -> str:
    """``value`` (formatted) with ``~`` before it where it reads low (``low``: its process is warming up);
    an unknown (N/A) or empty one as it is."""
    return f"{LOW}{value}" if low and value and value != NA else value


def low_title(title: str, low: bool | None) -> str:
    """A rate chart's title, saying while ``low`` (its process warming up) that its values read low."""
    return f"{title} (warming up: reads low)" if low else title


def text(value: object | None, limit: int = DEFAULT_LIMIT) -> str:
    """Any value for display; text from other processes is sanitised and capped at ``limit``
    characters (see gputop.textsafe: an escape is never cut in two)."""
    return NA if value is None else sanitize(str(value), limit)


def seconds(value: float | None) -> str:
    """A duration, three significant digits: 850µs, 12.5ms, 23.2s, 512s."""
    if not _finite(value):
        return NA
    assert value is not None
    if value < 1e-3:
        return f"{value * 1e6:.0f}µs"
    if value < 1:
        text = _sig3(value * 1e3, scaled=True)
        return "1.00s" if float(text) >= 1000 else f"{text}ms"
    return f"{_sig3(value, scaled=True)}s" if value < 999.5 else f"{value:.0f}s"


def clock(unix_s: float) -> str:
    """Local wall-clock time of a snapshot."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))


def cpu_share(ns_per_s: float | None) -> str:
    """CPU time spent per second of wall time, as % of one core (gputop's own BPF cost): at most three
    significant digits, to 0.01% of a core (0.47%, 9.06%, 17.0%, 153%)."""
    if not _finite(ns_per_s):
        return NA
    assert ns_per_s is not None
    share = ns_per_s / 1e7
    decimals = 0 if abs(share) >= 99.95 else 1 if abs(share) >= 9.995 else 2
    return f"{share:.{decimals}f}%"


#: the intervals a refresh or a recording uses (the dashboard's + and - steps, and -d's usual values)
_ROUND_INTERVALS = (0.1, 0.2, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0)


def interval(seconds_: float) -> str:
    """A refresh interval, rounded once as a person says it: 1s, 0.25s, 2.5s. A recording's measured
    interval (1.006 s, 0.994 s: the collector wakes a little late or early) within 5% of a usual
    interval is that interval, so a replay's header never switches between 'every 1s' and 'every 1.01s';
    any other value has two significant digits (1.3s, 45s)."""
    for usual in _ROUND_INTERVALS:
        if abs(seconds_ - usual) <= 0.05 * usual:
            return f"{usual:g}s"
    if seconds_ >= 10:
        return f"{seconds_:.0f}s"
    return f"{float(f'{seconds_:.2g}'):g}s"


def speed(factor: float) -> str:
    """A playback speed factor: 1, 4, 0.5, 1.3 (two significant digits at most)."""
    return f"{factor:.2g}" if factor < 10 else f"{factor:.0f}"


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


def _collapsed_lengths(name: str) -> dict[int, int]:
    """``len(_collapse(name, d))`` for every depth ``d`` from 1 to the deepest, in one pass. As
    ``_collapse`` goes, a bracket that opens level ``d`` starts hiding (``<…``) until its closing one
    (kept): a character stays when it is at a level below ``d``, an opening bracket when its level is
    ``d`` or less (two characters at ``d``), a closing one when its level before it closes is ``d`` or
    less. (Collapsing one level after another took time that grew with the square of the depth: 4,095
    nested brackets kept the details screen busy 7 s, issue 40.)"""
    plain: dict[int, int] = {}      # characters other than brackets, by the level they are at
    opens: dict[int, int] = {}      # opening brackets, by their level once open
    closes: dict[int, int] = {}     # closing brackets, by the level they close
    level = 0
    for ch in name:
        if ch in "<(":
            level += 1
            opens[level] = opens.get(level, 0) + 1
        elif ch in ">)":
            closes[level] = closes.get(level, 0) + 1
            level -= 1
        else:
            plain[level] = plain.get(level, 0) + 1
    deepest = max(opens, default=0)
    levels = sorted(set(plain) | set(opens) | set(closes))
    out: dict[int, int] = {}
    below = 0                       # plain characters and opening brackets below level d
    i = 0
    closed = 0                      # closing brackets at levels up to d
    for d in range(1, deepest + 1):
        while i < len(levels) and levels[i] < d:
            lv = levels[i]
            below += plain.get(lv, 0) + opens.get(lv, 0)
            closed += closes.get(lv, 0)
            i += 1
        out[d] = below + 2 * opens.get(d, 0) + closed + closes.get(d, 0)
    return out


def kernel_name(name: str, width: int) -> str:
    """A demangled kernel name shortened to ``width``: drop a leading ``void`` and the parameter
    list, then collapse template arguments from the innermost out (to the deepest level at which the
    name fits, found in one pass: ``_collapsed_lengths``), then cut."""
    if name.startswith("void "):
        name = name[5:]
    if len(name) <= width:
        return name
    name = _collapse(name, 1, "(")
    if len(name) > width:
        lengths = _collapsed_lengths(name)
        if lengths:
            name = _collapse(name, max((d for d, n in lengths.items() if n <= width), default=1))
    return fit(name, width)


def _strip_void(name: str) -> str:
    return name[5:] if name.startswith("void ") else name


def _base(short: str) -> str:
    """A shortened name up to its first collapsed bracket (the kernel, not its instance)."""
    cut = min((i for i in (short.find("<…"), short.find("(…")) if i >= 0), default=-1)
    return short if cut < 0 else short[:cut]


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _around(name: str, at: int, width: int) -> str:
    """``name`` cut to ``width`` so that position ``at`` (where it differs from another) shows:
    its start, an ellipsis, then the text from a little before ``at``."""
    if len(name) <= width:
        return name
    if width < 12:
        return fit(name, width)
    head = width // 3
    if at + max(8, width // 5) < width:     # the difference shows, with some of what follows
        return fit(name, width)
    start = max(head + 1, at - (width - head - 1) // 3)
    return fit(name[:head] + "…" + name[start:], width)


def kernel_names(names: list[str], width: int) -> list[str]:
    """Every name shortened with ``kernel_name``, but distinct names stay distinct: names that
    would read the same (templates of one kernel) show where they differ instead; names that
    still read the same get ``#2``, ``#3``."""
    short = [kernel_name(n, width) for n in names]
    groups: dict[str, list[int]] = {}
    for i, text in enumerate(short):
        # one kernel's template instances ("k<…>(…)" and "k<…>") read alike even when they differ
        groups.setdefault(_base(text), []).append(i)
    for members in groups.values():
        full = {_strip_void(names[i]) for i in members}
        if len(full) < 2:
            continue
        for i in members:
            mine = _strip_void(names[i])
            others = [other for other in full if other != mine]
            at = max((_common_prefix(mine, other) for other in others), default=0)
            short[i] = _around(mine, at, width)
    seen: dict[str, int] = {}
    for i, text in enumerate(short):
        if text in seen:
            seen[text] += 1
            tag = f" #{seen[text]}"
            short[i] = fit(text, max(1, width - len(tag))) + tag
        else:
            seen[text] = 1
    return short


#: the words the dashboard's header, batch's table and the docs use for a source's state; JSON (schema
#: gputop/1) keeps its values: ``status`` ok | unavailable | starting, UVM's ``scope`` cpu | cpu+gpu
STATE_WORDS = {"ok": "ok", "unavailable": "off", "starting": "starting", "degraded": "degraded"}
#: each source's name as shown (its key in ``Snapshot.sources`` is the lower-case JSON key)
SOURCE_LABELS = {"bpf": "BPF", "nvml": "NVML", "uvm": "UVM", "prometheus": "PROM"}


def source_state(key: str, st: SourceStatus | None) -> str:
    """A source's state in words: ``ok``, ``off`` (JSON ``unavailable``: the reason says why), ``starting``,
    and for UVM traced on the CPU side only (``scope`` cpu), ``CPU only``; ``N/A`` when the snapshot has
    no such source (as every unknown value is shown)."""
    if st is None:
        return NA
    if key == "uvm" and st.status == "ok" and st.scope == "cpu":
        return "CPU only"       # GPU faults and migrations are not traced
    return STATE_WORDS.get(st.status, text(st.status))


def time_plus(seconds: float | None) -> str:
    """CPU time as top's TIME+: minutes:seconds.hundredths (``12:34.56``); from 1,000 minutes on, hours
    and minutes (``16h40``); N/A when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return NA
    centis = round(seconds * 100)
    minutes, centis = divmod(centis, 6000)
    if minutes < 1000:
        return f"{minutes}:{centis // 100:02d}.{centis % 100:02d}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}"
