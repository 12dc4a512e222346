"""deploy/systemd's sandboxes (issue 25, "hostile tenants", item 11): `systemd-analyze security` rates
the exporter's unit 3.0 or better (6.0 before) and the recorder's no longer UNSAFE (9.6 before); the
recorder's rotation and size cap do what its comments say; and, where BPF can run, the exporter traces
exactly under the seccomp filters the unit asks for (an emulation of systemd 252's with libseccomp)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import support
from promserver import free_port
from support import ROOT, TESTBED

UNITS = ROOT / "deploy" / "systemd"
EXPORTER = UNITS / "gputop-exporter.service"
RECORD = UNITS / "gputop-record.service"
DROP_IN = UNITS / "perf-event-uprobes.conf"
CAPS = "CAP_BPF CAP_PERFMON CAP_DAC_READ_SEARCH CAP_SYS_PTRACE CAP_CHECKPOINT_RESTORE"


def analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    return tool


def settings(unit: Path, key: str) -> list[str]:
    return [ln.split("=", 1)[1] for ln in unit.read_text().splitlines() if ln.startswith(f"{key}=")]


def local_copy(unit: Path, tmp: Path) -> Path:
    """The unit with this checkout's venv in place of /opt/gputop's (the executable must exist)."""
    out = tmp / unit.name
    out.write_text(unit.read_text().replace("/opt/gputop/.venv/bin/", f"{ROOT}/.venv/bin/"))
    return out


def exposure(unit: Path, tmp: Path, drop_in: Path | None = None) -> tuple[float, str, int]:
    """(overall exposure, its word, the exit status under --threshold=30, i.e. 3.0); with ``drop_in`` in
    the unit's ``.d`` folder beside it, as /etc/systemd/system/UNIT.d/ holds it."""
    local = local_copy(unit, tmp)
    if drop_in is not None:
        (tmp / f"{unit.name}.d").mkdir()
        (tmp / f"{unit.name}.d" / drop_in.name).write_text(drop_in.read_text())
    res = subprocess.run([analyze(), "verify", str(local)], capture_output=True, text=True, timeout=120)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    help_text = subprocess.run([analyze(), "--help"], capture_output=True, text=True, timeout=60).stdout
    if "--offline" not in help_text:     # systemd 250+: Debian 11's 247 rates only units it has loaded
        pytest.skip("this systemd-analyze cannot rate a unit file offline (security --offline: systemd 250+)")
    res = subprocess.run([analyze(), "security", "--offline=yes", "--threshold=30", str(local)],
                         capture_output=True, text=True, timeout=120)
    LAST_RATING[:] = res.stdout.splitlines()
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\w+)", res.stdout)
    assert m is not None, res.stdout + res.stderr
    return float(m.group(1)), m.group(2), res.returncode


#: the lines of the last rating exposure() read
LAST_RATING: list[str] = []


def admin_line() -> str:
    return next(ln for ln in LAST_RATING if "CapabilityBoundingSet=~CAP_SYS_ADMIN" in ln)


@pytest.mark.parametrize("unit", [EXPORTER, RECORD], ids=lambda p: p.name)
def test_the_perf_event_drop_in_adds_cap_sys_admin_and_nothing_else(unit: Path, tmp_path: Path) -> None:
    """deploy/systemd/perf-event-uprobes.conf, where uprobes attach as perf events (docs/deploy.md): systemd
    merges it into either unit (verify is clean, the rating sees CAP_SYS_ADMIN granted) and the unit keeps
    an OK rating; the drop-in sets those two lists and nothing else."""
    assert [ln for ln in DROP_IN.read_text().splitlines() if ln and not ln.startswith("#")] == [
        "[Service]", "AmbientCapabilities=CAP_SYS_ADMIN", "CapabilityBoundingSet=CAP_SYS_ADMIN"]
    for d in ("bare", "drop-in"):
        (tmp_path / d).mkdir()
    bare, _, _ = exposure(unit, tmp_path / "bare")
    assert admin_line().startswith("✓ ")
    level, word, rc = exposure(unit, tmp_path / "drop-in", DROP_IN)
    assert admin_line().startswith("✗ "), admin_line()
    assert level > bare and word == "OK" and rc == 0, (bare, level, word)
    assert f"with it, {level} OK" in DROP_IN.read_text()


def test_the_exporters_unit_is_rated_3_or_better(tmp_path: Path) -> None:
    level, word, rc = exposure(EXPORTER, tmp_path)
    assert level <= 3.0 and word == "OK" and rc == 0, (level, word)
    assert f"`systemd-analyze security gputop-exporter.service`: {level} OK" in EXPORTER.read_text()


