"""htop's S column (issue 35, item 7): the kernel's state letter of each process, X once it exited, N/A
where unknown; optional (shown where every column fits, else scrolled off first), never in the fleet view
(the exporter exports no state); it sorts as htop's does, by letter."""

from __future__ import annotations

from gputop.model import ProcSample
from gputop.ui.widgets.table_layout import layout
from gputop.view import columns

S = columns.BY_KEY["state"]


def proc(pid: int, **kw: object) -> ProcSample:
    return ProcSample(pid=pid, comm="loop", **kw)  # type: ignore[arg-type]


def test_the_letter_the_exited_and_the_unknown() -> None:
    assert (S.header, S.descending) == ("S", False)
    assert [S.render(p) for p in (proc(1, kernel_state="R"), proc(2, kernel_state="T"), proc(3, kernel_state=None),
                                  proc(4, kernel_state="S", state="exited"))] == ["R", "T", "N/A", "X"]
    # a recording's letter is text from elsewhere: sanitised on display
    assert S.render(proc(5, kernel_state="\x1b")) != "\x1b"


def test_it_sorts_by_letter_unknown_last() -> None:
    ps = [proc(1, kernel_state="S"), proc(2, kernel_state=None), proc(3, kernel_state="D"), proc(4, kernel_state="R")]
    assert [p.pid for p in columns.sort_processes(ps, "state", reverse=False)] == [3, 4, 1, 2]


def test_after_mem_before_cpu_optional_and_hidden_in_the_fleet() -> None:
    keys = [c.key for c in columns.COLUMNS]
    assert keys.index("state") + 1 == keys.index("cpu")            # htop: S, CPU%, MEM%, TIME+
    assert "state" in columns.OPTIONAL
    assert "state" not in columns.visible(keys, fleet=True)
    assert "state" in columns.visible(keys, fleet=False)
    wide = layout(columns.visible(keys, fleet=False), 400)
    assert "state" in [c.key for c, _ in wide.cols]
