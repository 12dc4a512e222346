"""Reading schema ``gputop/1`` back: the snapshot a JSON object describes, every field checked.

A snapshot read back (a recording, which may come from anyone: docs/SECURITY.md, "Recordings") is
held to the schema field by field, here and nowhere else: an integer is an int (not a bool, a float
or text) within its range, a number is finite and within its range, text is a str of bounded
length, a list or an object has the shape its field says and a bounded length. Unknown fields are
ignored (the schema adds fields freely). A field the schema lets be null whose value is bad is read
as None (unknown) and the problem reported; any other bad value refuses the snapshot
(``SnapshotError``).

Each dataclass's reading is derived from its fields: the annotation's text (``int | None``,
``Mapping[str, CallBytes] | None``, ``tuple[KernelStat, ...]``; read with ``ast``, since Python 3.9
cannot evaluate ``X | None``) gives the shape, whether null is allowed, and the dataclasses nested;
a field's bound (``limits.bound`` in its metadata) or the default for its type gives the range.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from gputop.model import limits
from gputop.model.limits import (
    BOUND,
    COUNT,
    HIST_KEYS,
    MAX_ENTRIES,
    MAX_KEY,
    NUMBER,
    TEXT,
    Bound,
    Chars,
    Entries,
    Ints,
    Log2Hist,
    Numbers,
)
from gputop.model.schema import SCHEMA, Snapshot


class SnapshotError(ValueError):
    """A snapshot read from JSON that does not hold to schema gputop/1: the message says where
    (``processes[2].pid``) and what is wrong, in ASCII."""


class _Bad(Exception):
    """A bad value: ``what`` is wrong with it, at ``path`` (built outwards as it propagates)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path = ""

    def under(self, name: str) -> _Bad:
        self.path = _join(name, self.path)
        return self


class _Cut(Exception):
    """A value too long, kept cut to ``value``; ``what`` says so."""

    def __init__(self, value: Any, what: str) -> None:
        super().__init__(what)
        self.value = value
        self.what = what


_ABSENT: Any = object()
_KIND = {str: "text", int: "an integer", float: "a floating-point number", bool: "true/false",
         type(None): "null", list: "a list", dict: "an object"}
#: reads one value; may append problems (paths relative to the value) or raise _Bad or _Cut
Check = Callable[[Any, list[str]], Any]


def _join(name: str, sub: str) -> str:
    """``sub`` (a path or a problem that starts with one) inside ``name``."""
    if not sub:
        return name
    return name + sub if sub[0] == "[" else f"{name}.{sub}"


def _prefix(problems: list[str], start: int, name: str) -> None:
    for j in range(start, len(problems)):
        problems[j] = _join(name, problems[j])


def _kind(v: Any) -> str:
    return _KIND.get(type(v), "an unknown type")


def _not(expected: str, v: Any) -> _Bad:
    return _Bad(f"is not {expected} ({_kind(v)})")


def _key(k: str) -> str:
    return f"[{k!a}]"


@cache
def _ints(b: Ints) -> Check:
    lo, hi, label = b

    def check(v: Any, problems: list[str]) -> int:
        if type(v) is int:
            if lo <= v <= hi:
                return v
            raise _Bad(f"is out of range ({label})")
        raise _not("an integer", v)
    return check


@cache
def _numbers(b: Numbers) -> Check:
    """Numbers from ``lo`` (excluded when ``lo_open``) to below ``hi``; an integer stays one unless
    ``to_float``."""
    lo, hi, label, lo_open, to_float = b

    def check(v: Any, problems: list[str]) -> float:
        t = type(v)
        if t is float or t is int:
            if lo < v < hi or (v == lo and not lo_open):      # false for NaN
                return float(v) if to_float else v
            if t is float and not math.isfinite(v):
                raise _Bad("is not finite")
            raise _Bad(f"is out of range ({label})")
        raise _not("a number", v)
    return check


@cache
def _texts(b: Chars) -> Check:
    cap = b.most

    def check(v: Any, problems: list[str]) -> str:
        if type(v) is str:
            if len(v) <= cap:
                return v
            raise _Cut(v[: cap - 1] + "…", f"is longer than {cap} characters: cut")
        raise _not("text", v)
    return check


def _flag(v: Any, problems: list[str]) -> bool:
    if type(v) is bool:
        return v
    raise _not("true or false", v)


_count = _ints(COUNT)


#: a field as ``_read`` reads it: its name, its check, whether the schema lets it be null (a bad
#: value is then read as None), whether it must be there (no default), and whether its check may
#: report problems of its own (an object, a list or a keyed object)
_Field = tuple[str, Check, bool, bool, bool]


