"""NCCL (issue 36, item 2): the real libnccl.so.2 of the nvidia-nccl-cu12 2.27.5 wheel (what PyTorch 2.9 and 2.10
pin) and of nvidia-nccl-cu13 2.32.6. Without a GPU NCCL refuses a collective on a NULL communicator after its
entry (ncclInvalidArgument) and fails to create one: the entry probes count every call exactly, by operation
and datatype; the communicators a process creates are shown with a stand-in library that succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import support
from support import NCCL_VERSIONS, build_native

from gputop.model import NCCL_DTYPE_BYTES, NCCL_OPS

#: (op as the workload spells it, calls, count, datatype): fp32, bf16, int64, int8, fp16, double, fp8e5m2...
PLAIN = [("AllReduce", 3, 100, 7), ("Broadcast", 2, 10, 9), ("Reduce", 1, 10, 4), ("AllGather", 1, 10, 0),
         ("ReduceScatter", 1, 10, 6), ("Send", 2, 5, 8), ("Recv", 1, 5, 11)]
#: 2.28+
NEWER = [("AlltoAll", 1, 10, 3), ("Gather", 1, 4, 5), ("Scatter", 1, 4, 1)]
#: the *Config forms, 2.31+
CONFIG = [("AllReduce", 1, 10, 2), ("AlltoAll", 2, 3, 7)]


@pytest.fixture(params=NCCL_VERSIONS)
def nccl(request: pytest.FixtureRequest, testbed: support.Testbed) -> tuple[str, Path]:
    return request.param, testbed.libnccl(request.param)


def _expected(calls: list[tuple[str, int, int, int]]) -> tuple[list[int], list[int]]:
    n, b = [0] * len(NCCL_OPS), [0] * len(NCCL_OPS)
    for op, k, count, dtype in calls:
        i = NCCL_OPS.index(op.lower())
        n[i] += k
        b[i] += k * count * NCCL_DTYPE_BYTES[dtype]
    return n, b


@pytest.mark.attach_modes("links", "perf")
def test_calls_and_bytes_by_operation_and_datatype(run_workload, workloads, nccl) -> None:
    version, lib = nccl
    minor = int(version.split(".")[1])
    calls = PLAIN + (NEWER if minor >= 28 else [])
    config = CONFIG if minor >= 31 else []
    ops = [f"nccl:{k}:{op}:{count}:{dtype}" for op, k, count, dtype in calls]
    ops += [f"nccl_config:{k}:{op}:{count}:{dtype}" for op, k, count, dtype in config]
    # ncclBcast calls ncclBroadcast: one call, counted there; an unknown datatype: a call, no bytes; groups
    # apart; ncclCommInitRank fails without a GPU: no communicator
    ops += ["nccl_bcast:2:7:2", "nccl:1:AllReduce:10:99", "nccl_group:3", "nccl_init:2:8:3"]
    raw = run_workload([workloads.dlopen, "--nccl", lib, *ops]).go_and_wait()
    n, b = _expected([*calls, *config, ("Broadcast", 2, 7, 2)])
    n[NCCL_OPS.index("allreduce")] += 1
    assert list(raw.nccl_calls) == n and list(raw.nccl_bytes) == b
    c = raw.counters
    assert (c["nccl_all_calls"], c["nccl_all_bytes"]) == (sum(n), sum(b))
    assert (c["nccl_untyped_calls"], c["nccl_group_calls"], c["nccl_comms"]) == (1, 3, 0)
    assert raw.nccl_comm is None
    if minor == 32:     # every operation, the *Config forms included
        assert all(n) and sum(n) == 3 + 2 + 2 + 1 + 1 + 1 + 2 + 1 + 1 + 1 + 1 + 1 + 2 + 1
        assert sum(b) == 1200 + 40 + 56 + 80 + 10 + 20 + 80 + 5 + 40 + 32 + 4 + 40 + 2 * 3 * 4
    assert c["launches"] == 0


def test_the_largest_communicator_created_and_the_rank_in_it(run_workload, workloads) -> None:
    lib = build_native("nccl_standin.c", "nccl_standin/libnccl.so.2", "-shared", "-fPIC")
    raw = run_workload([workloads.dlopen, "--nccl", lib, "nccl_init:1:4:1", "nccl_init:1:8:3", "nccl_init:2:2:0",
                        "nccl:5:AllReduce:16:7"]).go_and_wait()
    c = raw.counters
    assert (c["nccl_comms"], raw.nccl_comm) == (4, (8, 3))
    assert raw.nccl_calls[NCCL_OPS.index("allreduce")] == 5 and raw.nccl_bytes[0] == 5 * 64
