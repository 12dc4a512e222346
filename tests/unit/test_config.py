"""gputop.config: where config.toml lives, tolerant reading, merging writes."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import pytest

from gputop.config import Config, config_path, load_config, save_config


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)


def test_path_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_path() == tmp_path / "home" / ".config" / "gputop" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_path() == tmp_path / "xdg" / "gputop" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")  # the spec says: absolute paths only
    assert config_path() == tmp_path / "home" / ".config" / "gputop" / "config.toml"


def test_missing_file_gives_defaults() -> None:
    assert load_config() == (Config(), [])


def test_round_trip() -> None:
    cfg = Config(theme="light", interval_s=2.0, sort="grid", reverse=True, columns=("pid", "launches"))
    save_config(cfg)
    assert load_config() == (cfg, [])
    text = config_path().read_text()
    assert text.startswith("# gputop") and 'theme = "light"' in text


def test_save_merges_and_keeps_other_keys() -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text('exporter_listen = "127.0.0.1:9464"\ntheme = "dark"\n')
    save_config(Config(sort="pid"))
    raw = tomllib.loads(path.read_text())
    assert raw == {"exporter_listen": "127.0.0.1:9464", "theme": "dark", "sort": "pid"}
    save_config(Config(theme="light"))
    assert load_config()[0] == Config(theme="light", sort="pid")
    assert not list(path.parent.glob(".*tmp"))


def test_broken_toml_warns_and_gives_defaults() -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text("theme = \n")
    cfg, warnings = load_config()
    assert cfg == Config() and len(warnings) == 1 and "cannot read" in warnings[0]


@pytest.mark.parametrize(
    ("text", "key"),
    [("theme = 3", "theme"), ("interval_s = 0", "interval_s"), ("interval_s = true", "interval_s"),
     ('sort = ["a"]', "sort"), ('reverse = "yes"', "reverse"), ("columns = []", "columns"),
     ("columns = [1, 2]", "columns")],
)
def test_bad_values_are_ignored_with_a_warning(text: str, key: str) -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text(text + '\nsort_other = 1\ntheme_ok = "x"\n')
    cfg, warnings = load_config()
    assert getattr(cfg, key) is None
    assert len(warnings) == 1 and key in warnings[0]


def test_save_into_a_new_directory(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "config.toml"
    save_config(Config(theme="monochrome"), target)
    assert load_config(target)[0].theme == "monochrome"


def test_corrupt_file_is_backed_up_before_it_is_replaced() -> None:
    """Changing a setting over a file gputop cannot parse keeps the user's content: the file is
    copied to config.toml.bak first, and loading it said so (defaults, one notice)."""
    path = config_path()
    path.parent.mkdir(parents=True)
    corrupt = b'theme = "dark"\nexporter_listen = "0.0.0.0:9464"\n[[broken\n# my notes\n'
    path.write_bytes(corrupt)
    cfg, warnings = load_config()
    assert cfg == Config() and len(warnings) == 1
    assert warnings[0].startswith(f"config: cannot read {path}: ") and warnings[0].endswith(
        "using defaults (the file is kept: saving settings copies it to config.toml.bak first)")
    assert save_config(Config(theme="light")) == path.with_name("config.toml.bak")
    assert path.with_name("config.toml.bak").read_bytes() == corrupt
    assert load_config() == (Config(theme="light"), [])
    assert save_config(Config(sort="pid")) is None          # gputop's own file: no second backup
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.toml", "config.toml.bak"]


def test_unknown_keys_are_kept_and_a_commented_file_is_backed_up() -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    text = '# chosen for the NOC wall\ntheme = "dark"  # high contrast\n[exporter]\nlisten = ":9464"\n'
    path.write_text(text)
    assert save_config(Config(sort="grid")) == path.with_name("config.toml.bak")
    assert tomllib.loads(path.read_text()) == {"theme": "dark", "sort": "grid", "exporter": {"listen": ":9464"}}
    assert path.with_name("config.toml.bak").read_text() == text            # the comments too
    edited = text.replace("[exporter]", "reverse = true\n[exporter]")
    path.write_text(edited)                                                  # edited again by hand
    assert save_config(Config(theme="light")) == path.with_name("config.toml.bak.1")   # the first backup stays
    assert path.with_name("config.toml.bak").read_text() == text
    assert path.with_name("config.toml.bak.1").read_text() == edited
    assert load_config()[0] == Config(theme="light", reverse=True)


def test_unreadable_file_is_never_replaced(tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    target.mkdir()                                   # something there that cannot be read as a file
    with pytest.raises(OSError):
        save_config(Config(theme="light"), target)
    assert target.is_dir() and not list(tmp_path.glob("*.bak*")) and not list(tmp_path.glob(".*tmp"))
    cfg, warnings = load_config(target)
    assert cfg == Config() and len(warnings) == 1 and "cannot read" in warnings[0]
