"""The contract between whatever produces snapshots (live collector, replay) and their consumers.

A feed runs its own thread and calls ``on_snapshot`` from that thread for every new snapshot.
Consumers (the Textual app, batch mode, the exporter) never block the feed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gputop.model import Snapshot

SnapshotCallback = Callable[[Snapshot], None]


class Feed(Protocol):
    #: "live" or "replay"
    kind: str

    def start(self, on_snapshot: SnapshotCallback) -> None:
        """Start the feed's thread; ``on_snapshot`` is called from that thread."""

    def stop(self) -> None:
        """Stop the thread and release sources (idempotent)."""

    def set_interval(self, interval_s: float) -> None:
        """Change the refresh interval (live) or the replay step duration."""

    def set_paused(self, paused: bool) -> None:
        """Stop producing snapshots while paused (the collector keeps its counters)."""


@dataclass(frozen=True)
class Filters:
    """Process filters of ``-p`` and ``-u`` (top's habits)."""

    pids: frozenset[int] = field(default_factory=frozenset)
    user: str | None = None

    def keep(self, pid: int, user: str | None) -> bool:
        if self.pids and pid not in self.pids:
            return False
        return not (self.user is not None and user != self.user)

    def apply(self, snap: Snapshot) -> Snapshot:
        if not self.pids and self.user is None:
            return snap
        from dataclasses import replace

        return replace(snap, processes=tuple(p for p in snap.processes if self.keep(p.pid, p.user)))
