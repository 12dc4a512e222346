"""The batch table (`gputop -b -f table`): the dashboard's process table, COMMAND last and whole,
hostile names escaped, GPU lines with the GPU panel's fields."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from dataclasses import replace

from gputop import batch
from gputop.model import Counts, GpuSample, ProcSample, Rates, Snapshot, SourceStatus, snapshot_to_json
from gputop.view import columns

HOSTILE = "\x1b[2J\x1b[31mEVIL\x07"
HEADERS = [c.header for c in columns.COLUMNS if c.key != "command" and c.key not in columns.FLEET_ONLY] + ["COMMAND"]


def proc(pid: int, launches: float | None = 1000.0, **kw: object) -> ProcSample:
    base: dict[str, object] = dict(
        comm="python", cmdline="/usr/bin/python train.py", user="alice", gpu_index=0,
        rates=Rates(launches_per_s=launches, graph_launches_per_s=20.0, graph_kernel_launches_per_s=250.0,
                    memcpy_bytes_per_s={"h2d": 2048.0, "d2h": 1 << 20, "d2d": 0.0},
                    memset_bytes_per_s=3 << 20, uvm_faults_per_s=12.0, sync_wait_pct=25.0),
        total=Counts(launches=5000, live_alloc_bytes=3 << 30), grid_blocks_avg=80.0, block_threads_avg=128.0,
        gpu_mem_bytes=4 << 30, gpu_util_pct=55.0, cpu_pct=97.5, launch_bound=True)
    base.update(kw)
    return ProcSample(pid=pid, **base)  # type: ignore[arg-type]


def snap(*procs: ProcSample, gpus: tuple[GpuSample, ...] = ()) -> Snapshot:
    return Snapshot(time=1_700_000_000.0, interval_s=1.0, host="node-1",
                    sources={"bpf": SourceStatus("ok"), "nvml": SourceStatus("ok")}, gpus=gpus, processes=procs)


def rows(text: str) -> tuple[str, list[str]]:
    """The header line and the process lines of one table."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("PID "))
    return lines[at], lines[at + 1:]


def split(header: str, row: str) -> tuple[list[str], str]:
    """A row's cells before COMMAND (no cell holds a space) and its command (everything after)."""
    at = header.index("COMMAND")
    return row[:at].split(), row[at:]


def test_headers_are_the_dashboards_in_order_with_command_last() -> None:
    header, _ = rows(batch.table(snap(proc(1))))
    assert re.fullmatch(r"\s*" + r"\s+".join(map(re.escape, HEADERS)), header), header
    assert [c.key for c in batch.TABLE_COLUMNS] == [c.key for c in columns.COLUMNS if c.key not in (
        "command", "node", "namespace", "pod")] + ["command"]


def test_cells_are_the_dashboards_renders() -> None:
    p = proc(4242, cpu_time_s=3723.45, rss_bytes=3 << 29, mem_pct=2.34, kernel_state="S")
    header, (row,) = rows(batch.table(snap(p)))
    cells, command = split(header, row)
    assert cells == [c.render(p) for c in batch.TABLE_COLUMNS[:-1]]
    assert cells == ["4242", "alice", "0", "1.00k", "80", "128", "20", "250", "2.00K", "1.00M", "0", "3.00M", "N/A",
                     "N/A", "3.00G",
                     "12",
                     "25%", "4.00G", "55%", "S", "98%", "62:03.45", "1.50G", "2.3%", "◆"]
    assert command == "python train.py"          # the dashboard's COMMAND: program without its directory


def test_hostile_names_are_escaped_never_raw() -> None:
    evil = proc(1, comm=HOSTILE, cmdline=None, user="bob\x1b]0;owned\x07")
    bad_utf8 = proc(2, cmdline="/opt/ev\udcffil --x=\u202eexe.txt")   # byte 0xff (surrogateescape), bidi override
    text = batch.table(snap(evil, bad_utf8))
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u202e\udc80-\udcff]", text.replace("\n", ""))
    text.encode("utf-8")                            # no lone surrogate left
    header, lines = rows(text)
    by_pid = {split(header, ln)[0][0]: ln for ln in lines}
    assert split(header, by_pid["1"])[1] == r"\x1b[2J\x1b[31mEVIL\x07"
    assert split(header, by_pid["1"])[0][1] == r"bob\x1b]0;owned\x07"
    assert split(header, by_pid["2"])[1] == r"ev\xffil --x=\u{202e}exe.txt"


