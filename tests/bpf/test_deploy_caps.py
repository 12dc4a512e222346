"""The least capability set of deploy/systemd/gputop-exporter.service, proven: the exporter as a
non-root user with exactly those capabilities (setpriv) counts a host process and a process in its own
mount namespace (a container) exactly; without CAP_SYS_PTRACE the container's process is missed,
without CAP_DAC_READ_SEARCH tracing fails (tracefs is root-only): --bpf exits 77 naming it.
(CAP_CHECKPOINT_RESTORE, for deleted libraries, and the same set in batch mode: test_privileges.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import support
from prometheus_client.parser import text_string_to_metric_families
from promserver import Exporter
from support import ROOT, Workloads

from gputop.sources.bpf.program.privileges import has_privileges, why_perf

UNIT = ROOT / "deploy" / "systemd" / "gputop-exporter.service"
NOBODY = 65534
SITE = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"), None)


def unit_caps(unit: Path = UNIT) -> list[str]:
    line = next(ln for ln in unit.read_text().splitlines() if ln.startswith("AmbientCapabilities="))
    return [c.removeprefix("CAP_").lower() for c in line.split("=", 1)[1].split()]


def deployed_caps() -> list[str]:
    """The unit's capabilities as this host deploys them: with the perf-event drop-in's where uprobes
    attach as perf events here (PERF_HERE)."""
    return unit_caps() + (unit_caps(DROP_IN) if PERF_HERE else [])


#: linux/capability.h's numbers (ABI) of the capabilities the deployment names: setpriv takes ``cap_N``,
#: while its names come from libcap-ng (Debian 11's knows neither ``bpf`` nor ``perfmon``)
CAP_NUMBERS = {"dac_read_search": 2, "sys_ptrace": 19, "sys_admin": 21, "perfmon": 38, "bpf": 39,
               "checkpoint_restore": 40}
DROP_IN = ROOT / "deploy" / "systemd" / "perf-event-uprobes.conf"
#: uprobes attach as perf events, as on Linux before 6.6 or with bcc before 0.21 (gputop's uprobes.links_wanted)
PERF_PATH = {"GPUTOP_UPROBE_LINKS": "off"}
#: whether uprobes attach as perf events here without forcing it (bcc 0.18 in Debian 11's root, a kernel
#: before 6.6): the units then need their drop-in (docs/deploy.md), and the tests of the least set take it
PERF_HERE = why_perf() is not None if has_privileges() else False
#: why tracing is off there without CAP_SYS_ADMIN (privileges.perf_admin_refusal)
PERF_WHY = ("uprobes attach here as perf events (uprobe_multi links are turned off: GPUTOP_UPROBE_LINKS=off), "
            "which the kernel opens only with CAP_SYS_ADMIN: missing CAP_SYS_ADMIN")


def as_nobody(caps: list[str]) -> tuple[str, ...]:
    spec = ",".join(["-all", *(f"+cap_{CAP_NUMBERS[c]}" for c in caps)])
    return ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", f"--inh-caps={spec}",
            f"--ambient-caps={spec}", f"--bounding-set={spec}")


def _runs_as_nobody(python: str) -> bool:
    res = subprocess.run([*as_nobody([]), python, "-c", "import prometheus_client"], capture_output=True,
                         env={**os.environ, "PYTHONPATH": ""}, timeout=60)
    return res.returncode == 0


@pytest.fixture(scope="module")
def gputop_as_nobody() -> tuple[str, ...]:
    """A command that runs gputop's CLI as an unprivileged user: this venv's Python when that user can
    run it, else the distro's Python of the same version with the venv's packages (a Python built under
    /root, as pyenv does, is out of reach of other users)."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    if _runs_as_nobody(sys.executable):
        return (sys.executable, "-m", "gputop.cli")
    distro = f"/usr/bin/python3.{sys.version_info.minor}"
    if SITE is None or not Path(distro).exists():
        pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} that uid {NOBODY} can run")
    boot = f"import site, sys; site.addsitedir({str(SITE)!r}); from gputop.cli import main; sys.exit(main())"
    return (distro, "-c", boot)


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "cache"          # the unit's CacheDirectory: the fallback headers' merged tree
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    tmp_path.chmod(0o755)
    yield d


def exporter_as_nobody(caps: list[str], command: tuple[str, ...], cache: Path, cwd: Path,
                       env: dict[str, str] | None = None) -> Exporter:
    return Exporter("--no-nvml", "--bpf", "-d", "0.5", prefix=as_nobody(caps), command=command,
                    env={"XDG_CACHE_HOME": str(cache), "HOME": "/nonexistent", **(env or {})}, cwd=cwd)


def launches(exp: Exporter) -> dict[int, float]:
    out = {}
    for fam in text_string_to_metric_families(exp.metrics()):
        for s in fam.samples:
            if s.name == "gputop_kernel_launches_total":
                out[int(s.labels["pid"])] = s.value
    return out


