"""docs/architecture.md holds to the code: its module map has one row for every module under gputop/
and none for a file that does not exist; its schema tables list exactly the fields of every dataclass
of the model gputop/model/ exports (plus what the JSON writer adds, ``summary``), each with its annotation as type;
every path it names exists and every link to a document lands on a heading of it."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import gputop.model as model

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "gputop"

MODULE_MAP = "Module map"
SCHEMA = "Schema gputop/1"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_CODE = re.compile(r"^`([^`]+)`$")
#: paths of this repository the document may name (in backticks or bare)
_PATH = re.compile(r"(?<![\w/.-])((?:gputop|tests|bench|scripts|bpf|deploy)/[\w./-]*\w)")
_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#([^)\s]+))?\)")


def modules_on_disk(package: Path = PACKAGE) -> set[str]:
    """Every module of the package, as its path from the repository root (``gputop/sources/bpf/program/program.py``)."""
    return {p.relative_to(package.parent).as_posix() for p in package.rglob("*.py") if "__pycache__" not in p.parts}


def section(text: str, title: str, level: int = 2) -> str:
    """The body of the heading ``title`` (backticks ignored) down to the next heading of its level or higher."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        m = re.match(r"^(#+) (.*)$", line)
        if m and len(m.group(1)) <= level:
            if inside:
                break
            inside = len(m.group(1)) == level and m.group(2).replace("`", "").strip() == title
            continue
        if inside:
            out.append(line)
    return "\n".join(out)


def subsections(text: str) -> dict[str, str]:
    """The level-3 headings of ``text`` (backticks dropped) and their bodies."""
    names = [m.group(1).replace("`", "").strip() for m in re.finditer(r"^### (.*)$", text, re.M)]
    return {name: section(text, name, 3) for name in names}


def table_rows(text: str) -> list[list[str]]:
    """The body rows of every Markdown table in ``text``, as cells (``\\|`` inside a cell is a pipe)."""
    rows: list[list[str]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        if re.match(r"^\|[\s:|-]+\|$", line):
            continue                                    # the separator under a header
        if i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1]):
            continue                                    # a header row
        cells = [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(line.strip())[1:-1]]
        rows.append(cells)
    return rows


def module_rows(doc: str) -> list[str]:
    """The modules the module map has a row for, in order (a row's first cell is the module's path)."""
    out = []
    for cells in table_rows(section(doc, MODULE_MAP)):
        m = _CODE.match(cells[0]) if cells else None
        if m and m.group(1).startswith("gputop/"):
            out.append(m.group(1))
    return out


def module_map_problems(doc: str, modules: Iterable[str]) -> list[str]:
    rows = module_rows(doc)
    have = set(modules)
    problems = [f"{m}: no row in the module map" for m in sorted(have - set(rows))]
    problems += [f"{m}: a row for a module that does not exist" for m in sorted(set(rows) - have)]
    problems += [f"{m}: {rows.count(m)} rows" for m in sorted({m for m in rows if rows.count(m) > 1})]
    return problems


def schema_problems(doc: str, classes: Mapping[str, type], extra: Mapping[str, set[str]] | None = None) -> list[str]:
    """Each class's table under "### `Name`" of the schema section against its dataclass fields: the
    same names (plus ``extra[name]``, keys the JSON writer adds), each once, typed as annotated."""
    tables = subsections(section(doc, SCHEMA))
    problems = [f"{name}: a schema table for no dataclass of gputop/model/"
                for name in sorted(set(tables) - set(classes))]
    for name, cls in sorted(classes.items()):
        if name not in tables:
            problems.append(f"{name}: no schema table")
            continue
        rows = [(m.group(1), cells[1] if len(cells) > 1 else "")
                for cells in table_rows(tables[name]) if cells and (m := _CODE.match(cells[0]))]
        listed = [field for field, _ in rows]
        fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        wanted = set(fields) | (extra or {}).get(name, set())
        problems += [f"{name}.{f}: not in its table" for f in sorted(wanted - set(listed))]
        problems += [f"{name}.{f}: in its table, not a field" for f in sorted(set(listed) - wanted)]
        twice = sorted({f for f in listed if listed.count(f) > 1})
        problems += [f"{name}.{f}: listed {listed.count(f)} times" for f in twice]
        for field, typ in rows:
            shown = typ.replace("`", "").strip()
            if field in fields and shown != fields[field]:
                problems.append(f"{name}.{field}: type {shown!r} in the table, {fields[field]!r} in the code")
    return problems


def schema_classes() -> dict[str, type]:
    """Every dataclass gputop.model exports, defined in its package: the types of schema gputop/1."""
    return {name: cls for name, cls in inspect.getmembers(model, inspect.isclass)
            if dataclasses.is_dataclass(cls) and cls.__module__.startswith(model.__name__ + ".")}


