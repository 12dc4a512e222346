"""Churn soak: the real `gputop -b -f json` traces long-lived processes while short-lived ones come
and go; its own resources are sampled throughout and the counts checked exactly.

Run as root after ./test.sh has set up the test bed (the hour-long default, nice'd, in the background):

    nice -n 10 .venv/bin/python bench/soak.py --out /tmp/soak.json > /tmp/soak.log 2>&1 &

Phases: ``--long`` processes (default 64; the dynamically linked test-bed workload on the REAL
libcudart.so.12) start and wait; gputop starts and lists them; they launch ``--burst`` kernels
every ``--period-s``. After a warm-up, gputop's baseline is sampled; then ``--short`` short-lived
processes (default 10,000) start evenly over ``--duration-s`` (default 3600 s), each making
``--short-launches`` launches and exiting within milliseconds; after the churn and a settle time,
gputop is sampled again; then the long-lived processes make their last burst and exit.

Sampled every ``--sample-s`` from outside gputop: RSS, open descriptors (probes apart), threads, the entries
of its BPF hash/LRU/LPM maps that belong to the soak's processes (read through pidfd_getfd; the host's
other CUDA processes are traced too), and the dropped-record counter of
its snapshots. Checked:

- every long-lived process's total launches are exact at the end (``bursts * burst``), and never
  decrease or pass that number on the way;
- every short-lived process is shown with exactly ``--short-launches`` (counted: exact, short,
  missing);
- after the churn: no descriptor or thread more than at the baseline (probe descriptors change only
  with the objects probed), every non-LRU map back to its baseline entry count, and RSS within
  ``--rss-tolerance-bytes`` of the baseline;
- dropped records are sampled, not checked: gputop traces every CUDA process on the host, and
  another one's calls may be dropped (a batch past 64 entries, a copy to a CUDA array).

Prints one line per sample and a summary (JSON with ``--out``); exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support import TESTBED, Testbed, runtime  # noqa: E402

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_BPF, _SYS_PIDFD_OPEN, _SYS_PIDFD_GETFD = 321, 434, 438
_BPF_MAP_GET_NEXT_KEY, _BPF_OBJ_GET_INFO_BY_FD = 4, 15
#: map types counted: hash, percpu hash, LRU hash, LRU percpu hash, LPM trie (arrays are full by design)
_COUNTED = {1: "hash", 5: "percpu_hash", 9: "lru_hash", 10: "lru_percpu_hash", 11: "lpm_trie"}
_LRU = {9, 10}
#: maps keyed by file, not by process (they grow with the files gputop has classified, to a cap)
_PER_FILE = {"known_files"}
#: RSS may stay this far above the baseline after the churn (CPython keeps freed arenas and dict
#: tables for reuse); measured here, see docs/RELIABILITY.md "## Soak"
RSS_TOLERANCE_BYTES = 4 << 20
#: the tables of sampled call sites: they fill as the long-lived processes' launches are sampled, at most one
#: entry each (the workload launches one kernel from one place); the short-lived processes' go with them
SAMPLED = ("py_stacks", "py_sites")


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    return int(_libc.syscall(_SYS_BPF, cmd, attr, len(attr)))


def _map_info(fd: int) -> tuple[int, int, str] | None:
    """(type, key size, name) of the BPF map ``fd``; None if it is not one."""
    info = ctypes.create_string_buffer(96)
    attr = ctypes.create_string_buffer(16)
    struct.pack_into("IIQ", attr, 0, fd, len(info), ctypes.addressof(info))
    if _bpf(_BPF_OBJ_GET_INFO_BY_FD, attr) != 0:
        return None
    mtype, _id, key_size = struct.unpack_from("III", info.raw, 0)
    name = info.raw[24:40].split(b"\0", 1)[0].decode()
    return mtype, key_size, name


#: maps keyed by a process identity (gputop/sources/bpf/lifecycle/procid.py: tgid | generation << 32)
_BY_IDENTITY = frozenset({"procs", "tracked"})


def _tgid(map_type: int, key: bytes, name: str = "") -> int:
    """The process a key of gputop's maps belongs to: LPM keys start with the tgid big-endian after
    the prefix length; identities (procs, tracked) and the other keys start with a u32 tgid; other
    u64 keys are pid_tgid (tgid high)."""
    if map_type == 11:
        return int.from_bytes(key[4:8], "big")
    if len(key) == 8 and name not in _BY_IDENTITY:
        return int.from_bytes(key[4:8], "little")
    return int.from_bytes(key[0:4], "little")


def _keys(fd: int, key_size: int, limit: int = 1 << 22) -> list[bytes]:
    key = ctypes.create_string_buffer(key_size)
    nxt = ctypes.create_string_buffer(key_size)
    attr = ctypes.create_string_buffer(24)
    struct.pack_into("IIQQ", attr, 0, fd, 0, 0, ctypes.addressof(nxt))     # NULL key: the first one
    out: list[bytes] = []
    while len(out) < limit and _bpf(_BPF_MAP_GET_NEXT_KEY, attr) == 0:
        out.append(nxt.raw)
        ctypes.memmove(key, nxt, key_size)
        struct.pack_into("Q", attr, 8, ctypes.addressof(key))
    return out


def map_entries(pid: int, mine: set[int]) -> tuple[dict[str, int], int]:
    """Entries of each hash, LRU and LPM map that process ``pid`` holds open, by map name, that
    belong to the processes ``mine`` (the host's other processes are traced too); and all
    entries of those maps. Needs root (pidfd_getfd)."""
    pidfd = int(_libc.syscall(_SYS_PIDFD_OPEN, pid, 0))
    if pidfd < 0:
        return {}, 0
    out: dict[str, int] = {}
    total = 0
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{name}") != "anon_inode:bpf-map":
                    continue
            except OSError:
                continue
            fd = int(_libc.syscall(_SYS_PIDFD_GETFD, pidfd, int(name), 0))
            if fd < 0:
                continue
            try:
                info = _map_info(fd)
                if info is not None and info[0] in _COUNTED:
                    label = info[2] + (" (lru)" if info[0] in _LRU else "")
                    keys = _keys(fd, info[1])
                    total += len(keys)
                    if info[2] not in _PER_FILE:
                        out[label] = out.get(label, 0) + sum(1 for k in keys if _tgid(info[0], k, info[2]) in mine)
            finally:
                os.close(fd)
    finally:
        os.close(pidfd)
    return out, total


@dataclass
class Sample:
    t_s: float
    phase: str
    rss_bytes: int
    fds: int                # open descriptors other than probes (BPF links, perf events, programs)
    probe_fds: int          # BPF links, perf events and programs: they grow with the objects probed
    objects: int | None     # CUDA objects probed (the snapshot's sources.bpf.objects)
    threads: int
    maps: dict[str, int]    # entries of the soak's own processes, by map
    maps_all: int           # entries of every process (the host's other CUDA processes too)
    dropped: int | None
    processes: int
    fd_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def map_entries(self) -> int:
        return sum(self.maps.values())


#: BPF links, perf events and programs: they grow with the objects probed (a program is loaded
#: the first time an object has an entry point it handles)
_PROBE_FDS = ("anon_inode:bpf_link", "anon_inode:[perf_event]", "anon_inode:bpf-prog")
#: open only while gputop measures its own BPF cost (1 s in every 5 s): counted in neither
_TRANSIENT_FDS = ("anon_inode:bpf-stats",)


def fd_kinds(pid: int) -> dict[str, int]:
    """Open descriptors of ``pid`` by what they are (digits in the link's target folded)."""
    out: dict[str, int] = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            kind = re.sub(r"[0-9]+", "N", os.readlink(f"/proc/{pid}/fd/{name}"))
        except OSError:
            continue
        out[kind] = out.get(kind, 0) + 1
    return out


def sample_proc(pid: int) -> tuple[int, int, int, int]:
    """(RSS bytes, open descriptors other than probes, probe descriptors, threads) of ``pid``."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = probes = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        probes += target in _PROBE_FDS
        fds += target not in _PROBE_FDS and target not in _TRANSIENT_FDS
    return rss, fds, probes, threads


class Gputop:
    """`gputop -b -f json` as a subprocess; its snapshots are handed to ``on_snapshot`` as they come."""

    def __init__(self, interval_s: float, on_snapshot: Callable[[dict[str, Any]], None]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "gputop.cli", "-b", "-f", "json", "--no-nvml",
                                      "-d", str(interval_s)], cwd=ROOT, stdout=subprocess.PIPE,
                                     env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent-gputop-soak"})
        self.last: dict[str, Any] | None = None
        self._on = on_snapshot
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            snap = json.loads(line)
            with self._lock:
                self.last = snap
                self._on(snap)

    def wait_for(self, cond: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                snap = self.last
            if snap is not None and cond(snap):
                return snap
            if self.proc.poll() is not None:
                raise SystemExit(f"gputop exited with {self.proc.returncode}")
            time.sleep(0.1)
        raise SystemExit("gputop did not get there in time")

    def stop(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                continue
        self.proc.wait()
        self._thread.join(timeout=5)


@dataclass
class Result:
    args: dict[str, Any]
    samples: list[Sample] = field(default_factory=list)
    long_expected: int = 0
    long_exact: int = 0
    long_wrong: dict[int, int | None] = field(default_factory=dict)   # pid -> last total seen
    long_regressions: int = 0         # a total that went down or past the expected
    short_started: int = 0
    short_exact: int = 0
    short_under: int = 0
    short_missing: int = 0
    short_over: int = 0
    #: short-lived processes not shown exactly: pid -> every total seen (none: never shown)
    short_wrong: dict[int, list[int]] = field(default_factory=dict)
    dropped_max: int | None = None
    baseline: Sample | None = None
    after: Sample | None = None
    failures: list[str] = field(default_factory=list)

    def check(self, rss_tolerance_bytes: int) -> None:
        b, a = self.baseline, self.after
        assert b is not None and a is not None
        if self.long_exact != self.args["long"]:
            self.failures.append(f"long-lived counts not exact: {self.long_wrong} (expected {self.long_expected})")
        if self.long_regressions:
            self.failures.append(f"{self.long_regressions} long-lived totals went down or past the expected")
        if self.short_exact != self.short_started:
            self.failures.append(f"short-lived: {self.short_exact} exact of {self.short_started} "
                                 f"({self.short_under} under, {self.short_over} over, {self.short_missing} missing)")
        if a.fds > b.fds:
            self.failures.append(f"descriptors grew: {b.fds} -> {a.fds}")
        if a.objects == b.objects and a.probe_fds != b.probe_fds:
            self.failures.append(f"probe descriptors changed with no new object: {b.probe_fds} -> {a.probe_fds}")
        if a.threads > b.threads:
            self.failures.append(f"threads grew: {b.threads} -> {a.threads}")
        for name, n in a.maps.items():
            if name in SAMPLED:     # the live processes' call sites fill as their launches are sampled
                if n < b.maps.get(name, 0) or n > self.args["long"]:
                    self.failures.append(f"map {name}: {b.maps.get(name, 0)} entries at the baseline, {n} after "
                                         f"(one stack and one site each of the {self.args['long']} long-lived "
                                         "processes)")
            elif "(lru)" not in name and n != b.maps.get(name, 0):
                self.failures.append(f"map {name}: {b.maps.get(name, 0)} entries at the baseline, {n} after")
        if a.rss_bytes - b.rss_bytes > rss_tolerance_bytes:
            self.failures.append(f"RSS {b.rss_bytes} -> {a.rss_bytes} bytes (tolerance {rss_tolerance_bytes})")

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        rss = [s.rss_bytes for s in self.samples]
        out["rss_max_bytes"] = max(rss) if rss else None
        out["fds_max"] = max((s.fds for s in self.samples), default=None)
        out["threads_max"] = max((s.threads for s in self.samples), default=None)
        out["map_entries_max"] = max((s.map_entries for s in self.samples), default=None)
        out["samples"] = len(self.samples)
        return out


def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> Result:
    res = Result(vars(args).copy())
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia")
    wl = runtime(tb, 12).dynamic
    warmup_s, settle_s = args.warmup_s, args.settle_s
    bursts = math.ceil((warmup_s + args.duration_s + settle_s + args.tail_s) / args.period_s) + 1
    res.long_expected = bursts * args.burst
    burst_op = f"launch:{args.burst}:4,2,1:64,1,1:0"
    ops = [op for _ in range(bursts) for op in (burst_op, f"sleep:{int(args.period_s * 1000)}")][:-1]

    long_totals: dict[int, int] = {}
    long_exited: set[int] = set()       # shown exited: their last rows, with their final totals
    #: pid -> when its last row is surely out: a refresh taken after this (unix time, the snapshots'
    #: clock: a collector slowed down by a busy host is waited for)
    short_pending: dict[int, float] = {}
    snap_time = [0.0]
    short_seen: dict[int, list[int]] = {}
    short_all: set[int] = set()
    lock = threading.Lock()

    def on_snapshot(snap: dict[str, Any]) -> None:
        dropped = snap["sources"]["bpf"].get("dropped")
        if dropped is not None:
            res.dropped_max = max(res.dropped_max or 0, dropped)
        with lock:
            for p in snap["processes"]:
                pid, total = p["pid"], p["total"]["launches"]
                if pid in long_totals and total is not None:
                    if total < long_totals[pid] or total > res.long_expected:
                        res.long_regressions += 1
                    long_totals[pid] = total
                    if p["state"] == "exited":
                        long_exited.add(pid)
                elif pid in short_pending and total is not None:
                    short_seen.setdefault(pid, []).append(total)
            snap_time[0] = snap["time"]

    def settle_short(final: bool = False) -> None:
        with lock:
            for pid in [p for p, dl in short_pending.items() if final or dl < snap_time[0]]:
                del short_pending[pid]
                seen = short_seen.pop(pid, [])
                got = max(seen, default=None)
                if got == args.short_launches:
                    res.short_exact += 1
                    continue
                res.short_wrong[pid] = seen
                if got is None:
                    res.short_missing += 1
                elif got < args.short_launches:
                    res.short_under += 1
                else:
                    res.short_over += 1

    with tempfile.TemporaryDirectory(prefix="gputop-soak-") as tmp:
        go = Path(tmp) / "go"
        longs = [subprocess.Popen([str(wl), "--wait", str(go), *ops], stdout=subprocess.PIPE)
                 for _ in range(args.long)]
        for p in longs:
            assert p.stdout is not None
            line = p.stdout.readline().decode()
            if not line.startswith("ready"):
                raise SystemExit(f"workload did not start: {line!r}")
            long_totals[p.pid] = 0
        t0 = time.monotonic()
        g = Gputop(args.interval_s, on_snapshot)
        try:
            wanted = set(long_totals)
            g.wait_for(lambda s: wanted <= {p["pid"] for p in s["processes"]}, timeout_s=120)
            go.touch()

            def take(phase: str) -> Sample:
                rss, fds, probe_fds, threads = sample_proc(g.proc.pid)
                snap = g.last or {}
                bpf = snap.get("sources", {}).get("bpf", {})
                with lock:
                    mine = set(long_totals) | short_all
                maps, maps_all = map_entries(g.proc.pid, mine)
                s = Sample(round(time.monotonic() - t0, 1), phase, rss, fds, probe_fds, bpf.get("objects"), threads,
                           maps, maps_all, bpf.get("dropped"), len(snap.get("processes", ())), fd_kinds(g.proc.pid))
                res.samples.append(s)
                log(f"{s.t_s:8.1f}s {phase:8} rss {rss / 2**20:7.2f} MiB fds {fds:4}+{probe_fds} probes "
                    f"({s.objects} objects) threads {threads:3} map entries {s.map_entries:6} (all {maps_all}) "
                    f"dropped {s.dropped} processes {s.processes} "
                    f"short {res.short_started} (exact {res.short_exact}, under {res.short_under}, "
                    f"missing {res.short_missing})")
                return s

            time.sleep(warmup_s)
            res.baseline = take("baseline")
            start = time.monotonic()
            next_sample = start + args.sample_s
            running: list[subprocess.Popen[bytes]] = []
            short_op = f"launch:{args.short_launches}:2,1,1:32,1,1:1"
            for i in range(args.short):
                at = start + i * args.duration_s / max(1, args.short)
                while (now := time.monotonic()) < at:
                    time.sleep(min(at - now, 0.05))
                    running = [p for p in running if p.poll() is None]
                    if now >= next_sample:
                        take("churn")
                        next_sample += args.sample_s
                    settle_short()
                p = subprocess.Popen([str(wl), short_op], stdout=subprocess.DEVNULL)
                running.append(p)
                with lock:
                    short_pending[p.pid] = time.time() + 2 * args.interval_s + 1
                    short_all.add(p.pid)
                res.short_started += 1
            for p in running:
                p.wait()
            time.sleep(settle_s)
            settle_short()
            res.after = take("after")
            for p in longs:
                p.wait()
            # their last rows (shown exited, with their final totals): a few refreshes, as many more as a
            # loaded host makes them late (a fixed 30 s once ended a run before the last burst was shown)
            deadline = time.monotonic() + max(10 * args.interval_s + 1, 120.0)
            while time.monotonic() < deadline:
                with lock:
                    if long_exited >= set(long_totals) or all(t == res.long_expected for t in long_totals.values()):
                        break
                time.sleep(0.2)
            settle_short(final=True)
            with lock:
                res.long_exact = sum(1 for t in long_totals.values() if t == res.long_expected)
                res.long_wrong = {pid: t for pid, t in long_totals.items() if t != res.long_expected}
            take("end")
        finally:
            g.stop()
            for p in longs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    res.check(args.rss_tolerance_bytes)
    return res


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", type=int, default=64, help="long-lived traced processes")
    ap.add_argument("--short", type=int, default=10_000, help="short-lived processes over the churn")
    ap.add_argument("--duration-s", type=float, default=3600.0, help="length of the churn")
    ap.add_argument("--warmup-s", type=float, default=20.0, help="before the baseline sample")
    ap.add_argument("--settle-s", type=float, default=15.0, help="after the churn, before the 'after' sample")
    ap.add_argument("--sample-s", type=float, default=30.0, help="between samples of gputop's resources")
    ap.add_argument("--interval-s", type=float, default=1.0, help="gputop's refresh (-d)")
    ap.add_argument("--period-s", type=float, default=5.0, help="between the long-lived processes' bursts")
    ap.add_argument("--tail-s", type=float, default=30.0,
                    help="the long-lived processes outlive the 'after' sample by about this long")
    ap.add_argument("--burst", type=int, default=100, help="launches per burst of a long-lived process")
    ap.add_argument("--short-launches", type=int, default=7, help="launches of each short-lived process")
    ap.add_argument("--rss-tolerance-bytes", type=int, default=RSS_TOLERANCE_BYTES)
    ap.add_argument("--out", "--json", type=Path, help="write the summary and every sample as JSON")
    return ap


def main() -> int:
    args = parser().parse_args()
    if os.geteuid() != 0:
        print("gputop: error: the soak traces with BPF and reads gputop's maps: it needs root", file=sys.stderr)
        print("hint: sudo .venv/bin/python bench/soak.py", file=sys.stderr)
        return 77
    # a background job ignores SIGINT: SIGTERM too ends the soak through its clean-up
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    res = run(args, log=lambda s: print(s, flush=True))
    summary = res.summary()
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1, default=str))
    b, a = res.baseline, res.after
    assert b is not None and a is not None
    print(f"long-lived: {res.long_exact}/{args.long} exact ({res.long_expected} launches each)")
    print(f"short-lived: {res.short_exact}/{res.short_started} exact, {res.short_under} under, "
          f"{res.short_over} over, {res.short_missing} missing")
    print(f"RSS: baseline {b.rss_bytes / 2**20:.2f} MiB, after {a.rss_bytes / 2**20:.2f} MiB "
          f"(max {summary['rss_max_bytes'] / 2**20:.2f}); fds {b.fds} -> {a.fds} (max {summary['fds_max']}); "
          f"threads {b.threads} -> {a.threads} (max {summary['threads_max']}); map entries {b.map_entries} -> "
          f"{a.map_entries} (max {summary['map_entries_max']}); dropped {res.dropped_max}")
    for f in res.failures:
        print(f"FAIL: {f}")
    if res.failures:
        print(f"short-lived not exact (pid: totals seen): {res.short_wrong}")
        print(f"descriptors at the baseline: {b.fd_kinds}; after: {a.fd_kinds}")
    return 1 if res.failures else 0


if __name__ == "__main__":
    sys.exit(main())
