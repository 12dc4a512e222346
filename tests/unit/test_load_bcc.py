"""load_bcc() takes the first real bcc among the dist-packages folders on sys.path (an offline bundle's,
put there by PYTHONPATH), then the distro's; the unrelated PyPI package called ``bcc`` never."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.sources import bpf

DISTRO_BCC = Path("/usr/lib/python3/dist-packages/bcc")


@pytest.fixture
def fresh_bcc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """load_bcc() as in a new process; the session's module is put back afterwards."""
    if not (DISTRO_BCC / "libbcc.py").is_file():
        pytest.skip("python3-bpfcc is not installed")
    saved = sys.modules.pop("bcc", None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    sys.modules.pop("bcc", None)
    if saved is not None:
        sys.modules["bcc"] = saved


def pypi_bcc(folder: Path) -> Path:
    """The layout of the PyPI package 'bcc' (0.1.10): bcc/__init__.py and bcc/bcc.py, no libbcc.py."""
    (folder / "bcc").mkdir(parents=True)
    (folder / "bcc" / "__init__.py").write_text("from .bcc import *\n")
    (folder / "bcc" / "bcc.py").write_text("raise ImportError('the PyPI bcc was imported')\n")
    return folder


def test_a_bundled_bcc_on_sys_path_comes_first(fresh_bcc: None, tmp_path: Path) -> None:
    site = tmp_path / "prefix" / "usr" / "lib" / "python3" / "dist-packages"
    shutil.copytree(DISTRO_BCC, site / "bcc", ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, str(pypi_bcc(tmp_path / "venv" / "dist-packages")))
    sys.path.insert(1, str(site))
    mod = bpf.load_bcc()
    assert Path(mod.__file__ or "") == site / "bcc" / "__init__.py"
    assert hasattr(mod, "BPF")


def test_the_pypi_bcc_is_never_picked(fresh_bcc: None, tmp_path: Path) -> None:
    sys.path.insert(0, str(pypi_bcc(tmp_path / "dist-packages")))
    mod = bpf.load_bcc()
    assert Path(mod.__file__ or "") == DISTRO_BCC / "__init__.py"


def test_the_distributions_places_in_order_and_none_another_user_can_change(tmp_path: Path) -> None:
    """Debian's and Ubuntu's python3-bpfcc, Fedora's and RHEL's python3-bcc under any python3.X (this
    interpreter's first, then the newest), a build from source under /usr/local; a directory group- or
    other-writable on the way (Debian's /usr/local/lib/python3.X is group staff's) is passed over."""
    from gputop.sources.bpf.program.program import bcc_dirs

    mine = sys.version_info.minor
    made = ["usr/lib/python3/dist-packages", "usr/lib/python3.6/site-packages",
            f"usr/lib/python3.{mine}/site-packages", f"usr/lib/python3.{mine + 2}/site-packages",
            "usr/lib64/python3.9/site-packages", "usr/local/lib/python3.12/dist-packages",
            "usr/local/lib/python3.13/site-packages", "usr/lib/python2.7/dist-packages"]
    for d in made:
        (tmp_path / d).mkdir(parents=True)
    tmp_path.chmod(0o755)
    (tmp_path / "usr/local/lib/python3.13").chmod(0o2775)            # root:staff, group-writable
    got = [str(Path(d).relative_to(tmp_path)) for d in bcc_dirs(str(tmp_path))]
    assert got == ["usr/lib/python3/dist-packages", f"usr/lib/python3.{mine}/site-packages",
                   f"usr/lib/python3.{mine + 2}/site-packages", "usr/lib/python3.6/site-packages",
                   "usr/lib64/python3.9/site-packages", "usr/local/lib/python3.12/dist-packages"]
