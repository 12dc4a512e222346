"""How soon a CUDA object gputop has never seen gets probed: exec/mmap events vs polling, side by side.

Run as root after ./test.sh has set up the test bed:

    .venv/bin/python bench/discovery_latency.py [--rounds 7] [--interval-s 1]

Each round copies the REAL libcudart.so.12 to a new path (a new inode) and starts a process that
dlopens it. The BPF source runs as the collector runs it, in one of two ways, alternating A B A B:

- events: the collector thread waits on the ring buffer; exec and mmap events rescan that process
  at once, and a file whose process is gone is reached through its path (what gputop does);
- polling: a full rescan of every process once per ``--interval-s`` (the refresh), events unused.

Two kinds of process: one that stays (it waits after the dlopen), timed from its start to its
object being probed; and one that exits at once after 7 launches (a few milliseconds), where
"probed" means within 3 s of its start. Prints the medians, their ratio and the counts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import benchjson  # noqa: E402
from support import TESTBED, build_native  # noqa: E402

from gputop.sources.bpf import BpfSource  # noqa: E402

LIB = TESTBED / "cudart" / "libcudart.so.12"
GIVE_UP_S = 3.0


class Collector:
    """The BPF source driven one way or the other on a thread of its own."""

    def __init__(self, src: BpfSource, mode: str, interval_s: float) -> None:
        self.src, self.mode, self.interval_s = src, mode, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_scan = time.monotonic()
        while not self._stop.is_set():
            if self.mode == "events":
                self.src.poll(0.2)
            else:
                self._stop.wait(max(0.0, next_scan - time.monotonic()))
                next_scan += self.interval_s
                self.src.scan()

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def probed_after(src: BpfSource, start: Callable[[Path], subprocess.Popen[bytes]], tmp: Path) -> float | None:
    """Seconds from starting a process on a new copy of libcudart to that object being probed."""
    d = Path(tempfile.mkdtemp(dir=tmp))
    lib = d / "libcudart.so.12"
    shutil.copy(LIB, lib)
    st = lib.stat()
    key = (st.st_dev, st.st_ino)
    t0 = time.monotonic()
    proc = start(lib)
    try:
        while key not in src.objects:
            if time.monotonic() - t0 > GIVE_UP_S:
                return None
            time.sleep(0.001)
        return time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--interval-s", type=float, default=1.0, help="the polling collector's refresh")
    benchjson.add_argument(ap)
    args = ap.parse_args()
    wl = build_native("cuda_workload.c", "wl_dlopen", "-ldl", "-lpthread")
    src = BpfSource()
    src.start()
    results: dict[tuple[str, str], list[float | None]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="gputop-discovery-") as tmp:
            go = Path(tmp) / "never"
            kinds: dict[str, Callable[[Path], subprocess.Popen[bytes]]] = {
                "stays": lambda lib: subprocess.Popen([str(wl), "--cudart", str(lib), "--wait", str(go),
                                                       "launch:7:2,1,1:32,1,1:0"], stdout=subprocess.DEVNULL),
                "exits": lambda lib: subprocess.Popen([str(wl), "--cudart", str(lib), "launch:7:2,1,1:32,1,1:0"],
                                                      stdout=subprocess.DEVNULL),
            }
            for _ in range(args.rounds):
                for mode in ("events", "polling"):
                    with Collector(src, mode, args.interval_s):
                        time.sleep(0.3)     # the collector settles (a polling one has just scanned)
                        for kind, start in kinds.items():
                            results.setdefault((mode, kind), []).append(probed_after(src, start, Path(tmp)))
    finally:
        src.close()
    figures: dict[str, object] = {"rounds": args.rounds, "interval_s": args.interval_s}
    for kind in ("stays", "exits"):
        med: dict[str, float | None] = {}
        for mode in ("events", "polling"):
            times = [t for t in results[(mode, kind)] if t is not None]
            med[mode] = statistics.median(times) if times else None
            shown = f"{med[mode] * 1000:.1f} ms" if med[mode] is not None else "never"
            print(f"{kind:6} {mode:8} probed {len(times)}/{args.rounds}, median {shown}")
            figures[f"{kind}_{mode}_probed"] = len(times)
            figures[f"{kind}_{mode}_median_s"] = med[mode]
        if med["events"] and med["polling"]:
            print(f"{kind:6} polling / events: {med['polling'] / med['events']:.1f}x")
    benchjson.write(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
