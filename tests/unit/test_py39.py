"""gputop runs on Python 3.9 (requires-python; Debian 11 and RHEL 9 ship it, and Debian 11's bcc module is
built for it), while the host's tools check less: ruff's py39 target refuses 3.10 syntax (match) but not
3.10 keywords or run-time unions, and mypy 2 checks against 3.10 at the oldest. This reads the code for
what Python 3.9 fails on at run time; the bullseye tier of tests/matrix runs it there (docs/matrix.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for d in ("gputop", "tests", "scripts", "bench", "deploy") for p in (ROOT / d).rglob("*.py")
               if "__snapshots__" not in p.parts)

#: keyword arguments Python 3.10 added: zip(strict=), dataclass(slots=, kw_only=, match_args=), field(kw_only=)
NEW_KEYWORDS = {"zip": {"strict"}, "dataclass": {"slots", "kw_only", "match_args"}, "field": {"kw_only"}}
#: names typing got in 3.10 and later (fine under ``if TYPE_CHECKING:``, never evaluated there)
NEW_TYPING = {"ParamSpec", "Concatenate", "TypeAlias", "TypeGuard", "is_typeddict", "Self", "Never", "LiteralString",
              "Required", "NotRequired", "Unpack", "TypeVarTuple", "assert_never", "assert_type", "reveal_type",
              "dataclass_transform", "override", "TypeIs", "ReadOnly"}
#: module attributes of 3.10 and later
NEW_ATTRIBUTES = {("itertools", "pairwise"), ("datetime", "UTC"), ("enum", "StrEnum"), ("asyncio", "TaskGroup"),
                  ("contextlib", "chdir"), ("hashlib", "file_digest"), ("contextlib", "aclosing")}
NEW_METHODS = {"bit_count"}
NEW_BUILTINS = {"aiter", "anext", "ExceptionGroup", "BaseExceptionGroup", "EncodingWarning"}
TYPE_NAMES = {"int", "float", "str", "bytes", "bool", "complex", "list", "dict", "tuple", "set", "frozenset", "type",
              "object", "None"}


#: match statements' node (Python 3.10+; on 3.9 ast.parse refuses one itself)
_MATCH: tuple[type, ...] = (ast.Match,) if hasattr(ast, "Match") else ()


def _type_like(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.Name):
        return node.id in TYPE_NAMES
    if isinstance(node, ast.Subscript):
        return True                     # list[int], Callable[..., T]: a generic alias
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_like(node.left) or _type_like(node.right)
    return False


def _annotations(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (not evaluated under ``from __future__ import annotations``)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        anns: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            anns += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]
            anns.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for ann in anns:
            if ann is not None:
                out |= {id(n) for n in ast.walk(ann)}
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                out |= {id(n) for n in ast.walk(stmt)}
    return out


def problems(path: Path) -> Iterator[str]:
    text = path.read_text()
    tree = ast.parse(text, str(path))
    future = "from __future__ import annotations" in text
    in_ann = _annotations(tree) if future else set()
    typing_only = _type_checking_only(tree)
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, _MATCH):
            yield f"{where}: a match statement"
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            bad = NEW_KEYWORDS.get(name, set()) & {k.arg for k in node.keywords}
            if bad:
                yield f"{where}: {name}({', '.join(sorted(bad))}=)"
            if isinstance(fn, ast.Attribute) and fn.attr in NEW_METHODS:
                yield f"{where}: .{fn.attr}()"
            if isinstance(fn, ast.Name) and fn.id in NEW_BUILTINS:
                yield f"{where}: {fn.id}()"
        elif isinstance(node, ast.ImportFrom) and id(node) not in typing_only:
            names = {a.name for a in node.names}
            if node.module in ("typing", "collections.abc") and names & NEW_TYPING:
                yield f"{where}: from {node.module} import {', '.join(sorted(names & NEW_TYPING))}"
            for mod, attr in NEW_ATTRIBUTES:
                if node.module == mod and attr in names:
                    yield f"{where}: from {mod} import {attr}"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in NEW_ATTRIBUTES or (
                    node.value.id == "typing" and node.attr in NEW_TYPING and id(node) not in typing_only):
                yield f"{where}: {node.value.id}.{node.attr}"
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and id(node) not in in_ann
              and (_type_like(node.left) or _type_like(node.right))):
            yield f"{where}: {ast.unparse(node)} evaluated at run time (Optional/Union on 3.9)"


def test_there_are_files() -> None:
    assert len(FILES) > 100


@pytest.mark.parametrize("part", ["gputop", "tests", "scripts", "bench", "deploy"])
def test_nothing_python_3_9_fails_on(part: str) -> None:
    found = [p for f in FILES if f.relative_to(ROOT).parts[0] == part for p in problems(f)]
    assert not found, "\n".join(found)
