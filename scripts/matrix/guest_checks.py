"""Inside a kernel-matrix guest: the real `gputop -b -f json` over real workloads, recorded for the host.

Run by scripts/matrix/guest-run.sh with the venv's Python that the README's set-up built, from the
repository's copy on the guest's disk; OUT is the run disk's out/ folder. Builds the workloads with
the guest's own gcc against the test bed carried in (.cache/testbed: the real libcudart.so.12 and
libcuda.so.1), then, with gputop running:
  before   a process started (and its libcudart mapped) before gputop, released after the first snapshot
  dynamic  6000 launches, h2d and d2h copies and 3 syncs (tests/bpf/test_batch.py's workload)
  copies   the real libcudart and libcuda loaded with dlopen: copies in every direction
  driver   the real libcuda alone: cuLaunchKernel and cuLaunchKernelEx
  graphs   a CUDA graph captured from 42 launches on a stream (the stream read at each launch) and launched 25
           times, through the shim runtime (tests/native/shim_runtime.c: its graph calls enter the real
           libcuda's first), as tests/bpf/test_graph_kernels.py's first test
  python   the distro's python3 driving the real libcudart through ctypes from three functions of known
           shares (tests/native/pysites.py: 60/30/10 %), one launch in 4 sampled for its call site
  short    a process that lives a few milliseconds, started once its library is probed
and, before gputop starts, what this kernel lets the least capability set do (``privileges``: as uid
65534 under setpriv, the uprobe PMU and gputop's own privileges check, with the five capabilities of
the systemd unit and with CAP_SYS_ADMIN added). Writes snapshots.jsonl (every snapshot, as printed),
result.json (the pids, the times, the privileges) and nothing else; the host asserts
(tests/matrix/test_kernels.py). Kept to Python 3.9: bullseye's.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support import TESTBED, Testbed, build_native, runtime  # noqa: E402

# for one thing to show up in the snapshots: TCG runs 10-50x slower than the host, and a full ./test.sh runs the
# guests beside the host's BPF tier (the first snapshot, a cold bcc compile: 155.7 s alone at ee05b66, past 240 s
# beside the BPF tier); an arm64 guest (full emulation of another architecture: docs/matrix.md) SLOW times that
SLOW = 4 if platform.machine() == "aarch64" else 1
DEADLINE_S = 480.0 * SLOW
#: the first snapshot's own: a cold compile of the whole program under TCG (190.5 s alone at 320a0e3); a full
#: run's guests two at once beside the BPF and UI tiers took it past 480 s in CI (stop 48)
FIRST_SNAPSHOT_S = 900.0 * SLOW

BEFORE = ["launch:500:3,1,1:64,1,1:0", "memcpy:2:1:300", "sleep:1500"]
DYNAMIC = ["launch:6000:40,2,1:128,1,1:0", "memcpy:4:1:1000", "memcpy:2:2:500", "sync:3", "sleep:1500"]
COPIES = ["memcpy:3:1:1000", "memcpy:4:2:10", "memcpy:5:3:7", "memcpy:6:0:1", "cu_htod:8:11", "cu_dtoh:9:12",
          "cu_dtod:10:13", "sleep:1500"]
# driver launches with made-up function handles: only in a process whose driver nobody initialised (the
# real libcuda returns an error without reading the handle; after the runtime's initialisation it reads it)
DRIVER = ["cu_launch:30:2,2,1:32,1,1:abc0", "cu_launch_ex:42:4,1,1:32,4,1:def0", "sleep:1500"]
SHORT = ["launch:7:2,1,1:32,1,1:0"]
GRAPHS = ["g_capture:30:0", "g_capture_to:12:1", "g_inst:1:0", "g_launch:25", "sleep:1500"]
PYSITES = ROOT / "tests" / "native" / "pysites.py"
PYTHON_ROUNDS = 1000        # 10,000 launches: ~2,500 samples at gputop's --sample-period 4
SAMPLE_PERIOD = 4


#: the systemd unit's five capabilities as setpriv's numbers (Debian 11's setpriv knows no bpf, perfmon names)
LEAST = "-all,+cap_39,+cap_38,+cap_2,+cap_19,+cap_40"
_ASK = ("import json; from gputop.sources.bpf.program.privileges import privileges_error, uprobe_pmu_allowed; "
        "print(json.dumps({'pmu': uprobe_pmu_allowed(), 'refusal': privileges_error()}))")


def privileges() -> dict[str, Any]:
    """As uid 65534 with the least set, and with CAP_SYS_ADMIN added: whether the kernel's uprobe PMU
    opens, and gputop's refusal ([why, hint] or None), as gputop --bpf would say it."""
    out: dict[str, Any] = {}
    for name, caps in (("least", LEAST), ("least+sys_admin", LEAST + ",+cap_21")):
        res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", f"--inh-caps={caps}",
                              f"--ambient-caps={caps}", f"--bounding-set={caps}", sys.executable, "-c", _ASK],
                             capture_output=True, text=True, cwd="/", timeout=DEADLINE_S,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(ROOT)})
        out[name] = json.loads(res.stdout) if res.returncode == 0 else {"error": res.stderr[-2000:]}
    return out


