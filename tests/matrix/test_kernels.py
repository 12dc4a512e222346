"""The kernel matrix: Debian's own kernels booted under QEMU, gputop installed inside by the README's
set-up, real workloads counted exactly by `gputop -b -f json` (docs/matrix.md).

Slow (a root per suite, a TCG boot, pip and a BPF compile under emulation: about 3 minutes a suite
once its root is cached): part of ./test.sh's full run (what CI runs), as root, with qemu-system-x86
and debootstrap installed (scripts/setup.sh --test); GPUTOP_MATRIX=0 leaves it out (the inner loop,
./test.sh --quick, never runs it).
GPUTOP_MATRIX_SUITES=bookworm,trixie picks suites (default: the three, and bullseye's userland on this
machine's kernel; on demand sid, and the arm64 suites bookworm-arm64 and trixie-arm64: Debian's arm64 kernel
and userland under qemu-system-aarch64's full emulation, about an hour each here, docs/matrix.md). Each suite
boots once (scripts/matrix/vm.py), one a CPU at a time
(GPUTOP_MATRIX_JOBS lowers that); every test below reads that one run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from gputop import __version__

ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Suite:
    name: str
    kernel: str         # the cloud kernel's release starts so
    python: str         # the distro's python3, major.minor
    bcc: str            # python3-bpfcc's upstream version, major.minor
    attach: str         # "perf" before Linux 6.6 (no uprobe_multi), "links" from it
    #: the bcc features gputop falls back from there (doctor's "bcc" lines; bcc 0.18 has neither)
    bcc_fallbacks: tuple[str, ...] = ()
    #: BPF atomic compare-and-exchange (Linux 5.12+): launch slots; without it launches go through `kernels`
    cmpxchg: bool = True
    #: the root of this suite, when it differs from the name (a userland on another kernel)
    root: str = ""
    #: the suite's userland chroot'd on this machine's kernel (vm.py --on-host), not booted
    on_host: bool = False
    #: bcc's compiler emits BPF cmpxchg (LLVM 12+); where the kernel takes it and LLVM 11 cannot, gputop
    #: compiles without it (doctor: "BPF cmpxchg compile")
    compiler_cmpxchg: bool = True
    #: the kernel logs a WARNING when gputop's program loads (no bpf_mem_alloc: before Linux 6.1)
    warns_at_load: bool = False
    #: the Debian architecture: amd64, or arm64 (SUITE-arm64: the arm64 port booted under qemu-system-aarch64)
    arch: str = "amd64"

    @property
    def flavour(self) -> str:
        """The end of the booted kernel's release: Debian's cloud kernel on amd64, the generic one on arm64."""
        return "-arm64" if self.arch == "arm64" else "-cloud-amd64"

    @property
    def machine(self) -> str:
        return "aarch64" if self.arch == "arm64" else "x86_64"

    @property
    def timeout_s(self) -> float:
        """How long vm.py may take: its own boot timeout (vm.TIMEOUT_S) and the root's build, with room."""
        return 7800.0 if self.arch == "arm64" else 2700.0

    @property
    def package(self) -> bool:
        """gputop's wheel installed with pipx and uv there (guest_package.py): Debian 12 and later, booted."""
        return not self.on_host and self.python != "3.9"

    @property
    def why_perf(self) -> str:
        """Why uprobes attach as perf events there (privileges.why_perf): the kernel, else bcc."""
        if not self.on_host and self.attach == "perf":
            return "the kernel has no uprobe_multi links: Linux 6.6+ has them"
        return "this bcc cannot load programs for uprobe_multi links: bcc 0.21+ can"


