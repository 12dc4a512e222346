"""Kernels inside graphs, user space: a process's graph contents multiplied out by function
(gputop/sources/bpf/read/graphs.py), the sampler's unknowns, the exporter's series. The BPF side that fills
the tables is tested with real probes in tests/bpf/test_graph_kernels.py."""

from __future__ import annotations

from gputop.exporter.metrics import ExportOptions, SnapshotCollector
from gputop.feeds.live import Sampler, SamplerConfig
from gputop.model import Counts, KernelStat, ProcSample, Snapshot, snapshot_from_json, snapshot_to_json
from gputop.sources.bpf import RawKernel, RawProc
from gputop.sources.bpf.read.graphs import G_LOST, G_UNKNOWN, Content, by_function, kernels_of
from gputop.sources.bpf.read.records import _SCALARS

F, G, H = 0x1000, 0x2000, 0x3000


def raw_proc(pid: int, *, kernels: tuple[RawKernel, ...] = (), graph_kernels_known: bool = True,
             **counters: int) -> RawProc:
    c = dict.fromkeys(_SCALARS, 0)
    c.update(counters, launches=sum(k.launches for k in kernels))
    zero = tuple([0] * 32)
    return RawProc(pid, c, (0,) * 5, (0,) * 5, (0, 0), (0, 0), zero, zero, tuple(zero for _ in range(5)), False,
                   kernels, comm="wl", graph_kernels_known=graph_kernels_known)


def test_contents_multiply_out_through_parts() -> None:
    """A = 5 F + 3 G; B = 2 H + 2 x A; C = B continued (a clone's fork) + 1 H. Launches: C 10, B 7."""
    nodes = {1: {F: 5, G: 3}, 2: {H: 2}, 3: {H: 1}}
    parts = {2: {1: 2}, 3: {2: 1}}
    contents = {1: Content(8, 0, 0), 2: Content(18, 7, 0), 3: Content(19, 10, 0)}
    assert kernels_of(3, nodes, parts, {}) == {H: 3, F: 10, G: 6}
    cache: dict[int, dict[int, int]] = {}
    assert by_function(contents, nodes, parts, cache) == {F: 170, G: 102, H: 44}
    assert set(cache) == {2, 3}                  # launched contents, whose kernels never change
    assert by_function(contents, {}, {}, cache) == {F: 170, G: 102, H: 44}


def test_a_long_chain_of_forks_is_no_recursion() -> None:
    n = 5000                                     # a graph modified after each of 5,000 instantiations
    nodes = {g: {F: 1} for g in range(1, n + 1)}
    parts = {g: {g - 1: 1} for g in range(2, n + 1)}
    assert by_function({n: Content(n, 2, 0)}, nodes, parts) == {F: 2 * n}


def test_what_does_not_add_up_is_unknown() -> None:
    nodes = {1: {F: 2}}
    assert by_function({1: Content(3, 1, 0)}, nodes, {}) is None            # count and nodes differ
    assert by_function({1: Content(2, 1, G_LOST)}, nodes, {}) is None       # a node was not stored
    assert by_function({1: Content(5, 1, 0)}, nodes, {1: {9: 1}}) is None   # a part's nodes are gone
    assert by_function({1: Content(2, 0, G_UNKNOWN), 2: Content(2, 4, 0)}, {2: {F: 2}}, {}) == {F: 8}
    assert kernels_of(1, {}, {1: {2: 1}, 2: {1: 1}}, {}) is None             # a cycle


class _Bpf:
    """A BpfSource stand-in that returns prepared readings (the sampler is what is under test)."""

    def __init__(self, readings: list[dict[int, object]]) -> None:
        self.readings = readings

    def start(self) -> None: ...

    def baseline(self) -> dict[int, object]:
        return {}

    def read(self):  # type: ignore[no-untyped-def]
        from gputop.model import SourceStatus
        from gputop.sources.bpf import BpfReading
        return BpfReading(SourceStatus("ok"), self.readings.pop(0))  # type: ignore[arg-type]

    def poll(self, _t: float) -> None: ...

    def forget(self, *_p: int) -> None: ...

    def close(self) -> None: ...


def _sample(readings: list[dict[int, object]]) -> list[ProcSample]:
    t = [0.0]
    s = Sampler(SamplerConfig(use_nvml=False), bpf=_Bpf(readings), clock=lambda: t[0])  # type: ignore[arg-type]
    s.open_bpf()
    out = []
    for _ in range(len(readings)):
        t[0] += 2.0
        p = s.collect().process(7)
        assert p is not None
        out.append(p)
    return out