def test_a_long_command_is_printed_whole_and_last() -> None:
    long_cmd = "/usr/bin/python serve.py " + " ".join(f"--option-{i}=value-{i}" for i in range(60)) + " --last"
    header, (row,) = rows(batch.table(snap(proc(7, cmdline=long_cmd))))
    assert len(long_cmd) > 1000
    assert split(header, row)[1] == "python " + long_cmd.split(" ", 1)[1]
    assert "…" not in row


def test_columns_are_as_wide_as_their_values_and_aligned() -> None:
    wide = proc(1234567, user="a-very-long-user-name", cpu_pct=12345.0)
    short = proc(8, user="al", launches=5.0)
    header, lines = rows(batch.table(snap(wide, short)))
    at = header.index("COMMAND")
    for line in lines:                              # every command starts under its header
        assert line[at - 1] == " " and line[at] != " "
    assert "a-very-long-user-name" in lines[0]      # not cut
    # right-aligned numbers end under their header, left-aligned USER starts under its header
    for h in ("PID", "LAUNCH/s", "CPU%"):
        end = header.index(h) + len(h)
        assert all(line[end - 1] != " " and line[end] == " " for line in lines), h
    assert all(line[header.index("USER")] != " " for line in lines)


def test_sorted_like_the_dashboard_unknown_last() -> None:
    procs = [proc(3, launches=10.0), proc(1, launches=None), proc(2, launches=500.0), proc(4, launches=500.0)]
    def order(sort: str = columns.DEFAULT_SORT, reverse: bool = False) -> list[str]:
        header, lines = rows(batch.table(snap(*procs), sort, reverse))
        return [split(header, ln)[0][0] for ln in lines]
    assert order() == ["2", "4", "3", "1"] == [str(p.pid) for p in columns.sort_processes(procs, "launches")]
    assert order("pid") == ["1", "2", "3", "4"]
    assert order("launches", reverse=True) == ["3", "2", "4", "1"]


def test_exited_and_stopped_are_marked_after_the_command() -> None:
    text = batch.table(snap(proc(1, state="exited"), proc(2, state="stopped", launches=5.0), proc(3, launches=1.0)))
    header, lines = rows(text)
    assert [split(header, ln)[1] for ln in lines] == [
        "python train.py (exited)", "python train.py (stopped)", "python train.py"]


def test_unknown_values_are_na_and_an_unflagged_process_has_a_blank_lb() -> None:
    bare = ProcSample(pid=9, comm=None)
    calm = proc(10, launch_bound=False)
    header, lines = rows(batch.table(snap(bare, calm)))
    cells, command = split(header, lines[1])
    assert cells[0] == "9" and set(cells[1:]) == {"N/A"} and command == "N/A"
    cells, _ = split(header, lines[0])
    assert len(cells) == len(HEADERS) - 2           # LB is empty: nothing between CPU% and the command


def test_gpu_lines_carry_the_gpu_panels_fields() -> None:
    full = GpuSample(index=0, name="NVIDIA H100 80GB HBM3", util_pct=87.0, mem_used_bytes=40 << 30,
                     mem_total_bytes=80 << 30, temp_c=61.4, power_w=412.3, power_limit_w=700.0,
                     pcie_rx_bytes_per_s=250 * 1024.0, pcie_tx_bytes_per_s=1500 * 1024.0, xid_errors=2)
    unknown = GpuSample(index=1, mig_instance=3, name="A100\x1b[2J")
    text = batch.table(snap(gpus=(full, unknown)))
    tasks, first, second = text.splitlines()[1:4]
    # the summary line (derive.summary): a GPU of unknown utilisation leaves the busy count unknown
    assert tasks == ("Tasks: 0 listed, 0 running, 0 stopped, 0 exited  Launches: 0/s  Graph kernels: 0/s  "
                     "H2D 0/s  D2H 0/s  D2D 0/s  GPUs busy: N/A")
    assert first == ("GPU 0 NVIDIA H100 80GB HBM3  util 87%  mem 40.0G/80.0G  temp 61°C  power 412/700W  "
                     "pcie ↓250K/s ↑1.46M/s  xid 2")
    assert second == r"GPU 1.3 A100\x1b[2J  util N/A  mem N/A  temp N/A  power N/A  pcie ↓N/A ↑N/A  xid N/A"