def json_extra() -> dict[str, set[str]]:
    """Keys the JSON writer puts in a snapshot beyond its fields (the derived ``summary``)."""
    written = model.snapshot_to_dict(model.Snapshot(time=1.0, interval_s=1.0, host="h"))
    return {"Snapshot": set(written) - {f.name for f in dataclasses.fields(model.Snapshot)}}


def slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", path.read_text(encoding="utf-8"), re.M)}


# ---------------------------------------------------------------- the document against the code


def test_every_module_has_one_row_and_every_row_a_module() -> None:
    assert module_map_problems(DOC.read_text(encoding="utf-8"), modules_on_disk()) == []


def test_the_schema_tables_list_every_field_of_the_model_with_its_type() -> None:
    classes = schema_classes()
    assert {"Snapshot", "ProcSample", "Counts", "Rates", "KernelStat", "GpuSample", "SourceStatus"} <= set(classes)
    assert json_extra() == {"Snapshot": {"summary"}}
    assert schema_problems(DOC.read_text(encoding="utf-8"), classes, json_extra()) == []


def test_every_path_named_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    named = {m.group(1).rstrip(".") for m in _PATH.finditer(text)}
    assert "gputop/feeds/live.py" in named and "bpf/gputop.bpf.c" in named
    # gputop/1 is the schema's name; gputop/_data/ is where a wheel puts bpf/ and themes/
    missing = sorted(p for p in named if not (ROOT / p).exists() and p != model.SCHEMA
                     and not p.startswith("gputop/_data/"))
    assert missing == []


def test_every_link_lands_on_a_heading() -> None:
    text = DOC.read_text(encoding="utf-8")
    links = _LINK.findall(text)
    assert len(links) > 20
    broken = []
    for target, anchor in links:
        path = DOC.parent / target
        if not path.is_file():
            broken.append(f"{target}: no such document")
        elif anchor and anchor not in anchors(path):
            broken.append(f"{target}#{anchor}: no such heading")
    own = anchors(DOC)
    broken += [f"#{a}: no such heading" for a in re.findall(r"\]\(#([^)\s]+)\)", text) if a not in own]
    assert broken == []


def test_every_table_row_has_its_header_s_cells() -> None:
    """An unescaped pipe (a type such as ``int | None``) would shift a row's cells."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    width = 0
    bad = []
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            width = 0
            continue
        cells = len(_CELL_SPLIT.split(line.strip())) - 2
        if width == 0:
            width = cells                               # the header
        elif cells != width:
            bad.append(f"line {i + 1}: {cells} cells, its header {width}")
    assert bad == []


# ---------------------------------------------------------------- the checks catch drift


_SAMPLE = """\
## Module map

| module | purpose | boundary |
|---|---|---|
| `gputop/model.py` | the model | stdlib |
| `gputop/gone.py` | a module since removed | — |
| `gputop/model.py` | twice | — |

## Schema gputop/1

### `Pair`

| field | type | unit | null |
|---|---|---|---|
| `a` | `int` | a count | required |
| `c` | `int \\| None` | not a field | — |
| `b` | `int \\| None` | drifted | — |

## Next
"""


@dataclasses.dataclass(frozen=True)
class Pair:
    a: int
    b: str | None = None
    d: float | None = None


def test_a_module_without_a_row_or_a_row_without_a_module_is_reported() -> None:
    assert module_rows(_SAMPLE) == ["gputop/model.py", "gputop/gone.py", "gputop/model.py"]
    assert module_map_problems(_SAMPLE, {"gputop/model.py", "gputop/new.py"}) == [
        "gputop/new.py: no row in the module map",
        "gputop/gone.py: a row for a module that does not exist",
        "gputop/model.py: 2 rows",
    ]


def test_a_field_added_removed_or_retyped_without_the_table_is_reported() -> None:
    assert schema_problems(_SAMPLE, {"Pair": Pair, "Other": Pair}) == [
        "Other: no schema table",
        "Pair.d: not in its table",
        "Pair.c: in its table, not a field",
        "Pair.b: type 'int | None' in the table, 'str | None' in the code",
    ]
    assert schema_problems(_SAMPLE, {"Pair": Pair}, {"Pair": {"c", "d"}}) == [
        "Pair.d: not in its table",
        "Pair.b: type 'int | None' in the table, 'str | None' in the code",
    ]


def test_headings_become_the_anchors_links_use() -> None:
    assert slug("Host values (`gputop/sources/host.py`)") == "host-values-gputopsourceshostpy"
    assert slug("Schema gputop/1") == "schema-gputop1"
    assert slug("One launch, probe to screen") == "one-launch-probe-to-screen"
