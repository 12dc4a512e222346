"""Pieces of the collector that need no BPF: headers choice, symbols, catalogue, code ranges, doctor."""

from __future__ import annotations

import inspect
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.sources.bpf import aligned_blocks, load_bcc
from gputop.sources.bpf.attach import catalogue, symbols
from gputop.sources.bpf.program import kheaders

ROOT = Path(__file__).resolve().parent.parent.parent


def _headers_tree(base: Path, name: str, common: bool, flavour: str = "amd64") -> None:
    d = base / "usr_src" / name
    (d / "include" / "generated").mkdir(parents=True)
    (d / "Makefile").write_text("include ../common/Makefile\n")
    (d / "include" / "generated" / "autoconf.h").write_text("#define X 1\n")
    if common:
        c = base / "usr_src" / name.replace(f"-{flavour}", "-common")
        (c / "include" / "linux").mkdir(parents=True)
        (c / "include" / "linux" / "kconfig.h").write_text("/* kconfig */\n")


def test_exact_headers_win(tmp_path: Path) -> None:
    build = tmp_path / "modules" / "6.9.0-test" / "build" / "include"
    build.mkdir(parents=True)
    c = kheaders.choose("6.9.0-test", usr_src=tmp_path / "none", modules=tmp_path / "modules", cache=tmp_path)
    assert c.kind == "exact" and c.env == {}


def test_fallback_merges_newest_debian_split_headers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    _headers_tree(tmp_path, "linux-headers-6.1.0-9-amd64", common=True)
    _headers_tree(tmp_path, "linux-headers-6.1.0-56-amd64", common=True)
    c = kheaders.choose("6.18.44-custom", usr_src=tmp_path / "usr_src", modules=tmp_path / "none",
                        cache=tmp_path / "cache")
    assert c.kind == "fallback"
    assert c.path == tmp_path / "cache" / "linux-headers-6.1.0-56-amd64"
    assert c.env == {"BCC_KERNEL_SOURCE": str(c.path)}
    # both halves are visible in the merged tree, as bcc expects of one kernel directory
    assert (c.path / "include" / "linux" / "kconfig.h").read_text() == "/* kconfig */\n"
    assert (c.path / "include" / "generated" / "autoconf.h").read_text() == "#define X 1\n"
    assert "6.18.44-custom" in c.detail and "linux-headers-6.1.0-56-amd64" in c.detail


@pytest.mark.parametrize(("name", "flavour"), [
    ("linux-headers-6.12.117+deb13-amd64", "amd64"),              # Debian 13: no ABI number, a +debN suffix
    ("linux-headers-6.12.117+deb13-cloud-amd64", "cloud-amd64"),  # a flavour of two parts
    ("linux-headers-7.2.13+deb14-cloud-amd64", "cloud-amd64"),    # sid
    ("linux-headers-6.1.0-56-cloud-amd64", "cloud-amd64")])       # Debian 12
def test_fallback_finds_the_common_half_of_each_debian_naming(tmp_path: Path, monkeypatch, name: str,
                                                              flavour: str) -> None:
    """The common half is found whatever the version looks like: Debian 13's names have no ABI number, and
    the offline bundle built there merged the arch half alone (kconfig.h missing: its compile failed)."""
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    _headers_tree(tmp_path, name, common=True, flavour=flavour)
    c = kheaders.choose("6.18.44-custom", usr_src=tmp_path / "usr_src", modules=tmp_path / "none",
                        cache=tmp_path / "cache")
    assert (c.kind, c.path) == ("fallback", tmp_path / "cache" / name)
    assert c.path is not None
    assert (c.path / "include" / "linux" / "kconfig.h").read_text() == "/* kconfig */\n"
    assert (c.path / "include" / "generated" / "autoconf.h").read_text() == "#define X 1\n"


