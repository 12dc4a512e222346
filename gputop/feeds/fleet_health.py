"""The fleet's health as the prometheus source's reason says it: the nodes that are down (``N of M nodes
down: …``), the nodes that export per container, and each source once for the fleet (``sources``).
Stdlib only."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gputop.feeds.fleet_client import Sample, sample_value
from gputop.model import SourceStatus

#: down nodes named in the message (then ", …")
DOWN_SHOWN = 5


def nodes_down(down: Sequence[str], targets: int, name: Any) -> str:
    """``1 of 2 nodes down: node-b`` (``name``: a target's node name, or None: the target is named)."""
    shown = [name(i) or i for i in down[:DOWN_SHOWN]]
    more = ", …" if len(down) > DOWN_SHOWN else ""
    return f"{len(down)} of {targets} node{'s' if targets != 1 else ''} down: {', '.join(shown)}{more}"


_DOWN = re.compile(r"\d+ of \d+ nodes? down: ")


def down_clause(reason: str | None) -> str | None:
    """The ``N of M nodes down: …`` clause of the prometheus source's reason (its other clauses say
    something that is no failure, such as nodes that export per container)."""
    for part in (reason or "").split("; "):
        if _DOWN.match(part):
            return part
    return None


def per_container(instances: Sequence[str], name: Any) -> str:
    """``node-c exports per container (no process rows)``: exporters run with --aggregate container."""
    shown = [name(i) or i for i in instances[:DOWN_SHOWN]]
    more = ", …" if len(instances) > DOWN_SHOWN else ""
    verb = "exports" if len(instances) == 1 else "export"
    return f"{', '.join(shown)}{more} {verb} per container (no process rows)"


def omitted(counts: Mapping[str, float], name: Any) -> str:
    """``node-a: 1200 processes over --max-processes (summed per container, no rows)``: exporters that
    give only their busiest processes series of their own."""
    shown = [f"{name(i) or i}: {int(n)}" for i, n in list(counts.items())[:DOWN_SHOWN]]
    more = ", …" if len(counts) > DOWN_SHOWN else ""
    return f"{', '.join(shown)}{more} processes over --max-processes (summed per container, no rows)"


def fleet_sources(samples: list[Sample], node_of: Mapping[str, str], nodes: frozenset[str]) -> dict[str, SourceStatus]:
    """Each source once for the fleet: ok when every node reports it up, else which nodes do not."""
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    for s in samples:
        m = s["metric"]
        instance = m.get("instance", "")
        node = node_of.get(instance) or instance
        if nodes and node_of.get(instance) not in nodes:
            continue
        (up if sample_value(s) >= 1 else down).setdefault(m.get("source", "?"), []).append(node)
    out: dict[str, SourceStatus] = {}
    for name in sorted(set(up) | set(down)):
        off = sorted(down.get(name, []))
        if not off:
            out[name] = SourceStatus("ok")
        else:
            n = len(off) + len(up.get(name, []))
            shown = ", ".join(off[:3]) + (", …" if len(off) > 3 else "")
            out[name] = SourceStatus("unavailable", reason=f"off on {len(off)} of {n} nodes: {shown}")
    return out