def test_the_recorders_unit_is_no_longer_unsafe(tmp_path: Path) -> None:
    level, word, rc = exposure(RECORD, tmp_path)
    assert word != "UNSAFE" and level <= 3.0 and rc == 0, (level, word)
    assert f"`systemd-analyze security gputop-record.service`: {level} OK" in RECORD.read_text()


@pytest.mark.parametrize("unit", [EXPORTER, RECORD], ids=lambda p: p.name)
def test_both_units_run_without_root_under_the_same_bounds(unit: Path) -> None:
    for key, value in [("DynamicUser", "yes"), ("AmbientCapabilities", CAPS), ("CapabilityBoundingSet", CAPS),
                       ("NoNewPrivileges", "yes"), ("UMask", "0077"), ("ProtectSystem", "strict"),
                       ("LimitNOFILE", "65536"), ("MemoryMax", "1G"), ("TasksMax", "64"),
                       ("SystemCallArchitectures", "native"), ("SystemCallErrorNumber", "EPERM")]:
        assert settings(unit, key) == [value], key
    assert settings(unit, "SystemCallFilter") == ["@system-service", "~@privileged @resources", "bpf perf_event_open"]
    for key in ("User", "ProtectProc", "ProcSubset", "PrivateDevices", "PrivateUsers", "ProtectKernelModules"):
        assert settings(unit, key) == [], f"{key}: tracing needs it as it is (see the exporter's unit)"


def test_the_exporter_accepts_only_what_it_listens_for() -> None:
    (start,) = settings(EXPORTER, "ExecStart")
    assert "--listen 127.0.0.1:9464" in start
    assert settings(EXPORTER, "IPAddressDeny") == ["any"] and settings(EXPORTER, "IPAddressAllow") == ["localhost"]


# -- the recorder's file: its own, 0600, appended, rotated in the process before 256 MiB ----------------------

def test_the_recording_rotates_in_the_process() -> None:
    """No more a write failing at LimitFSIZE and a restart (a refresh lost, the totals restarted): the recorder
    rotates its own file between two snapshots (tests/unit/test_record_rotation.py)."""
    (start,) = settings(RECORD, "ExecStart")
    assert " -b -f json " in start
    assert "--record /var/log/gputop-record/snapshots.jsonl --record-max-size 256M --record-keep 4" in start
    assert settings(RECORD, "LogsDirectory") == ["gputop-record"] and settings(RECORD, "UMask") == ["0077"]
    assert settings(RECORD, "StandardOutput") == ["null"]
    assert not settings(RECORD, "LimitFSIZE") and not settings(RECORD, "ExecStartPre")


# -- the exporter under the unit's seccomp filters, tracing for real ----------------------------------

def expand(name: str, seen: set[str] | None = None) -> set[str]:
    """A SystemCallFilter= word as systemd 252 expands it: a group, recursively, or one call."""
    if not name.startswith("@"):
        return {name}
    seen = set() if seen is None else seen
    seen.add(name)
    out = subprocess.run([analyze(), "syscall-filter", name], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    calls: set[str] = set()
    for word in (ln.strip() for ln in out.splitlines()[1:]):
        if word.startswith("@") and word not in seen:
            calls |= expand(word, seen)
        elif re.fullmatch(r"[a-z0-9_]+", word):
            calls.add(word)
    return calls


def unit_allow_list(unit: Path) -> set[str]:
    """SystemCallFilter= lines in order: the first, an allow list, sets the default (deny); later
    ones add, or remove with ~ (systemd.exec(5))."""
    lines = settings(unit, "SystemCallFilter")
    assert lines and not lines[0].startswith("~")
    allowed: set[str] = set()
    for line in lines:
        words = line.removeprefix("~").split()
        calls = set().union(*(expand(w) for w in words))
        allowed = allowed - calls if line.startswith("~") else allowed | calls
    return allowed


class _Cmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]