def test_no_headers_at_all(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("BCC_KERNEL_SOURCE", raising=False)
    c = kheaders.choose("6.18.0", usr_src=tmp_path / "a", modules=tmp_path / "b", cache=tmp_path)
    assert c.kind == "missing" and c.path is None


def test_aligned_blocks_cover_exactly() -> None:
    for start, end in ((0x1000, 0x1001), (0x7F0000001100, 0x7F00000A0F00), (256, 1 << 20), (3, 1000)):
        blocks = aligned_blocks(start, end)
        covered = sorted((a, a + (1 << k)) for a, k in blocks)
        assert covered[0][0] == start and covered[-1][1] == end
        assert all(covered[i][1] == covered[i + 1][0] for i in range(len(covered) - 1))
        assert all(a % (1 << k) == 0 for a, k in blocks)
        assert len(blocks) <= 2 * 64


def test_symbols_of_the_real_runtime(testbed) -> None:
    syms = symbols.read_symbols(str(testbed.libcudart))
    assert syms is not None
    f = syms.functions
    assert syms.jump_target("__cudaLaunchKernel") == f["cudaLaunchKernel"]       # a thunk: not probed
    assert syms.jump_target("__cudaLaunchKernel_ptsz") == f["cudaLaunchKernel_ptsz"]
    assert syms.jump_target("cudaMalloc") is None
    probes = dict((p.symbol, p.entry) for p, _ in catalogue.probes_for(f, syms.jump_target))
    assert "__cudaLaunchKernel" not in probes and probes["cudaLaunchKernel"] == "rt_launch"
    assert probes["cudaMemPrefetchAsync"] == "rt_prefetch_dev"      # CUDA 12: the plain name takes a device
    assert probes["cudaMemPrefetchAsync_v2"] == "rt_prefetch_loc"
    # libcudart exports only CUDA functions: its whole text is runtime code, internal code included
    assert syms.all_exports_cuda
    assert syms.cuda_code_runs() == [(v, v + size) for v, _o, size in syms.segments]
    assert probes["cudaMemcpyBatchAsync"] == probes["cudaMemcpyBatchAsync_ptsz"] == "rt_memcpy_batch"
    assert "cudaMemPrefetchBatchAsync" not in probes                 # new in CUDA 13


def test_symbols_of_the_real_cuda13_runtime(testbed) -> None:
    syms = symbols.read_symbols(str(testbed.cudart13_dir / "libcudart.so.13"))
    assert syms is not None
    f = syms.functions
    assert syms.jump_target("__cudaLaunchKernel") == f["cudaLaunchKernel"]
    probes = dict((p.symbol, p.entry) for p, _ in catalogue.probes_for(f, syms.jump_target))
    assert "__cudaLaunchKernel" not in probes and probes["cudaLaunchKernel"] == "rt_launch"
    # CUDA 13 has no cudaMemPrefetchAsync_v2: the plain name took over its location signature
    assert "cudaMemPrefetchAsync_v2" not in f
    assert probes["cudaMemPrefetchAsync"] == probes["cudaMemPrefetchAsync_ptsz"] == "rt_prefetch_loc"
    assert probes["cudaMemPrefetchBatchAsync"] == probes["cudaMemPrefetchBatchAsync_ptsz"] == "rt_prefetch_batch"
    assert probes["cudaMemcpyBatchAsync"] == "rt_memcpy_batch"
    # discarding moves no data: not a prefetch
    assert "cudaMemDiscardAndPrefetchBatchAsync" in f and "cudaMemDiscardAndPrefetchBatchAsync" not in probes


def test_libcuda_text_is_all_driver_code(testbed) -> None:
    syms = symbols.read_symbols(str(testbed.libcuda))
    assert syms is not None and syms.all_exports_cuda
    runs = syms.cuda_code_runs()
    assert sum(e - s for s, e in runs) == sum(size for _v, _o, size in syms.segments)


def test_non_thunk_internal_launch_gets_checked_public_entry() -> None:
    funcs = {"cudaLaunchKernel": 0x100, "__cudaLaunchKernel": 0x200, "__cudaRegisterFatBinary": 0x300}
    probes = {p.symbol: p.entry for p, _ in catalogue.probes_for(funcs, lambda _n: -1)}
    assert probes == {"cudaLaunchKernel": "rt_launch_checked", "__cudaLaunchKernel": "rt_launch"}
    # code that could not be read: assume the usual thunk (not probed) rather than risk double counts
    probes = {p.symbol: p.entry for p, _ in catalogue.probes_for(funcs, lambda _n: None)}
    assert probes == {"cudaLaunchKernel": "rt_launch"}


def test_a_runtime_wrapper_keeps_only_its_driver_layer() -> None:
    """A library preloaded in front of the runtime (no __cudaRegisterFatBinary: not a runtime)
    forwards to the runtime, which counts each call; its driver wrappers are probed as a driver."""
    wrapper = {"cudaLaunchKernel": 0x100, "cudaMemcpy": 0x180, "cuLaunchKernel": 0x200, "init_hooks": 0x300}
    assert catalogue.is_runtime_wrapper(wrapper)
    assert {p.symbol: p.entry for p, _ in catalogue.probes_for(wrapper)} == {"cuLaunchKernel": "drv_launch"}
    assert not catalogue.is_runtime_wrapper({**wrapper, "__cudaRegisterFatBinary": 0x400})
    assert not catalogue.is_runtime_wrapper({"cuLaunchKernel": 0x200})       # a driver layer
    # its runtime-named code is the application's: only the driver wrapper is CUDA code
    syms = symbols.ObjectSymbols("libwrap.so", "ET_DYN")
    syms.functions.update(wrapper)
    syms._addrs, syms._ends, syms._names = [0x100, 0x180, 0x200, 0x300], [0x180, 0x200, 0x280, 0x380], \
        ["cudaLaunchKernel", "cudaMemcpy", "cuLaunchKernel", "init_hooks"]
    syms.all_exports_cuda = False
    assert syms.cuda_code_runs() == [(0x200, 0x280)]


def test_objects_without_launch_or_copy_entry_points_are_not_probed() -> None:
    assert catalogue.probes_for({"cudaMalloc": 1, "main": 2}) == []


def test_demangle() -> None:
    names = ("_Z10fused_stepPfS_i", "plain", "_ZN6gputop4test12saxpy_kernelEfPKfPf")
    assert [symbols.demangle_cached(n) for n in names] == [
        "fused_step(float*, float*, int)", "plain", "gputop::test::saxpy_kernel(float, float const*, float*)"]


def test_distro_bcc_is_loaded_not_a_pypi_namesake() -> None:
    bcc = load_bcc()
    assert hasattr(bcc, "BPF") and bcc.__file__ is not None and "dist-packages" in bcc.__file__


def test_doctor_reports_every_check_and_exits_0_here() -> None:
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "doctor"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    names = [ln.split(":")[0][6:] for ln in res.stdout.splitlines() if ln[:4] in ("OK  ", "WARN", "FAIL")]
    for n in ("privileges", "kernel", "uprobes", "kprobes", "BTF", "tracefs", "bcc", "kernel headers",
              "BPF compile", "uprobe attach", "NVML", "CUDA objects", "kernel names", "fair share"):
        assert n in names, names
    assert ("OK    kernel names: demangled by /usr/bin/c++filt, and by /usr/bin/llvm-cxxfilt where it cannot"
            in res.stdout)
    assert "OK    fair share: each tenant (a uid; a cgroup for uid 0) may hold 50 % of each BPF table" in res.stdout
    release = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2])
    # uprobe_multi links arrived in Linux 6.6, and bcc loads programs for them where its load_func
    # takes an attach_type (not bcc 0.18: Debian 11, Ubuntu 22.04): perf events otherwise
    bcc_links = "attach_type" in inspect.signature(load_bcc().BPF.load_func).parameters
    if release >= (6, 6) and bcc_links:
        assert "OK    uprobe attach: uprobe_multi links" in res.stdout
    else:
        assert "WARN  uprobe attach: a perf event per probe" in res.stdout
    assert res.stdout.rstrip().endswith("gputop can trace with BPF")


