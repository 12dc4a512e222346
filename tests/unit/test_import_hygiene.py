"""Module boundaries of docs/architecture.md ("Module map", "Boundaries"), checked on the AST of every module:
textual and plotext only under gputop/ui/, bcc only in sources/bpf.py, pynvml only in sources/nvml.py."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gputop"

#: top-level module -> where it may be imported (paths relative to the package)
ALLOWED = {
    "textual": lambda rel: rel.parts[0] == "ui",
    "plotext": lambda rel: rel.parts[0] == "ui",
    "rich": lambda rel: rel.parts[0] == "ui",
    "bcc": lambda rel: rel.as_posix() == "sources/bpf.py",
    "pynvml": lambda rel: rel.as_posix() == "sources/nvml.py",
}


def imported_modules(tree: ast.AST) -> set[str]:
    """Top-level names of every module imported: import statements, importlib.import_module("x"),
    __import__("x")."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value.split(".")[0])
    return names


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_package_has_modules() -> None:
    assert any(p.name == "model.py" for p in MODULES)
    assert any(p.parent.name == "ui" for p in MODULES)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_respect_module_boundaries(path: Path) -> None:
    rel = path.relative_to(PACKAGE)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for name in imported_modules(tree):
        if name in ALLOWED:
            assert ALLOWED[name](rel), f"{rel} imports {name}, which docs/architecture.md confines elsewhere"


def test_detector_sees_every_import_form() -> None:
    source = "import textual.app\nfrom plotext import x\nimportlib.import_module('bcc')\n__import__('pynvml')\n"
    tree = ast.parse(source)
    assert imported_modules(tree) == {"textual", "plotext", "bcc", "pynvml"}


def test_non_ui_entry_points_do_not_load_textual() -> None:
    """Batch mode and the CLI's argument checks import these without paying for the UI."""
    code = ("import sys, gputop.record, gputop.config, gputop.ui.columns, gputop.ui.compare, gputop.ui.format\n"
            "bad = [m for m in ('textual', 'plotext') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
