"""The summary line (htop's ``Tasks:``) as text: pure, no Textual, shared by the dashboard's summary bar
and batch mode's table header. The numbers are ``gputop.model.summarize``'s (docs/dashboard.md,
"Summary line")."""

from __future__ import annotations

from gputop.model import Summary
from gputop.view import format as fmt


def _per_s(value: str) -> str:
    return value if value == fmt.NA else f"{value}/s"


def summary_pieces(s: Summary, tagged: int = 0) -> list[tuple[str, str]]:
    """(label, value) pairs in order: tasks (listed, running, stopped, exited, and tagged when any),
    launches/s, graph kernels/s, H2D/D2H/D2D bytes/s, GPUs busy of all. The rates have ``~`` before them
    while a process they sum is warming up (the fleet view's ``Summary.warming_up``: they read low)."""
    tasks = f"{s.processes} listed, {s.running} running, {s.stopped} stopped, {s.exited} exited"
    if tagged:
        tasks += f", {tagged} tagged"
    busy = fmt.NA if s.gpus_busy is None else f"{s.gpus_busy}/{s.gpus}"
    low = bool(s.warming_up)

    def rate(value: str) -> str:
        return _per_s(fmt.reads_low(value, low))

    return [
        ("Tasks:", tasks),
        ("Launches:", rate(fmt.si(s.launches_per_s))),
        ("Graph kernels:", rate(fmt.si(s.graph_kernel_launches_per_s))),
        ("H2D", rate(fmt.bytes_(s.h2d_bytes_per_s))),
        ("D2H", rate(fmt.bytes_(s.d2h_bytes_per_s))),
        ("D2D", rate(fmt.bytes_(s.d2d_bytes_per_s))),
        ("GPUs busy:", busy),
    ]


def summary_text(s: Summary, tagged: int = 0) -> str:
    """The summary as one line of plain text (batch mode's table header)."""
    return "  ".join(f"{label} {value}" for label, value in summary_pieces(s, tagged))
