"""NvmlSource against the fake libnvidia-ml.so.1 (tests/native/fake_nvml.c), loaded by the real pynvml."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import support
from support import NVML_H100, ROOT, build_native

from gputop.model import GpuSample, SourceStatus
from gputop.sources.nvml import ENV_LIBRARY, NOT_PER_MIG, NvmlProc, NvmlSource

GiB = 1 << 30

BASE = NVML_H100 + """\
gpu 1 name Tesla V100-SXM2-16GB
gpu 1 uuid GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee
gpu 1 util 3 1
gpu 1 memory 17179869184 1073741824
gpu 1 temp 35
gpu 1 power 56000
gpu 1 power_limit 300000
gpu 1 sm_clock 1530
gpu 1 pcie 0 12
gpu 1 ecc 0 0
proc 0 4242 21474836480
proc 0 4343 10737418240
proc 1 5151 1073741824
proc 0 6000 1073741824
proc 1 6000 4294967296
putil 0 4242 90 40
putil 0 4242 70 30
putil 0 4343 12 3
putil 1 6000 33 5
"""

GPU0 = GpuSample(
    index=0,
    uuid="GPU-11111111-2222-3333-4444-555555555555",
    name="NVIDIA H100 80GB HBM3",
    util_pct=87.0,
    mem_util_pct=45.0,
    mem_used_bytes=40 * GiB,
    mem_total_bytes=80 * GiB,
    temp_c=61.0,
    power_w=412.345,
    power_limit_w=700.0,
    sm_clock_mhz=1980.0,
    pcie_tx_bytes_per_s=1500 * 1024.0,
    pcie_rx_bytes_per_s=250 * 1024.0,
    xid_errors=0,
    ecc_volatile_errors=2,
)
GPU1 = GpuSample(
    index=1,
    uuid="GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
    name="Tesla V100-SXM2-16GB",
    util_pct=3.0,
    mem_util_pct=1.0,
    mem_used_bytes=1 * GiB,
    mem_total_bytes=16 * GiB,
    temp_c=35.0,
    power_w=56.0,
    power_limit_w=300.0,
    sm_clock_mhz=1530.0,
    pcie_tx_bytes_per_s=0.0,
    pcie_rx_bytes_per_s=12 * 1024.0,
    xid_errors=0,
    ecc_volatile_errors=0,
)
PROCS = {
    4242: NvmlProc(4242, 0, 20 * GiB, 80.0),
    4343: NvmlProc(4343, 0, 10 * GiB, 12.0),
    5151: NvmlProc(5151, 1, 1 * GiB, 0.0),
    # on both GPUs: memory summed, the GPU with more memory kept, the higher SM %
    6000: NvmlProc(6000, 1, 5 * GiB, 33.0),
}

# field of the fake's script -> GpuSample fields it feeds
FAKE_FIELDS = {
    "uuid": ("uuid",),
    "name": ("name",),
    "util": ("util_pct", "mem_util_pct"),
    "memory": ("mem_used_bytes", "mem_total_bytes"),
    "temp": ("temp_c",),
    "power": ("power_w",),
    "clock": ("sm_clock_mhz",),
    "pcie": ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"),
    "ecc": ("ecc_volatile_errors",),
    "events": ("xid_errors",),
}
ERRORS = {
    "NOT_SUPPORTED": "Not Supported",
    "NO_PERMISSION": "Insufficient Permissions",
    "UNKNOWN": "Unknown Error",
}


@pytest.fixture(scope="session")
def fake_lib() -> Path:
    return build_native("fake_nvml.c", "fake_nvml/libnvidia-ml.so.1", "-shared", "-fPIC")


class Script:
    """The fake's script file; ``write`` replaces it atomically (the fake re-reads it on change)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, text: str) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Script:
    s = Script(tmp_path / "nvml.script")
    s.write(BASE)
    monkeypatch.setenv("FAKE_NVML_SCRIPT", str(s.path))
    monkeypatch.delenv(ENV_LIBRARY, raising=False)
    return s


@pytest.fixture
def source(fake_lib: Path, script: Script) -> Iterator[NvmlSource]:
    src = NvmlSource(str(fake_lib))
    yield src
    src.close()


