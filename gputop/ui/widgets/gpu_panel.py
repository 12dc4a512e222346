"""The GPU panel: one line per GPU (NVML), with bars and a utilisation sparkline."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget

from gputop.model import GpuSample, Snapshot
from gputop.ui import format as fmt
from gputop.ui.flow import flow

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


def _bar(label: str, fraction: float | None, value: str, style: str, width: int) -> Content:
    filled, empty = fmt.bar(fraction, width)
    return Content.assemble(
        (label, "bold"),
        (filled, style),
        (empty, _MUTED),
        " ",
        (value, _MUTED if value == fmt.NA else ""),
    )


#: one GPU per line needs this many cells (without the sparkline); narrower panels wrap
WIDE = 134


def gpu_pieces(g: GpuSample, width: int) -> list[Content]:
    """A GPU's fields as pieces; narrow panels get shorter names and bars, then wrap (never cut)."""
    wide = width >= WIDE
    bar = BAR if wide else 5
    util = None if g.util_pct is None else g.util_pct / 100
    mem = fmt.fraction(g.mem_used_bytes, g.mem_total_bytes)
    name_w = 22 if wide else 14
    name = fmt.fit(fmt.text(g.name or "GPU"), name_w)
    mem_text = f"{fmt.bytes_(g.mem_used_bytes)}/{fmt.bytes_(g.mem_total_bytes)}"
    power = f"{fmt.num(g.power_w)}/{fmt.num(g.power_limit_w)}W"
    temp = "N/A" if g.temp_c is None else f"{g.temp_c:.0f}°C"
    pcie = f"PCIe ↓{fmt.bytes_(g.pcie_rx_bytes_per_s)}/s ↑{fmt.bytes_(g.pcie_tx_bytes_per_s)}/s"
    xid_style = "$error bold" if g.xid_errors else _MUTED
    mig = f".{g.mig_instance}" if g.mig_instance is not None else ""
    return [
        Content.assemble((f" {g.index}", "bold $primary"), mig, " ", name.ljust(name_w) if wide else name),
        _bar("UTIL ", util, fmt.pct(g.util_pct).rjust(4), "$primary", bar),
        _bar("MEM ", mem, mem_text.ljust(13) if wide else mem_text, _level_style(mem), bar),
        Content(temp.rjust(5) if wide else temp),
        Content(power.rjust(9) if wide else power),
        Content(pcie),
        Content.assemble(("XID ", "bold"), (fmt.text(g.xid_errors), xid_style)),
    ]


def gpu_lines(g: GpuSample, history: list[float | None], width: int) -> list[Content]:
    """One line when the panel is wide enough (with a utilisation sparkline in the spare cells),
    else the same fields wrapped onto more lines."""
    lines = flow(gpu_pieces(g, width), width, indent="     ")
    if len(lines) == 1:
        spare = width - lines[0].cell_length - 2
        if spare >= 8:
            lines[0] = Content.assemble(lines[0], "  ", (fmt.sparkline(history, spare - 1), "$primary"))
    return lines


def gpu_line(g: GpuSample, history: list[float | None], width: int) -> Content:
    return Content("\n").join(gpu_lines(g, history, width))


class GpuPanel(Widget):
    DEFAULT_CSS = """
    GpuPanel { height: auto; max-height: 30%; background: $surface; color: $foreground;
               text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, history: Callable[[int, float | None], list[float | None]], *,
                 id: str | None = None) -> None:
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

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self._lines(width)))

    def _lines(self, width: int) -> list[Content]:
        snap = self._snapshot
        if snap is None:
            return [Content.styled(" GPUs: waiting for the first sample", _MUTED)]
        if not snap.gpus:
            nvml = snap.sources.get("nvml")
            if nvml is not None and nvml.status != "ok":
                reason = f": {fmt.text(nvml.reason)}" if nvml.reason else ""
                return [Content.styled(f" NVML unavailable{reason} (GPU panel empty)", _MUTED)]
            return [Content.styled(" no GPUs", _MUTED)]
        # the sparkline ends at the snapshot shown (a replay stepped back)
        return [line for g in snap.gpus for line in gpu_lines(g, self._history(g.index, snap.time), width)]

    def render(self) -> Content:
        return Content("\n").join(self._lines(self.content_region.width or 160))
