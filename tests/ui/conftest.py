"""Fixtures of the dashboard tests: a private config dir, UTC, no NO_COLOR, the scenario recording."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.model import Snapshot
from gputop.record import read_recording

from .ui_helpers import SCENARIO


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()
    yield
    os.environ.pop("TZ", None)
    time.tzset()


@pytest.fixture(scope="session")
def scenario() -> list[Snapshot]:
    return list(read_recording(SCENARIO))


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "gputop" / "config.toml"