def fake(fake_lib: Path) -> ctypes.CDLL:
    """The same loaded fake (dlopen of the same path returns the same object), for its test hooks."""
    lib = ctypes.CDLL(str(fake_lib))
    lib.fake_nvml_calls.restype = ctypes.c_ulonglong
    lib.fake_nvml_last_seen.restype = ctypes.c_ulonglong
    lib.fake_nvml_registered.restype = ctypes.c_ulonglong
    return lib


def without(sample: GpuSample, reason: str, *fields: str) -> GpuSample:
    reasons = dict(sample.reasons or {})
    reasons.update({f: reason for f in fields})
    return replace(sample, reasons=reasons, **{f: None for f in fields})


# ------------------------------------------------------------------ values


def test_scripted_values_arrive_exactly(source: NvmlSource) -> None:
    r = source.read()
    assert r.status == SourceStatus("ok", None)
    assert r.gpus == (GPU0, GPU1)
    assert dict(r.procs) == PROCS
    assert source.driver_version == "550.54.15"


def test_construction_makes_no_nvml_call(fake_lib: Path, script: Script) -> None:
    before = fake(fake_lib).fake_nvml_calls()
    src = NvmlSource(str(fake_lib))
    assert fake(fake_lib).fake_nvml_calls() == before
    assert src.calls == 0
    src.close()
    assert fake(fake_lib).fake_nvml_calls() == before


def test_module_imports_pynvml_lazily() -> None:
    code = "import sys, gputop.sources.nvml as m; m.NvmlSource(); print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_values_follow_the_script_between_reads(source: NvmlSource, script: Script) -> None:
    source.read()
    text = BASE.replace("gpu 1 temp 35", "gpu 1 temp 36").replace("gpu 0 util 87 45", "gpu 0 util 12 9")
    script.write(text)
    r = source.read()
    assert r.gpus == (replace(GPU0, util_pct=12.0, mem_util_pct=9.0), replace(GPU1, temp_c=36.0))


@pytest.mark.parametrize("error", sorted(ERRORS))
@pytest.mark.parametrize("field", sorted(FAKE_FIELDS))
def test_failing_field_is_none_with_reason_rest_keeps_working(
    fake_lib: Path, script: Script, field: str, error: str
) -> None:
    script.write(BASE + f"gpu 1 fail {field} {error}\n")
    src = NvmlSource(str(fake_lib))
    try:
        r = src.read()
    finally:
        src.close()
    assert r.status.status == "ok"
    assert r.gpus == (GPU0, without(GPU1, ERRORS[error], *FAKE_FIELDS[field]))
    assert dict(r.procs) == PROCS


