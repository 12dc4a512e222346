"""The NVML source: per-GPU values and per-process GPU memory / SM utilisation.

This is the only module that imports ``pynvml`` (nvidia-ml-py), and only when a source is first read.
Every NVML call goes through one query helper (:meth:`NvmlSource._query`): an NVML error (NotSupported,
NoPermission, GpuIsLost, Unknown...) becomes ``None`` for the values that call would have produced and
the error text is kept, by ``GpuSample`` field name, in ``GpuSample.reasons``. A GPU that is lost
mid-run has all its values ``None`` (reason ``"GPU is lost"``) while the other GPUs keep working;
nothing NVML can do makes :meth:`NvmlSource.read` raise.

Choosing the library: ``library_path``, else the environment variable ``GPUTOP_NVML_LIBRARY``, else
pynvml's own ``libnvidia-ml.so.1``, installed process-wide by ``nvml_library`` before ``nvmlInit``
(each ``close()`` releases it); a second source wanting another library while one holds its own
reports ``unavailable``. What a read returns, and how its rows are assembled: ``nvml_rows``.

Not thread-safe: one collector thread owns a source (``read``, then ``close``).
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass
from typing import Any

from gputop.model import GpuSample, SourceStatus
from gputop.sources import nvml_library
from gputop.sources.nvml_rows import (
    GPU_FIELDS,
    PROCESS_REASON_KEYS,
    Entry,
    NvmlProc,
    NvmlReading,
    Row,
    merge,
    sample,
)

__all__ = ["ENV_LIBRARY", "NOT_PER_MIG", "NvmlProc", "NvmlReading", "NvmlSource"]

#: environment variable naming the libnvidia-ml.so.1 to load (overridden by ``library_path``)
ENV_LIBRARY = "GPUTOP_NVML_LIBRARY"

#: reason given on MIG instance rows for values NVML only reports for the whole GPU
NOT_PER_MIG = "not reported per MIG instance"

# NVML return codes the source reacts to (nvml.h; pynvml defines the same numbers)
_SUCCESS = 0
_NOT_FOUND = 6
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_ARGUMENT_VERSION_MISMATCH = 25
_NO_ID = 0xFFFFFFFF  # gpuInstanceId of a process on a GPU without MIG
_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
_MAX_EVENTS_PER_READ = 4096
_KIB = 1024  # NVML reports PCIe throughput in KB/s (KiB: 1024 bytes)


@dataclass(frozen=True)
class _Err:
    code: int | None  # NVML return code; None for failures outside NVML (ctypes)
    reason: str


def _address(handle: Any) -> int:
    """The address behind an NVML handle (a ctypes pointer), to compare handles."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)


# ------------------------------------------------------------------ the source


