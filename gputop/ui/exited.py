"""The rows of processes that exited, kept on the dashboard for a moment (``ExitedRows``): the dashboard's
own view of a snapshot (the feed's, the history's and the recording's are the snapshot as it came)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gputop.model import ProcKey, ProcSample, Snapshot, Summary, summarize

#: how long the dashboard keeps the row of a process that exited after the refresh that reported the exit:
#: LINGER_S seconds or LINGER_REFRESHES refreshes, whichever is longer (htop shows a dying process
#: highlighted for a moment)
LINGER_S = 3.0
LINGER_REFRESHES = 2
#: exits remembered (a replay stepped back shows the rows again), and for how long at most
_EXITS_KEPT = 4096
_EXITS_FOR_S = 600.0


class ExitedRows:
    """The rows of processes that exited, kept on the dashboard for a moment (issue 35: a row vanished one
    refresh after its exit). A snapshot reports an exited process once, with its last, partial interval
    (``state`` "exited"; JSON, recordings, batch mode and the exporter keep that contract,
    docs/architecture.md); the dashboard then shows its row, faded and marked exited, for ``LINGER_S``
    seconds or ``LINGER_REFRESHES`` refreshes after that one, whichever is longer, with its rates and levels
    N/A (never its last interval's rate as current: ``details.without_live_values``), its totals kept;
    then the row is gone. Counted as listed and exited in the summary line, out of its sums. Only the
    dashboard's own view: the history and the recording get the snapshot as the feed gave it. The fleet
    view keeps exited processes for the exporters' ``--exited-grace`` already: not applied there.
    """

    def __init__(self) -> None:
        #: an exited process's key -> (the time of the snapshot that reported its exit, that sample)
        self._exits: dict[ProcKey, tuple[float, ProcSample]] = {}
        #: the keys of the rows added to the snapshot shown last
        self.kept: frozenset[ProcKey] = frozenset()

    @staticmethod
    def keep_s(interval_s: float) -> float:
        """How long after the refresh that reported an exit the row stays: LINGER_S or LINGER_REFRESHES
        refreshes, whichever is longer."""
        return max(LINGER_S, LINGER_REFRESHES * interval_s)

    def apply(self, snap: Snapshot, interval_s: float) -> Snapshot:
        """``snap`` with the rows of the processes that exited within ``keep_s`` before it and are no longer
        in it; ``snap`` itself where there are none. ``interval_s``: the refresh interval (a snapshot's own
        where it has one). Depends on the snapshots' times only, so a replay stepped back shows the same."""
        exits = self._exits
        for p in snap.processes:
            if p.state == "exited":
                exits[p.key] = (snap.time, p)
        if not exits:
            self.kept = frozenset()
            return snap
        interval = snap.interval_s if snap.interval_s > 0 else interval_s
        # half a refresh short of keep_s: a refresh a little early (2.98 s after the exit at 1 s) shows
        # no third lingering refresh
        until = self.keep_s(interval) - interval / 2
        present = {p.key for p in snap.processes}
        kept: list[ProcSample] = []
        for key, (t, p) in list(exits.items()):
            elapsed = snap.time - t
            if abs(elapsed) > _EXITS_FOR_S:
                del exits[key]
            elif 0 < elapsed < until and key not in present:
                kept.append(p)
        while len(exits) > _EXITS_KEPT:
            del exits[next(iter(exits))]
        self.kept = frozenset(p.key for p in kept)
        if not kept:
            return snap
        from gputop.ui.screens.details import without_live_values

        shown = replace(snap, processes=snap.processes + tuple(
            replace(without_live_values(p), state="exited") for p in kept))
        # listed and exited, but out of the sums (their rates are unknown, not 0: a sum with them would be N/A)
        shown.__dict__["summary"] = self._counted(snap.summary, len(kept))
        return shown

    @staticmethod
    def _counted(summary: Summary, kept: int) -> Summary:
        return replace(summary, processes=summary.processes + kept, exited=summary.exited + kept)

    def summary(self, snap: Snapshot, rows: Sequence[ProcSample]) -> Summary:
        """The summary line of ``rows`` (the filter's): the kept rows counted, not summed."""
        if not self.kept:
            return summarize(snap, rows)
        live = [p for p in rows if p.key not in self.kept]
        return self._counted(summarize(snap, live), len(rows) - len(live))