class Snapshots:
    """Every snapshot gputop prints, kept in order and written to a file as it comes."""

    def __init__(self, stream: IO[str], path: Path) -> None:
        self.items: list[dict[str, Any]] = []
        self.first_at: float | None = None
        #: how long each wait_for took (s), in order: result.json's "waits", of a failed run too
        self.waited: dict[str, float] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream, path), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str], path: Path) -> None:
        with path.open("w") as f:
            for line in stream:
                f.write(line)
                f.flush()
                with self._lock:
                    if self.first_at is None:
                        self.first_at = time.monotonic()
                    self.items.append(json.loads(line))

    def count(self) -> int:
        with self._lock:
            return len(self.items)

    def wait_for(self, what: str, test: Any, limit_s: float = DEADLINE_S) -> None:
        """Until a snapshot satisfies ``test`` (a callable on one snapshot), for at most ``limit_s``."""
        start = time.monotonic()
        seen = 0
        try:
            while time.monotonic() < start + limit_s:
                with self._lock:
                    new = self.items[seen:]
                for snap in new:
                    if test(snap):
                        return
                seen += len(new)
                time.sleep(0.1)
        finally:
            self.waited[what] = round(time.monotonic() - start, 1)
        raise SystemExit(f"guest_checks: {what}: not seen within {limit_s:.0f} s (waits before: {self.waited})")


def _state(snap: dict[str, Any], pid: int) -> str | None:
    for p in snap["processes"]:
        if p["pid"] == pid:
            return str(p["state"])
    return None


def _sites_named(snap: dict[str, Any], pid: int) -> bool:
    """Whether the snapshot shows ``pid``'s call sites with their frames named (its code objects read)."""
    for p in snap["processes"]:
        if p["pid"] == pid and p.get("call_sites"):
            sites = p["call_sites"]["sites"]
            return len(sites) >= 3 and all(s["frames"] and s["frames"][0]["function"] for s in sites[:3])
    return False


