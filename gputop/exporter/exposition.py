"""The exposition of metric families as bytes: what prometheus_client's encoders write, byte for byte, in
a fraction of their time, for the two formats scrapers ask for (OpenMetrics 1.0.0 as Prometheus asks
for it, and the Prometheus text format 0.0.4); any other format, and any family beyond what gputop's
collectors make (units, timestamps, exemplars, other types, names outside the legacy character set), is
left to prometheus_client.

Rendering is most of the exporter's CPU at its defaults: prometheus_client's OpenMetrics encoder checks
every character of every sample's name one by one (the escaping of names outside the legacy set), about
40 ms for the 2,500 series of 32 processes. Here a family's names are checked once, by one regular
expression, and each label set is written once per distinct set of values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_1_0_0
from prometheus_client.utils import floatToGoString

#: the content types this module renders: prometheus_client's for OpenMetrics 1.0.0 with its default
#: escaping (Prometheus's Accept header names no escaping), and for the text format 0.0.4
OPENMETRICS = f"{OPENMETRICS_1_0_0}; escaping=underscores"
TEXT = CONTENT_TYPE_PLAIN_0_0_4
#: a name every encoder writes as it is, whatever the escaping: (the legacy label name set; sample names
#: in OpenMetrics are escaped as label names are, so ``:`` is left to prometheus_client)
_PLAIN_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = ("counter", "gauge", "histogram")


class Collected:
    """Families already collected, as an encoder's registry: prometheus_client's encoders take anything
    with ``collect()`` (a fallback renders what was collected once, never collecting again)."""

    def __init__(self, families: Sequence[Any]) -> None:
        self._families = families

    def collect(self) -> Iterable[Any]:
        return iter(self._families)


def _value_escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _plain(families: Sequence[Any]) -> bool:
    """Whether every family is one this module writes exactly as prometheus_client does."""
    names: set[str] = set()
    for m in families:
        if m.type not in _TYPES or m.unit or not _PLAIN_NAME.fullmatch(m.name):
            return False
        for s in m.samples:
            if s.timestamp is not None or s.exemplar is not None or s.native_histogram is not None \
                    or s.value is None:
                return False
            names.add(s.name)
            names.update(s.labels)
            if s.name.endswith(("_created", "_gsum", "_gcount")):   # the text format moves these: not ours
                return False
    return all(_PLAIN_NAME.fullmatch(n) for n in names)


class _Writer:
    """Label sets and values as text, each written once per render: a process's label set is the same in
    each of its series, and a histogram's buckets differ from each other only in ``le``."""

    def __init__(self) -> None:
        self._sets: dict[tuple[tuple[str, str], ...], str] = {}
        #: a bucket's label set without ``le`` -> the text before and after ``le``'s value
        self._around_le: dict[tuple[tuple[str, str], ...], tuple[str, str]] = {}
        self._values: dict[float, str] = {}

    def labels(self, labels: dict[str, str]) -> str:
        """``{k="v",...}`` in key order, values escaped; "" without labels."""
        if not labels:
            return ""
        items = tuple(labels.items())
        text = self._sets.get(items)
        if text is not None:
            return text
        if len(items) > 1 and items[-1][0] == "le":        # a bucket (le added last: HistogramMetricFamily)
            base = items[:-1]
            around = self._around_le.get(base)
            if around is None:
                around = self._around_le[base] = _around_le(base)
            return f"{around[0]}{_value_escape(items[-1][1])}{around[1]}"
        text = self._sets[items] = "{" + ",".join(f'{k}="{_value_escape(v)}"' for k, v in sorted(items)) + "}"
        return text

    def value(self, v: float) -> str:
        if v == 0:
            return floatToGoString(v)       # 0.0 and -0.0 are one key, two texts
        text = self._values.get(v)
        if text is None:
            text = self._values[v] = floatToGoString(v)
        return text


def _around_le(base: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """The text of a label set ``base`` + ``le`` before and after ``le``'s value (keys in order)."""
    before = [f'{k}="{_value_escape(v)}"' for k, v in sorted(base) if k < "le"]
    after = [f'{k}="{_value_escape(v)}"' for k, v in sorted(base) if k > "le"]
    return "{" + "".join(f"{part}," for part in before) + 'le="', '"' + "".join(f",{part}" for part in after) + "}"


def _openmetrics(families: Sequence[Any]) -> bytes:
    out: list[str] = []
    w = _Writer()
    for m in families:
        out.append(f"# HELP {m.name} {_value_escape(m.documentation)}\n# TYPE {m.name} {m.type}\n")
        out.extend(f"{s.name}{w.labels(s.labels)} {w.value(s.value)}\n" for s in m.samples)
    out.append("# EOF\n")
    return "".join(out).encode("utf-8")


def _text(families: Sequence[Any]) -> bytes:
    out: list[str] = []
    w = _Writer()
    for m in families:
        name = m.name + "_total" if m.type == "counter" else m.name
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {m.type}\n")
        out.extend(f"{s.name}{w.labels(s.labels)} {w.value(s.value)}\n" for s in m.samples)
    return "".join(out).encode("utf-8")


_RENDER: dict[str, Callable[[Sequence[Any]], bytes]] = {OPENMETRICS: _openmetrics, OPENMETRICS_1_0_0: _openmetrics,
                                                         TEXT: _text}


def render(registry: Any, encoder: Callable[[Any], bytes], content_type: str) -> bytes:
    """``encoder(registry)``'s bytes (``encoder`` and ``content_type`` as prometheus_client's
    ``choose_encoder`` gives them): written here for the formats of ``_RENDER``, else by ``encoder``."""
    fast = _RENDER.get(content_type)
    if fast is None:
        return encoder(registry)
    families = list(registry.collect())
    if not _plain(families):
        return encoder(Collected(families))
    return fast(families)
