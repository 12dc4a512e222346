"""The BPF program's text as bcc compiles it: ``bpf/gputop.bpf.c`` with each header it includes from
its own directory (``#include "NAME"``) written in place of the ``#include``, once.

bcc rewrites map operations (``procs.lookup(&k)``) and the tracepoints' ``args`` only in the text
it is given, never in a file that text includes (a helper in an included header compiles to a call
through a null pointer, which the verifier refuses). So bcc is given one text. Each header's part
starts with a ``#line`` marker, and the including file's rest with another: the compiler's messages
and the verifier's log name the file and the line in it. The compile cache's key is a hash of
this text (compilecache.key), so a change to any header is a change of key.

Standard library only: a matrix guest (scripts/matrix/guest_verifier.py) uses it without gputop's
dependencies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

#: a quoted include on a line of its own (angle-bracket includes are the kernel's headers: bcc's)
_INCLUDE = re.compile(r'[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"[ \t]*(?://[^\n]*)?\n?')


def expand(path: Path, search: Sequence[Path] = ()) -> str:
    """``path``'s text with every quoted ``#include`` replaced by the header's (expanded the same way;
    a header already written in is not written again), each found in the including file's directory,
    then in ``search``. Raises FileNotFoundError for a header found nowhere."""
    return f'#line 1 "{path.name}"\n' + _expand(path, tuple(search), set())


def _expand(path: Path, search: tuple[Path, ...], seen: set[Path]) -> str:
    seen.add(path.resolve())
    out: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(keepends=True), 1):
        m = _INCLUDE.fullmatch(line)
        if m is None:
            out.append(line)
            continue
        name = m.group(1)
        header = next((d / name for d in (path.parent, *search) if (d / name).is_file()), None)
        if header is None:
            raise FileNotFoundError(f"{path.name}:{number}: {name} not found in {path.parent}"
                                    + "".join(f" or {d}" for d in search))
        if header.resolve() in seen:
            out.append("\n")            # the line stays: the rest of the file keeps its numbers
            continue
        text = _expand(header, search, seen)
        out += [f'#line 1 "{name}"\n', text if text.endswith("\n") else text + "\n",
                f'#line {number + 1} "{path.name}"\n']
    return "".join(out)