def test_graph_kernel_counts_rates_and_unknown_windows() -> None:
    """Interval 1: 600 graph kernels (F 400, G 200); interval 2: 300 more, and one graph of unknown
    kernels: the interval's count and the total are null from then on, never a guess."""
    r1 = raw_proc(7, graph_launches=6, graph_kernel_launches=600,
                  kernels=(RawKernel(F, 10, 10, 10, "f", None, 400), RawKernel(G, 0, 0, 0, "g", None, 200)))
    r2 = raw_proc(7, graph_launches=10, graph_kernel_launches=900, graph_unknown_launches=1,
                  kernels=(RawKernel(F, 10, 10, 10, "f", None, 600), RawKernel(G, 0, 0, 0, "g", None, 300)))
    r3 = raw_proc(7, graph_launches=11, graph_kernel_launches=1000, graph_unknown_launches=1,
                  kernels=(RawKernel(F, 10, 10, 10, "f", None, 700), RawKernel(G, 0, 0, 0, "g", None, 300)))
    p1, p2, p3 = _sample([{7: r1}, {7: r2}, {7: r3}])
    assert p1.interval is not None and p1.total is not None and p1.rates is not None
    assert (p1.interval.graph_kernel_launches, p1.total.graph_kernel_launches) == (600, 600)
    assert p1.rates.graph_kernel_launches_per_s == 300.0
    assert [(k.name, k.launches, k.graph_launches, k.interval_graph_launches, k.graph_launches_per_s)
            for k in p1.kernels] == [("f", 10, 400, 400, 200.0), ("g", 0, 200, 200, 100.0)]
    assert p2.interval is not None and p2.total is not None and p2.rates is not None
    assert (p2.interval.graph_kernel_launches, p2.total.graph_kernel_launches) == (None, None)
    assert p2.rates.graph_kernel_launches_per_s is None
    assert [(k.graph_launches, k.interval_graph_launches) for k in p2.kernels] == [(None, None), (None, None)]
    # a window without unknown graph launches is known again; the total stays unknown
    assert p3.interval is not None and p3.total is not None
    assert (p3.interval.graph_kernel_launches, p3.total.graph_kernel_launches) == (100, None)
    assert [(k.graph_launches, k.interval_graph_launches) for k in p3.kernels] == [(None, 100), (None, 0)]
    back = snapshot_from_json(snapshot_to_json(Snapshot(1.0, 2.0, "h", processes=(p1,))))
    assert back.processes[0] == p1


def test_kernels_ranked_with_their_graph_launches_and_lost_entries_unknown() -> None:
    r = raw_proc(7, graph_launches=1, graph_kernel_launches=50, graph_kernels_known=False,
                 kernels=(RawKernel(F, 10, 10, 10, "f", None, 0), RawKernel(G, 0, 0, 0, "g", None, 50)))
    (p,) = _sample([{7: r}])
    assert p.interval is not None and p.interval.graph_kernel_launches == 50
    assert [(k.name, k.graph_launches) for k in p.kernels] == [("g", None), ("f", None)]


def test_exporter_graph_kernel_series() -> None:
    total = Counts(launches=10, graph_launches=6, graph_kernel_launches=600)
    kernels = (KernelStat("f", 10, 1.0, 1.0, graph_launches=400), KernelStat("g", 0, None, None, graph_launches=200),
               KernelStat("h", 30, 1.0, 1.0, graph_launches=0))
    p = ProcSample(7, "wl", total=total, interval=Counts(), kernels=kernels)
    c = SnapshotCollector(ExportOptions(kernel_metrics=2))
    c.update(Snapshot(1.0, 1.0, "h", processes=(p,)))
    m = {(s.name, s.labels.get("kernel")): s.value for fam in c.collect() for s in fam.samples}
    assert m[("gputop_graph_kernel_launches_total", None)] == 600
    assert m[("gputop_kernel_function_launches_total", "f")] == 10
    assert m[("gputop_kernel_function_launches_total", "g")] == 0
    assert ("gputop_kernel_function_launches_total", "h") not in m          # 30 < 410 and 200
    assert m[("gputop_kernel_function_graph_launches_total", "f")] == 400
    assert m[("gputop_kernel_function_graph_launches_total", "g")] == 200
    unknown = ProcSample(7, "wl", total=Counts(launches=10, graph_launches=6), interval=Counts(), kernels=())
    c.update(Snapshot(2.0, 1.0, "h", processes=(unknown,)))
    assert not [s for fam in c.collect() for s in fam.samples if s.name == "gputop_graph_kernel_launches_total"]