OLD_BCC = ("batch map operations", "load_func attach_type")
SUITES = {
    "bullseye": Suite("bullseye", "5.10.", "3.9", "0.18", "perf", OLD_BCC, cmpxchg=False, compiler_cmpxchg=False,
                      warns_at_load=True),
    "bookworm": Suite("bookworm", "6.1.", "3.11", "0.26", "perf"),
    "trixie": Suite("trixie", "6.12.", "3.13", "0.31", "links"),
    # Debian 11 with a newer kernel (backports; Ubuntu 22.04 pairs bcc 0.18 with 5.15): bcc 0.18's LLVM 11
    # cannot emit the cmpxchg this kernel takes, and bcc 0.18 reads tracepoints under debugfs only
    # Debian's unstable (on demand, GPUTOP_MATRIX_SUITES=sid: its archive changes daily)
    "sid": Suite("sid", "7.", "3.14", "0.37", "links"),
    # Debian's arm64 port (Grace Hopper hosts, issue 39), on demand (GPUTOP_MATRIX_SUITES=bookworm-arm64): full
    # emulation of another architecture takes about an hour a suite on this machine's two cores
    "bookworm-arm64": Suite("bookworm-arm64", "6.1.", "3.11", "0.26", "perf", arch="arm64"),
    "trixie-arm64": Suite("trixie-arm64", "6.12.", "3.13", "0.31", "links", arch="arm64"),
    "bullseye-on-host": Suite("bullseye-on-host", os.uname().release, "3.9", "0.18", "perf", OLD_BCC,
                              root="bullseye", on_host=True, compiler_cmpxchg=False),
}
#: the longest boots first (docs/matrix.md): they start first when suites run at once
DEFAULT = ("bookworm", "bullseye", "trixie", "bullseye-on-host")
CHOSEN = [s for s in os.environ.get("GPUTOP_MATRIX_SUITES", ",".join(DEFAULT)).split(",") if s]
#: GPUTOP_MATRIX_PART=guests: only the booted suites; =host: only those on this machine's kernel (./test.sh
#: runs the guests beside the BPF tier, whose host-wide counts a gputop on this kernel would disturb)
_PART = os.environ.get("GPUTOP_MATRIX_PART", "")
if _PART not in ("", "guests", "host"):
    raise pytest.UsageError(f"GPUTOP_MATRIX_PART must be guests or host, not {_PART!r}")
if _PART:
    CHOSEN = [s for s in CHOSEN if s not in SUITES or SUITES[s].on_host == (_PART == "host")]

pytestmark = pytest.mark.skipif(
    os.environ.get("GPUTOP_MATRIX") == "0" or os.geteuid() != 0,
    reason="the kernel matrix boots Debian kernels under QEMU as root (minutes each); GPUTOP_MATRIX=0 left it out")

FUSED = "fused_step(float*, float*, int)"
#: gputop doctor's lines under "bcc"
BCC_FEATURES = ("batch map operations", "load_func attach_type")


@dataclass
class Run:
    suite: Suite
    dir: Path
    rc: int
    stderr: str = ""

    def text(self, name: str) -> str:
        return (self.dir / "out" / name).read_text()

    @cached_property
    def snapshots(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.text("snapshots.jsonl").splitlines()]

    @cached_property
    def result(self) -> dict[str, Any]:
        return dict(json.loads(self.text("result.json")))

    def last(self, role: str) -> dict[str, Any]:
        """The process's last row (it is shown exited once, with its totals)."""
        pid = self.result["pids"][role]
        rows = [p for s in self.snapshots for p in s["processes"] if p["pid"] == pid]
        assert rows, f"{role} ({pid}) never shown"
        return dict(rows[-1])

    def interval_sum(self, role: str, key: str) -> int:
        pid = self.result["pids"][role]
        return sum(int(p["interval"][key]) for s in self.snapshots for p in s["processes"] if p["pid"] == pid)


