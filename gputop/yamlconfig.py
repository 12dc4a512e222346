"""Configuration files in Prometheus' YAML formats (``--http.config.file``, ``--web.config.file``): the file and
the files it names read once, bounded (a file of another user's may be anything: at most ``MAX_FILE_BYTES``), the
YAML parsed safely (no tags that build objects), each section held to its fields, every message naming the
field and the file, never a value (they hold secrets)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

#: the most read of a config file and of each file it names (a secret, a certificate)
MAX_FILE_BYTES = 1 << 20

T = TypeVar("T")


def _bounded(path: Path, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ValueError(f"{what}: cannot read {str(path)!a}: {e.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{what}: {str(path)!a} is larger than {MAX_FILE_BYTES >> 20} MiB")
    return data


def named_file(base: Path, name: object, what: str) -> Path:
    """A file the config names (relative: to the config's directory), checked readable and within the bound."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what}: expected a file name")
    path = Path(name) if os.path.isabs(name) else base / name
    _bounded(path, what)
    return path


def read_text(base: Path, name: object, what: str) -> str:
    """The text of a file the config names, read once and bounded."""
    path = named_file(base, name, what)
    try:
        return _bounded(path, what).decode()
    except UnicodeDecodeError:
        raise ValueError(f"{what}: {str(path)!a} is not UTF-8 text") from None


def section(doc: Mapping[str, Any], key: str, allowed: set[str], refused: frozenset[str] = frozenset(),
            who: str = "gputop") -> dict[str, Any]:
    """``doc[key]`` as a mapping (absent: empty) whose fields are ``allowed``; a ``refused`` one is said to be
    unsupported by ``who``, any other unknown."""
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected a mapping")
    for k in value:
        if k in refused:
            raise ValueError(f"{key}.{k} is not supported by {who}")
        if k not in allowed:
            raise ValueError(f"{key}: unknown field {str(k)!a} (fields: {', '.join(sorted(allowed))})")
    return value


def load(path: str, option: str, parse: Callable[[object, Path], T]) -> T:
    """The configuration in file ``path`` given to ``option``: its YAML, parsed safely, handed to
    ``parse(doc, directory)``; a ValueError says which file and what is wrong."""
    import yaml  # loaded when a config file is given

    data = _bounded(Path(path), f"{option} {path!a}")
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)      # its line; not the message, which may quote a secret
        raise ValueError(f"{option} {path!a}: not YAML{f' at line {mark.line + 1}' if mark is not None else ''}") \
            from None
    try:
        return parse(doc, Path(path).resolve().parent)
    except ValueError as e:
        raise ValueError(f"{option} {path!a}: {e}") from None
