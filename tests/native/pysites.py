"""A Python workload of known call sites (tests/bpf/test_call_sites.py, the matrix guests): it drives the
real CUDA runtime through ctypes (each cudaLaunchKernel fails for want of a driver after gputop's probe
counted it) from functions whose shares of the launches are known. Standard library only (it runs on every
CPython of the matrix, 3.9 on).

    pysites.py [--wait GOFILE] LIBCUDART MODE N

prints ``ready PID`` (then waits for GOFILE to exist, if given), runs MODE with N rounds, prints ``done`` and
exits at the end of its input (so that gputop reads its code objects while it lives):
  shares    each round: big() launches 6 times, mid() 3, small() once (60/30/10 %), one after the other
            in that fixed order (a sampler that aliased with the loop would see one of them only)
  threads   big(), mid() and small() each on a thread of its own, 6/3/1 launches a round
  layers    launches from under a generator (via_generator: 3 a round) and a coroutine run by asyncio
            (via_coroutine: 1 a round)
  stacks    one launch from each recursion depth 0 .. N - 1 of deep(): N distinct stacks (a tenant filling
            its share of the call-site tables: tests/bpf/test_fair_share_tables.py)
  exec      mid() N times, then the program execs itself (the same PID) into ``--wait GOFILE.2 ... shares N``
            (gputop starts the call sites of the new image anew)
  bench     big() N times, timed: prints ``ns_per_call X`` (bench/probe_cost.py --python: as lines
            ``bench N`` to an idle one)
  idle      N seconds without launching (a process started before gputop: the test launches later
            by writing lines ``shares N`` to stdin)
Stub addresses: big 0x1001, mid 0x1002, small 0x1003, via_generator 0x1004, via_coroutine 0x1005.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import threading
import time


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


LAUNCH = None
G, B = Dim3(1, 1, 1), Dim3(32, 1, 1)

# each site calls the runtime itself: a launch's call site is the innermost Python frame


def big() -> None:
    LAUNCH(0x1001, G, B, None, 0, None)


def mid() -> None:
    LAUNCH(0x1002, G, B, None, 0, None)


def small() -> None:
    LAUNCH(0x1003, G, B, None, 0, None)


def shares(n: int) -> None:
    for _ in range(n):
        for _ in range(6):
            big()
        for _ in range(3):
            mid()
        small()


def threads(n: int) -> None:
    def loop(fn, k: int) -> None:
        for _ in range(n * k):
            fn()
    ts = [threading.Thread(target=loop, args=(fn, k)) for fn, k in ((big, 6), (mid, 3), (small, 1))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def via_generator(k: int):
    for _ in range(k):
        LAUNCH(0x1004, G, B, None, 0, None)
        yield


async def via_coroutine() -> None:
    LAUNCH(0x1005, G, B, None, 0, None)
    await asyncio.sleep(0)


def bench(n: int) -> None:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        big()
    print("ns_per_call", (time.perf_counter_ns() - t0) / n, flush=True)


def deep(k: int) -> None:
    if k:
        deep(k - 1)
    else:
        LAUNCH(0x1006, G, B, None, 0, None)


def stacks(n: int) -> None:
    for k in range(n):
        deep(k)


def layers(n: int) -> None:
    async def run() -> None:
        for _ in range(n):
            for _ in via_generator(3):
                pass
            await via_coroutine()
    asyncio.run(run())


def main() -> int:
    global LAUNCH
    args = sys.argv[1:]
    go = None
    if args[:1] == ["--wait"]:
        go, args = args[1], args[2:]
    lib, mode, n = args[0], args[1], int(args[2])
    cudart = ctypes.CDLL(lib)
    LAUNCH = cudart.cudaLaunchKernel
    LAUNCH.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    LAUNCH.restype = ctypes.c_int
    print("ready", os.getpid(), flush=True)
    while go is not None and not os.path.exists(go):
        time.sleep(0.005)
    if mode == "bench":
        bench(n)
        return 0
    if mode == "exec":
        for _ in range(n):
            mid()
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, __file__, "--wait", f"{go}.2", lib, "shares", str(n)])
    if mode == "idle":
        for line in sys.stdin:
            what, count = line.split()
            {"shares": shares, "layers": layers, "bench": bench}[what](int(count))
            print("done", flush=True)
        return 0
    {"shares": shares, "threads": threads, "layers": layers, "stacks": stacks}[mode](n)
    print("done", flush=True)
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main())