class Boots:
    """Every suite's vm.py, `jobs()` at a time; stopped as a whole when the session ends early."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=jobs(), thread_name_prefix="matrix")
        self.procs: list[subprocess.Popen[str]] = []
        self.lock = threading.Lock()
        self.closed = False

    def boot(self, suite: Suite, out: Path) -> Run:
        with self.lock:
            if self.closed:
                return Run(suite, out, 1, "matrix: the session ended before this suite booted\n")
            proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "matrix" / "vm.py"),
                                     suite.root or suite.name, str(out), *(["--on-host"] if suite.on_host else [])],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.procs.append(proc)
        try:
            _, err = proc.communicate(timeout=suite.timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)         # vm.py kills its guest on the way out
            _, err = proc.communicate()
        return Run(suite, out, proc.returncode, err)

    def close(self) -> None:
        """Queued suites never start; running ones are interrupted (vm.py kills its guest) and waited for."""
        with self.lock:
            self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def jobs() -> int:
    """Suites run at once: one a CPU (each guest runs on one host thread, defect 15), at most GPUTOP_MATRIX_JOBS."""
    cpus = len(os.sched_getaffinity(0))
    wanted = os.environ.get("GPUTOP_MATRIX_JOBS", str(cpus))
    if not wanted.isdigit() or int(wanted) < 1:
        raise pytest.UsageError(f"GPUTOP_MATRIX_JOBS must be a whole number above 0, not {wanted!r}")
    return min(cpus, int(wanted))


@pytest.fixture(scope="session")
def boots(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Run]]]:
    """The run of every suite a selected test of this module reads, all started on the first test that
    asks for one, `jobs()` at a time in CHOSEN's order (the longest boots first): the tier takes its
    longest chain of boots, not their sum."""
    here = Path(__file__)
    params = (getattr(getattr(item, "callspec", None), "params", {}) for item in request.session.items
              if getattr(item, "path", None) == here)
    wanted = {p["run"] for p in params if "run" in p}
    pool = Boots()
    try:
        yield {name: pool.pool.submit(pool.boot, SUITES[name], tmp_path_factory.mktemp(f"matrix-{name}"))
               for name in CHOSEN if name in wanted}
    finally:
        pool.close()


@pytest.fixture(scope="module", params=CHOSEN)
def run(request: pytest.FixtureRequest, boots: dict[str, Future[Run]]) -> Run:
    r = boots[request.param].result()
    sys.stderr.write(r.stderr)          # vm.py's words, with this suite's first test
    return r


#: guest-run.sh's own exit statuses
GUEST_STEPS = {"90": "the repository copy", "91": "the README's set-up (setup.log)",
               "94": "the package's install (package.log)"}


def test_the_guest_ran_every_step(run: Run) -> None:
    status = run.text("status").strip()
    logs = [run.dir / "out" / n for n in ("guest.log", "setup.log", "checks.log", "package.log")]
    why = GUEST_STEPS.get(status, "the checks (checks.log)") + "\n" + "".join(
        p.read_text()[-3000:] for p in logs if p.is_file())
    assert (status, run.rc) == ("0", 0), why


def test_every_workload_exited_0(run: Run) -> None:
    assert run.result["returncodes"] == {"before": 0, "dynamic": 0, "copies": 0, "driver": 0, "graphs": 0,
                                         "python": 0, "short": 0}
    assert run.result["gputop_rc"] in (0, -15)      # stopped with SIGTERM after the last snapshot


def test_platform_is_the_suites_own(run: Run) -> None:
    plat = dict(line.split(" ", 1) for line in run.text("platform.txt").splitlines())
    assert plat["kernel"].startswith(run.suite.kernel)
    assert plat["kernel"].endswith(run.suite.flavour) != run.suite.on_host    # its own kernel, or this machine's
    assert plat["machine"] == run.suite.machine
    assert plat["python"].rsplit(".", 1)[0] == run.suite.python
    assert plat["bcc"].startswith(run.suite.bcc + ".")
    assert plat["btf"] == "present"


def test_readme_set_up_and_doctor(run: Run) -> None:
    assert run.text("setup.rc").strip() == "0", run.text("setup.log")
    doctor = run.text("doctor.txt")
    assert run.text("doctor.rc").strip() == "0", doctor
    lines = doctor.splitlines()
    assert lines[-1] == "gputop can trace with BPF"
    krel = dict(line.split(" ", 1) for line in run.text("platform.txt").splitlines())["kernel"]
    assert f"OK    kernel: Linux {krel}" in lines
    assert "OK    BTF: /sys/kernel/btf/vmlinux present" in lines
    assert any(line.startswith("OK    BPF cmpxchg: " if run.suite.cmpxchg else "WARN  BPF cmpxchg: ")
               for line in lines), doctor
    assert "OK    BPF compile: a test program compiled and loaded" in lines
    # the bcc in use and each optional feature: used, or fallen back from (feature detection, not versions)
    (bcc,) = [line for line in lines if line.startswith("OK    bcc: bcc ")]
    assert bcc.split()[3].startswith(run.suite.bcc + "."), bcc
    assert bcc.endswith("; falls back from " + ", ".join(run.suite.bcc_fallbacks)) if run.suite.bcc_fallbacks else (
        "falls back" not in bcc), bcc
    for feature in BCC_FEATURES:
        level = "WARN" if feature in run.suite.bcc_fallbacks else "OK"
        assert any(line.startswith(f"{level:<4}    {feature}: ") for line in lines), (feature, doctor)
    # the suite's own headers package for its own kernel: no fallback (on this machine's kernel: the nearest)
    assert any(line.startswith("WARN  kernel headers") for line in lines) == run.suite.on_host, doctor
    # a kernel with cmpxchg and a compiler without it (LLVM 11): said, and compiled without it
    assert any(line.startswith("WARN  BPF cmpxchg compile: ") for line in lines) == (
        run.suite.cmpxchg and not run.suite.compiler_cmpxchg), doctor
    # before Linux 6.1 the first load logs a kernel WARNING: doctor says so exactly where the guest kernel's
    # own log (the serial console) shows it (on this machine's kernel, --on-host, the log is the host's)
    assert any(line.startswith("WARN  kernel WARNING at load: no bpf_mem_alloc (Linux before 6.1)")
               for line in lines) == run.suite.warns_at_load, doctor
    if not run.suite.on_host:
        console = (run.dir / "console.log").read_bytes()
        assert (b"trace type BPF program uses run-time allocation" in console) == run.suite.warns_at_load
    attach = [line for line in lines if line.startswith(("OK    uprobe attach", "WARN  uprobe attach"))]
    assert attach == (["OK    uprobe attach: uprobe_multi links: probes detach together at exit"]
                      if run.suite.attach == "links" else
                      [f"WARN  uprobe attach: a perf event per probe ({run.suite.why_perf}): each needs CAP_SYS_ADMIN"])
    # as root: the capabilities, and CAP_SYS_ADMIN named where uprobes attach as perf events
    assert lines[0] == ("OK    privileges: root, with every capability tracing needs: CAP_BPF, CAP_PERFMON, "
                        "CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_CHECKPOINT_RESTORE" + (
                            " and CAP_SYS_ADMIN (uprobes attach as perf events here)"
                            if run.suite.attach == "perf" else "")), doctor


def test_the_wheel_installs_with_pipx_and_uv_then_traces(run: Run) -> None:
    """On Debian 12 and later, booted: the wheel built from the checkout (distribution gputop-ebpf, command
    gputop), installed by pipx and by uv for the distro's python3 with the distro's bcc, traces: its doctor
    passes, finding bcc where Debian puts it, and `gputop -b` counts a workload's launches exactly
    (scripts/matrix/guest_package.py). Elsewhere the step does not run."""
    package = run.dir / "out" / "package.json"
    if not run.suite.package:
        assert not package.exists()
        return
    res = json.loads(package.read_text())
    why = run.text("package.log")[-3000:] if (run.dir / "out" / "package.log").exists() else ""
    assert (res["wheel_rc"], res["wheel"], res["tools_rc"]) == (
        0, f"gputop_ebpf-{__version__}-py3-none-any.whl", 0), why
    for tool in ("pipx", "uv"):
        got = res[tool]
        doctor = run.text(f"package-{tool}-doctor.log")
        assert (got["install_rc"], got["doctor_rc"]) == (0, 0), (tool, run.text(f"package-{tool}-install.log"), doctor)
        assert doctor.splitlines()[-1] == "gputop can trace with BPF"
        assert any(line.startswith("OK    bcc: bcc ") and " from /usr/lib/python3/dist-packages/bcc" in line
                   for line in doctor.splitlines()), doctor
        assert (got["workload_rc"], got["launches"]) == (0, 4321), (tool, got)
        assert got["gputop_rc"] in (0, -15)


def test_the_least_capability_set_on_this_kernel(run: Run) -> None:
    """As uid 65534 with the systemd unit's five capabilities: this kernel's uprobe PMU refuses them and
    opens with CAP_SYS_ADMIN added; gputop's privileges check (what --bpf exits 77 with) names
    CAP_SYS_ADMIN exactly where uprobes attach as perf events (docs/deploy.md)."""
    from gputop.sources.bpf.program.privileges import PERF_ADMIN_HINT

    privs = run.result["privileges"]
    refusal = None if run.suite.attach == "links" else [
        f"uprobes attach here as perf events ({run.suite.why_perf}), which the kernel opens only with "
        "CAP_SYS_ADMIN: missing CAP_SYS_ADMIN", PERF_ADMIN_HINT]
    assert privs == {"least": {"pmu": False, "refusal": refusal}, "least+sys_admin": {"pmu": True, "refusal": None}}


def test_bpf_source_attach_mode_and_statistics(run: Run) -> None:
    bpf = [s["sources"]["bpf"] for s in run.snapshots]
    assert {b["status"] for b in bpf} == {"ok"}
    assert {b["attach"] for b in bpf} == {run.suite.attach}
    assert {b["dropped"] for b in bpf} == {0}
    # every probe on the real libcudart and libcuda loads and attaches (the names: probes_failed.txt)
    assert run.text("probes_failed.txt") == ""
    assert {b["probes_failed"] for b in bpf} == {0}, {b["reason"] for b in bpf}
    # BPF run-time statistics (BPF_ENABLE_STATS): a window closes within the first interval; the cost
    # is known once a window saw hits (docs/matrix.md); the trap cost is measured on each kernel
    assert all(b["stats_age_s"] is not None for b in bpf[1:])
    assert any(b["cost_ns_per_s"] is not None for b in bpf)
    assert all(b["trap_ns"] is not None and b["trap_ns"] > 0 for b in bpf)
    assert max(b["probe_hits_per_s"] for b in bpf[1:]) > 0


def test_process_started_before_gputop(run: Run) -> None:
    p = run.last("before")
    assert (p["state"], p["comm"]) == ("exited", "wl_dynamic")
    assert p["total"]["launches"] == 500 and run.interval_sum("before", "launches") == 500
    assert p["total"]["memcpy"]["h2d"] == {"calls": 2, "bytes": 600}
    assert [(k["name"], k["launches"]) for k in p["kernels"]] == [(FUSED, 500)]


def test_launches_copies_syncs_and_names(run: Run) -> None:
    """tests/bpf/test_batch.py's workload, the same numbers."""
    p = run.last("dynamic")
    assert (p["state"], p["comm"], p["user"]) == ("exited", "wl_dynamic", "root")
    assert p["total"]["launches"] == 6000 and run.interval_sum("dynamic", "launches") == 6000
    assert p["total"]["memcpy"]["h2d"] == {"calls": 4, "bytes": 4000}
    assert p["total"]["memcpy"]["d2h"] == {"calls": 2, "bytes": 1000}
    assert p["total"]["sync_calls"] == 3
    assert p["grid_blocks_hist"] == {"2^6": 6000} and p["block_threads_hist"] == {"2^7": 6000}
    assert (p["total"]["grid_blocks_sum"], p["total"]["block_threads_sum"]) == (6000 * 80, 6000 * 128)
    k = p["kernels"][0]
    assert (k["name"], k["launches"], k["grid_blocks_avg"], k["block_threads_avg"]) == (FUSED, 6000, 80.0, 128.0)


