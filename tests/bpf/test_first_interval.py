"""Every interval's counts cover exactly its interval_s, the first one too.

A process already launching at a steady rate when gputop starts is counted from the moment its
probes attach; what it launched while gputop was still attaching belongs to the totals, not to the
first interval (which used to read 1.3x to 2.4x the true rate).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

GPUTOP = [sys.executable, "-m", "gputop.cli"]
RATE = 4000


def test_first_interval_rate_of_a_process_running_before_gputop(workloads, tmp_path) -> None:
    go = tmp_path / "go"
    wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), f"paced:{RATE}:20000"],
                          stdout=subprocess.PIPE)
    try:
        assert wl.stdout is not None and wl.stdout.readline().startswith(b"ready")
        go.touch()
        time.sleep(0.5)                 # launching steadily before gputop starts
        out = subprocess.run([*GPUTOP, "-b", "-n", "3", "-d", "2", "-f", "json", "-p", str(wl.pid), "--no-nvml",
                              "--bpf"], capture_output=True, text=True, timeout=120, check=True).stdout
    finally:
        wl.kill()
        wl.wait()
    snaps = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(snaps) == 3
    intervals = []
    for snap in snaps:
        (proc,) = [p for p in snap["processes"] if p["pid"] == wl.pid]
        intervals.append(proc["interval"]["launches"])
        rate = proc["interval"]["launches"] / snap["interval_s"]
        # the workload paces itself to 4000/s to within a millisecond's launches; an interval that
        # also held the launches made while gputop attached would read 10% to 140% more
        assert abs(rate - RATE) / RATE < 0.05, (rate, snap["interval_s"], proc["interval"]["launches"])
        assert proc["rates"]["launches_per_s"] == pytest.approx(rate, rel=1e-9)
    # the intervals add up to what the totals gained after the first interval began
    totals = [p["total"]["launches"] for s in snaps for p in s["processes"] if p["pid"] == wl.pid]
    assert totals[2] - totals[0] == intervals[1] + intervals[2]
    assert totals[0] >= intervals[0]


def test_code_ranges_are_in_place_before_an_objects_probes(workloads, testbed, tmp_path) -> None:
    """While gputop attaches, a runtime's call into the driver must not count twice: when an
    object's probes go in, the kernel already holds its code ranges for every process that maps it
    (checked in the BPF side's own trie at the moment of each attach)."""
    from gputop.sources.bpf import BpfSource
    from gputop.sources.bpf.attach import discovery

    shim, cuda = tmp_path / "libshimcudart.so", tmp_path / "libcuda.so.1"     # inodes no probe covers yet
    shim.write_bytes(workloads.shim_runtime.read_bytes())
    cuda.write_bytes(testbed.libcuda.read_bytes())
    go = tmp_path / "go"
    src = BpfSource()
    src.start()                         # before the workload: its copies are objects new to gputop
    wl = subprocess.Popen([str(workloads.dlopen), "--wait", str(go), "--cudart", str(shim), "--cuda", str(cuda),
                           "launch:300:2,1,1:32,1,1:0"], stdout=subprocess.PIPE,
                          env={"SHIM_LIBCUDA": str(cuda), "PATH": "/usr/bin:/bin"})
    try:
        assert wl.stdout is not None and wl.stdout.readline().startswith(b"ready")
        assert src.uprobes is not None
        real_attach = src.uprobes.attach
        checked: list[str] = []

        def attach(path: str, wanted: list, name: str | None = None, owner: object = None) -> int:  # type: ignore[type-arg]
            mine = [m for m in discovery.read_maps(wl.pid) if m.path == name]
            prefix = wl.pid.to_bytes(4, "big")
            ranges = []
            for k in src.table("code"):
                if bytes(k.data[:4]) == prefix:        # tgid, generation, address (big-endian)
                    base = int.from_bytes(bytes(k.data[8:16]), "big")
                    ranges.append((base, base + (1 << (128 - int(k.prefixlen)))))
            assert mine and all(any(lo < m.end and m.start < hi for lo, hi in ranges) for m in mine), name
            checked.append(str(name))
            return real_attach(path, wanted, name=name, owner=owner)

        src.uprobes.attach = attach  # type: ignore[method-assign]
        src.scan([wl.pid])
        deadline = time.monotonic() + 30        # an object whose read outlasts the scan's wait: the next polls
        while len(checked) < 2 and time.monotonic() < deadline:
            src.poll(0.05)
        assert sorted(checked) == sorted([str(shim), str(cuda)])
        go.touch()
        assert wl.wait(timeout=30) == 0
        raw = src.read().procs[wl.pid]
        assert raw.counters["launches"] == 300          # each through the shim runtime and the real driver
    finally:
        if wl.poll() is None:
            wl.kill()
            wl.wait()
        src.close()