#: the leaves' checks by type: the bound's class, the check of one, the bound when the field gives none
_LEAVES: dict[str, tuple[type, Callable[[Any], Check], Bound]] = {
    "int": (Ints, _ints, COUNT), "float": (Numbers, _numbers, NUMBER), "str": (Chars, _texts, TEXT)}


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _derive(node: ast.expr, b: Bound | None, namespace: Mapping[str, Any], where: str) -> tuple[Check, bool]:
    """The check of a value annotated ``node`` (the annotation's syntax tree) with the field's bound
    ``b``, and whether it reports problems of its own (nested). A bound applies to the part of the
    annotation it fits: the leaves of its type, a list (``Entries``), the innermost
    ``Mapping[str, int]`` (``Log2Hist``); one that fits no part is an error here, at import."""
    def wrong() -> TypeError:
        return TypeError(f"{where}: the bound {b!r} does not fit {ast.unparse(node)!r}")

    if isinstance(node, ast.Name):
        if node.id in _LEAVES:
            kind, leaf, default = _LEAVES[node.id]
            if b is not None and not isinstance(b, kind):
                raise wrong()
            return leaf(default if b is None else b), False
        if node.id == "bool":
            if b is not None:
                raise wrong()
            return _flag, False
        cls = namespace.get(node.id)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            if b is not None:
                raise wrong()
            return _objects(_spec(cls), cls), True
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if node.value.id in ("Mapping", "dict") and len(args) == 2 and _is_name(args[0], "str"):
            if isinstance(b, Log2Hist) and _is_name(args[1], "int"):
                return _hist, False
            return _keyed(_derive(args[1], b, namespace, where)[0]), True
        if (node.value.id == "tuple" and len(args) == 2 and isinstance(args[1], ast.Constant)
                and args[1].value is Ellipsis):
            if not isinstance(b, Entries):
                raise TypeError(f"{where}: a list needs a bound (limits.Entries)")
            return _list(_derive(args[0], None, namespace, where)[0], b.limit, b.cut), True
    raise TypeError(f"{where}: no check for the annotation {ast.unparse(node)!r}")


@cache
def _spec(cls: type) -> tuple[_Field, ...]:
    """How ``_read`` reads the dataclass ``cls``: one entry per field, in order, from its annotation
    (``from __future__ import annotations``: its text) and its bound."""
    namespace = vars(sys.modules[cls.__module__])
    out = []
    for f in dataclasses.fields(cls):
        where = f"{cls.__name__}.{f.name}"
        if not isinstance(f.type, str):
            raise TypeError(f"{where}: the annotation is not text (from __future__ import annotations)")
        node = ast.parse(f.type, mode="eval").body
        nullable = isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and _is_none(node.right)
        if nullable:
            assert isinstance(node, ast.BinOp)
            node = node.left
        check, nested = _derive(node, f.metadata.get(BOUND), namespace, where)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, check, nullable, required, nested))
    return tuple(out)


def _keyed(value: Check) -> Check:
    """An object of at most ``MAX_ENTRIES`` keys of at most ``MAX_KEY`` characters (a direction,
    a source, a field's name: any, so that the schema can add one), each value read by ``value``."""
    def check(v: Any, problems: list[str]) -> dict[str, Any]:
        if type(v) is not dict:
            raise _not("an object", v)
        if len(v) > MAX_ENTRIES:
            raise _Bad(f"has more than {MAX_ENTRIES} entries")
        out = {}
        for k, x in v.items():
            if type(k) is not str or len(k) > MAX_KEY:
                raise _Bad(f"has a key longer than {MAX_KEY} characters")
            start = len(problems)
            try:
                out[k] = value(x, problems)
            except _Bad as e:
                raise e.under(_key(k)) from None
            except _Cut as e:
                out[k] = e.value
                problems.append(f"{_key(k)} {e.what}")
                continue
            if len(problems) > start:
                _prefix(problems, start, _key(k))
        return out
    return check


def _hist(v: Any, problems: list[str]) -> dict[str, int]:
    """Log2 buckets ``{"2^k": count}``, k from 0 to 63."""
    if type(v) is not dict:
        raise _not("an object", v)
    for k, n in v.items():
        if k not in HIST_KEYS:
            raise _Bad(f"has a bucket other than 2^0 to 2^63 ({str(k)[:24]!a})")
        try:
            _count(n, problems)
        except _Bad as e:
            raise e.under(_key(k)) from None
    return v