def test_call_sites_of_the_distros_python(run: Run) -> None:
    """Issue 37 on the suite's own CPython (Debian 11's 3.9, 12's 3.11, 13's 3.13), its own kernel: three
    functions launching 60/30/10 % (tests/native/pysites.py), one launch in 4 sampled; each site's share
    within 3 points over >= 2,000 samples, named with its line, its caller and its kernel."""
    pid = run.result["pids"]["python"]
    rows = [p for s in run.snapshots for p in s["processes"] if p["pid"] == pid and p.get("call_sites")]
    assert rows, "no call sites shown"
    assert run.last("python")["total"]["launches"] == 10_000
    cs = rows[-1]["call_sites"]
    assert cs["total_samples"] >= 2000 and cs["period"] == 4
    from support import pysites_launch_line
    lines = {fn: pysites_launch_line(fn) for fn in ("big", "mid", "small")}
    by_fn = {s["frames"][0]["function"]: s for s in cs["sites"] if s["frames"]}
    for fn, want in (("big", 60.0), ("mid", 30.0), ("small", 10.0)):
        site = by_fn[fn]
        assert abs(site["share_pct"] - want) <= 3.0, (fn, cs)
        assert site["kind"] == "python" and site["frames"][0]["line"] == lines[fn]
        assert site["frames"][0]["file"].endswith("pysites.py")
        assert [f["function"] for f in site["frames"][1:4]] == ["shares", "main", "<module>"]