def run_two_workloads(workloads: Workloads, testbed: support.Testbed, tmp: Path, exp: Exporter,
                      container: bool = True, reached: bool = True) -> tuple[int, int | None]:
    """A host process (6,000 launches) and one in its own mount namespace whose runtime only exists
    there (999 launches; not with ``container`` False: its libcudart is a file of its own, which a perf
    event per probe detaches in ~12 s), both started after the exporter; returns their PIDs once both
    exited."""
    go = tmp / "go"
    hidden = tmp / "ns-only"
    hidden.mkdir(exist_ok=True)
    script = f"mount -t tmpfs tmpfs {hidden} && cp {testbed.libcudart} {hidden}/libcudart.so.12 && exec \"$@\""
    procs = [subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0",
                               "sleep:300"], stdout=subprocess.PIPE)]
    if container:
        procs.append(subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                                       str(workloads.dlopen), "--wait", str(go), "--cudart",
                                       f"{hidden}/libcudart.so.12", "launch:999:3,1,1:96,1,1:2", "sleep:300"],
                                      stdout=subprocess.PIPE))
    pids = []
    for p in procs:
        assert p.stdout is not None
        pids.append(int(p.stdout.readline().split()[1]))
    # the exec events attach the exporter to both (a fixed 1.5 s was too short on a host loaded by other
    # work: the container's first launches were lost); the container's unless the exporter cannot reach it
    exp.wait_listed(*(pids if reached else pids[:1]))
    if not reached:
        time.sleep(1.5)             # time enough to list it, were it reached
    go.touch()
    for p in procs:
        assert p.wait(timeout=60) == 0
    go.unlink()
    return pids[0], (pids[1] if container else None)


def test_the_units_capabilities_count_host_and_container_processes_exactly(
        gputop_as_nobody: tuple[str, ...], cache: Path, workloads: Workloads, testbed: support.Testbed,
        tmp_path: Path) -> None:
    assert unit_caps() == ["bpf", "perfmon", "dac_read_search", "sys_ptrace", "checkpoint_restore"]
    caps = deployed_caps()
    exp = exporter_as_nobody(caps, gputop_as_nobody, cache, tmp_path)
    try:
        assert exp.healthy(90)["sources"]["bpf"]["status"] == "ok"
        host, ctr = run_two_workloads(workloads, testbed, tmp_path, exp)
        time.sleep(1.0)
        seen = launches(exp)
        assert (seen.get(host), seen.get(ctr)) == (6000, 999)
    finally:
        rc, err = exp.stop()
    assert rc == 0, err


def test_without_sys_ptrace_a_containers_process_is_missed(
        gputop_as_nobody: tuple[str, ...], cache: Path, workloads: Workloads, testbed: support.Testbed,
        tmp_path: Path) -> None:
    caps = [c for c in deployed_caps() if c != "sys_ptrace"]
    exp = exporter_as_nobody(caps, gputop_as_nobody, cache, tmp_path)
    try:
        assert exp.healthy(90)["sources"]["bpf"]["status"] == "ok"
        _, ctr = run_two_workloads(workloads, testbed, tmp_path, exp, reached=False)
        time.sleep(1.0)
        assert ctr not in launches(exp)
    finally:
        rc, err = exp.stop()
    assert rc == 0, err


def test_without_dac_read_search_tracing_fails(gputop_as_nobody: tuple[str, ...], cache: Path,
                                               tmp_path: Path) -> None:
    caps = [c for c in unit_caps() if c != "dac_read_search"]
    exp = exporter_as_nobody(caps, gputop_as_nobody, cache, tmp_path)
    try:
        rc = exp.proc.wait(timeout=90)
    finally:
        _, err = exp.stop()
    assert rc == 77
    assert err.splitlines()[0] == ("gputop: error: tracing needs CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH "
                                   "(root has them): missing CAP_DAC_READ_SEARCH")
    assert "Traceback" not in err


def test_on_the_perf_event_path_the_unit_without_its_drop_in_exits_77_naming_cap_sys_admin(
        gputop_as_nobody: tuple[str, ...], cache: Path, tmp_path: Path) -> None:
    """Where uprobes attach as perf events (Linux before 6.6, bcc before 0.21: forced here), the kernel
    opens them only for CAP_SYS_ADMIN: the unit's five capabilities alone counted nothing before (docs/matrix.md)."""
    exp = exporter_as_nobody(unit_caps(), gputop_as_nobody, cache, tmp_path, PERF_PATH)
    try:
        rc = exp.proc.wait(timeout=90)
    finally:
        _, err = exp.stop()
    assert rc == 77
    assert err.splitlines() == [
        f"gputop: error: {PERF_WHY}",
        "hint: run the exporter as root, or with the capabilities of deploy/systemd/gputop-exporter.service and "
        "its drop-in deploy/systemd/perf-event-uprobes.conf (CAP_SYS_ADMIN)"]


def test_on_the_perf_event_path_the_unit_with_its_drop_in_counts_exactly(
        gputop_as_nobody: tuple[str, ...], cache: Path, workloads: Workloads, testbed: support.Testbed,
        tmp_path: Path) -> None:
    caps = unit_caps() + unit_caps(DROP_IN)
    assert caps[5:] == ["sys_admin"]
    exp = exporter_as_nobody(caps, gputop_as_nobody, cache, tmp_path, PERF_PATH)
    try:
        assert exp.healthy(90)["sources"]["bpf"] == {"status": "ok", "reason": None}
        # the host's process alone: reaching a container's is the capabilities' (the test above), not the attach's
        host, _ = run_two_workloads(workloads, testbed, tmp_path, exp, container=False)
        time.sleep(1.0)
        seen = launches(exp)
        assert seen.get(host) == 6000
        failed = [s.value for fam in text_string_to_metric_families(exp.metrics()) for s in fam.samples
                  if s.name == "gputop_probes_failed"]
        assert failed == [0]
    finally:
        rc, err = exp.stop()
    assert rc == 0, err