def test_power_limit_falls_back_to_management_limit(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 0 fail power_limit NOT_SUPPORTED\ngpu 0 power_mgmt_limit 650000\n")
    assert source.read().gpus[0] == replace(GPU0, power_limit_w=650.0)


def test_power_limit_none_when_both_limits_fail(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 0 fail power_limit NO_PERMISSION\ngpu 0 fail power_mgmt_limit NOT_SUPPORTED\n")
    assert source.read().gpus[0] == without(GPU0, "Insufficient Permissions", "power_limit_w")


def test_memory_info_v1_when_v2_is_missing(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 0 fail memory_v2 FUNCTION_NOT_FOUND\n")
    r = source.read()
    # v1 counts driver-reserved memory as used (here 512 MiB)
    assert r.gpus == (replace(GPU0, mem_used_bytes=40 * GiB + 512 * 1024 * 1024), GPU1)


def test_pcie_can_be_disabled(fake_lib: Path, script: Script) -> None:
    src = NvmlSource(str(fake_lib), pcie=False)
    try:
        r = src.read()
    finally:
        src.close()
    fields = ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s")
    off = "disabled (pcie=False)"
    assert r.gpus == (without(GPU0, off, *fields), without(GPU1, off, *fields))


# ------------------------------------------------------------------ lost GPU


def test_gpu_lost_mid_run(fake_lib: Path, source: NvmlSource, script: Script) -> None:
    assert source.read().gpus == (GPU0, GPU1)
    script.write(BASE + "gpu 1 lost\n")
    r = source.read()
    assert r.status.status == "ok"
    lost = {f: "GPU is lost" for f in GPU1.__dataclass_fields__ if f not in ("index", "uuid", "name")}
    lost.pop("mig_instance")
    lost.pop("reasons")
    lost.pop("node")                    # the fleet view's, not NVML's
    lost.update(processes="GPU is lost", mps_processes="GPU is lost", process_util="GPU is lost")
    assert r.gpus == (
        GPU0,
        GpuSample(index=1, uuid=GPU1.uuid, name=GPU1.name, reasons=lost),  # identity stays known
    )
    # its processes go; a process also on GPU 0 keeps what GPU 0 says about it
    assert dict(r.procs) == {4242: PROCS[4242], 4343: PROCS[4343], 6000: NvmlProc(6000, 0, 1 * GiB, 0.0)}
    # the lost GPU costs one call per read (its handle is asked for again), the others are unaffected
    lib = fake(fake_lib)
    before = lib.fake_nvml_calls()
    assert source.read().gpus[1] == r.gpus[1]
    calls_lost = lib.fake_nvml_calls() - before
    script.write(BASE)  # back after a reset
    assert source.read().gpus == (GPU0, GPU1)
    before = lib.fake_nvml_calls()
    source.read()
    calls_both = lib.fake_nvml_calls() - before
    assert (calls_lost, calls_both) == (15 + 1 + 1, 2 * 15 + 1)  # see test_calls_per_read


def test_gpu_lost_before_first_read(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 0 lost\n")
    r = source.read()
    assert r.gpus[0].uuid is None and r.gpus[0].util_pct is None
    assert r.gpus[0].reasons is not None
    assert r.gpus[0].reasons["uuid"] == "GPU is lost"
    assert r.gpus[0].reasons["mem_used_bytes"] == "GPU is lost"
    assert r.gpus[1] == GPU1
    assert sorted(r.procs) == [5151, 6000]


def test_gpu_lost_in_the_middle_of_a_read(source: NvmlSource, script: Script) -> None:
    """A call on a lost GPU after earlier ones succeeded: what was read before the loss goes too."""
    source.read()
    script.write(BASE + "gpu 0 fail pcie GPU_IS_LOST\n")
    r = source.read()
    g = r.gpus[0]
    assert (g.uuid, g.name) == (GPU0.uuid, GPU0.name)
    assert (g.util_pct, g.temp_c, g.mem_used_bytes) == (None, None, None)
    assert g.reasons is not None and set(g.reasons.values()) == {"GPU is lost"}
    assert r.gpus[1] == GPU1


# ------------------------------------------------------------------ driver not loaded, library choice


def test_driver_not_loaded(fake_lib: Path, script: Script) -> None:
    script.write("init DRIVER_NOT_LOADED\n")
    src = NvmlSource(str(fake_lib))
    r = src.read()
    assert r == NvmlReading_unavailable("Driver Not Loaded")
    # retried at most every INIT_RETRY_S: the driver loads, the next read after the delay works
    script.write(BASE)
    assert src.read() == NvmlReading_unavailable("Driver Not Loaded")
    src.INIT_RETRY_S = 0.0
    r = src.read()
    assert r.status == SourceStatus("ok") and r.gpus == (GPU0, GPU1)
    src.close()


def NvmlReading_unavailable(reason: str) -> object:
    from gputop.sources.nvml import NvmlReading

    return NvmlReading(SourceStatus("unavailable", reason), (), {})


def test_missing_library_path(script: Script, tmp_path: Path) -> None:
    src = NvmlSource(str(tmp_path / "libnvidia-ml.so.1"))
    r = src.read()
    assert r.status.status == "unavailable"
    assert r.status.reason is not None
    assert r.status.reason.startswith(f"cannot load {tmp_path / 'libnvidia-ml.so.1'}: ")
    assert "No such file or directory" in r.status.reason
    src.close()


def test_library_from_environment(fake_lib: Path, script: Script, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_LIBRARY, str(fake_lib))
    src = NvmlSource()
    try:
        assert src.read().gpus == (GPU0, GPU1)
    finally:
        src.close()


def test_second_library_refused_while_first_in_use(
    fake_lib: Path, source: NvmlSource, testbed: support.Testbed
) -> None:
    assert source.read().status.status == "ok"
    other = NvmlSource(str(testbed.libnvidia_ml))
    r = other.read()
    assert r.status == SourceStatus(
        "unavailable", f"another NVML library ({os.path.realpath(fake_lib)}) is in use in this process"
    )
    other.close()
    assert source.read().gpus == (GPU0, GPU1)  # the first one is untouched


def test_switching_libraries_in_one_process(
    fake_lib: Path, script: Script, testbed: support.Testbed
) -> None:
    a = NvmlSource(str(fake_lib))
    assert a.read().gpus == (GPU0, GPU1)
    a.close()
    real = NvmlSource(str(testbed.libnvidia_ml))
    assert real.read().status == SourceStatus("unavailable", "Driver Not Loaded")
    real.close()
    b = NvmlSource(str(fake_lib))
    assert b.read().gpus == (GPU0, GPU1)
    b.close()


def test_close_shuts_nvml_down_and_is_idempotent(fake_lib: Path, source: NvmlSource) -> None:
    source.read()
    lib = fake(fake_lib)
    count = ctypes.c_uint()
    assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0  # initialised
    source.close()
    source.close()
    assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 1  # NVML_ERROR_UNINITIALIZED
    assert source.read().gpus == (GPU0, GPU1)  # a read after close initialises again


# ------------------------------------------------------------------ XID events


def test_xid_events_counted_since_start(fake_lib: Path, source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 0 xid 1 48\n")  # one XID before gputop started: not counted
    assert [g.xid_errors for g in source.read().gpus] == [0, 0]
    assert fake(fake_lib).fake_nvml_registered(0) == 0x8  # nvmlEventTypeXidCriticalError only
    script.write(BASE + "gpu 0 xid 4 48\ngpu 1 xid 2 79\n")
    assert [g.xid_errors for g in source.read().gpus] == [3, 2]
    assert [g.xid_errors for g in source.read().gpus] == [3, 2]  # counts, not per-read deltas
    script.write(BASE + "gpu 0 xid 5 13\ngpu 1 xid 2 79\n")
    assert [g.xid_errors for g in source.read().gpus] == [4, 2]


def test_xid_none_when_event_registration_not_supported(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 1 fail events NOT_SUPPORTED\ngpu 1 xid 3\n")
    r = source.read()
    assert r.gpus == (GPU0, without(GPU1, "Not Supported", "xid_errors"))


def test_xid_none_when_event_set_cannot_be_created(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "events_create NO_PERMISSION\n")
    r = source.read()
    reason = "Insufficient Permissions"
    assert r.gpus == (without(GPU0, reason, "xid_errors"), without(GPU1, reason, "xid_errors"))


# ------------------------------------------------------------------ processes


def test_process_utilization_keeps_last_seen_timestamp(
    fake_lib: Path, source: NvmlSource, script: Script
) -> None:
    text = BASE.replace("putil 0 4242 90 40", "putil 0 4242 90 40 1000").replace(
        "putil 0 4242 70 30", "putil 0 4242 70 30 2000"
    )
    text = text.replace("putil 0 4343 12 3", "putil 0 4343 12 3 1500").replace("putil 1 6000 33 5", "")
    script.write(text)
    lib = fake(fake_lib)
    r = source.read()
    assert lib.fake_nvml_last_seen(0) == 0
    assert (r.procs[4242].sm_util_pct, r.procs[4343].sm_util_pct) == (80.0, 12.0)
    r = source.read()  # no sample newer than 2000: NVML_ERROR_NOT_FOUND, the processes were idle
    assert lib.fake_nvml_last_seen(0) == 2000
    assert (r.procs[4242].sm_util_pct, r.procs[4343].sm_util_pct) == (0.0, 0.0)
    script.write(text + "putil 0 4343 66 1 2500\n")
    r = source.read()
    assert lib.fake_nvml_last_seen(0) == 2000
    assert (r.procs[4242].sm_util_pct, r.procs[4343].sm_util_pct) == (0.0, 66.0)
    source.read()
    assert lib.fake_nvml_last_seen(0) == 2500


def test_process_utilization_failure(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 0 fail proc_util NO_PERMISSION\n")
    r = source.read()
    assert r.gpus == (replace(GPU0, reasons={"process_util": "Insufficient Permissions"}), GPU1)
    assert dict(r.procs) == {
        4242: NvmlProc(4242, 0, 20 * GiB, None),
        4343: NvmlProc(4343, 0, 10 * GiB, None),
        5151: PROCS[5151],
        6000: PROCS[6000],
    }


def test_process_list_failure_falls_back_to_utilization_samples(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "gpu 0 fail procs NOT_SUPPORTED\ngpu 0 fail mps_procs NOT_SUPPORTED\n")
    r = source.read()
    reasons = {"processes": "Not Supported", "mps_processes": "Not Supported"}
    assert r.gpus == (replace(GPU0, reasons=reasons), GPU1)
    assert dict(r.procs) == {
        4242: NvmlProc(4242, 0, None, 80.0),
        4343: NvmlProc(4343, 0, None, 12.0),
        5151: PROCS[5151],
        6000: NvmlProc(6000, 1, 4 * GiB, 33.0),
    }


def test_mps_clients_and_unknown_memory(source: NvmlSource, script: Script) -> None:
    script.write(BASE + "proc 1 7000 2147483648 mps\nproc 1 7001 na\n")
    r = source.read()
    assert r.procs[7000] == NvmlProc(7000, 1, 2 * GiB, 0.0)
    assert r.procs[7001] == NvmlProc(7001, 1, None, 0.0)


def test_no_processes(source: NvmlSource, script: Script) -> None:
    script.write("\n".join(line for line in BASE.splitlines() if not line.startswith(("proc", "putil"))))
    r = source.read()
    assert r.gpus == (GPU0, GPU1)
    assert dict(r.procs) == {}


# ------------------------------------------------------------------ MIG


MIG = """\
gpu 2 name NVIDIA A100-SXM4-40GB
gpu 2 uuid GPU-cccccccc-0000-0000-0000-000000000002
gpu 2 memory 42949672960 3221225472
gpu 2 temp 40
gpu 2 power 90000
gpu 2 power_limit 400000
gpu 2 sm_clock 1410
gpu 2 pcie 10 20
gpu 2 ecc 0 0
gpu 2 mig_mode 1
mig 2 0 7 0 10200547328 1073741824 MIG-0e2e2e2e-0000-0000-0000-000000000007 NVIDIA A100-SXM4-40GB MIG 2g.10gb
mig 2 3 1 0 20401094656 2147483648 MIG-0e2e2e2e-0000-0000-0000-000000000001 NVIDIA A100-SXM4-40GB MIG 3g.20gb
proc 2 8100 2147483648 gi=1 ci=0
proc 2 8200 1073741824 gi=7 ci=0
"""


def test_mig_instances_get_their_own_rows(source: NvmlSource, script: Script) -> None:
    script.write(BASE + MIG)
    r = source.read()
    assert r.gpus[:2] == (GPU0, GPU1)
    not_per_mig = {
        f: NOT_PER_MIG
        for f in (
            "temp_c",
            "power_w",
            "power_limit_w",
            "sm_clock_mhz",
            "pcie_tx_bytes_per_s",
            "pcie_rx_bytes_per_s",
            "xid_errors",
            "ecc_volatile_errors",
        )
    }
    util_ns = {"util_pct": "Not Supported", "mem_util_pct": "Not Supported"}
    assert r.gpus[2:] == (
        GpuSample(
            index=2,
            uuid="GPU-cccccccc-0000-0000-0000-000000000002",
            name="NVIDIA A100-SXM4-40GB",
            mem_used_bytes=3 * GiB,
            mem_total_bytes=40 * GiB,
            temp_c=40.0,
            power_w=90.0,
            power_limit_w=400.0,
            sm_clock_mhz=1410.0,
            pcie_tx_bytes_per_s=10240.0,
            pcie_rx_bytes_per_s=20480.0,
            xid_errors=0,
            ecc_volatile_errors=0,
            reasons=util_ns,  # NVML has no GPU utilisation while MIG is on
        ),
        GpuSample(
            index=2,
            mig_instance=1,
            uuid="MIG-0e2e2e2e-0000-0000-0000-000000000001",
            name="NVIDIA A100-SXM4-40GB MIG 3g.20gb",
            mem_used_bytes=2 * GiB,
            mem_total_bytes=20401094656,
            reasons={**util_ns, **not_per_mig},
        ),
        GpuSample(
            index=2,
            mig_instance=7,
            uuid="MIG-0e2e2e2e-0000-0000-0000-000000000007",
            name="NVIDIA A100-SXM4-40GB MIG 2g.10gb",
            mem_used_bytes=1 * GiB,
            mem_total_bytes=10200547328,
            reasons={**util_ns, **not_per_mig},
        ),
    )
    assert r.procs[8100] == NvmlProc(8100, 2, 2 * GiB, 0.0, mig_instance=1)
    assert r.procs[8200] == NvmlProc(8200, 2, 1 * GiB, 0.0, mig_instance=7)
    assert r.procs[4242] == PROCS[4242]


def test_mig_mode_turned_off(source: NvmlSource, script: Script) -> None:
    script.write(BASE + MIG)
    assert len(source.read().gpus) == 5
    script.write(BASE + MIG.replace("gpu 2 mig_mode 1", "gpu 2 mig_mode 0"))
    r = source.read()
    assert [(g.index, g.mig_instance) for g in r.gpus] == [(0, None), (1, None), (2, None)]
    assert r.procs[8100] == NvmlProc(8100, 2, 2 * GiB, 0.0, mig_instance=None)


# ------------------------------------------------------------------ cost


def test_calls_per_read(fake_lib: Path, source: NvmlSource) -> None:
    """The NVML calls a steady-state read makes (C entry points; pynvml calls some twice)."""
    lib = fake(fake_lib)
    source.read()
    before, before_py = lib.fake_nvml_calls(), source.calls
    source.read()
    # per GPU: util, memory, temp, power, power limit, clock, 2 x pcie, ecc, mig mode,
    # compute procs (2: size, then fill), MPS procs (1: none), process util (2) = 15; + 1 event wait
    assert lib.fake_nvml_calls() - before == 2 * 15 + 1
    assert source.calls - before_py == 2 * 13 + 1


def test_mig_instance_recreated_in_the_same_slot(source: NvmlSource, script: Script) -> None:
    script.write(BASE + MIG)
    assert [g.uuid for g in source.read().gpus if g.mig_instance is not None] == [
        "MIG-0e2e2e2e-0000-0000-0000-000000000001",
        "MIG-0e2e2e2e-0000-0000-0000-000000000007",
    ]
    new = (
        "mig 2 0 9 0 10200547328 0 MIG-99999999-0000-0000-0000-000000000009 NVIDIA A100-SXM4-40GB MIG 2g.10gb"
    )
    script.write(BASE + "\n".join(new if line.startswith("mig 2 0 ") else line for line in MIG.splitlines()))
    assert [(g.mig_instance, g.uuid) for g in source.read().gpus if g.mig_instance is not None] == [
        (1, "MIG-0e2e2e2e-0000-0000-0000-000000000001"),
        (9, "MIG-99999999-0000-0000-0000-000000000009"),
    ]


def test_every_nvml_call_goes_through_the_query_helper() -> None:
    """No ``<anything>.nvml...(...)`` call in the module: functions are named to ``_query`` as strings."""
    import ast

    import gputop.sources.nvml as mod

    tree = ast.parse(Path(mod.__file__).read_text())
    direct = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("nvml")
    ]
    assert direct == []
    imports = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and (any(a.name == "pynvml" for a in node.names) or getattr(node, "module", None) == "pynvml")
    ]
    assert len(imports) == 1  # the lazy import in NvmlSource._init