def seccomp_like_systemd(unit: Path) -> Callable[[], None]:
    """A preexec_fn that loads the unit's filters: MemoryDenyWriteExecute='s (systemd 252's rules) and
    the allow list, everything else EPERM (SystemCallErrorNumber=EPERM)."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        pytest.skip("libseccomp.so.2 is not installed")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.c_void_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    allow, eperm, masked_eq = 0x7FFF0000, 0x00050000 | 1, 7
    assert settings(unit, "SystemCallErrorNumber") == ["EPERM"]
    nrs = sorted(n for n in (lib.seccomp_syscall_resolve_name(s.encode()) for s in unit_allow_list(unit)) if n >= 0)
    mdwe = settings(unit, "MemoryDenyWriteExecute") == ["yes"]
    prot_write, prot_exec, shm_exec = 2, 4, 0o100000
    rules = [("mmap", prot_write | prot_exec, prot_write | prot_exec), ("mprotect", prot_exec, prot_exec),
             ("pkey_mprotect", prot_exec, prot_exec), ("shmat", shm_exec, shm_exec)]

    def load() -> None:
        if mdwe:                # first: the allow list has no seccomp(2)
            ctx = lib.seccomp_init(allow)
            for name, mask, value in rules:
                cmp = _Cmp(2, masked_eq, mask, value)
                nr = lib.seccomp_syscall_resolve_name(name.encode())
                if lib.seccomp_rule_add_array(ctx, eperm, nr, 1, ctypes.byref(cmp)) != 0:
                    raise OSError("seccomp_rule_add_array")
            if lib.seccomp_load(ctx) != 0:
                raise OSError("seccomp_load")
        ctx = lib.seccomp_init(eperm)
        for nr in nrs:
            if lib.seccomp_rule_add_array(ctx, allow, nr, 0, None) != 0:
                raise OSError("seccomp_rule_add_array")
        if lib.seccomp_load(ctx) != 0:
            raise OSError("seccomp_load")

    return load


def test_the_filters_refuse_what_they_should(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("setuid(0) is allowed to root only: the check needs root")
    load = seccomp_like_systemd(EXPORTER)
    code = ("import mmap, os, resource\n"
            "def tried(f):\n"
            "    try: f(); return 'ok'\n"
            "    except OSError as e: return e.strerror\n"
            "print(tried(lambda: os.setuid(0)), tried(lambda: os.sched_setaffinity(0, {0})),\n"
            "      tried(lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)),\n"
            "      tried(lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE)), sep='|')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, preexec_fn=load)
    assert out.stdout.strip().split("|") == ["Operation not permitted", "Operation not permitted",
                                            "Operation not permitted", "ok"], out.stderr


@pytest.mark.bpf
def test_the_exporter_traces_exactly_under_the_units_seccomp_filters(tmp_path: Path) -> None:
    """A fresh cache (a full bcc compile), the trap-cost calibration, uprobes, a workload's 6,000
    launches counted exactly, and a clean exit, all under the unit's system call filters."""
    if os.geteuid() != 0:
        pytest.skip("loads BPF programs: needs root")
    testbed = support.Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia", TESTBED / "cudart13")
    if not testbed.libcudart.exists():
        pytest.skip("the test bed is not built (scripts/testbed.sh)")
    try:
        from gputop.sources.bpf import load_bcc
        load_bcc()
    except Exception as e:
        pytest.skip(f"bcc is not usable here: {e}")
    workload = support.runtime(testbed, 12).dynamic
    # what a booted host has mounted (systemd's sys-kernel-debug.mount): bcc 0.18 reads tracepoints under
    # debugfs, and the unit's filters refuse mount(2) (a chroot on a host without debugfs lacks it)
    from gputop.sources.bpf.common import linux
    assert linux.ensure_tracefs(linux.bcc_tracefs(load_bcc())) is None
    load = seccomp_like_systemd(EXPORTER)
    port = free_port()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-m", "gputop.cli", "exporter", "--bpf", "--no-nvml", "-d", "0.5",
                             "--listen", f"127.0.0.1:{port}"], cwd=ROOT, preexec_fn=load,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def get(path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return str(r.read().decode())

    try:
        deadline = time.monotonic() + 240
        bpf = None
        while time.monotonic() < deadline and proc.poll() is None and bpf in (None, "starting"):
            with contextlib.suppress(OSError, ValueError):
                bpf = json.loads(get("/healthz"))["sources"].get("bpf", {}).get("status")
            time.sleep(0.5)
        assert bpf == "ok", proc.stderr.read() if proc.poll() is not None and proc.stderr else bpf
        go = tmp_path / "go"
        wl = subprocess.Popen([str(workload), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0", "sleep:300"],
                              stdout=subprocess.PIPE)
        assert wl.stdout is not None
        pid = int(wl.stdout.readline().split()[1])
        time.sleep(1.5)                     # the exec event attaches the exporter to it
        go.touch()
        assert wl.wait(timeout=60) == 0
        time.sleep(1.5)
        seen = [ln for ln in get("/metrics").splitlines()
                if ln.startswith("gputop_kernel_launches_total{") and f'pid="{pid}"' in ln]
        assert len(seen) == 1 and seen[0].endswith(" 6000.0"), seen
        assert list((cache / "gputop" / "bpf").glob("bpf-*.json"))        # compiled here, not read from a cache
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Operation not permitted" not in err, err
