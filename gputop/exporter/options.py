"""The exporter's options as the collector takes them (``ExportOptions``) and the choices of ``--aggregate`` and
``--buckets``: no Prometheus here, so that the command line's parser (gputop.modes.commands) imports them cheaply."""

from __future__ import annotations

from dataclasses import dataclass

from gputop.exporter.admission import MAX_PROCESSES


@dataclass(frozen=True)
class ExportOptions:
    exited_grace_s: float = 300.0
    kernel_metrics: int = 0             # top N kernels per process as series (0: none)
    call_site_metrics: int = 0          # top N call sites per process as series (0: none; per process only)
    max_processes: int = MAX_PROCESSES  # processes with series of their own (the rest summed: admission.py)
    cmdline_label: bool = False         # command lines can hold secrets: off by default
    user_label: bool = False            # the process's user as a label (issue 40: tell tenants apart)
    node: str | None = None             # node label of gputop_build_info (None: the snapshot's host)
    interval_s: float | None = None     # the collector's refresh interval (None: not known, no series)
    aggregate: str = "process"          # "process": series per PID; "container": per container (AGGREGATES)
    buckets: str = "log2"               # histogram bounds (BUCKETS): "log2", "log16" or "none"


#: ``--aggregate``: what one row of series stands for
AGGREGATES = ("process", "container")
#: ``--buckets``: log2 exponents between two finite ``le`` bounds (0: none, only +Inf, _count and _sum)
BUCKETS: dict[str, int] = {"log2": 1, "log16": 4, "none": 0}
