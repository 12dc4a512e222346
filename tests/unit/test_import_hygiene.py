"""Module boundaries of docs/architecture.md ("Module map", "Boundaries"), checked on the AST of every module:
textual and plotext only under gputop/ui/, bcc only in sources/bpf/program/program.py, pynvml only in
sources/nvml.py."""

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
    "bcc": lambda rel: rel.as_posix() == "sources/bpf/program/program.py",
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
    assert any(p.parent.name == "model" for p in MODULES)
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
    code = ("import sys, gputop.record, gputop.config, gputop.view.columns, gputop.view.compare, gputop.view.format\n"
            "bad = [m for m in ('textual', 'plotext') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- the import graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def gputop_imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, str]]:
    """(module imported, name imported or "") for every import of a gputop module in ``tree``, at any
    depth (a function's deferred import too), except under ``if TYPE_CHECKING:``; relative imports
    resolved against ``module``."""
    out: list[tuple[str, str]] = []
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend((a.name, "") for a in node.names if a.name.split(".")[0] == "gputop")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            if base.split(".")[0] == "gputop":
                out.extend((base, a.name) for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module -> the gputop modules it imports (``from gputop.x import y`` counts as ``gputop.x.y``
    where ``y`` is a module)."""
    modules = {_module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for base, imported in gputop_imports(ast.parse(path.read_text(encoding="utf-8")), name,
                                             path.name == "__init__.py"):
            target = f"{base}.{imported}" if f"{base}.{imported}" in modules else base
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_cycle_among_gputop_modules() -> None:
    """No two modules import each other, directly or around a loop, deferred imports included
    (``if TYPE_CHECKING:`` imports aside): each layer of docs/architecture.md only imports below it."""
    graph = import_graph(MODULES)
    assert graph["gputop.cli"] and graph["gputop.ui.app"]
    assert cycles(graph) == []


def test_no_private_name_is_imported_from_another_module() -> None:
    """A module uses another's public names only (``from gputop.x import _y`` is a tangle)."""
    bad = []
    for path in MODULES:
        name = _module_name(path)
        for base, imported in gputop_imports(ast.parse(path.read_text(encoding="utf-8")), name,
                                             path.name == "__init__.py"):
            if imported.startswith("_") and not imported.startswith("__"):
                bad.append(f"{name}: from {base} import {imported}")
    assert bad == []


def test_the_cycle_finder_sees_a_loop_and_deferred_imports() -> None:
    deferred = ast.parse("def f():\n    from gputop.b import x\nif TYPE_CHECKING:\n    from gputop import c\n")
    assert gputop_imports(deferred, "gputop.a", False) == [("gputop.b", "x")]
    relative = ast.parse("from . import base\nfrom .live import Sampler\n")
    assert gputop_imports(relative, "gputop.feeds.fleet", False) == [
        ("gputop.feeds", "base"), ("gputop.feeds.live", "Sampler")]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


#: the most lines a module of gputop/ may have (issue 33: modules with one job each)
MODULE_LINES_MAX = 500


def test_no_module_over_the_line_limit() -> None:
    long = {p.relative_to(PACKAGE).as_posix(): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MODULE_LINES_MAX}
    assert long == {}