def _read(spec: tuple[_Field, ...], d: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """The fields of ``spec`` in ``d``, checked: keyword arguments of the dataclass."""
    kw: dict[str, Any] = {}
    for name, check, nullable, required, nested in spec:
        v = d.get(name, _ABSENT)
        if v is _ABSENT:
            if required:
                raise _Bad("is missing").under(name)
            continue
        if v is None and nullable:
            kw[name] = None
            continue
        start = len(problems)
        try:
            kw[name] = check(v, problems)
        except _Cut as e:
            if nested:
                _prefix(problems, start, name)
            kw[name] = e.value
            problems.append(f"{name} {e.what}")
            continue
        except _Bad as e:
            if not nullable:
                raise e.under(name) from None
            kw[name] = None
            del problems[start:]
            problems.append(f"{_join(name, e.path)} {e.what}: read as unknown")
            continue
        if nested and len(problems) > start:
            _prefix(problems, start, name)
    return kw


def _objects(spec: tuple[_Field, ...], cls: type) -> Check:
    """An object read as the dataclass ``cls``; one whose fields are all required, not null and plain
    values (``CallBytes``: thousands in a fleet's snapshot) by a shorter loop that reads the same."""
    if all(required and not nullable and not nested for _, _, nullable, required, nested in spec):
        return _record(tuple((name, check) for name, check, *_ in spec), cls)

    def check(v: Any, problems: list[str]) -> Any:
        if type(v) is not dict:
            raise _not("an object", v)
        return cls(**_read(spec, v, problems))
    return check


def _record(fields: tuple[tuple[str, Check], ...], cls: type) -> Check:
    """``_read`` of required, not-null plain fields, positionally."""
    def check(v: Any, problems: list[str]) -> Any:
        if type(v) is not dict:
            raise _not("an object", v)
        args = []
        for name, read in fields:
            x = v.get(name, _ABSENT)
            if x is _ABSENT:
                raise _Bad("is missing").under(name)
            try:
                args.append(read(x, problems))
            except _Bad as e:
                raise e.under(name) from None
            except _Cut as e:
                args.append(e.value)
                problems.append(f"{name} {e.what}")
        return cls(*args)
    return check


def _list(item: Check, limit: str, cut: bool = False) -> Check:
    """A list read by ``item``, of at most ``limits``'s attribute ``limit`` entries (looked up at each
    call: a test can lower it); with ``cut``, a longer one is cut to that many (the first ones: the
    list is sorted by importance)."""
    def check(v: Any, problems: list[str]) -> tuple[Any, ...]:
        if type(v) is not list:
            raise _not("a list", v)
        most: int = getattr(limits, limit)
        over = len(v) > most
        if over and not cut:
            raise _Bad(f"has more than {most} entries")
        out = []
        for i, x in enumerate(v[:most] if over else v):
            start = len(problems)
            try:
                out.append(item(x, problems))
            except _Bad as e:
                raise e.under(f"[{i}]") from None
            if len(problems) > start:
                _prefix(problems, start, f"[{i}]")
        if over:
            raise _Cut(tuple(out), f"has more than {most} entries: the first {most} kept")
        return tuple(out)
    return check



_spec(Snapshot)                 # every class's reading derived at import: a bad annotation fails here


def snapshot_from_dict(d: Mapping[str, Any], problems: list[str] | None = None) -> Snapshot:
    """The snapshot a JSON object (``json.loads`` of a line) describes, every field checked.

    Raises ``SnapshotError`` (a ValueError) for a snapshot that does not hold to the schema. A
    field the schema lets be null that holds a bad value is read as None; text longer than its
    cap is cut (``…`` marks the cut), and kernels beyond the top 20 are dropped: each such problem
    is appended to ``problems`` when given, as one ASCII line that says where and what.
    """
    if not isinstance(d, Mapping):
        raise SnapshotError(f"a snapshot is an object, not {_kind(d)}")
    schema = d.get("schema")
    if schema != SCHEMA:
        shown = f"{schema[:40]!a}" if isinstance(schema, str) else "None" if schema is None else _kind(schema)
        raise SnapshotError(f"unsupported schema {shown} (expected {SCHEMA!r})")
    found: list[str] = []
    try:
        kw = _read(_spec(Snapshot), d, found)
    except _Bad as e:
        raise SnapshotError(f"{e.path} {e.what}") from None
    if problems is not None:
        problems.extend(found)
    return Snapshot(**kw)


def snapshot_from_json(line: str) -> Snapshot:
    return snapshot_from_dict(json.loads(line))
