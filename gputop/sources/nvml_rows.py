"""What the NVML source returns (``NvmlReading``, ``NvmlProc``) and how it is assembled: a GPU (or MIG
instance) row's values and the reasons of the missing ones (``Row`` → ``GpuSample``), and the
per-GPU process entries merged into one ``NvmlProc`` per PID (``merge``). No NVML here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gputop.model import GpuSample, SourceStatus

#: the value fields of a GpuSample that the source fills (reasons are keyed by these names)
GPU_FIELDS: tuple[str, ...] = (
    "uuid",
    "name",
    "util_pct",
    "mem_util_pct",
    "mem_used_bytes",
    "mem_total_bytes",
    "temp_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
    "xid_errors",
    "ecc_volatile_errors",
)
#: extra keys of ``GpuSample.reasons`` when per-process queries fail on that GPU
PROCESS_REASON_KEYS: tuple[str, ...] = ("processes", "mps_processes", "process_util")


@dataclass(frozen=True)
class NvmlProc:
    """One process as NVML sees it, keyed by its host PID.

    A process with contexts on several GPUs is one ``NvmlProc``: ``gpu_mem_bytes`` is the sum over its
    GPUs (of the values NVML knows; ``None`` when it knows none), ``gpu_index`` (and ``mig_instance``)
    is the GPU where it holds the most memory (lowest index on a tie), and ``sm_util_pct`` is the highest
    SM utilisation among its GPUs.
    """

    pid: int  # host PID
    gpu_index: int
    gpu_mem_bytes: int | None
    sm_util_pct: float | None
    #: GPU instance id when the process runs in a MIG instance of ``gpu_index``, else None
    mig_instance: int | None = None


@dataclass(frozen=True)
class NvmlReading:
    """One read of NVML. ``gpus`` holds one row per GPU (by NVML index), each followed by one row per MIG
    instance when MIG mode is on (same ``index``, ``mig_instance`` = GPU instance id)."""

    status: SourceStatus
    gpus: tuple[GpuSample, ...] = ()
    procs: Mapping[int, NvmlProc] = field(default_factory=dict)


class Row:
    """Values and reasons of one GPU (or MIG instance) row being read."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.reasons: dict[str, str] = {}
        #: set once the GPU is lost (or its handle unusable): every later query is skipped with this reason
        self.dead: str | None = None

    def fail(self, fields: Iterable[str], reason: str) -> None:
        for f in fields:
            self.reasons.setdefault(f, reason)


@dataclass
class Entry:
    """One process on one GPU, as that GPU's process lists and utilisation samples give it."""

    pid: int
    gpu_index: int
    mem: int | None
    sm: float | None
    mig: int | None


def sample(index: int, row: Row, mig_instance: int | None) -> GpuSample:
    values = {k: row.values.get(k) for k in GPU_FIELDS}
    reasons = {k: v for k, v in row.reasons.items() if k not in values or values[k] is None}
    return GpuSample(index=index, mig_instance=mig_instance, reasons=reasons or None, **values)


def merge(entries: list[Entry]) -> dict[int, NvmlProc]:
    """One NvmlProc per pid (see :class:`NvmlProc` for how several GPUs combine)."""
    by_pid: dict[int, list[Entry]] = {}
    for e in entries:
        by_pid.setdefault(e.pid, []).append(e)
    procs: dict[int, NvmlProc] = {}
    for pid, es in by_pid.items():
        kept = max(es, key=lambda e: (e.mem if e.mem is not None else -1, -e.gpu_index))
        mems = [e.mem for e in es if e.mem is not None]
        sms = [e.sm for e in es if e.sm is not None]
        procs[pid] = NvmlProc(
            pid=pid,
            gpu_index=kept.gpu_index,
            gpu_mem_bytes=sum(mems) if mems else None,
            sm_util_pct=max(sms) if sms else None,
            mig_instance=kept.mig,
        )
    return procs
