"""Driver-API kernels of processes that looked them up before gputop started (issue 34 item 4): named from
the driver's structure the handle points to, with a layout learned from handles gputop saw looked up
(gputop/sources/bpf/names/handles.py). The test bed's libcuda makes no handles without a driver: a
library named libcuda.so.1 of its own makes them (tests/native/driver_handles.c), one layout each."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from support import SCAN_WAIT_S, build_native

from gputop.sources.bpf import BpfSource, has_privileges

pytestmark = pytest.mark.skipif(not has_privileges(), reason="BPF tests need root (or the capabilities "
                                "gputop doctor lists)")

BEFORE = ("before_first(float*, int)", "before_second", "gputop::test::before_third()")
AFTER = ("after_one", "after_two(float const*)")
PEER = ("peer_alpha(int)", "peer_beta", "gputop::test::peer_gamma()")


def start(layout: int, after: int, go: Path, variant: str = "",
          peer: bool = False) -> tuple[subprocess.Popen[str], dict[int, int]]:
    """The program with its own libcuda.so.1 (one file per layout: a layout is learned per file); its
    handles by launch count (11, 21, 31: looked up before gputop started; 41, 51: after). ``peer``: the
    kernels' names are peer_* (PEER)."""
    lib = build_native("driver_handles.c", f"driver_handles_{layout}{variant}/libcuda.so.1", "-shared", "-fPIC",
                       "-DFAKE_LIBCUDA", f"-DLAYOUT={layout}", *([f"-DVARIANT_{variant}"] if variant else []))
    prog = build_native("driver_handles.c", "driver_handles", "-ldl")
    p = subprocess.Popen([str(prog), str(lib), str(go), str(after), *(["peer"] if peer else [])],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().startswith("ready")
    handles: dict[int, int] = {}
    for line in p.stdout:
        if line.strip() == "looked":
            break
        handles[10 * (len(handles) + 1) + 1] = int(line.split()[2], 16)
    return p, handles


def test_handles_looked_up_before_gputop_started_are_named_from_the_driver_structure(tmp_path: Path) -> None:
    go = tmp_path / "go"
    cases = {"direct": (1, 2), "through a pointer": (2, 2), "disagreeing": (3, 2), "ambiguous": (4, 2),
             "one seen": (1, 1)}
    started = {case: start(layout, after, go, "one" if case == "one seen" else "")
               for case, (layout, after) in cases.items()}
    src = BpfSource()
    try:
        src.start()                             # after the first look-ups: none of them seen
        src.scan([p.pid for p, _ in started.values()], wait_s=SCAN_WAIT_S)
        go.touch()
        for p, handles in started.values():
            assert p.stdout is not None
            for line in p.stdout:
                if line.strip() == "launched":
                    break
                handles[10 * (len(handles) + 1) + 1] = int(line.split()[2], 16)

        def names() -> dict[str, dict[int, tuple[str | None, str | None, int]]]:
            reading = src.read()
            out = {}
            for case, (p, _) in started.items():
                raw = reading.procs.get(p.pid)
                out[case] = {k.launches: (k.name, k.object, k.key) for k in raw.kernels} if raw else {}
            return out
        named = {launches: name for launches, name in zip((11, 21, 31, 41, 51), (*BEFORE, *AFTER))}
        deadline = time.monotonic() + 40
        while True:
            src.poll(0.1)
            got = names()
            if all(got[c].get(n, (None,))[0] for c in ("direct", "through a pointer") for n in named):
                break
            assert time.monotonic() < deadline, got
        settled = time.monotonic() + 6          # more than a retry (handles.RETRY_S): the others had theirs
        while time.monotonic() < settled:
            src.poll(0.1)
        got = names()
        for case, (_, handles) in started.items():
            after = cases[case][1]
            assert {n: key for n, (_, _, key) in got[case].items()} == handles, case
            want = {n: (named[n] if n > 31 or case in ("direct", "through a pointer") else None, None)
                    for n in list(named)[:3 + after]}
            assert {n: (name, obj) for n, (name, obj, _) in got[case].items()} == want, case
    finally:
        for p, _ in started.values():
            p.kill()
            p.wait()
        src.close()


def launched(p: subprocess.Popen[str], handles: dict[int, int]) -> None:
    """Reads the handles ``p`` looked up after its go, up to its "launched"."""
    assert p.stdout is not None
    for line in p.stdout:
        if line.strip() == "launched":
            return
        handles[10 * (len(handles) + 1) + 1] = int(line.split()[2], 16)


def test_another_process_of_the_same_driver_file_names_them_and_hostile_structures_name_nothing(
        tmp_path: Path) -> None:
    """A process that looked its kernels up before gputop started and none since (``before``) is named once
    another process of the same libcuda file and user (``peer``, started after gputop) looks up three; a
    process of another file, byte for byte the same library (``other file``), is not: no process of that
    file taught anything. Handles whose name's pointer leads to a page unmapped since, to 1 MiB without a
    NUL or to bytes that are no name (``hostile``, its layout learned from its own two later look-ups) are
    never named, and no refresh waits on them."""
    go = tmp_path / "go"
    started = {"before": start(1, 0, go, "peer"), "other file": start(1, 0, go, "otherfile"),
               "hostile": start(5, 2, go)}
    src = BpfSource()
    try:
        src.start()
        src.scan([p.pid for p, _ in started.values()], wait_s=SCAN_WAIT_S)
        go.touch()                              # the peer looks its kernels up and launches them at once
        started["peer"] = start(1, 0, go, "peer", peer=True)
        src.scan([p.pid for p, _ in started.values()], wait_s=SCAN_WAIT_S)
        for p, handles in started.values():
            launched(p, handles)
        spent: list[float] = []

        def names() -> dict[str, dict[int, tuple[str | None, int]]]:
            t = time.monotonic()
            reading = src.read()
            spent.append(time.monotonic() - t)
            out = {}
            for case, (p, _) in started.items():
                raw = reading.procs.get(p.pid)
                out[case] = {k.launches: (k.name, k.key) for k in raw.kernels} if raw else {}
            return out
        want = {"before": dict(zip((11, 21, 31), BEFORE)), "peer": dict(zip((11, 21, 31), PEER)),
                "other file": dict.fromkeys((11, 21, 31)),
                "hostile": {11: None, 21: None, 31: None, 41: AFTER[0], 51: AFTER[1]}}
        deadline = time.monotonic() + 40
        while True:
            src.poll(0.1)
            got = names()
            if all(got[c].get(n, (None,))[0] for c in ("before", "peer") for n in want[c]) \
                    and all(got["hostile"].get(n, (None,))[0] for n in (41, 51)):
                break
            assert time.monotonic() < deadline, got
        spent.clear()
        settled = time.monotonic() + 6          # more than a retry (handles.RETRY_S): the others had theirs
        while time.monotonic() < settled:
            src.poll(0.1)
            got = names()
        for case, (_, handles) in started.items():
            assert {n: key for n, (_, key) in got[case].items()} == handles, case
            assert {n: name for n, (name, _) in got[case].items()} == want[case], case
        assert max(spent) < 2.0, spent          # the hostile handles retried in it: bounded reads, no wait
    finally:
        for p, _ in started.values():
            p.kill()
            p.wait()
        src.close()
