"""The dashboard's persisted settings: ``$XDG_CONFIG_HOME/gputop/config.toml`` (default ``~/.config``).

Holds the theme, the refresh interval, the sort column and direction and the visible columns.
Reading never fails the program: a missing file gives defaults, a broken one gives defaults plus
warnings to show. Writing merges into the file, so keys written by others are kept; a file that
gputop would not write back as it is (content it cannot parse, comments, the user's own layout)
is first copied to ``config.toml.bak`` (``.bak.1``... when that holds something else), so nothing
the user wrote is ever lost. A file that cannot be read is never replaced.
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
else:  # pragma: no cover - Python 3.10 needs the tomli backport
    import tomli as tomllib

import tomli_w

#: the keys this module owns in config.toml
KEYS: tuple[str, ...] = ("theme", "interval_s", "sort", "reverse", "columns")
HEADER = b"# gputop dashboard settings, saved when changed in the dashboard\n"


@dataclass(frozen=True)
class Config:
    """Saved settings; ``None`` means "not set" (the built-in default applies)."""

    theme: str | None = None
    interval_s: float | None = None
    sort: str | None = None
    reverse: bool | None = None
    columns: tuple[str, ...] | None = None


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "gputop"


def config_path() -> Path:
    return config_dir() / "config.toml"


def _typed(raw: Mapping[str, Any], warnings: list[str]) -> Config:
    kw: dict[str, Any] = {}

    def bad(key: str, want: str) -> None:
        warnings.append(f"config: {key} should be {want}, got {raw[key]!r}; ignored")

    if "theme" in raw:
        if isinstance(raw["theme"], str):
            kw["theme"] = raw["theme"]
        else:
            bad("theme", "a string")
    if "interval_s" in raw:
        v = raw["interval_s"]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0.05 <= v <= 3600:
            kw["interval_s"] = float(v)
        else:
            bad("interval_s", "a number of seconds between 0.05 and 3600")
    if "sort" in raw:
        if isinstance(raw["sort"], str):
            kw["sort"] = raw["sort"]
        else:
            bad("sort", "a string")
    if "reverse" in raw:
        if isinstance(raw["reverse"], bool):
            kw["reverse"] = raw["reverse"]
        else:
            bad("reverse", "true or false")
    if "columns" in raw:
        v = raw["columns"]
        if isinstance(v, list) and v and all(isinstance(c, str) for c in v):
            kw["columns"] = tuple(v)
        else:
            bad("columns", "a non-empty list of column names")
    return Config(**kw)


def _read_raw(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def load_config(path: Path | None = None) -> tuple[Config, list[str]]:
    """Return the saved settings and warnings about anything ignored (never raises for bad files)."""
    path = path or config_path()
    warnings: list[str] = []
    try:
        raw = _read_raw(path)
    except FileNotFoundError:
        return Config(), warnings
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        warnings.append(f"config: cannot read {path}: {e}; using defaults (the file is kept: saving settings "
                        f"copies it to {path.name}.bak first)")
        return Config(), warnings
    return _typed(raw, warnings), warnings


def _backup(path: Path, data: bytes) -> Path:
    """Copy ``data`` (the file's bytes) next to it, to the first of ``NAME.bak``, ``NAME.bak.1``...
    that is free or already holds the same bytes; never overwrite another backup."""
    for n in range(1000):
        bak = path.with_name(f"{path.name}.bak" + (f".{n}" if n else ""))
        try:
            with bak.open("xb") as f:
                f.write(data)
            return bak
        except FileExistsError:
            try:
                if bak.read_bytes() == data:
                    return bak
            except OSError:
                continue
    raise FileExistsError(f"no free name for a backup of {path}")


def save_config(cfg: Config, path: Path | None = None) -> Path | None:
    """Write the fields of ``cfg`` that are set into the file (atomically); keys not set and keys of
    others stay as they are. When the file held what gputop would not write back as it was
    (content it cannot parse, comments, formatting), it is backed up first: return the backup's
    path (else None). May raise OSError (then the file is untouched)."""
    path = path or config_path()
    raw: dict[str, Any] = {}
    backup: Path | None = None
    try:
        data: bytes | None = path.read_bytes()      # any other OSError: never replace what cannot be read
    except FileNotFoundError:
        data = None
    if data is not None:
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            raw = {}
        if data != HEADER + tomli_w.dumps(raw).encode():
            backup = _backup(path, data)
    for key in KEYS:
        value = getattr(cfg, key)
        if value is not None:
            raw[key] = list(value) if isinstance(value, tuple) else value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(HEADER)
            tomli_w.dump(raw, f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return backup