def test_copies_in_every_direction_through_the_real_runtime_and_driver(run: Run) -> None:
    p = run.last("copies")
    assert (p["state"], p["comm"]) == ("exited", "wl_dlopen")
    mc = p["total"]["memcpy"]
    # cudaMemcpy kinds 1 h2d, 2 d2h, 3 d2d, 0 h2h; cuMemcpyHtoD/DtoH/DtoD
    assert mc["h2d"] == {"calls": 3 + 8, "bytes": 3000 + 8 * 11}
    assert mc["d2h"] == {"calls": 4 + 9, "bytes": 40 + 9 * 12}
    assert mc["d2d"] == {"calls": 5 + 10, "bytes": 35 + 10 * 13}
    assert mc["h2h"] == {"calls": 6, "bytes": 6}
    assert p["total"]["launches"] == 0


def test_driver_launches(run: Run) -> None:
    p = run.last("driver")
    assert (p["state"], p["comm"]) == ("exited", "wl_dlopen")
    assert p["total"]["launches"] == 30 + 42 and run.interval_sum("driver", "launches") == 72
    # driver handles nobody named are shown by their handle; sums as tests/bpf/test_counts.py's
    assert sorted((k["name"], k["launches"], k["grid_blocks_avg"], k["block_threads_avg"]) for k in p["kernels"]) == [
        ("0xabc0", 30, 4.0, 32.0), ("0xdef0", 42, 4.0, 128.0)]


