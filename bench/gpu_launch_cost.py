"""What gputop costs a real kernel launch on a GPU host, and how many probe hits one launch makes.

    sudo python3 bench/gpu_launch_cost.py --gputop /opt/gputop/bin/gputop [--rounds 5] [--launches 500]

An empty kernel (PTX, compiled by the driver) is launched through the runtime (``cudaLaunchKernel``
with a ``cudaKernel_t`` from ``cudaLibraryGetKernel``) in batches of --launches, each batch timed
(launches only: the synchronisation after it is not), in rounds that alternate nothing attached and
gputop running (`-b -f json -d 1 --bpf`), A B A B; per round the median ns per launch; then the
medians of the rounds. gputop's snapshots of the rounds it ran give probe hits per launch
(``sources.bpf.probe_hits_per_s`` over the launching process's ``rates.launches_per_s``; hits are
sampled in gputop's 0.1 s statistics windows, so this is a ratio of rates, to about a percent):
1 where only ``cudaLaunchKernel``'s probe fires, 2 where the runtime's own ``cuLaunchKernel`` call
is probed too. Compare with `gputop doctor`'s "uprobe trap cost" line: the cost of one probe hit.
Needs the Python whose PyTorch brought a libcudart (its own is used), or --cudart PATH. --testbed: no GPU,
launches through the test bed's libcudart that fail after their entry probe fired (CI runs it so).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))

from gpu_validate import positive, read_snapshots, start_gputop  # noqa: E402
from gpu_workloads import Dim3, torch_cudart  # noqa: E402

PTX = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry gputop_launch_cost()
{
    ret;
}
\0"""


class Launcher:
    def __init__(self, cudart: str, testbed: bool = False) -> None:
        self.lib = lib = ctypes.CDLL(cudart)
        self.testbed = testbed
        lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.c_void_p]
        self.grid, self.block = Dim3(1, 1, 1), Dim3(32, 1, 1)
        if testbed:         # no GPU: every call fails after its entry probe fired
            self.kernel = ctypes.cast(lib.cudaLaunchKernel, ctypes.c_void_p)
            return
        self.check(lib.cudaSetDevice(0), "cudaSetDevice")
        library, self.kernel = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(lib.cudaLibraryLoadData(ctypes.byref(library), ctypes.c_char_p(PTX), None, None, 0, None, None,
                                           0), "cudaLibraryLoadData")
        self.check(lib.cudaLibraryGetKernel(ctypes.byref(self.kernel), library, b"gputop_launch_cost"),
                   "cudaLibraryGetKernel")

    @staticmethod
    def check(rc: int, call: str) -> None:
        if rc != 0:
            raise SystemExit(f"gputop: error: {call} returned CUDA error {rc}\nhint: run nvidia-smi")

    def batch(self, n: int) -> float:
        """ns per launch of ``n`` launches (the synchronisation after them not timed)."""
        launch, kernel, grid, block = self.lib.cudaLaunchKernel, self.kernel, self.grid, self.block
        t0 = time.perf_counter_ns()
        for _ in range(n):
            launch(kernel, grid, block, None, 0, None)
        t1 = time.perf_counter_ns()
        rc = self.lib.cudaDeviceSynchronize()
        if not self.testbed:
            self.check(rc, "cudaDeviceSynchronize")
        return (t1 - t0) / n

    def round(self, seconds: float, n: int) -> float:
        times = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            times.append(self.batch(n))
        return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gputop", required=True, help="the command that runs gputop")
    ap.add_argument("--cudart", help="the libcudart to launch through (default: PyTorch's)")
    ap.add_argument("--rounds", type=positive, default=5, help="rounds of each (default 5)")
    ap.add_argument("--seconds", type=float, default=6.0, help="seconds a round launches (default 6)")
    ap.add_argument("--launches", type=positive, default=500, help="launches a batch (default 500)")
    ap.add_argument("--testbed", action="store_true", help="no GPU: launches that fail after entry (--cudart)")
    args = ap.parse_args()
    cudart = args.cudart or torch_cudart()
    if cudart is None:
        print("gputop: error: no libcudart: this Python has no PyTorch with its CUDA runtime\n"
              "hint: give --cudart PATH", file=sys.stderr)
        return 1
    launcher = Launcher(cudart, args.testbed)
    launcher.round(1.0, args.launches)                 # warm-up: the driver compiles the PTX
    off: list[float] = []
    on: list[float] = []
    ratios: list[float] = []
    tmp = Path(tempfile.mkdtemp(prefix="gputop-launch-cost-"))
    for r in range(args.rounds):
        off.append(launcher.round(args.seconds, args.launches))
        snaps = tmp / f"round{r}.jsonl"
        gt = start_gputop([*shlex.split(args.gputop), "-b", "-f", "json", "-d", "1", "--bpf", "-p", str(os.getpid())],
                          snaps, tmp / f"round{r}.err")
        try:
            on.append(launcher.round(args.seconds, args.launches))
        finally:
            gt.send_signal(signal.SIGTERM)
            gt.wait(timeout=60)
        for snap in read_snapshots(snaps):
            hits = snap["sources"]["bpf"].get("probe_hits_per_s")
            rate = sum(p["rates"]["launches_per_s"] or 0 for p in snap["processes"] if p["rates"])
            if hits and rate > 1000:
                ratios.append(hits / rate)
        print(f"round {r + 1}: {off[-1]:.0f} ns per launch without gputop, {on[-1]:.0f} ns with it", flush=True)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"cudaLaunchKernel ({cudart}), batches of {args.launches}, medians of {args.rounds} rounds A B A B:")
    print(f"  without gputop {m_off:.0f} ns, with gputop {m_on:.0f} ns: +{m_on - m_off:.0f} ns per launch "
          f"({m_on / m_off:.3f}x)")
    per_launch = (f"{statistics.median(ratios):.2f} (median of {len(ratios)} snapshots, "
                  f"{min(ratios):.2f}-{max(ratios):.2f})" if ratios else "N/A (no snapshot with both rates)")
    print(f"  probe hits per launch: {per_launch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
