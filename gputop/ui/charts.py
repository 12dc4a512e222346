"""plotext charts rendered to ANSI text for the details and compare screens.

Charts take the theme's palette (no painted canvas, so the widget background shows through) and
the size they are drawn at; unknown points (None) break a line instead of being drawn as 0.
plotext keeps global state: call these from the UI thread only. plotext is imported lazily.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Optional

from gputop.ui.themes import ChartPalette
from gputop.view.history import Series

Formatter = Callable[[Optional[float]], str]


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    try:
        return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    except ValueError:
        return 192, 192, 192


def _figure(width: int, height: int, palette: ChartPalette, colorless: bool) -> Any:
    import plotext as plt

    plt.terminal.limit(False, False)  # draw at the widget's size, not the terminal's
    f = plt.figure
    f.clear()
    f.plot_size(max(10, width), max(5, height))
    if colorless:
        f.theme("colorless")
    else:
        plt.add_theme("gputop", text=_rgb(palette.text), sequence=[_rgb(c) for c in palette.series])
        f.theme("gputop")
    return f


def _y_axis(f: Any, top: float, label: Callable[[float], str], base: int) -> None:
    """The y axis from 0 to round steps above ``top``; all zeros: one tick, 0, and no invented scale."""
    if top <= 0 or not math.isfinite(top):
        f.ruler("y").ticks([0.0], [label(0.0)])
        f.ruler("y").lim(0, 1)
        return
    ticks = _nice_ticks(top, base=base)
    f.ruler("y").ticks(ticks, [label(t) for t in ticks])
    f.ruler("y").lim(0, ticks[-1])


def _nice_ticks(top: float, count: int = 4, base: int = 1000) -> list[float]:
    """0 and round steps up to at least ``top``; ``base`` 1024 gives steps in KiB/MiB/GiB."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    unit = float(base ** max(0, math.floor(math.log(top, base)))) if top >= 1 else 1.0
    raw = top / unit / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9)) * unit
    n = math.ceil(top / step - 1e-9)
    return [i * step for i in range(n + 1)]


def _time_ticks(lo: float, hi: float) -> list[float]:
    span = max(hi - lo, 1.0)
    step = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600) if span / s <= 6), 7200)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) // step) + 1)]


def _time_labels(ticks: Sequence[float]) -> list[str]:
    """Seconds, or whole minutes when every tick is one (and the span is long)."""
    whole = [round(t) for t in ticks]
    if all(t % 60 == 0 for t in whole) and max(abs(t) for t in whole) >= 120:
        return [f"{t // 60}m" for t in whole]
    return [f"{t}s" for t in whole]


def _legend(title: str, names: Sequence[str], colours: Sequence[str | None], width: int) -> str:
    """One line: the title, then a coloured ■ and name per series (colour via ANSI truecolor)."""
    parts = [title] if title else []
    plain = len(title)
    for name, colour in zip(names, colours):
        if colour:
            r, g, b = _rgb(colour)
            parts.append(f"\x1b[38;2;{r};{g};{b}m■\x1b[0m {name}")
        else:
            parts.append(f"■ {name}")
        plain += 3 + len(name)
    line = "  ".join(parts)
    plain += 2 * max(0, len(parts) - 1)
    return line + " " * max(0, width - plain)


def _known(y: float | None) -> bool:
    return y is not None and math.isfinite(y)


def _runs(s: Series) -> list[tuple[list[float], list[float]]]:
    runs: list[tuple[list[float], list[float]]] = []
    xs: list[float] = []
    ys: list[float] = []
    for x, y in zip(s.xs, s.ys):
        if y is None or not math.isfinite(y):
            if xs:
                runs.append((xs, ys))
                xs, ys = [], []
            continue
        xs.append(x)
        ys.append(y)
    if xs:
        runs.append((xs, ys))
    return runs


def _marker(colour: str | None, symbol: str = "braille") -> Any:
    import plotext as plt

    if colour is None:
        return symbol
    return plt.marker(symbol, plt.pixel(_rgb(colour)))


def _message(width: int, height: int, text: str, title: str) -> str:
    lines = [title.center(width)] + [""] * max(0, height - 1)
    lines[min(len(lines) - 1, height // 2)] = text.center(width)
    return "\n".join(line.ljust(width) for line in lines[:height])


def line_chart(
    series: Sequence[Series],
    width: int,
    height: int,
    palette: ChartPalette,
    *,
    title: str = "",
    y_format: Formatter | None = None,
    y_binary: bool = False,
    colorless: bool = False,
    labels: Sequence[str] | None = None,
) -> str:
    """Lines of ``series`` (x in seconds) as ANSI text of ``width`` × ``height`` cells.

    The first line holds the title and the legend; ``y_binary`` puts y ticks on powers of 1024.
    """
    points = [(x, y) for s in series for x, y in zip(s.xs, s.ys) if y is not None and _known(y)]
    if not points:
        return _message(width, height, "no data yet", title)
    colours = [
        None if colorless or not palette.series else palette.series[i % len(palette.series)]
        for i in range(len(series))
    ]
    legend = _legend(title, labels or [s.name for s in series], colours, width)
    f = _figure(width, height - 1, palette, colorless)
    for s, colour in zip(series, colours):
        for xs, ys in _runs(s):
            sig = f.signal(xs, ys, marker=_marker(colour))
            sig.lines()
            f.draw(sig)
    _y_axis(f, max(y for _, y in points), y_format or (lambda v: f"{v:g}"), 1024 if y_binary else 1000)
    lo = min(x for x, _ in points)
    hi = max(x for x, _ in points)
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    xt = _time_ticks(lo, hi)
    f.ruler("x").lim(lo, hi)
    f.ruler("x").ticks(xt, _time_labels(xt))
    return legend + "\n" + str(f.build().string(colorless=colorless))


def bar_chart(
    labels: Sequence[str],
    values: Sequence[float],
    width: int,
    height: int,
    palette: ChartPalette,
    *,
    title: str = "",
    colorless: bool = False,
) -> str:
    """Vertical bars (histograms of log2 buckets) as ANSI text."""
    if not labels:
        return _message(width, height, "no data", title)
    f = _figure(width, height, palette, colorless)
    colour = None if colorless or not palette.series else palette.series[0]
    f.draw(f.bar(list(labels), list(values), marker=_marker(colour, "full")))
    _y_axis(f, max(values) if values else 0, _count_label, 1000)
    if title:
        f.title(title)
    return str(f.build().string(colorless=colorless))


def _count_label(v: float) -> str:
    from gputop.view import format as fmt

    return fmt.si(v, 0) if v >= 1000 else f"{v:g}"