def test_a_captured_graph_replayed_counts_its_kernels(run: Run) -> None:
    """tests/bpf/test_graph_kernels.py's first test on the suite's kernel: 30 + 12 launches captured from
    stream 0x77 (read at each launch: on the stack on x86-64, in x7 on arm64) into one graph, instantiated
    once and launched 25 times: 1,050 kernels, by kernel, and no launch counted as run."""
    p = run.last("graphs")
    assert (p["state"], p["comm"]) == ("exited", "wl_dlopen")
    t = p["total"]
    assert (t["captured_launches"], t["graph_launches"], t["graph_kernel_launches"], t["launches"]) == (
        42, 25, 25 * 42, 0)
    assert {k["name"]: k["graph_launches"] for k in p["kernels"] if k["graph_launches"]} == {
        FUSED: 25 * 30, "unfused_step(float const*, float*, int)": 25 * 12}


def test_a_classified_files_mappings_are_not_named_again(run: Run) -> None:
    """The change time the BPF side reads from the inode (at the offsets of this kernel's BTF) is
    fstat's: a probed library's next mapping asks for a rescan only, it is not named again."""
    # what the naming carried, against fstat (older runs' result.json lack it): a change time the BPF side
    # reads otherwise, or a file user space had not classified before the short process ran
    assert run.result["probed_file_named_again"] is False, run.result.get("named_again")


def test_a_short_lived_process_is_counted(run: Run) -> None:
    p = run.last("short")
    # a flake seen twice in CI-like runs (the process listed exited, comm null, no launches: no record at its
    # exit) is not explained yet: what each snapshot said meanwhile comes with the failure
    pid = run.result["pids"]["short"]
    seen = [(round(s["time"] % 1000, 2), s["sources"]["bpf"]["probe_hits_per_s"], s["sources"]["bpf"]["objects"],
             s["sources"]["bpf"]["probes"], s["sources"]["bpf"]["dropped"],
             [(r["state"], r["comm"], r["interval"]["launches"]) for r in s["processes"] if r["pid"] == pid])
            for s in run.snapshots[-8:]]
    why = f"short {pid}, times {run.result['times']}; the last snapshots (time, hits/s, objects, probes, " \
          f"dropped, its rows): {seen}"
    assert (p["state"], p["comm"]) == ("exited", "wl_dlopen"), why
    assert p["total"]["launches"] == 7, why
