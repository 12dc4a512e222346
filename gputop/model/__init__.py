"""The snapshot model, schema ``gputop/1``: what every feed produces and every consumer reads.

Stdlib only; every other part of gputop may import it, it imports nothing of gputop outside it.
``schema`` holds the frozen dataclasses, ``limits`` the schema's bounds, ``summary`` the host-wide
totals (``summarize``), ``tojson`` the JSON writer and ``validate`` the checked reading, derived from
the dataclasses' annotations and bounds. The names below are the model's public ones.
"""

from __future__ import annotations

from gputop.model.limits import (
    COUNT_LIMIT,
    HIST_KEYS,
    ID_MAX,
    INTERVAL_LIMIT,
    MAX_CMDLINE,
    MAX_ENTRIES,
    MAX_GPUS,
    MAX_KERNEL_NAME,
    MAX_KERNELS,
    MAX_KEY,
    MAX_PROCESSES,
    MAX_TEXT,
    NUMBER_LIMIT,
    PID_MAX,
    TIME_LIMIT,
)
from gputop.model.schema import (
    BPF_ONLY,
    LOG2_BUCKETS,
    MEMCPY_DIRECTIONS,
    NCCL_DTYPE_BYTES,
    NCCL_OPS,
    PREFETCH_DIRECTIONS,
    SCHEMA,
    UVM_DIRECTIONS,
    UVM_ONLY,
    CallBytes,
    CallSite,
    CallSites,
    Counts,
    Frame,
    GpuSample,
    KernelStat,
    Latency,
    LatencyHistogram,
    ProcKey,
    ProcSample,
    Rates,
    Snapshot,
    SourceStatus,
    SyncLatency,
)
from gputop.model.summary import Summary, summarize
from gputop.model.tojson import snapshot_to_dict, snapshot_to_json
from gputop.model.validate import SnapshotError, snapshot_from_dict, snapshot_from_json

__all__ = [
    "BPF_ONLY", "COUNT_LIMIT", "HIST_KEYS", "ID_MAX", "INTERVAL_LIMIT", "LOG2_BUCKETS", "MAX_CMDLINE", "MAX_ENTRIES",
    "MAX_GPUS", "MAX_KERNELS", "MAX_KERNEL_NAME", "MAX_KEY", "MAX_PROCESSES", "MAX_TEXT", "MEMCPY_DIRECTIONS",
    "NCCL_DTYPE_BYTES", "NCCL_OPS",
    "NUMBER_LIMIT", "PID_MAX", "PREFETCH_DIRECTIONS", "SCHEMA", "TIME_LIMIT", "UVM_DIRECTIONS", "UVM_ONLY",
    "CallBytes", "CallSite", "CallSites", "Counts", "Frame", "GpuSample", "KernelStat", "Latency",
    "LatencyHistogram", "ProcKey", "ProcSample", "Rates",
    "Snapshot", "SnapshotError", "SourceStatus", "Summary", "SyncLatency", "snapshot_from_dict", "snapshot_from_json",
    "snapshot_to_dict", "snapshot_to_json", "summarize",
]
