"""The header line: host, time, refresh, source status and gputop's own cost."""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.widget import Widget

from gputop.model import Snapshot, SourceStatus
from gputop.ui import format as fmt

_STATUS_STYLE = {"ok": "$success", "starting": "$warning"}
_MUTED = "$foreground 60%"


@dataclass(frozen=True)
class HeaderState:
    snapshot: Snapshot | None = None
    interval_s: float = 1.0
    paused: bool = False
    #: (snapshots shown, snapshots in the recording, speed) when replaying
    replay: tuple[int, int, float] | None = None
    filter: str = ""
    error: str | None = None


def _source(name: str, st: SourceStatus | None) -> list[tuple[str, str] | str]:
    if st is None:
        return [(f"{name} ", "bold"), ("n/a", _MUTED)]
    style = _STATUS_STYLE.get(st.status, _MUTED)
    label = st.status if st.status != "unavailable" else "off"
    parts: list[tuple[str, str] | str] = [(f"{name} ", "bold"), (label, style)]
    if name == "BPF" and st.status == "ok":
        if st.probes is not None:
            parts.append((f" {st.probes}p/{fmt.text(st.objects)}obj", _MUTED))
        if st.probes_failed:
            parts.append((f" {st.probes_failed} failed", "$warning bold"))
        if st.dropped:
            parts.append((f" dropped {fmt.si(st.dropped)}", "$warning bold"))
    return parts


def header_content(state: HeaderState) -> Content:
    snap = state.snapshot
    parts: list[tuple[str, str] | str] = [(" gputop ", "bold $primary")]
    if snap is None:
        parts += [" ", ("starting…", "$warning"), ("  loading probes and GPU handles", _MUTED)]
        if state.error:
            parts += ["  ", (state.error, "$error bold")]
        return Content.assemble(*parts)
    parts += [
        (snap.host, "bold"),
        "  ",
        fmt.clock(snap.time),
        "  ",
        (f"every {fmt.interval(state.interval_s)}", _MUTED),
    ]
    if state.paused:
        parts += ["  ", (" PAUSED ", "reverse $warning bold")]
    if state.replay is not None:
        shown, total, speed = state.replay
        parts += ["  ", (f" REPLAY {shown}/{total} ×{speed:g} ", "reverse $accent")]
    for label, key in (("BPF", "bpf"), ("NVML", "nvml"), ("UVM", "uvm")):
        parts += ["  ", *_source(label, snap.sources.get(key))]
    bpf = snap.sources.get("bpf")
    if bpf is not None and bpf.status == "ok":
        hits = fmt.si(bpf.probe_hits_per_s)
        parts += ["  ", ("cost ", "bold"), f"{hits} hits/s {fmt.cpu_share(bpf.overhead_ns_per_s)} CPU"]
    if state.filter:
        parts += ["  ", ("filter: ", "bold"), (state.filter, "$accent")]
    if state.error:
        parts += ["  ", (state.error, "$error bold")]
    return Content.assemble(*parts)


class HeaderBar(Widget):
    DEFAULT_CSS = """
    HeaderBar {
        height: 1; background: $panel; color: $foreground; text-wrap: nowrap; text-overflow: ellipsis;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._state = HeaderState()

    def show(self, state: HeaderState) -> None:
        if state != self._state:
            self._state = state
            self.refresh()

    @property
    def state(self) -> HeaderState:
        return self._state

    def render(self) -> Content:
        return header_content(self._state)
