"""The dashboard's options (``DashboardOptions``, from the command line) and its live settings
(``Settings``): options beat config.toml beats defaults (``resolve_settings``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gputop import config as config_mod
from gputop.feeds.base import Filters
from gputop.model import ProcKey
from gputop.ui import themes
from gputop.view import columns

#: names accepted by ``DashboardOptions.sort`` (and ``-s``): every column of the process table
SORT_KEYS: tuple[str, ...] = columns.SORT_KEYS
#: names accepted by ``DashboardOptions.theme`` (and ``--theme``)
THEME_NAMES = themes.theme_names

#: refresh intervals that ``+`` and ``-`` step through (seconds)
INTERVAL_STEPS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
DEFAULT_INTERVAL = 1.0


@dataclass(frozen=True)
class DashboardOptions:
    #: refresh interval; None: from config.toml, else 1 s
    interval_s: float | None = None
    #: sort key name (see SORT_KEYS); None: from config.toml, else "launches"
    sort: str | None = None
    filters: Filters = field(default_factory=Filters)
    #: theme name (see THEME_NAMES()); None: from config.toml, else "dark" ("monochrome" under NO_COLOR)
    theme: str | None = None
    readonly: bool = False
    baseline: Path | None = None
    #: also write every snapshot here (JSON Lines)
    record: Path | None = None
    #: --record-max-size, --record-keep: the recording's rotation (None: never rotated)
    record_max_bytes: int | None = None
    record_keep: int = 4
    #: open the compare screen on these PIDs (A, B) at start (keys in the fleet view: (instance, PID))
    compare_pids: tuple[ProcKey, ProcKey] | None = None
    #: a line shown under the header
    banner: str | None = None
    #: the recorded process to compare against; None: the one with the most launches
    baseline_pid: int | None = None
    #: flip the sort column's natural direction; None: from config.toml, else False
    reverse: bool | None = None
    #: visible columns in order (see SORT_KEYS); None: from config.toml, else all
    columns: tuple[str, ...] | None = None
    #: SIGINT, SIGTERM and SIGHUP quit as ``q`` does (the terminal restored, the feed stopped): the
    #: program's own dashboards; off under tests (the test runner's signals stay its own)
    quit_on_signals: bool = False


@dataclass
class Settings:
    """The live, user-adjustable view settings."""

    interval_s: float
    sort: str
    reverse: bool
    columns: tuple[str, ...]
    theme: str


def resolve_settings(options: DashboardOptions, cfg: config_mod.Config, warnings: list[str]) -> Settings:
    """Options beat config.toml beats defaults. Bad options raise ValueError; bad config values warn."""
    if options.sort is not None:
        columns.check_sort_key(options.sort)
    if options.theme is not None:
        themes.check_theme_name(options.theme)
    if options.columns is not None:
        columns.check_columns(options.columns)
    if options.interval_s is not None and not 0.05 <= options.interval_s <= 3600:
        raise ValueError(f"refresh interval must be between 0.05 and 3600 s, got {options.interval_s:g}")

    def from_config(value: str | None, check: Callable[[str], str], what: str) -> str | None:
        if value is None:
            return None
        try:
            check(value)
        except ValueError as e:
            warnings.append(f"config: {what}: {e}; ignored")
            return None
        return value

    sort = options.sort or from_config(cfg.sort, columns.check_sort_key, "sort") or columns.DEFAULT_SORT
    if options.theme is not None:
        theme = options.theme
    elif themes.no_color():
        theme = themes.NO_COLOR_THEME
    else:
        theme = from_config(cfg.theme, themes.check_theme_name, "theme") or themes.DEFAULT_THEME
    cols: tuple[str, ...] = columns.SORT_KEYS
    if options.columns is not None:
        cols = columns.check_columns(options.columns)
    elif cfg.columns is not None:
        try:
            cols = columns.check_columns(cfg.columns)
        except ValueError as e:
            warnings.append(f"config: columns: {e}; ignored")
    interval = options.interval_s or cfg.interval_s or DEFAULT_INTERVAL
    reverse = options.reverse if options.reverse is not None else bool(cfg.reverse)
    return Settings(interval_s=interval, sort=sort, reverse=reverse, columns=cols, theme=theme)