class NvmlSource:
    """Reads NVML on demand. Construction does nothing; the first :meth:`read` loads the library and
    calls ``nvmlInit``. When that fails (no library, driver not loaded...), ``read`` returns status
    ``unavailable`` with NVML's reason and tries again at most every ``INIT_RETRY_S`` seconds.

    ``pcie=False`` skips ``nvmlDeviceGetPcieThroughput``: on real GPUs each of its calls samples a byte
    counter for about 20 ms, i.e. 40 ms per GPU per refresh spent blocked in NVML.
    """

    INIT_RETRY_S = 10.0

    def __init__(self, library_path: str | None = None, *, pcie: bool = True) -> None:
        self._library_path = library_path
        self._pcie = pcie
        self._nv: Any = None
        self._initialised = False
        self._holds_library = False
        self._init_failed_at: float | None = None
        self._init_status = SourceStatus("unavailable", "not initialised")
        #: NVML calls made so far (through the query helper), for cost accounting
        self.calls = 0
        #: driver version reported by NVML once initialised
        self.driver_version: str | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._count = 0
        self._handles: dict[int, Any] = {}
        self._handle_reason: dict[int, str] = {}
        self._by_address: dict[int, int] = {}
        self._static: dict[int, dict[str, str]] = {}
        self._mig_static: dict[tuple[int, int, int], dict[str, str]] = {}  # by (gpu, slot, instance)
        self._mig_max: dict[int, int] = {}
        self._mem_v2 = True
        self._event_set: Any = None
        self._events_reason: str | None = None
        self._xid_reason: dict[int, str | None] = {}  # registered GPUs: None = counting, else why not
        self._xid_counts: dict[int, int] = {}
        self._last_seen: dict[int, int] = {}

    # -------------------------------------------------------------- public

    def read(self) -> NvmlReading:
        status = self._ensure_init()
        if not self._initialised:
            return NvmlReading(status, (), {})
        for i in range(self._count):
            self._ensure_handle(i)
        self._drain_events()
        rows: list[GpuSample] = []
        entries: list[Entry] = []
        for i in range(self._count):
            self._read_gpu(i, rows, entries)
        return NvmlReading(SourceStatus("ok"), tuple(rows), merge(entries))

    def close(self) -> None:
        """Free the event set and ``nvmlShutdown`` if initialised; idempotent."""
        if self._initialised:
            if self._event_set is not None:
                self._query("nvmlEventSetFree", self._event_set)
            self._query("nvmlShutdown")
            self._initialised = False
            self._reset_state()
        if self._holds_library:
            nvml_library.release()
            self._holds_library = False

    # -------------------------------------------------------------- the query helper

    def _query(self, fn_name: str, *args: Any) -> tuple[Any, _Err | None]:
        """Call ``pynvml.<fn_name>(*args)``: ``(value, None)``, or ``(None, error)`` for anything NVML
        (or loading one of its functions) can fail with. Every NVML call of this module goes here."""
        nv = self._nv
        self.calls += 1
        try:
            return getattr(nv, fn_name)(*args), None
        except nv.NVMLError as exc:
            return None, _Err(int(exc.value), str(exc))
        except nv.NVMLLibraryMismatchError as exc:
            return None, _Err(_FUNCTION_NOT_FOUND, str(exc))
        except (OSError, ctypes.ArgumentError) as exc:
            return None, _Err(None, f"{type(exc).__name__}: {exc}")

    def _try(self, row: Row, fn_name: str, *args: Any) -> tuple[Any, _Err | None]:
        """``_query`` for one GPU row: skipped once the GPU is lost; a lost GPU marks the row dead."""
        if row.dead is not None:
            return None, _Err(_GPU_IS_LOST, row.dead)
        value, err = self._query(fn_name, *args)
        if err is not None and err.code == _GPU_IS_LOST:
            row.dead = err.reason
        return value, err

    def _get(self, row: Row, fields: tuple[str, ...], fn_name: str, *args: Any) -> Any:
        """``_try`` that records the reason under ``fields`` when the value is missing."""
        value, err = self._try(row, fn_name, *args)
        if err is not None:
            row.fail(fields, err.reason)
            return None
        return value

    # -------------------------------------------------------------- initialisation

    def _ensure_init(self) -> SourceStatus:
        if self._initialised:
            return SourceStatus("ok")
        now = time.monotonic()
        if self._init_failed_at is not None and now - self._init_failed_at < self.INIT_RETRY_S:
            return self._init_status
        status = self._init()
        if not self._initialised:
            self._init_failed_at = now
            self._init_status = status
        return status

    def _init(self) -> SourceStatus:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - a dependency of the package
            return SourceStatus("unavailable", f"nvidia-ml-py is not installed ({exc})")
        self._nv = pynvml
        path = self._library_path or os.environ.get(ENV_LIBRARY) or None
        why = nvml_library.acquire(pynvml, path)
        if why is not None:
            return SourceStatus("unavailable", why)
        self._holds_library = True
        _, err = self._query("nvmlInit")
        if err is not None:
            self.close()
            return SourceStatus("unavailable", err.reason)
        count, err = self._query("nvmlDeviceGetCount")
        if err is not None:
            self._query("nvmlShutdown")
            self.close()
            return SourceStatus("unavailable", err.reason)
        self._reset_state()
        self._count = int(count)
        version, _ = self._query("nvmlSystemGetDriverVersion")
        self.driver_version = str(version) if version is not None else None
        self._event_set, err = self._query("nvmlEventSetCreate")
        self._events_reason = err.reason if err is not None else None
        self._initialised = True
        return SourceStatus("ok")

    def _ensure_handle(self, i: int) -> None:
        if i in self._handles:
            return
        handle, err = self._query("nvmlDeviceGetHandleByIndex", i)
        if err is not None:
            self._handle_reason[i] = err.reason
            return
        self._handle_reason.pop(i, None)
        self._handles[i] = handle
        self._by_address[_address(handle)] = i
        if i in self._xid_reason:
            return
        if self._event_set is None:
            self._xid_reason[i] = self._events_reason or "no NVML event set"
            return
        _, err = self._query("nvmlDeviceRegisterEvents", handle, _XID_CRITICAL, self._event_set)
        if err is None:
            self._xid_reason[i] = None
            self._xid_counts.setdefault(i, 0)
        elif err.code != _GPU_IS_LOST:  # a lost GPU is registered again once it is back
            self._xid_reason[i] = err.reason

    def _drain_events(self) -> None:
        """Count the critical XID events pending in the event set (``nvmlEventSetWait_v2``, timeout 0)."""
        if self._event_set is None or not any(r is None for r in self._xid_reason.values()):
            return
        for _ in range(_MAX_EVENTS_PER_READ):
            data, err = self._query("nvmlEventSetWait_v2", self._event_set, 0)
            if err is not None:  # NVML_ERROR_TIMEOUT: nothing pending (any other error: try next read)
                return
            if int(data.eventType) & _XID_CRITICAL:
                i = self._by_address.get(_address(data.device))
                if i is not None and i in self._xid_counts:
                    self._xid_counts[i] += 1

    # -------------------------------------------------------------- one GPU

    def _read_gpu(self, i: int, rows: list[GpuSample], entries: list[Entry]) -> None:
        nv = self._nv
        row = Row()
        static = self._static.setdefault(i, {})
        handle = self._handles.get(i)
        if handle is None:
            row.dead = self._handle_reason.get(i, "no NVML handle")
        for name, fn in (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName")):
            if name not in static:
                value = self._get(row, (name,), fn, handle)
                if value is not None:
                    static[name] = str(value)
            row.values[name] = static.get(name)

        util = self._get(row, ("util_pct", "mem_util_pct"), "nvmlDeviceGetUtilizationRates", handle)
        if util is not None:
            row.values["util_pct"] = float(util.gpu)
            row.values["mem_util_pct"] = float(util.memory)
        self._read_memory(row, handle)
        temp = self._get(row, ("temp_c",), "nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU)
        row.values["temp_c"] = float(temp) if temp is not None else None
        power = self._get(row, ("power_w",), "nvmlDeviceGetPowerUsage", handle)
        row.values["power_w"] = power / 1000.0 if power is not None else None
        row.values["power_limit_w"] = self._read_power_limit(row, handle)
        clock = self._get(row, ("sm_clock_mhz",), "nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_SM)
        row.values["sm_clock_mhz"] = float(clock) if clock is not None else None
        for name, counter in (
            ("pcie_tx_bytes_per_s", nv.NVML_PCIE_UTIL_TX_BYTES),
            ("pcie_rx_bytes_per_s", nv.NVML_PCIE_UTIL_RX_BYTES),
        ):
            if not self._pcie:
                row.fail((name,), "disabled (pcie=False)")
                continue
            kbps = self._get(row, (name,), "nvmlDeviceGetPcieThroughput", handle, counter)
            row.values[name] = float(kbps * _KIB) if kbps is not None else None
        ecc = self._get(
            row,
            ("ecc_volatile_errors",),
            "nvmlDeviceGetTotalEccErrors",
            handle,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nv.NVML_VOLATILE_ECC,
        )
        row.values["ecc_volatile_errors"] = int(ecc) if ecc is not None else None

        mig_on = False
        mode, _ = self._try(row, "nvmlDeviceGetMigMode", handle)
        if mode is not None:
            mig_on = int(mode[0]) == nv.NVML_DEVICE_MIG_ENABLE
        procs: list[Entry] = []
        self._read_processes(i, row, handle, mig_on, procs)
        mig_rows = self._read_mig(i, row, handle) if mig_on else []

        if row.dead is None:
            entries.extend(procs)
            xid_reason = self._xid_reason.get(i, "no NVML handle")
            if xid_reason is None:
                row.values["xid_errors"] = self._xid_counts.get(i, 0)
            else:
                row.fail(("xid_errors",), xid_reason)
        else:  # lost: every value and process of this GPU goes, whatever was read before the loss
            row.values = {k: row.values.get(k) for k in ("uuid", "name")}
            lost = row.dead
            row.reasons = {k: lost for k in (*GPU_FIELDS, *PROCESS_REASON_KEYS) if row.values.get(k) is None}
            if handle is not None:  # ask for a new handle next time: NVML says when the GPU is back
                del self._handles[i]
        rows.append(sample(i, row, None))
        rows.extend(mig_rows)

    def _read_memory(self, row: Row, handle: Any) -> None:
        fields = ("mem_used_bytes", "mem_total_bytes")
        mem: Any = None
        if self._mem_v2:  # used excludes driver-reserved memory, as nvidia-smi shows it
            mem, err = self._try(row, "nvmlDeviceGetMemoryInfo", handle, self._nv.nvmlMemory_v2)
            if err is not None and err.code in (_FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH):
                self._mem_v2 = False
            elif err is not None:
                row.fail(fields, err.reason)
                return
        if not self._mem_v2:
            mem = self._get(row, fields, "nvmlDeviceGetMemoryInfo", handle)
        if mem is not None:
            row.values["mem_used_bytes"] = int(mem.used)
            row.values["mem_total_bytes"] = int(mem.total)

    def _read_power_limit(self, row: Row, handle: Any) -> float | None:
        limit, err = self._try(row, "nvmlDeviceGetEnforcedPowerLimit", handle)
        if err is not None and row.dead is None:
            limit, _ = self._try(row, "nvmlDeviceGetPowerManagementLimit", handle)
        if limit is None:
            row.fail(("power_limit_w",), err.reason if err is not None else "unknown")
            return None
        return limit / 1000.0

    def _read_processes(self, i: int, row: Row, handle: Any, mig_on: bool, entries: list[Entry]) -> None:
        listed: list[Any] = []
        compute = self._get(row, ("processes",), "nvmlDeviceGetComputeRunningProcesses", handle)
        listed.extend(compute or ())
        mps = self._get(row, ("mps_processes",), "nvmlDeviceGetMPSComputeRunningProcesses", handle)
        listed.extend(mps or ())

        samples, err = self._try(row, "nvmlDeviceGetProcessUtilization", handle, self._last_seen.get(i, 0))
        sm: dict[int, list[int]] | None = None
        if err is not None and err.code not in (_NOT_FOUND, _SUCCESS):  # NOT_FOUND: no sample since then
            row.fail(("process_util",), err.reason)
        else:
            sm = {}
            for s in samples or ():
                sm.setdefault(int(s.pid), []).append(int(s.smUtil))
            if samples:
                self._last_seen[i] = max(int(s.timeStamp) for s in samples)

        def sm_of(pid: int) -> float | None:
            if sm is None:
                return None
            values = sm.get(pid)
            # no sample since the previous read: the process ran no kernel on this GPU meanwhile
            return sum(values) / len(values) if values else 0.0

        if compute is None and mps is None:  # no process list: the utilisation samples still name pids
            for pid in sorted(sm or ()):
                entries.append(Entry(pid, i, None, sm_of(pid), None))
            return
        for p in listed:
            gi = int(getattr(p, "gpuInstanceId", _NO_ID))
            used = p.usedGpuMemory
            entries.append(
                Entry(
                    pid=int(p.pid),
                    gpu_index=i,
                    mem=int(used) if used is not None else None,
                    sm=sm_of(int(p.pid)),
                    mig=gi if mig_on and gi != _NO_ID else None,
                )
            )

    def _read_mig(self, i: int, parent: Row, handle: Any) -> list[GpuSample]:
        """One row per MIG instance (GPU instance id in ``mig_instance``); empty if the parent is lost."""
        if i not in self._mig_max:
            count, err = self._try(parent, "nvmlDeviceGetMaxMigDeviceCount", handle)
            if err is not None:
                return []
            self._mig_max[i] = int(count)
        found: list[tuple[int, GpuSample]] = []
        for slot in range(self._mig_max[i]):
            mig, err = self._try(parent, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if parent.dead is not None:
                return []
            if err is not None:  # NOT_FOUND: no instance in this slot
                continue
            row = Row()
            gi = self._get(row, ("mig_instance",), "nvmlDeviceGetGpuInstanceId", mig)
            if gi is None:
                continue
            static = self._mig_static.setdefault((i, slot, int(gi)), {})  # a new instance: asked again
            for name, fn in (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName")):
                if name not in static:
                    value = self._get(row, (name,), fn, mig)
                    if value is not None:
                        static[name] = str(value)
                row.values[name] = static.get(name)
            util = self._get(row, ("util_pct", "mem_util_pct"), "nvmlDeviceGetUtilizationRates", mig)
            if util is not None:
                row.values["util_pct"] = float(util.gpu)
                row.values["mem_util_pct"] = float(util.memory)
            self._read_memory(row, mig)
            if row.dead is not None:
                parent.dead = row.dead
                return []
            row.fail(
                (f for f in GPU_FIELDS if f not in ("uuid", "name", "util_pct", "mem_util_pct")),
                NOT_PER_MIG,
            )
            for f in ("mem_used_bytes", "mem_total_bytes"):
                if row.values.get(f) is not None:
                    row.reasons.pop(f, None)
            found.append((int(gi), sample(i, row, int(gi))))
        return [s for _, s in sorted(found, key=lambda t: t[0])]