def test_summary_line_first_and_json_unchanged() -> None:
    s = snap(proc(1))
    assert batch.table(s).splitlines()[0].startswith("gputop - ")
    out = io.StringIO()
    batch.emit([s, s], "json", out)
    assert out.getvalue().splitlines() == [snapshot_to_json(s)] * 2
    # with the summary's totals (Snapshot.summary, an optional field of schema gputop/1)
    assert json.loads(out.getvalue().splitlines()[0])["summary"] == {
        "processes": 1, "running": 1, "stopped": 0, "exited": 0, "launches_per_s": 1000.0,
        "graph_kernel_launches_per_s": 250.0, "h2d_bytes_per_s": 2048.0, "d2h_bytes_per_s": 1048576.0,
        "d2d_bytes_per_s": 0.0, "gpus": 0, "gpus_busy": None, "warming_up": None}


def test_batch_does_not_load_textual() -> None:
    code = ("import sys, gputop.batch, gputop.cli\n"
            "bad = [m for m in ('textual', 'plotext', 'rich') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def fleet(*procs: ProcSample) -> Snapshot:
    """A fleet view's snapshot (Prometheus a source) of ``procs``, each on a scrape target."""
    return Snapshot(time=1_700_000_000.0, interval_s=60.0, host="http://prometheus:9090",
                    sources={"prometheus": SourceStatus("ok")}, gpus=(),
                    processes=tuple(replace(p, instance=f"10.0.0.{p.pid}:9464", node=f"node-{p.pid}",
                                            user=None, stale=False, last_seen=1_700_000_000.0) for p in procs))


def test_fleet_totals_that_sum_a_process_warming_up_are_marked() -> None:
    """Issue 35 item 2: a young series' rates read low wherever they are shown, the summary line's totals
    too (the table's and JSON's); the JSON summary counts the summed processes warming up. An exited or
    stale process is not summed: its warming up marks nothing."""
    young, old = proc(1, launches=7730.0, warming_up=True), proc(2, launches=20_000.0, warming_up=False)
    gone = proc(3, warming_up=True, state="exited")
    down = proc(4, warming_up=True)
    s = fleet(young, old, gone, down)
    s = replace(s, processes=(*s.processes[:3], replace(s.processes[3], stale=True)))
    text = batch.table(s)
    assert text.splitlines()[1] == ("Tasks: 4 listed, 3 running, 0 stopped, 1 exited  Launches: ~27.7k/s  "
                                    "Graph kernels: ~500/s  H2D ~4.00K/s  D2H ~2.00M/s  D2D ~0/s  GPUs busy: N/A")
    assert json.loads(snapshot_to_json(s))["summary"]["warming_up"] == 1
    header, lines = rows(text)
    at = header.split().index("LAUNCH/s")
    launches = {split(header, ln)[0][0]: split(header, ln)[0][at] for ln in lines}
    assert (launches["1"], launches["2"]) == ("~7.73k", "20.0k")     # the table's own marks
    # none warming up: no mark, a count of 0; an unknown total stays N/A, unmarked
    settled = fleet(replace(young, warming_up=False), old)
    assert "Launches: 27.7k/s" in batch.table(settled).splitlines()[1]
    assert json.loads(snapshot_to_json(settled))["summary"]["warming_up"] == 0
    unknown = fleet(young, proc(2, launches=None))
    assert "Launches: N/A  Graph kernels: ~500/s" in batch.table(unknown).splitlines()[1]
    assert unknown.summary.warming_up == 1
    # one host: no process warms up, the count is null
    assert snap(proc(1)).summary.warming_up is None
    assert json.loads(snapshot_to_json(snap(proc(1))))["summary"]["warming_up"] is None