def _ready(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("ready "):
        raise SystemExit(f"guest_checks: a workload did not start: {line!r}")
    return int(line.split()[1])


def failed_probes(dlopen: Path, lib: Path, libcuda: Path, out: Path) -> dict[str, Any]:
    """Every probe the kernel refused on the real libcudart and libcuda, one per line, in
    probes_failed.txt (the snapshots carry only their count and the first); then whether a probed
    file's next mapping is named again (_named_again)."""
    from gputop.sources.bpf import BpfSource

    go = Path(tempfile.mkdtemp(prefix="matrix-probes-")) / "go"
    src = BpfSource()
    src.start()
    try:
        proc = subprocess.Popen([str(dlopen), "--wait", str(go), "--cudart", str(lib), "--cuda", str(libcuda),
                                 "sleep:10"], stdout=subprocess.PIPE)
        _ready(proc)
        src.scan([proc.pid])
        go.touch()
        deadline = time.monotonic() + DEADLINE_S
        while proc.poll() is None and time.monotonic() < deadline:
            src.poll(0.05)
        proc.wait(timeout=DEADLINE_S)
        assert src.uprobes is not None
        (out / "probes_failed.txt").write_text("".join(f"{line}\n" for line in src.uprobes.failed))
        return _named_again(src, dlopen, lib)
    finally:
        src.close()


def _named_again(src: Any, dlopen: Path, lib: Path) -> dict[str, Any]:
    """Whether a mapping of ``lib``, probed and classified (known_files, under the change time fstat
    gave), is named to user space again: the BPF side's change time, read from the inode at the BTF's
    offsets, is not fstat's on this kernel. With the change time the naming carried and fstat's, and
    whether it was still named before the short process ran (user space had not classified it yet)."""
    st = lib.stat()
    key = (st.st_dev, st.st_ino)
    for _ in range(3):
        src.poll(0.05)                      # whatever came before
    before = key in src.events.unknown_files
    subprocess.run([str(dlopen), "--cudart", str(lib), *SHORT], capture_output=True, check=True,
                   timeout=DEADLINE_S)
    src.bpf.ring_buffer_poll(200)
    named = src.events.unknown_files.get(key)
    return {"named": named is not None, "pending_before": before, "fstat_ctime_ns": st.st_ctime_ns,
            "bpf_ctime_ns": None if named is None else named[2]}


def main() -> int:
    out = Path(sys.argv[1])
    times: dict[str, float] = {}
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia", TESTBED / "cudart13")
    t0 = time.monotonic()
    r12 = runtime(tb, 12)
    dlopen = build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread")
    shim = build_native("shim_runtime.c", "libshimcudart.so", "-shared", "-fPIC", "-ldl")
    times["build_workloads_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    privs = privileges()
    times["privileges_s"] = time.monotonic() - t0

    go = Path(tempfile.mkdtemp(prefix="matrix-go-"))
    before = subprocess.Popen([str(r12.dynamic), "--wait", str(go / "before"), *BEFORE], stdout=subprocess.PIPE)
    before_pid = _ready(before)

    t0 = time.monotonic()
    gt = subprocess.Popen([str(ROOT / ".venv" / "bin" / "gputop"), "-b", "-f", "json", "-d", "0.5", "--no-nvml",
                           "--bpf", "--sample-period", str(SAMPLE_PERIOD)], stdout=subprocess.PIPE,
                          stderr=(out / "gputop.stderr").open("w"), text=True, cwd=str(ROOT))
    assert gt.stdout is not None
    snaps = Snapshots(gt.stdout, out / "snapshots.jsonl")
    pids: dict[str, int] = {"before": before_pid}
    returncodes: dict[str, int] = {}
    try:
        snaps.wait_for("the first snapshot", lambda s: True, FIRST_SNAPSHOT_S)
        assert snaps.first_at is not None
        times["gputop_first_snapshot_s"] = snaps.first_at - t0   # the BPF compile and the attach included
        snaps.wait_for("the process started before gputop", lambda s: _state(s, before_pid) == "running")
        (go / "before").touch()

        dynamic = subprocess.Popen([str(r12.dynamic), "--wait", str(go / "dynamic"), *DYNAMIC],
                                   stdout=subprocess.PIPE)
        pids["dynamic"] = _ready(dynamic)
        snaps.wait_for("wl_dynamic", lambda s: _state(s, pids["dynamic"]) == "running")
        (go / "dynamic").touch()

        copies = subprocess.Popen([str(dlopen), "--wait", str(go / "copies"), "--cudart", str(r12.lib), "--cuda",
                                   str(tb.libcuda), *COPIES], stdout=subprocess.PIPE)
        pids["copies"] = _ready(copies)
        snaps.wait_for("wl_dlopen", lambda s: _state(s, pids["copies"]) == "running")
        (go / "copies").touch()

        driver = subprocess.Popen([str(dlopen), "--wait", str(go / "driver"), "--cuda", str(tb.libcuda), *DRIVER],
                                  stdout=subprocess.PIPE)
        pids["driver"] = _ready(driver)
        snaps.wait_for("wl_dlopen (driver)", lambda s: _state(s, pids["driver"]) == "running")
        (go / "driver").touch()

        graphs = subprocess.Popen([str(dlopen), "--wait", str(go / "graphs"), "--cudart", str(shim), *GRAPHS],
                                  stdout=subprocess.PIPE, env={**os.environ, "SHIM_LIBCUDA": str(tb.libcuda)})
        pids["graphs"] = _ready(graphs)
        snaps.wait_for("wl_dlopen (graphs)", lambda s: _state(s, pids["graphs"]) == "running")
        (go / "graphs").touch()

        # the distro's own python3, as a user runs it (its call sites read while it lives: it exits at the end
        # of its input)
        python = subprocess.Popen(["/usr/bin/python3", str(PYSITES), "--wait", str(go / "python"), str(r12.lib),
                                   "shares", str(PYTHON_ROUNDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        pids["python"] = _ready(python)
        snaps.wait_for("python3", lambda s: _state(s, pids["python"]) == "running")
        (go / "python").touch()
        assert python.stdout is not None and python.stdin is not None
        python.stdout.readline()                # "done"
        snaps.wait_for("python3's call sites named", lambda s: _sites_named(s, pids["python"]))
        python.stdin.close()

        for name, proc in (("before", before), ("dynamic", dynamic), ("copies", copies), ("driver", driver),
                           ("graphs", graphs), ("python", python)):
            returncodes[name] = proc.wait(timeout=DEADLINE_S)
        t1 = time.monotonic()
        short = subprocess.run([str(dlopen), "--cudart", str(r12.lib), *SHORT], capture_output=True, text=True,
                               check=True, timeout=DEADLINE_S)
        times["short_lived_s"] = time.monotonic() - t1
        pids["short"] = int(short.stdout.split()[1])
        returncodes["short"] = short.returncode
        for name, pid in pids.items():
            snaps.wait_for(f"{name} exited", lambda s, pid=pid: _state(s, pid) == "exited")
        at = snaps.count()
        snaps.wait_for("one more snapshot", lambda s: snaps.count() > at + 1)
    finally:
        gt.terminate()
        gt.wait(timeout=60)
        (out / "result.json").write_text(json.dumps({"pids": pids, "returncodes": returncodes, "times": times,
                                                     "gputop_rc": gt.returncode, "privileges": privs,
                                                     "waits": snaps.waited},
                                                    indent=1))
    t0 = time.monotonic()
    named_again = failed_probes(dlopen, r12.lib, tb.libcuda, out)
    times["probe_listing_s"] = time.monotonic() - t0
    (out / "result.json").write_text(json.dumps({"pids": pids, "returncodes": returncodes, "times": times,
                                                 "gputop_rc": gt.returncode,
                                                 "probed_file_named_again": named_again["named"],
                                                 "named_again": named_again,
                                                 "privileges": privs, "waits": snaps.waited}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
