"""The offline bundle's scripts refuse bad input with exit 2 (usage) or one error line and one hint
(exit 1), before touching anything. The gathering and installing themselves: tests/bpf/test_offline_bundle.py."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "offline-install.sh"
GATHER = ROOT / "scripts" / "offline-bundle.sh"


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60)


def fake_bundle(tmp_path: Path, damaged: bool = False) -> Path:
    """A bundle folder without packages: install.sh and a SHA256SUMS over one wheel-named file."""
    b = tmp_path / "bundle"
    (b / "wheels").mkdir(parents=True)
    shutil.copy(INSTALL, b / "install.sh")
    whl = b / "wheels" / "x-1-py3-none-any.whl"
    whl.write_bytes(b"not a wheel")
    digest = hashlib.sha256(b"something else" if damaged else b"not a wheel").hexdigest()
    (b / "SHA256SUMS").write_text(f"{digest}  wheels/x-1-py3-none-any.whl\n")
    return b


def test_install_usage() -> None:
    for argv in ([], ["a", "b"], ["--all"], ["--bogus"]):
        res = run(INSTALL, *argv)
        assert (res.returncode, res.stdout, res.stderr) == (2, "", f"usage: {INSTALL} [--all] PREFIX\n")


def test_install_refuses_a_damaged_bundle_before_writing(tmp_path: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed (not a Debian or Ubuntu machine)")
    b = fake_bundle(tmp_path, damaged=True)
    res = run(b / "install.sh", tmp_path / "prefix")
    assert res.returncode == 1
    assert res.stderr.splitlines()[-2:] == [
        f"install.sh: error: the bundle in {b} is damaged (checksums differ)",
        "hint: copy it again from where it was gathered"]
    assert not (tmp_path / "prefix").exists()


def test_install_refuses_a_folder_that_is_no_bundle_and_odd_prefixes(tmp_path: Path) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed (not a Debian or Ubuntu machine)")
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(INSTALL, lone / "install.sh")
    res = run(lone / "install.sh", tmp_path / "prefix")
    assert (res.returncode, res.stderr) == (1, f"install.sh: error: {lone} is not a gputop bundle (no SHA256SUMS)\n"
                                               "hint: run install.sh from the bundle's folder\n")
    b = fake_bundle(tmp_path)
    res = run(b / "install.sh", "/")
    assert (res.returncode, res.stderr) == (1, "install.sh: error: PREFIX must not be /\n"
                                               "hint: give a folder of its own, e.g. /opt/gputop\n")
    odd = tmp_path / "it's"
    res = run(b / "install.sh", odd)
    assert (res.returncode, res.stderr) == (1, f"install.sh: error: PREFIX {odd} holds a character the wrapper "
                                               "cannot quote\nhint: choose a plain path\n")


def test_gather_usage_and_python_version(tmp_path: Path) -> None:
    usage = f"usage: {GATHER} gather DIR [--kernel RELEASE]... [--python-version X.Y] [--headers-meta PKG]\n"
    for argv in ([], ["gather"], ["scatter", str(tmp_path)], ["gather", str(tmp_path), "--bogus"],
                 ["gather", str(tmp_path), "--kernel"]):
        res = run(GATHER, *argv)
        assert (res.returncode, res.stderr) == (2, usage)
    res = run(GATHER, "gather", tmp_path / "b", "--python-version", "3")
    assert (res.returncode, res.stderr) == (1, "offline-bundle: error: --python-version 3 is not of the form 3.N\n"
                                               "hint: give the GPU hosts' Python version, e.g. --python-version 3.12\n")
    assert not (tmp_path / "b").exists()
