"""The process table's sort at fleet scale (``columns.ProcOrder``) gives exactly the order of the
implementation it replaced (sort by identity, then a stable sort of the known values, the unknown
last): every column, both directions, with a filter, and the selected row found by key."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from gputop.model import ProcSample, Rates
from gputop.view import columns


def reference_sort(procs: Sequence[ProcSample], key: str, reverse: bool = False) -> list[ProcSample]:
    """``columns.sort_processes`` as it was before ``ProcOrder`` (commit 63b4ced)."""
    col = columns.BY_KEY[key]
    descending = col.descending != reverse
    order = sorted(procs, key=columns.identity)
    values = [col.value(p) for p in order]
    lowered: list[Any] = [v.lower() if isinstance(v, str) else v for v in values]
    known = [i for i, v in enumerate(values) if v is not None]
    known.sort(key=lowered.__getitem__, reverse=descending)
    return [order[i] for i in known] + [p for p, v in zip(order, values) if v is None]


def fleet(nodes: int, procs: int, seed: int = 9) -> tuple[ProcSample, ...]:
    """A shuffled fleet with many ties, unknown values, text differing only in case, and on one node
    a PID twice (reused within the snapshot: two rows with one key)."""
    rnd = random.Random(seed)

    def maybe(*choices: Any) -> Any:
        return rnd.choice((None, *choices))

    out = []
    for n in range(nodes):
        node = maybe(f"gpu-node-{n % 50:03d}", f"GPU-Node-{n % 7}")
        instance = f"10.0.{n // 250}.{n % 250}:9464"
        for i in range(procs):
            rates = Rates(launches_per_s=maybe(0.0, 100.0, 2500.0, float(rnd.randint(0, 99))),
                          graph_kernel_launches_per_s=maybe(0.0, 3.0),
                          memcpy_bytes_per_s=maybe({"h2d": 1e6, "d2h": 0.0}, {"h2d": 2e6}, {}),
                          uvm_faults_per_s=maybe(0.0, 1.5), sync_wait_pct=maybe(0.0, 12.5, 99.0))
            out.append(ProcSample(
                pid=1000 + (i % (procs - 1) if n == 3 else i) * 3, comm=maybe("python", "Python", "vllm", "a"),
                cmdline=maybe("python train.py --lr 3", "/usr/bin/vllm serve", "B job"), user=maybe("alice", "Bob"),
                rates=maybe(rates, rates, rates), grid_blocks_avg=maybe(1.0, 128.0), block_threads_avg=maybe(256.0),
                gpu_index=maybe(0, 1, 7), gpu_mem_bytes=maybe(2**30, 2**33), gpu_util_pct=maybe(0.0, 50.0),
                cpu_pct=maybe(3.0, 0.5), launch_bound=maybe(True, False), node=node, instance=instance))
    rnd.shuffle(out)
    return tuple(out)


@pytest.fixture(scope="module")
def procs() -> tuple[ProcSample, ...]:
    return fleet(250, 64)       # 16,000 rows: ties of every kind (64,000 took 28 s of the quick tier)


@pytest.mark.parametrize("reverse", [False, True])
def test_every_column_sorts_16000_processes_as_before(procs: tuple[ProcSample, ...], reverse: bool) -> None:
    assert len(procs) == 16_000
    order = columns.ProcOrder(procs)
    for key in columns.SORT_KEYS:
        assert columns._values(key, procs) == [columns.BY_KEY[key].value(p) for p in procs], key
        expected = reference_sort(procs, key, reverse)
        assert order.rows(key, reverse) == expected, key
        assert list(order.view(key, reverse)) == expected, key          # and again, from what it kept
        assert columns.sort_processes(procs, key, reverse) == expected, key


def test_a_filter_keeps_the_sorted_order(procs: tuple[ProcSample, ...]) -> None:
    order = columns.ProcOrder(procs)
    for query in ("PYTHON", " node-01", "1003", "vllm"):
        shown = columns.filter_processes(procs, query)
        assert 0 < len(shown) < len(procs)
        for key in ("launches", "command", "node", "pid"):
            for reverse in (False, True):
                assert list(order.view(key, reverse, query)) == reference_sort(shown, key, reverse), (query, key)
    assert list(order.view("pid", False, "no such process")) == []


def test_the_selected_row_is_found_by_key(procs: tuple[ProcSample, ...]) -> None:
    order = columns.ProcOrder(procs)
    for key, reverse, query in (("launches", False, ""), ("command", True, ""), ("sync", False, "python")):
        rows = order.view(key, reverse, query)
        listed = list(rows)
        wanted = [listed[0].key, listed[len(listed) // 2].key, listed[-1].key, procs[0].key,
                  ("10.0.0.3:9464", 1000), ("10.0.0.3:9464", 1000 + 63 * 3), ("10.9.9.9:9464", 1000)]
        for which in wanted:
            first = next((r for r, p in enumerate(listed) if p.key == which), None)
            assert rows.position(which) == first, (key, which)
    # node 3 has PID 1000 twice (a key on two rows): the first row with it
    both = [p for p in procs if p.key == ("10.0.0.3:9464", 1000)]
    assert len(both) == 2
    assert len(order.where(("10.0.0.3:9464", 1000))) == 2


def test_rows_is_a_sequence(procs: tuple[ProcSample, ...]) -> None:
    rows = columns.ProcOrder(procs[:10]).view("pid")
    listed = reference_sort(procs[:10], "pid")
    assert len(rows) == 10 and rows[0] is listed[0] and rows[-1] is listed[-1] and rows[2:5] == listed[2:5]
    assert [p.pid for p in rows] == [p.pid for p in listed]
    host = [ProcSample(pid=p, comm="x") for p in (7, 3, 5)]
    assert columns.ProcOrder(host).view("pid").position(5) == 1
    assert columns.ProcOrder(host).view("pid").position(4) is None