def test_doctor_reports_the_real_nvml_without_a_driver(testbed) -> None:
    env = {**os.environ, "GPUTOP_NVML_LIBRARY": str(testbed.libnvidia_ml)}
    res = subprocess.run([sys.executable, "-m", "gputop.cli", "doctor"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env=env)
    line = next(ln for ln in res.stdout.splitlines() if "NVML:" in ln)
    assert line == "WARN  NVML: off: Driver Not Loaded"


def test_statistics_windows_close_on_one_thread_kept() -> None:
    """Each window's close runs after its delay, in order, on one thread that stays: 40 windows make no
    thread each (a thread made and ended every 5 s read as one thread more in the soak's count), and a
    close that raises does not end it."""
    import threading
    import time

    from gputop.sources.bpf.cost.selfcost import _Closer

    closer = _Closer()
    ran: list[tuple[int, str]] = []
    done = threading.Event()

    def close(i: int) -> None:
        ran.append((i, threading.current_thread().name))
        if i == 3:
            raise RuntimeError("a window's read failed")
        if len(ran) == 40:
            done.set()

    before = threading.active_count()
    t0 = time.monotonic()
    for i in range(40):
        closer(0.05 if i % 2 else 0.01, lambda i=i: close(i))
        assert threading.active_count() <= before + 1
    assert done.wait(10)
    assert time.monotonic() - t0 >= 0.05
    assert sorted(ran) == [(i, "gputop-stats-window") for i in range(40)]
    order = [i for i, _ in ran]             # each delay's closes in the order they were scheduled
    assert [i for i in order if i % 2 == 0] == list(range(0, 40, 2))
    assert [i for i in order if i % 2] == list(range(1, 40, 2))
    assert threading.active_count() == before + 1


def test_self_cost_is_measured_over_windows(monkeypatch, tmp_path: Path) -> None:
    """Statistics are on for 0.1 s in every 5 s (2 %), closed by a timer; they give the run time per
    uprobe hit; the hits are exact per refresh interval (``observe``); the cost is hits x the
    calibrated trap cost + hits x the run time per hit + the tracepoints' time, unknown (None) until
    the trap cost is known."""
    from gputop.sources.bpf.common import linux as bpfsys
    from gputop.sources.bpf.cost import selfcost
    from gputop.sources.bpf.cost.selfcost import ProgStats, SelfCost
    from gputop.sources.bpf.cost.trapcost import Calibration, TrapCost

    assert selfcost.STATS_WINDOW_S / selfcost.STATS_PERIOD_S == 0.02
    opened: list[int] = []
    monkeypatch.setattr(bpfsys, "enable_stats", lambda: opened.append(1) or os.open("/dev/null", os.O_RDONLY))
    t = [0.0]
    stats = [ProgStats(0, 0, 0)]
    timers: list[tuple[float, object]] = []
    calibrations: list[Calibration] = []

    def calibration(mode: str) -> Calibration:
        c = Calibration(mode, tmp_path,
                        measure_fn=lambda m: TrapCost(700.0, 600.0, m, 9, 20000, 0.0))
        calibrations.append(c)
        return c

    cost = SelfCost(lambda: stats[0], lambda: t[0], schedule=lambda d, fn: timers.append((d, fn)),
                    calibration=calibration)
    cost.observe(0, 0)
    cost.tick()                                  # window opens at t=0, its close is scheduled
    assert len(opened) == 1 and timers[0][0] == 0.1 and cost.ns_per_s is None and cost.stats_age_s() is None
    t[0], stats[0] = 0.125, ProgStats(2_700_000, 1000, 100, 150, other_ns=500_000)
    timers[0][1]()                               # closes: 2.2 ms over 1100 uprobe runs, 0.5 ms of tracepoints
    assert (cost.ns_per_hit, cost.other_ns_per_s) == (2000.0, 4_000_000.0)
    assert cost.hits_per_s is None               # no refresh interval observed yet
    t[0] = 1.0
    cost.observe(8000, 800)                      # the exact counters after 1 s: 8000 entry hits, 800 return hits
    assert (cost.entry_hits_per_s, cost.return_hits_per_s, cost.hits_per_s) == (8000.0, 800.0, 8800.0)
    assert cost.ns_per_s == 8800 * 2000.0 + 4_000_000.0 == 21_600_000.0
    assert cost.stats_age_s() == 0.875
    assert cost.cost_ns_per_s is None            # the trap cost is not known yet
    t[0] = 4.0
    cost.observe(8000 + 3 * 50_000, 800)         # a 50k/s loop: the interval's figure, not the window's
    assert (cost.hits_per_s, cost.ns_per_s) == (50_000.0, 50_000 * 2000.0 + 4_000_000.0)
    cost.tick("links", measure=False)            # before the first snapshot: the cache only (empty)
    assert cost.trap is None and not calibrations[0].running and not calibrations[0].done.is_set()
    cost.tick("links")                           # calibrates (here at once) ...
    assert calibrations[0].attach == "links"
    calibrations[0].done.wait(5)
    assert cost.trap == TrapCost(700.0, 600.0, "links", 9, 20000, 0.0)
    # 50,000 entry hits x 700 ns + 0 return hits + 104 ms of programs, per second
    assert cost.cost_ns_per_s == 50_000 * 700.0 + 104_000_000.0 == 139_000_000.0
    assert len(opened) == 1                      # ... and opens no window before the period ends
    t[0] = 5.0
    cost.tick("links")
    assert len(opened) == 2 and len(calibrations) == 1
    t[0], stats[0] = 5.125, ProgStats(2_800_000, 1000, 100, 250, other_ns=600_000)
    timers[1][1]()                               # a window without uprobe hits keeps the run time per hit
    assert (cost.ns_per_hit, cost.other_ns_per_s, cost.window_closed) == (2000.0, 800_000.0, 5.125)
    t[0] = 6.0
    cost.observe(158_000, 800)                   # no hits in this interval: the tracepoints' time only
    assert (cost.hits_per_s, cost.ns_per_s) == (0.0, 800_000.0)
    cost.stop()
    # the next start finds the figure in the cache before its first snapshot, without measuring
    later = SelfCost(lambda: stats[0], lambda: t[0], schedule=lambda d, fn: None,
                     calibration=lambda m: Calibration(m, tmp_path, measure_fn=None))
    later.tick("links", measure=False)
    assert later.trap == TrapCost(700.0, 600.0, "links", 9, 20000, 0.0, cached=True)
    later.stop()


def test_self_cost_formula_is_exact() -> None:
    from gputop.sources.bpf.cost.selfcost import cost_ns_per_s
    from gputop.sources.bpf.cost.trapcost import TrapCost

    trap = TrapCost(750.5, 612.25, "perf", 9, 20000, 0.0)
    assert cost_ns_per_s(12_345.0, 67.0, 2_468_000.0, trap) == 12_345 * 750.5 + 67 * 612.25 + 2_468_000.0
    assert cost_ns_per_s(0.0, 0.0, 0.0, trap) == 0.0
    assert cost_ns_per_s(1.0, 0.0, 5.0, None) is None          # unknown trap: unknown cost, never 0
    assert cost_ns_per_s(None, 0.0, 5.0, trap) is None
