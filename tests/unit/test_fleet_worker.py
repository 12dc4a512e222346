"""The dashboard's fleet reading (gputop.feeds.fleet_worker): a real Prometheus holding a synthetic fleet (the
benchmark's generator, 3 nodes x 400 processes, loaded with promtool) read in a child process and handed
back in chunks. Exact: the query count, every process, its launch rate (the counter's rise over the
window, which the samples span exactly), and every value the table shows, equal to batch mode's reading
in this process; what the table does not show is unknown (None) until the process is watched; a reader
process that died is started again at the next refresh, and the reader ends with the feed."""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from promserver import tsdb_prometheus, wait_until
from support import ROOT

from gputop.feeds.fleet import FleetFeed
from gputop.feeds.fleet_worker import CHUNK, WorkerReader
from gputop.feeds.prometheus import FleetConfig
from gputop.model import ProcSample
from gputop.view.columns import COLUMNS

sys.path.insert(0, str(ROOT / "bench"))
from fleet_scale import STEP_S, write_openmetrics

NODES, PROCS = 3, 400
WINDOW_S = 60


def table_values(p: ProcSample) -> tuple[object, ...]:
    return tuple(c.value(p) for c in COLUMNS)


def test_child_reads_the_table_exactly_in_chunks(tmp_path: Path) -> None:
    t_end = int(time.time()) // STEP_S * STEP_S
    om, data = tmp_path / "fleet.om", tmp_path / "data"
    write_openmetrics(om, NODES, PROCS, t_end)
    # the launches counter of each process at the window's two ends, as written
    rise: dict[tuple[str, int], float] = {}
    line = re.compile(r'gputop_kernel_launches_total\{.*instance="([^"]+)",job="gputop",pid="(\d+)"\} (\d+) (\d+)')
    for m in line.finditer(om.read_text()):
        key, v, t = (m.group(1), int(m.group(2))), float(m.group(3)), int(m.group(4))
        if t == t_end - WINDOW_S:
            rise[key] = rise.get(key, 0.0) - v
        elif t == t_end:
            rise[key] = rise.get(key, 0.0) + v
    assert len(rise) == NODES * PROCS
    dash = batch = None
    with tsdb_prometheus(om, data) as url:
        try:
            config = FleetConfig(url=url, window=f"{WINDOW_S}s", at=t_end)
            dash = FleetFeed(replace(config, table_only=True, child=True))
            batch = FleetFeed(config)
            snap = dash.collect()
            assert gc.isenabled()
            assert isinstance(dash.reader, WorkerReader) and dash.reader.pid not in (None, os.getpid())
            # 1 build info + sources, GPUs, 6 gauge families, the processes' state, total launches (with the names)
            # + 13 increases
            assert dash.queries == 24
            assert len(snap.processes) == NODES * PROCS > 2 * CHUNK      # handed back in three chunks
            assert {p.key: p.rates.launches_per_s if p.rates else None for p in snap.processes} == {
                k: v * (1.0 / WINDOW_S) for k, v in rise.items()}
            full = batch.collect()
            assert batch.queries == 1 + 9 + 2 * 32
            assert {p.key: table_values(p) for p in snap.processes} == {p.key: table_values(p) for p in full.processes}
            assert (snap.gpus, snap.sources) == (full.gpus, full.sources)
            p = snap.processes[0]
            assert p.total is not None and p.total.sync_calls is None and p.interval is not None
            assert p.interval.sync_calls is None and p.interval.memcpy is None     # not shown: not read
            # a reader process that died is started again at the next refresh
            first = dash.reader.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            # a zombie whose other threads are gone too: the leader shows Z while they still exit,
            # and until they have, waitpid does not report it (the refresh then finds the pipe closed)
            wait_until("the killed reader to be a zombie",
                       lambda: Path(f"/proc/{first}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
                       and os.listdir(f"/proc/{first}/task") == [str(first)])
            assert dash.collect().processes == snap.processes
            assert dash.reader.pid not in (None, first) and dash.queries == 2 * 24
            # watched: everything, as batch mode reads it
            dash.watch([p.key])
            batch.watch([p.key])
            watched = {q.key: q for q in dash.collect().processes}[p.key]
            assert watched == {q.key: q for q in batch.collect().processes}[p.key]
            assert watched.total is not None and watched.total.sync_calls is not None
            assert dash.queries == 3 * 24 + 2 + 8
            # the child ends with the feed
            child = dash.reader.pid
            dash.stop()
            assert child is not None and not Path(f"/proc/{child}").exists()       # ended and reaped
        finally:
            for feed in (dash, batch):
                if feed is not None:
                    feed.stop()
