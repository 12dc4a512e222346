"""The GPU panel: one line per GPU (NVML), with bars and a utilisation sparkline.

In the fleet view the GPUs are grouped under their node: each GPU on its own line while there are
few, else one summary line per node; lines beyond the panel's height are counted in a last line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.content import Content
from textual.geometry import Size
from textual.reactive import Reactive
from textual.widget import Widget

from gputop.model import GpuSample, Snapshot
from gputop.ui.flow import flow
from gputop.ui.widgets.header import looks
from gputop.view import format as fmt

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


#: vendor words a GPU's name starts with, dropped first where the name does not fit (``NVIDIA H100 80GB HBM3``:
#: ``H100 80GB HBM3``, whole at 14 cells, where it read ``NVIDIA H100 8…``)
_VENDOR_WORDS = ("NVIDIA ", "Tesla ", "GeForce ", "Quadro ")


def gpu_name(name: str, width: int) -> str:
    """A GPU's name in ``width`` cells: whole where it fits, else without its vendor words, then cut (``…``)."""
    while len(name) > width and name.startswith(_VENDOR_WORDS):
        name = name.split(" ", 1)[1]
    return fmt.fit(name, width)


def gpu_pieces(g: GpuSample, width: int) -> list[Content]:
    """A GPU's fields as pieces; narrow panels get shorter names and bars, then wrap (never cut)."""
    wide = width >= WIDE
    bar = BAR if wide else 5
    util = None if g.util_pct is None else g.util_pct / 100
    mem = fmt.fraction(g.mem_used_bytes, g.mem_total_bytes)
    name_w = 22 if wide else 14
    name = gpu_name(fmt.text(g.name or "GPU"), name_w)
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
    auto_links = Reactive(False)     # no links: skips a per-segment meta decode each repaint
    DEFAULT_CSS = """
    GpuPanel { height: auto; max-height: 30%; background: $surface; color: $foreground;
               text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, history: Callable[[int, float | None, str | None], list[float | None]], *,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self._history = history
        self._snapshot: Snapshot | None = None
        self._filter = ""
        #: the lines of the last ``_lines_at``: (snapshot, filter, width, limit, lines)
        self._laid_out: tuple[Snapshot | None, str, int, int, list[Content]] | None = None

    def show(self, snapshot: Snapshot, filter_text: str = "") -> None:
        old = self._snapshot
        before = self._laid_out
        self._snapshot = snapshot
        changed = filter_text != self._filter
        self._filter = filter_text
        if old is None or len(old.gpus) != len(snapshot.gpus) or changed:
            self.refresh(layout=True)
            return
        region = self.content_region
        if (before is not None and region.width and before[2:4] == (region.width, region.height or 10_000)
                and looks(before[4]) == looks(self._lines_at(region.width, region.height or 10_000))):
            return      # the same text in the same styles: nothing to redraw
        self.refresh()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self._lines_at(width, max(3, viewport.height * 3 // 10))))

    def _lines_at(self, width: int, limit: int) -> list[Content]:
        """``_lines`` kept for the snapshot, filter and size: show and render each need them."""
        cached = self._laid_out
        if cached is None or cached[0] is not self._snapshot or cached[1:4] != (self._filter, width, limit):
            cached = self._laid_out = (self._snapshot, self._filter, width, limit, self._lines(width, limit))
        return cached[4]

    def _lines(self, width: int, limit: int = 10_000) -> list[Content]:
        snap = self._snapshot
        if snap is None:
            return [Content.styled(" GPUs: waiting for the first sample", _MUTED)]
        if not snap.gpus:
            nvml = snap.sources.get("nvml")
            if nvml is not None and nvml.status != "ok":
                reason = f": {fmt.text(nvml.reason)}" if nvml.reason else ""
                state = fmt.source_state("nvml", nvml)       # the header's word: off, starting
                return [Content.styled(f" NVML {state}{reason} (GPU panel empty)", _MUTED)]
            return [Content.styled(" no GPUs", _MUTED)]
        if any(g.node is not None for g in snap.gpus):
            return fleet_lines(snap.gpus, self._filter, width, limit,
                               lambda g: self._history(g.index, snap.time, g.node))
        # the sparkline ends at the snapshot shown (a replay stepped back)
        return [line for g in snap.gpus for line in gpu_lines(g, self._history(g.index, snap.time, None), width)]

    def render(self) -> Content:
        region = self.content_region
        return Content("\n").join(self._lines_at(region.width or 160, region.height or 10_000))


#: the fleet panel lists each GPU while there are at most this many, else one line per node
FLEET_GPU_LINES = 16


def node_summary(node: str, gpus: Sequence[GpuSample]) -> Content:
    """One node's GPUs on one line: count, mean utilisation, memory, hottest, power, XID errors."""
    def known(values: list[float | int | None]) -> list[float]:
        return [float(v) for v in values if v is not None]

    utils = known([g.util_pct for g in gpus])
    util = sum(utils) / len(utils) if utils else None
    used, total = known([g.mem_used_bytes for g in gpus]), known([g.mem_total_bytes for g in gpus])
    temps, power = known([g.temp_c for g in gpus]), known([g.power_w for g in gpus])
    xids = known([g.xid_errors for g in gpus])
    xid = int(sum(xids)) if xids else None
    mem = fmt.fraction(sum(used), sum(total)) if used and total else None
    return Content.assemble(
        (f" {fmt.fit(fmt.text(node), 24).ljust(24)}", "bold $primary"), f" {len(gpus):>2} GPU ",
        _bar("UTIL ", None if util is None else util / 100, fmt.pct(util).rjust(4), "$primary", 5), "  ",
        _bar("MEM ", mem, f"{fmt.bytes_(sum(used) if used else None)}/{fmt.bytes_(sum(total) if total else None)}",
             _level_style(mem), 5),
        f"  max {'N/A' if not temps else f'{max(temps):.0f}°C'}  {fmt.num(sum(power) if power else None)}W  ",
        ("XID ", "bold"), (fmt.text(xid), "$error bold" if xid else _MUTED),
    )


def fleet_lines(gpus: Sequence[GpuSample], filter_text: str, width: int, limit: int,
                history: Callable[[GpuSample], list[float | None]]) -> list[Content]:
    """The fleet's GPUs grouped by node (``filter_text`` narrows the nodes when it names some)."""
    by_node: dict[str, list[GpuSample]] = {}
    for g in gpus:
        by_node.setdefault(g.node or "N/A", []).append(g)
    q = filter_text.strip().lower()
    if q and any(q in n.lower() for n in by_node):
        by_node = {n: gs for n, gs in by_node.items() if q in n.lower()}
    lines: list[Content] = []
    shown = 0
    each = sum(len(gs) for gs in by_node.values()) <= FLEET_GPU_LINES
    for node, gs in sorted(by_node.items()):
        block = ([Content.styled(f" {fmt.text(node)}", "bold $accent"),
                  *(line for g in gs for line in gpu_lines(g, history(g), width))] if each
                 else [node_summary(node, gs)])
        room = limit - (1 if shown < len(by_node) - 1 else 0)     # a last line counts the nodes left out
        if len(lines) + len(block) > room:
            break
        lines += block
        shown += 1
    if shown < len(by_node):
        lines.append(Content.styled(f" … {len(by_node) - shown} more nodes (/ filters by node)", _MUTED))
    return lines
