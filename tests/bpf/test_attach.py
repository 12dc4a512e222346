"""How gputop's probes sit among others: room for other tracers at the same addresses, failures
reported, everything gone after close (both with links and with perf events)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import SCAN_WAIT_S

from gputop.sources.bpf import BpfSource
from gputop.sources.bpf.attach import catalogue, discovery, symbols, uprobes
from gputop.sources.bpf.attach.uprobes import links_supported
from gputop.sources.bpf.common.linux import uprobe_multi_link
from gputop.sources.bpf.cost.trapcost import empty_prog


@pytest.fixture
def waiting(workloads, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A dynamically linked workload that has mapped libcudart and waits."""
    go = tmp_path / "go"
    proc = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:10:1,1,1:1,1,1:0"],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.attach_modes("links", "perf")
def test_another_tracer_can_probe_the_same_entry_points(bpf_source: BpfSource, waiting, testbed) -> None:
    """While gputop traces cudaLaunchKernel, a second tool (here a bare uprobe_multi link, as
    bpftrace or libbpf make them) attaches at the same address. With bcc 0.26's attach_uprobe it
    would fail: the kernel got a garbage reference-counter offset and refuses any other."""
    bpf_source.scan([waiting.pid], wait_s=SCAN_WAIT_S)
    syms = symbols.read_symbols(str(testbed.libcudart))
    assert syms is not None
    off = syms.offset_of_vaddr(syms.functions["cudaLaunchKernel"])
    assert off is not None
    if not links_supported():
        pytest.skip("the kernel has no uprobe_multi links (Linux < 6.6)")
    prog = empty_prog(links=True)       # loaded without bcc, as bpftrace and libbpf do (bcc 0.18 cannot)
    try:
        os.close(uprobe_multi_link(prog, str(testbed.libcudart), [off], retprobe=False))
    finally:
        os.close(prog)


@pytest.mark.parametrize("links", [True, False], ids=["links", "perf"])
def test_a_probe_that_cannot_attach_is_reported_and_the_rest_attach(waiting, testbed, links: bool) -> None:
    src = BpfSource(uprobe_links=links)
    src.start()
    try:
        assert src.uprobes is not None
        bad = catalogue.Probe("cudaLaunchKernel", "rt_launch")
        size = testbed.libcudart.stat().st_size
        done = src.uprobes.attach(str(testbed.libcudart), [(bad, size + 16, size + 16)])  # past the end
        assert done == 0
        assert len(src.uprobes.failed) == 1 and "rt_launch" in src.uprobes.failed[0]
        src.scan([waiting.pid], wait_s=SCAN_WAIT_S)
        status = src.read().status
        assert status.probes_failed == 1 and status.probes == src.probes > 0
        assert status.reason is not None and status.reason.startswith("1 probe(s) did not attach")
    finally:
        src.close()


def _probe_fds() -> int:
    """This process's open perf-event and BPF-link descriptors."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += target in ("anon_inode:[perf_event]", "anon_inode:bpf_link")
    return n


@pytest.mark.parametrize("links", [True, False], ids=["links", "perf"])
def test_close_detaches_everything(waiting, links: bool) -> None:
    before = _probe_fds()
    src = BpfSource(uprobe_links=links)
    src.start()
    src.scan([waiting.pid], wait_s=SCAN_WAIT_S)
    assert src.probes > 0 and _probe_fds() > before
    src.close()
    src.close()         # twice (the exit hook) is harmless
    assert _probe_fds() == before


def test_an_object_whose_process_exited_during_discovery_is_tried_again(bpf_source: BpfSource,
                                                                         tmp_path: Path) -> None:
    """A process that exits between the scan and the attach takes its /proc/PID/map_files path
    along: the object is neither probed nor marked "not CUDA", so the next process mapping it
    gets it probed."""
    failed = len(bpf_source.uprobes.failed)  # type: ignore[union-attr]
    gone = discovery.ObjectRef(0, 1, "/opt/app/libcudart.so.12", str(tmp_path / "map_files-of-an-exited-pid"), 1)
    assert not bpf_source._attach_object(gone)
    assert gone.key not in bpf_source.rejected and gone.key not in bpf_source.objects
    assert len(bpf_source.uprobes.failed) == failed  # type: ignore[union-attr]
    true = Path("/bin/true").resolve()
    st = true.stat()
    other = discovery.ObjectRef(st.st_dev, st.st_ino, str(true), str(true), 1)
    assert not bpf_source._attach_object(other)
    assert other.key in bpf_source.rejected          # readable and without CUDA entry points


def test_close_from_the_exit_hook_still_detaches(waiting, monkeypatch: pytest.MonkeyPatch) -> None:
    """At interpreter shutdown no thread pool can start: the links are closed one by one."""
    before = _probe_fds()
    src = BpfSource()
    src.start()
    src.scan([waiting.pid], wait_s=SCAN_WAIT_S)
    assert _probe_fds() > before

    class ShuttingDown:
        def __init__(self, *args: object, **kwargs: object) -> None: ...

        def __enter__(self) -> None:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

        def __exit__(self, *exc: object) -> None: ...

    monkeypatch.setattr(uprobes, "ThreadPoolExecutor", ShuttingDown)
    src.close()
    assert _probe_fds() == before


@pytest.mark.attach_modes("links", "perf")
def test_the_handlers_are_loaded_before_the_first_cuda_process(bpf_source: BpfSource, waiting) -> None:
    """The preload (UprobeAttacher.preload, off the collector's thread) loads every handler a runtime and a
    driver take before any CUDA process is seen: probing the first one loads nothing more on the collector's
    thread (the verifier's most of a second there held the refresh that showed it: test_fair_share_live)."""
    bpf = bpf_source.program.bpf
    assert bpf is not None
    loaded = {name.decode() for name in bpf.funcs}
    assert set(uprobes.PRELOAD) <= loaded, sorted(set(uprobes.PRELOAD) - loaded)
    assert not {fn for fn in loaded for p in catalogue.NCCL if fn == p.entry}     # no libnccl here: not loaded
    funcs = dict(bpf.funcs)
    bpf_source.scan([waiting.pid], wait_s=SCAN_WAIT_S)
    assert bpf_source.probes > 0
    assert dict(bpf.funcs) == funcs                 # the same programs, none loaded by the attach


def test_closing_while_the_handlers_load_waits_for_the_load_and_stops(tmp_path: Path) -> None:
    """close() right after start, the preload under way: it stops after the load it is in (bcc's cleanup
    frees the module it loads from), every program is unloaded, and no thread is left."""
    src = BpfSource()
    src.start()
    assert src.uprobes is not None
    preloader = src.uprobes._preloader
    assert preloader is not None        # under way here (~100 programs: most of a second), or done on a fast host
    bpf = src.program.bpf
    assert bpf is not None
    src.close()
    assert not preloader.is_alive()
    assert not bpf.funcs                            # bcc's cleanup closed what the preload had loaded
