"""Colour themes: TOML files loaded into ``textual.theme.Theme`` objects.

Built-in themes live in the package (``gputop/_data/themes`` in a wheel) or, in a development
install, in ``<repo>/themes``. Users add or override themes in ``<config dir>/themes/*.toml``.
A theme's name is its file name without ``.toml``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from textual.theme import Theme

from gputop.config import config_dir

DEFAULT_THEME = "dark"
NO_COLOR_THEME = "monochrome"
#: shown first, in this order, when cycling with `t`
PREFERRED_ORDER: tuple[str, ...] = ("dark", "light", "high-contrast", "monochrome")

_COLOR_KEYS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)


class ThemeError(ValueError):
    pass


def builtin_themes_dir(package: Path | None = None) -> Path:
    """``gputop/_data/themes`` when installed from a wheel, else ``<repo>/themes``."""
    package = package or Path(__file__).resolve().parent.parent
    packaged = package / "_data" / "themes"
    if packaged.is_dir():
        return packaged
    return package.parent / "themes"


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def theme_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for d in (builtin_themes_dir(), user_themes_dir()):
        if d.is_dir():
            for f in sorted(d.glob("*.toml")):
                files[f.stem] = f
    return files


def theme_names() -> tuple[str, ...]:
    """Names accepted by ``--theme``: the four built-ins first, then any others alphabetically."""
    names = set(theme_files())
    first = [n for n in PREFERRED_ORDER if n in names]
    return tuple(first + sorted(names - set(first)))


def no_color() -> bool:
    """https://no-color.org: a non-empty NO_COLOR asks for no colour."""
    return bool(os.environ.get("NO_COLOR"))


def check_theme_name(name: str) -> str:
    names = theme_names()
    if name not in names:
        raise ValueError(f"unknown theme {name!r}; choose one of: {', '.join(names)}")
    return name


def theme_from_mapping(name: str, raw: Mapping[str, Any]) -> Theme:
    if "primary" not in raw:
        raise ThemeError(f"theme {name!r} has no 'primary' colour")
    kw: dict[str, Any] = {k: str(raw[k]) for k in _COLOR_KEYS if k in raw}
    for key in ("luminosity_spread", "text_alpha"):
        if key in raw:
            kw[key] = float(raw[key])
    variables = raw.get("variables", {})
    if not isinstance(variables, Mapping):
        raise ThemeError(f"theme {name!r}: [variables] must be a table")
    return Theme(
        name=name,
        dark=bool(raw.get("dark", True)),
        variables={str(k): str(v) for k, v in variables.items()},
        **kw,
    )


def load_theme(path: Path) -> Theme:
    try:
        with path.open("rb") as f:
            raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ThemeError(f"cannot read theme {path}: {e}") from e
    return theme_from_mapping(path.stem, raw)


def load_themes() -> dict[str, Theme]:
    """Every loadable theme by name; unreadable user themes are skipped."""
    out: dict[str, Theme] = {}
    for name, path in theme_files().items():
        try:
            out[name] = load_theme(path)
        except ThemeError:
            continue
    return out


@dataclass(frozen=True)
class ChartPalette:
    """Colours for plotext: text of axes and labels, and the series in order (hex strings)."""

    text: str
    series: tuple[str, ...]


def chart_palette(theme: Theme) -> ChartPalette:
    v = theme.variables
    fallback = [theme.primary, theme.accent, theme.success, theme.secondary, theme.error, theme.warning]
    series = [v.get(f"chart-series-{i}") or fallback[i - 1] for i in range(1, 6)]
    return ChartPalette(
        text=v.get("chart-text") or theme.foreground or "#C0C0C0",
        series=tuple(s for s in series if s),
    )
