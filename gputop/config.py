"""The dashboard's persisted settings: ``$XDG_CONFIG_HOME/gputop/config.toml`` (default ``~/.config``).

Holds the theme, the refresh interval, the sort column and direction and the visible columns.
Reading never fails the program: a missing file gives defaults, a broken one gives defaults plus
warnings to show. Writing merges into the file, so keys written by others are kept; a file that
gputop would not write back as it is (content it cannot parse, comments, the user's own layout)
is first copied to ``config.toml.bak`` (``.bak.1``... when that holds something else), so nothing
the user wrote is ever lost. A file that cannot be read is never replaced.

As root (``sudo -E`` keeps HOME and XDG_CONFIG_HOME pointing into a user's directories), a config
directory that another user controls is not used: root's own home from the passwd database is, and
the file is read only when it is root's own regular file (never through a link). Backups and the
file itself are written mode 0600 through ``gputop.safefiles`` (an ``O_EXCL`` temporary name renamed
into place), never through a link.
"""

from __future__ import annotations

import contextlib
import os
import pwd
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

from gputop import safefiles

#: the keys this module owns in config.toml
KEYS: tuple[str, ...] = ("theme", "interval_s", "sort", "reverse", "columns")
HEADER = b"# gputop dashboard settings, saved when changed in the dashboard\n"
#: a settings file larger than this is not read as root
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Config:
    """Saved settings; ``None`` means "not set" (the built-in default applies)."""

    theme: str | None = None
    interval_s: float | None = None
    sort: str | None = None
    reverse: bool | None = None
    columns: tuple[str, ...] | None = None


def _root_home() -> Path:
    """Root's home directory, from the passwd database (not $HOME)."""
    return Path(pwd.getpwuid(0).pw_dir)


def _config_dir_and_note() -> tuple[Path, str | None]:
    """``$XDG_CONFIG_HOME/gputop`` (default ``~/.config/gputop``). As root, one that another user
    controls is passed over for root's own, and the second value says why (else None)."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    chosen = (Path(base) if base and Path(base).is_absolute() else Path.home() / ".config") / "gputop"
    if os.geteuid() != 0:
        return chosen, None
    reason = safefiles.untrusted_reason(chosen, missing_ok=True)
    if reason is None:
        return chosen, None
    own = _root_home() / ".config" / "gputop"
    return own, f"config: {chosen} is not used as root ({reason}); using {own}"


def config_dir() -> Path:
    return _config_dir_and_note()[0]


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


def _read_bytes(path: Path, dir_fd: int | None = None) -> bytes:
    """The file's bytes; as root only a regular file of root's that no one else can write, in a
    trusted directory, never through a link (safefiles.UnsafePathError otherwise)."""
    if os.geteuid() != 0:
        return path.read_bytes()
    if dir_fd is None:
        return safefiles.read_file(path, max_bytes=MAX_BYTES)
    return safefiles.read_at(dir_fd, path.name, max_bytes=MAX_BYTES, shown=str(path))


def load_config(path: Path | None = None) -> tuple[Config, list[str]]:
    """Return the saved settings and warnings about anything ignored (never raises for bad files)."""
    warnings: list[str] = []
    if path is None:
        directory, note = _config_dir_and_note()
        path = directory / "config.toml"
        warnings += [note] if note else []
    try:
        raw = tomllib.loads(_read_bytes(path).decode("utf-8"))
    except FileNotFoundError:
        return Config(), warnings
    except safefiles.UnsafePathError as e:
        warnings.append(f"config: cannot read {path}: {e}; using defaults (as root, gputop reads only root's own "
                        f"regular files, never through a link; the file is kept)")
        return Config(), warnings
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        warnings.append(f"config: cannot read {path}: {e}; using defaults (the file is kept: saving settings "
                        f"copies it to {path.name}.bak first)")
        return Config(), warnings
    return _typed(raw, warnings), warnings


def _backup(dir_fd: int, path: Path, data: bytes) -> Path:
    """Copy ``data`` (the file's bytes) next to it, to the first of ``NAME.bak``, ``NAME.bak.1``...
    that is free or already holds the same bytes; never overwrite another backup (nor write
    through a link: the name is created with ``O_EXCL``, mode 0600)."""
    for n in range(1000):
        bak = path.with_name(f"{path.name}.bak" + (f".{n}" if n else ""))
        try:
            safefiles.create_at(dir_fd, bak.name, data, 0o600)
            return bak
        except FileExistsError:
            with contextlib.suppress(OSError):
                if safefiles.read_at(dir_fd, bak.name, max_bytes=len(data)) == data:
                    return bak
    raise FileExistsError(f"no free name for a backup of {path}")


def save_config(cfg: Config, path: Path | None = None) -> Path | None:
    """Write the fields of ``cfg`` that are set into the file (atomically, mode 0600); keys not set
    and keys of others stay as they are. When the file held what gputop would not write back as it
    was (content it cannot parse, comments, formatting), it is backed up first: return the backup's
    path (else None). May raise OSError (then the file is untouched), ``safefiles.UnsafePathError``
    as root for a directory or file another user controls."""
    path = path or config_path()
    d = safefiles.open_dir(path.parent, strict=os.geteuid() == 0, create=True)
    try:
        return _save_at(d, path, cfg)
    finally:
        os.close(d)


def _save_at(dir_fd: int, path: Path, cfg: Config) -> Path | None:
    raw: dict[str, Any] = {}
    backup: Path | None = None
    try:
        data: bytes | None = _read_bytes(path, dir_fd)  # any other OSError: never replace what cannot be read
    except FileNotFoundError:
        data = None
    if data is not None:
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            raw = {}
        if data != HEADER + tomli_w.dumps(raw).encode():
            backup = _backup(dir_fd, path, data)
    for key in KEYS:
        value = getattr(cfg, key)
        if value is not None:
            raw[key] = list(value) if isinstance(value, tuple) else value
    safefiles.write_atomic_at(dir_fd, path.name, HEADER + tomli_w.dumps(raw).encode(), 0o600)
    return backup
