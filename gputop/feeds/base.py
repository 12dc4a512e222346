"""The contract between whatever produces snapshots (live collector, replay, fleet) and their consumers.

A feed runs its own thread and calls ``on_snapshot`` from that thread for every new snapshot.
Consumers (the Textual app, batch mode, the exporter) never block the feed.

Every feed derives from ``Feed``: four methods it must have (``start``, ``stop``, ``set_interval``,
``set_paused``), a ``kind`` (``FeedKind``), and its optional capabilities, each declared here with a
default: ``capabilities`` (what the dashboard may offer: stepping, pacing, signals, several nodes,
its own series; by default the row of ``CAPABILITIES`` for its kind), ``notices``, ``error``,
``progress``, ``speed``/``set_speed``/``playback_speed``, ``step``, ``watch``, ``series`` and
``refreshes`` (batch mode). Consumers ask the feed, never probe it for attributes; a feed object
that has only the four methods and ``kind`` (``MinimalFeed``) gets every default through ``adopt``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Protocol

from gputop.model import ProcKey, Snapshot, Summary

SnapshotCallback = Callable[[Snapshot], None]
#: a process's own time series, by name of ``gputop.view.history.PROC_SERIES``: ``[(time, value)]``
SeriesByName = dict[str, list[tuple[float, float]]]


class FeedKind(str, Enum):
    """What a feed reads: this host's processes, a recording, or every node through Prometheus."""

    LIVE = "live"
    REPLAY = "replay"
    FLEET = "fleet"


@dataclass(frozen=True)
class Capabilities:
    """What the dashboard may offer over a feed (its keys, its words, its charts)."""

    #: ``.`` and ``,`` step through the snapshots one by one (``Feed.step``)
    steps: bool = False
    #: ``[`` and ``]`` change the speed (``Feed.set_speed``, ``Feed.speed``, ``Feed.playback_speed``)
    paces: bool = False
    #: plays a recording: snapshots may come again (stepped back, looped), it plays at its recorded
    #: pace until an interval is given, and that interval is a playback step, not a saved setting
    recorded: bool = False
    #: processes of several nodes: NODE, NAMESPACE and POD columns, keys (instance, PID)
    nodes: bool = False
    #: the feed serves its processes' time series (``Feed.series``) instead of the dashboard's history
    own_series: bool = False
    #: why ``k`` sends no signal to the feed's processes; None: they are this host's, running now
    signal_refusal: str | None = None


#: the capabilities of each kind of feed (a feed may declare others by overriding ``capabilities``)
CAPABILITIES: dict[FeedKind, Capabilities] = {
    FeedKind.LIVE: Capabilities(),
    FeedKind.REPLAY: Capabilities(steps=True, paces=True, recorded=True,
                                  signal_refusal="replaying a recording: its processes are not live, no signal sent"),
    FeedKind.FLEET: Capabilities(nodes=True, own_series=True,
                                 signal_refusal="fleet view (--prometheus): the processes run on other nodes, "
                                                "no signal sent"),
}


class MinimalFeed(Protocol):
    """The least a feed is: what ``adopt`` turns into a ``Feed`` with every default."""

    @property
    def kind(self) -> str: ...

    def start(self, on_snapshot: SnapshotCallback) -> None: ...

    def stop(self) -> None: ...

    def set_interval(self, interval_s: float) -> None: ...

    def set_paused(self, paused: bool) -> None: ...


class Feed:
    """The base of every feed: the four methods a feed must have, and its optional capabilities with
    their defaults (a feed without them)."""

    #: what the feed reads (a subclass sets it)
    kind: FeedKind = FeedKind.LIVE
    #: what the dashboard says once at start (a recording's cut last line, bad lines before the first good one)
    notices: Sequence[str] = ()
    #: what the header shows as the feed's problem now (Prometheus not answering, a bad line skipped); None: none
    error: str | None = None
    #: the playback speed (recorded seconds per second at the recorded pace); 1 for a feed that does not pace
    speed: float = 1.0

    # -- the four methods every feed has ----------------------------------------------------
    def start(self, on_snapshot: SnapshotCallback) -> None:
        """Start the feed's thread; ``on_snapshot`` is called from that thread."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the thread and release sources (idempotent)."""
        raise NotImplementedError

    def set_interval(self, interval_s: float) -> None:
        """Change the refresh interval (live, fleet) or the replay step duration."""
        raise NotImplementedError

    def set_paused(self, paused: bool) -> None:
        """Stop producing snapshots while paused (the collector keeps its counters)."""
        raise NotImplementedError

    # -- capabilities, with their defaults ---------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """What the dashboard may offer over this feed: its kind's row of ``CAPABILITIES``."""
        return CAPABILITIES[FeedKind(self.kind)]

    def progress(self) -> tuple[int, int] | None:
        """(1-based position of the snapshot shown last, snapshots in all) of a feed that plays a
        sequence; None: a feed without one."""
        return None

    def set_speed(self, speed: float) -> None:
        """Play at ``speed`` (``capabilities.paces``); ignored by a feed that does not pace."""

    def playback_speed(self, interval_s: float) -> float:
        """How fast it really plays snapshots ``interval_s`` apart: recorded seconds per second."""
        return self.speed

    def step(self, n: int) -> Snapshot:
        """Move ``n`` snapshots forward (or back) and return that one (``capabilities.steps``)."""
        raise NotImplementedError(f"a {FeedKind(self.kind).value} feed does not step")

    def watch(self, keys: Sequence[ProcKey]) -> None:
        """The processes the dashboard shows in detail now (the fleet feed reads more of them)."""

    def series(self, key: ProcKey) -> SeriesByName | None:
        """The feed's own time series of a process (``capabilities.own_series``); None: none."""
        return None

    def set_view(self, sort: str, descending: bool, query: str) -> None:
        """The table's sort column, direction and filter text now (the fleet feed reads its top rows by them)."""

    def table_note(self, snap: Snapshot) -> str | None:
        """What the table of ``snap`` leaves out, said on the summary line (the fleet feed's top rows of
        many); None: it holds every process."""
        return None

    def summary_of(self, snap: Snapshot, query: str) -> Summary | None:
        """The totals of the processes ``query`` finds in ``snap`` where the feed summed them itself (the
        fleet feed's top rows: rows are left out); None: the dashboard sums the rows."""
        return None

    def refreshes(self, stop: threading.Event) -> Generator[Snapshot, None, None]:
        """Batch mode: the feed's refreshes, one interval apart, made in the caller's thread, until
        ``stop`` is set or the caller stops iterating; the feed is stopped and its sources closed when
        the iterator ends or is closed."""
        raise NotImplementedError(f"a {FeedKind(self.kind).value} feed has no batch mode")


class _Adopted(Feed):
    """A ``MinimalFeed`` as a ``Feed``: its four methods and kind, every capability a default."""

    def __init__(self, inner: MinimalFeed) -> None:
        self.inner = inner
        self.kind = FeedKind(inner.kind)

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self.inner.start(on_snapshot)

    def stop(self) -> None:
        self.inner.stop()

    def set_interval(self, interval_s: float) -> None:
        self.inner.set_interval(interval_s)

    def set_paused(self, paused: bool) -> None:
        self.inner.set_paused(paused)


def adopt(feed: Feed | MinimalFeed) -> Feed:
    """``feed`` as a ``Feed``: itself, or a minimal one with every capability's default."""
    return feed if isinstance(feed, Feed) else _Adopted(feed)


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
        return replace(snap, processes=tuple(p for p in snap.processes if self.keep(p.pid, p.user)))
