"""The GPU panel: one line per GPU (NVML), with bars and a utilisation sparkline."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.widget import Widget

from gputop.model import GpuSample, Snapshot
from gputop.ui import format as fmt

_MUTED = "$foreground 60%"
BAR = 10


def _level_style(fraction: float | None) -> str:
    if fraction is None:
        return _MUTED
    if fraction >= 0.9:
        return "$error"
    if fraction >= 0.7:
        return "$warning"
    return "$success"


def _bar(label: str, fraction: float | None, value: str, style: str) -> list[tuple[str, str] | str]:
    filled, empty = fmt.bar(fraction, BAR)
    return [
        (label, "bold"),
        (filled, style),
        (empty, _MUTED),
        " ",
        (value, _MUTED if value == fmt.NA else ""),
    ]


def gpu_line(g: GpuSample, history: list[float | None], width: int) -> Content:
    util = None if g.util_pct is None else g.util_pct / 100
    mem = fmt.fraction(g.mem_used_bytes, g.mem_total_bytes)
    name = fmt.fit(g.name or "GPU", 22).ljust(22)
    mem_text = f"{fmt.bytes_(g.mem_used_bytes)}/{fmt.bytes_(g.mem_total_bytes)}"
    power = f"{fmt.num(g.power_w)}/{fmt.num(g.power_limit_w)}W"
    temp = "N/A" if g.temp_c is None else f"{g.temp_c:.0f}°C"
    pcie = f"PCIe ↓{fmt.bytes_(g.pcie_rx_bytes_per_s)}/s ↑{fmt.bytes_(g.pcie_tx_bytes_per_s)}/s"
    xid_style = "$error bold" if g.xid_errors else _MUTED
    parts: list[tuple[str, str] | str] = [
        (f" {g.index}", "bold $primary"),
        (f"{'.' + str(g.mig_instance) if g.mig_instance is not None else ''} ", ""),
        (name, ""),
        " ",
        *_bar("UTIL ", util, fmt.pct(g.util_pct).rjust(4), "$primary"),
        "  ",
        *_bar("MEM ", mem, mem_text.ljust(13), _level_style(mem)),
        " ",
        temp.rjust(5),
        "  ",
        power.rjust(9),
        "  ",
        pcie,
        "  ",
        ("XID ", "bold"),
        (fmt.text(g.xid_errors), xid_style),
        "  ",
    ]
    content = Content.assemble(*parts)
    spare = width - content.cell_length
    if spare >= 8:
        content = Content.assemble(content, (fmt.sparkline(history, spare - 1), "$primary"))
    return content


class GpuPanel(Widget):
    DEFAULT_CSS = """
    GpuPanel { height: auto; max-height: 9; background: $surface; color: $foreground;
               text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, history: Callable[[int], list[float | None]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._history = history
        self._snapshot: Snapshot | None = None

    def show(self, snapshot: Snapshot) -> None:
        old = self._snapshot
        self._snapshot = snapshot
        if old is None or len(old.gpus) != len(snapshot.gpus):
            self.refresh(layout=True)
        else:
            self.refresh()

    def render(self) -> Content:
        snap = self._snapshot
        if snap is None:
            return Content.styled(" GPUs: waiting for the first sample", _MUTED)
        if not snap.gpus:
            nvml = snap.sources.get("nvml")
            if nvml is not None and nvml.status != "ok":
                reason = f": {nvml.reason}" if nvml.reason else ""
                return Content.styled(f" NVML unavailable{reason} (GPU panel empty)", _MUTED)
            return Content.styled(" no GPUs", _MUTED)
        width = self.size.width or 160
        return Content("\n").join(gpu_line(g, self._history(g.index), width) for g in snap.gpus)
