"""Privileges, measured as uid 65534 (setpriv) with exact capability sets.

The least set that traces every process is gputop's TRACING_CAPS (CAP_BPF, CAP_PERFMON,
CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_CHECKPOINT_RESTORE): with exactly it, batch mode counts three
root-owned processes exactly: one on the host, one whose libcudart exists only in its own mount
namespace (a container), one whose libcudart copy was deleted after it loaded it. Dropping any one of
the set loses tracing (CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH: --bpf exits 77 naming it) or
exactly the processes that capability reaches. Without any, the dashboard and batch mode still run
(NVML and host data) with one line saying why tracing is off and how to turn it on, and
`gputop doctor` completes every check, names each missing capability and exits 1."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import support
import test_deploy_caps
from support import ROOT, Workloads
from test_deploy_caps import NOBODY, PERF_HERE, PERF_PATH, PERF_WHY, as_nobody

from gputop.sources.bpf.program.privileges import ENABLE_HINT, PERF_ADMIN_HINT, TRACING_CAPS

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from tmux_driver import TmuxSession, have_tmux

#: why tracing is off for uid 65534 without capabilities (privileges.privileges_error), in every command's words
WHY = ("tracing needs CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH (root has them): missing CAP_BPF, "
       "CAP_PERFMON, CAP_DAC_READ_SEARCH")

# the fixtures of the deploy test: an unprivileged user's gputop command, a cache folder it owns
gputop_as_nobody = test_deploy_caps.gputop_as_nobody
cache = test_deploy_caps.cache

LEAST = [c.removeprefix("CAP_").lower() for c in TRACING_CAPS]
#: the least set here: CAP_SYS_ADMIN too where uprobes attach as perf events (Debian 11's bcc 0.18, a kernel
#: before 6.6; the perf-event tests below force that path on any host)
TRACES = [*LEAST, "sys_admin"] if PERF_HERE else LEAST
#: launches of each workload: on the host, in its own mount namespace, from a deleted library
EXPECTED = {"host": 6000, "container": 999, "deleted": 777}


def env_for(cache_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(cache_dir), "HOME": "/nonexistent", **(extra or {})}


def traced(command: tuple[str, ...], caps: list[str], workloads: Workloads, testbed: support.Testbed,
           tmp: Path, cache_dir: Path, env: dict[str, str] | None = None, only: tuple[str, ...] = tuple(EXPECTED),
           ) -> tuple[subprocess.CompletedProcess[str], dict[str, int | None]]:
    """Batch mode as uid 65534 with ``caps`` (and ``env``) while the three workloads run (``only`` those:
    each of the other two maps a libcudart of its own, which a perf event per probe detaches in ~12 s),
    started before gputop, released once its first snapshot is out; their total launches as gputop
    reported them."""
    tmp.chmod(0o755)
    go = tmp / "go"
    lib = tmp / "libcudart.so.12"
    shutil.copy(testbed.libcudart, lib)
    hidden = tmp / "ns-only"
    hidden.mkdir()
    ns = f"mount -t tmpfs tmpfs {hidden} && cp {testbed.libcudart} {hidden}/ && exec \"$@\""
    argv = {
        "host": [str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0"],
        "container": ["unshare", "-m", "--propagation", "private", "sh", "-c", ns, "sh", str(workloads.dlopen),
                      "--wait", str(go), "--cudart", f"{hidden}/libcudart.so.12", "launch:999:3,1,1:96,1,1:2"],
        "deleted": [str(workloads.dlopen), "--wait", str(go), "--cudart", str(lib), "launch:777:1,1,1:1,1,1:0"],
    }
    procs = {k: subprocess.Popen(argv[k], stdout=subprocess.PIPE) for k in only}
    pids = {}
    for k, p in procs.items():
        assert p.stdout is not None
        pids[k] = int(p.stdout.readline().split()[1])
    lib.unlink()                # as an upgrade does: the process keeps the old file mapped
    try:
        g = subprocess.Popen([*as_nobody(caps), *command, "-b", "-f", "json", "-d", "1", "-n", "5", "--no-nvml"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp,
                             env=env_for(cache_dir, env))
        assert g.stdout is not None
        first = g.stdout.readline()
        go.touch()
        out, err = g.communicate(timeout=120)
    finally:
        for p in procs.values():
            if p.wait(timeout=60) != 0:
                raise AssertionError("a workload failed")
    totals: dict[int, int] = {}
    lines = [ln for ln in [first, *out.splitlines()] if ln.strip()]
    for ln in lines:
        for proc in json.loads(ln)["processes"]:
            if proc["total"] is not None:
                totals[proc["pid"]] = proc["total"]["launches"]
    res = subprocess.CompletedProcess(g.args, g.returncode, "\n".join(lines), err)
    return res, {k: totals.get(pid) for k, pid in pids.items()}


def bpf_status(res: subprocess.CompletedProcess[str]) -> dict[str, object]:
    status: dict[str, object] = json.loads(res.stdout.splitlines()[-1])["sources"]["bpf"]
    return status


def test_the_least_set_traces_every_process_exactly(gputop_as_nobody: tuple[str, ...], cache: Path,
                                                    workloads: Workloads, testbed: support.Testbed,
                                                    tmp_path: Path) -> None:
    assert LEAST == ["bpf", "perfmon", "dac_read_search", "sys_ptrace", "checkpoint_restore"]
    res, seen = traced(gputop_as_nobody, TRACES, workloads, testbed, tmp_path, cache)
    assert (res.returncode, res.stderr) == (0, "")
    assert seen == EXPECTED
    st = bpf_status(res)
    assert (st["status"], st["reason"]) == ("ok", None)


@pytest.mark.parametrize("dropped", ["bpf", "perfmon", "dac_read_search"])
def test_without_a_required_capability_bpf_exits_77_naming_it(gputop_as_nobody: tuple[str, ...],
                                                               cache: Path, dropped: str, tmp_path: Path) -> None:
    caps = [c for c in LEAST if c != dropped]
    res = subprocess.run([*as_nobody(caps), *gputop_as_nobody, "-b", "-n", "1", "--no-nvml", "--bpf"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env_for(cache))
    assert res.returncode == 77
    assert res.stderr.splitlines() == [
        "gputop: error: tracing needs CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH (root has them): "
        f"missing CAP_{dropped.upper()}", f"hint: {ENABLE_HINT}"]


@pytest.mark.parametrize(("dropped", "missed"), [("sys_ptrace", {"container", "deleted"}),
                                                 ("checkpoint_restore", {"deleted"})])
def test_without_a_reach_capability_exactly_its_processes_are_missed(
        gputop_as_nobody: tuple[str, ...], cache: Path, workloads: Workloads,
        testbed: support.Testbed, tmp_path: Path, dropped: str, missed: set[str]) -> None:
    if PERF_HERE and dropped == "checkpoint_restore":
        pytest.skip("uprobes attach as perf events here: the CAP_SYS_ADMIN they need grants what "
                    "CAP_CHECKPOINT_RESTORE does")
    res, seen = traced(gputop_as_nobody, [c for c in TRACES if c != dropped], workloads, testbed, tmp_path, cache)
    assert res.returncode == 0, res.stderr
    assert seen == {k: None if k in missed else v for k, v in EXPECTED.items()}
    st = bpf_status(res)
    assert st["status"] == "ok"
    assert str(st["reason"]).startswith(f"missing CAP_{dropped.upper()}: processes whose CUDA library")


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def test_without_privileges_batch_mode_runs_and_says_why(gputop_as_nobody: tuple[str, ...], cache: Path,
                                                          tmp_path: Path, workloads: Workloads) -> None:
    """Without privileges, batch mode says why it cannot trace and lists what `gputop doctor` sees (issue 35):
    the user's own process that maps a CUDA runtime, its counts unknown (null, never 0); a root process
    mapping one (whose maps that user cannot read) and the user's processes that map none are not listed."""
    def start(nobody: bool, *ops: str) -> subprocess.Popen[str]:
        return subprocess.Popen([str(workloads.dynamic), *ops], stdout=subprocess.DEVNULL, cwd="/",
                                preexec_fn=_drop_to_nobody if nobody else None)

    mine, roots, plain = start(True, "sleep:60000"), start(False, "sleep:60000"), subprocess.Popen(
        [*as_nobody([]), "sleep", "60"])
    try:
        time.sleep(0.5)                     # its runtime mapped
        res = subprocess.run([*as_nobody([]), *gputop_as_nobody, "-b", "-n", "1", "-f", "json", "--no-nvml"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env_for(cache))
    finally:
        for p in (mine, roots, plain):
            p.kill()
            p.wait()
    assert res.returncode == 0
    why = WHY
    assert res.stderr == f"gputop: tracing is off ({why}): NVML and host data only. To trace: {ENABLE_HINT}\n"
    snap = json.loads(res.stdout)
    assert (snap["sources"]["bpf"]["status"], snap["sources"]["bpf"]["reason"]) == ("unavailable", why)
    listed = {p["pid"]: p for p in snap["processes"]}
    assert set(listed) == {mine.pid}
    assert listed[mine.pid]["user"] == "nobody" and listed[mine.pid]["total"] is None
    assert listed[mine.pid]["rates"] is None


@pytest.mark.skipif(not have_tmux(), reason="tmux not installed")
def test_without_privileges_the_dashboard_runs_with_a_banner(gputop_as_nobody: tuple[str, ...]) -> None:
    home = Path(tempfile.mkdtemp(prefix="gputop-nobody-"))     # reachable unprivileged, unlike /tmp/pytest-of-root
    home.chmod(0o755)
    os.chown(home, NOBODY, NOBODY)
    env = {"XDG_CACHE_HOME": str(home), "XDG_CONFIG_HOME": str(home), "HOME": str(home)}
    with TmuxSession([*as_nobody([]), *gputop_as_nobody, "--no-nvml"], env=env, width=160, height=30,
                     cwd=home) as t:
        screen = t.wait_for("BPF off", timeout=60)
        # the words of batch mode's line (above), doctor and the demo: one wording (gputop.cli.tracing_off),
        # on as many lines as the banner takes
        text = " ".join(ln.strip() for ln in screen.splitlines())
        assert f"tracing is off ({WHY}): NVML and host data only. To trace: {ENABLE_HINT}" in text, screen
        t.send_keys("q")
        assert t.wait_exit(30) == 0
    shutil.rmtree(home)


def test_doctor_without_privileges_completes_and_names_each_capability(
        gputop_as_nobody: tuple[str, ...], cache: Path, tmp_path: Path) -> None:
    res = subprocess.run([*as_nobody([]), *gputop_as_nobody, "doctor"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env_for(cache))
    assert (res.returncode, res.stderr) == (1, "")
    lines = res.stdout.splitlines()
    assert lines[0] == f"FAIL  privileges: uid {NOBODY}: tracing is off ({WHY})"
    assert lines[1] == f"      fix: {ENABLE_HINT}"
    assert [ln.split(":")[0] for ln in lines if ln.startswith(("FAIL    CAP_", "WARN    CAP_"))] == [
        "FAIL    CAP_BPF", "FAIL    CAP_PERFMON", "FAIL    CAP_DAC_READ_SEARCH", "WARN    CAP_SYS_PTRACE",
        "WARN    CAP_CHECKPOINT_RESTORE"]
    names = [ln[6:].split(":")[0] for ln in lines if ln[:4] in ("OK  ", "WARN", "FAIL")]
    for check in ("kernel", "uprobes", "kprobes", "BTF", "tracefs", "bcc", "kernel headers", "BPF compile", "NVML",
                  "CUDA objects"):
        assert check in names, res.stdout
    assert "WARN  uprobe trap cost: not measured: it needs the tracing privileges" in lines
    assert lines[-1] == "gputop cannot trace with BPF here (see FAIL)"


def test_doctor_with_the_least_set_passes(gputop_as_nobody: tuple[str, ...], cache: Path,
                                          tmp_path: Path) -> None:
    started = time.monotonic()
    res = subprocess.run([*as_nobody(TRACES), *gputop_as_nobody, "doctor"], capture_output=True, text=True,
                         timeout=180, cwd=tmp_path, env=env_for(cache))
    assert (res.returncode, res.stderr) == (0, ""), res.stdout
    assert res.stdout.splitlines()[0] == (f"OK    privileges: uid {NOBODY}, with every capability tracing needs: "
                                          + ", ".join(TRACING_CAPS) + (
                                              " and CAP_SYS_ADMIN (uprobes attach as perf events here)"
                                              if PERF_HERE else ""))
    assert "OK    BPF compile: a test program compiled and loaded" in res.stdout
    # the trap calibration works with the least set too (its cache under nobody's unwritable home is skipped)
    assert re.search(r"^OK    uprobe trap cost: \d+ ns per probe hit at function entry, \+\d+ ns with a return probe "
                     r"\((links|perf); medians of 9 rounds of 20000 calls\)", res.stdout, re.M), res.stdout
    assert time.monotonic() - started < 180


# --- where uprobes attach as perf events (Linux before 6.6, bcc before 0.21; forced here: PERF_PATH) ---------
# the kernel opens a uprobe's perf event only for CAP_SYS_ADMIN (bench/uprobe_pmu_open.py): the least set
# above counted nothing there and said nothing (docs/matrix.md, Debian 11's root)

@pytest.mark.parametrize("bpf", [True, False], ids=["--bpf", "batch"])
def test_on_the_perf_event_path_the_least_set_names_cap_sys_admin(gputop_as_nobody: tuple[str, ...], cache: Path,
                                                                   tmp_path: Path, bpf: bool) -> None:
    res = subprocess.run([*as_nobody(LEAST), *gputop_as_nobody, "-b", "-n", "1", "-f", "json", "--no-nvml",
                          *(["--bpf"] if bpf else [])], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=env_for(cache, PERF_PATH))
    if bpf:
        assert (res.returncode, res.stderr.splitlines()) == (77, [f"gputop: error: {PERF_WHY}",
                                                                  f"hint: {PERF_ADMIN_HINT}"])
        return
    assert res.returncode == 0
    assert res.stderr == (f"gputop: tracing is off ({PERF_WHY}): NVML and host data only. To trace: "
                          f"{PERF_ADMIN_HINT}\n")
    assert bpf_status(res)["status"] == "unavailable" and bpf_status(res)["reason"] == PERF_WHY


def test_on_the_perf_event_path_cap_sys_admin_traces_every_process_exactly(
        gputop_as_nobody: tuple[str, ...], cache: Path, workloads: Workloads, testbed: support.Testbed,
        tmp_path: Path) -> None:
    # the host's process alone: reaching the others is the capabilities' (the tests above), not the attach's
    res, seen = traced(gputop_as_nobody, [*LEAST, "sys_admin"], workloads, testbed, tmp_path, cache, PERF_PATH,
                       only=("host",))
    assert (res.returncode, res.stderr) == (0, "")
    assert seen == {"host": EXPECTED["host"]}
    st = bpf_status(res)
    assert (st["status"], st["reason"], st["attach"], st["probes_failed"]) == ("ok", None, "perf", 0)


def test_doctor_on_the_perf_event_path_names_cap_sys_admin(gputop_as_nobody: tuple[str, ...], cache: Path,
                                                           tmp_path: Path) -> None:
    res = subprocess.run([*as_nobody(LEAST), *gputop_as_nobody, "doctor"], capture_output=True, text=True,
                         timeout=180, cwd=tmp_path, env=env_for(cache, PERF_PATH))
    assert (res.returncode, res.stderr) == (1, "")
    lines = res.stdout.splitlines()
    assert lines[:3] == [f"FAIL  privileges: uid {NOBODY}: tracing is off ({PERF_WHY})",
                         f"      fix: {PERF_ADMIN_HINT}",
                         "FAIL    CAP_SYS_ADMIN: missing: needed to open uprobes as perf events (the kernel's uprobe "
                         "PMU is CAP_SYS_ADMIN's only)"]
    # the compile needs no CAP_SYS_ADMIN: it is checked, and says how probes attach here
    assert "OK    BPF compile: a test program compiled and loaded" in lines
    assert ("WARN  uprobe attach: a perf event per probe (uprobe_multi links are turned off: GPUTOP_UPROBE_LINKS=off): "
            "each needs CAP_SYS_ADMIN") in lines
    assert lines[-1] == "gputop cannot trace with BPF here (see FAIL)"
    trap = lines.index("WARN  uprobe trap cost: not measured: it needs the tracing privileges")
    assert lines[trap + 1] == f"      fix: {PERF_ADMIN_HINT}"        # the hint of what is missing here
    with_admin = subprocess.run([*as_nobody([*LEAST, "sys_admin"]), *gputop_as_nobody, "doctor"], capture_output=True,
                                text=True, timeout=180, cwd=tmp_path, env=env_for(cache, PERF_PATH))
    assert (with_admin.returncode, with_admin.stderr) == (0, ""), with_admin.stdout
    assert with_admin.stdout.splitlines()[0] == (
        f"OK    privileges: uid {NOBODY}, with every capability tracing needs: {', '.join(TRACING_CAPS)} and "
        "CAP_SYS_ADMIN (uprobes attach as perf events here)")
    assert re.search(r"^OK    uprobe trap cost: \d+ ns per probe hit at function entry, .* \(perf; ", with_admin.stdout,
                     re.M), with_admin.stdout
