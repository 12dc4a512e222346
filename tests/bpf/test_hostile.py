"""Hostile names (issue 10) in batch output, for real: a workload named ESC[2J ESC[31m EVIL BEL 0x9b
launches 3,000 kernels through the real libcudart, whose host stub's ELF symbol is crafted the same
way (plus a right-to-left override). The table shows visible escapes and never writes a control
byte; the JSON keeps the raw text (escaped by JSON), the invalid byte as the text \\x9b."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from hostile_names import COMM, COMM_JSON, COMM_SHOWN, KERNEL_JSON, hostile_workload
from support import table_rows

ROOT = Path(__file__).resolve().parent.parent.parent
#: what must never reach a terminal from a name: C0 controls but newline, DEL, C1, bidi/zero-width
_UNSAFE = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x0A} | {"\u202e", "\u200b"}


def _states(rec: Path, pid: int) -> set[str]:
    """The states the recording has shown the process ``pid`` in so far."""
    try:
        text = rec.read_text(encoding="utf-8")
    except FileNotFoundError:
        return set()
    return {p["state"] for line in text.splitlines(keepends=True) if line.endswith("\n")
            for p in json.loads(line)["processes"] if p["pid"] == pid}


def _exited(rec: Path, pid: int) -> bool:
    return "exited" in _states(rec, pid)


def _traced(tmp_path: Path, form: str, argv: list[bytes], env: dict[str, str] | None = None
            ) -> tuple[bytes, bytes, Path, int]:
    """``gputop -b -f FORM --record`` while the workload ``argv`` (started with --wait) runs; gputop
    is stopped once its recording shows the workload's last row (exited). Returns stdout, stderr,
    the recording and the workload's PID."""
    go = tmp_path / "go"
    rec = tmp_path / "rec.jsonl"
    gt = subprocess.Popen([sys.executable, "-m", "gputop.cli", "-b", "-f", form, "-d", "0.5", "--no-nvml", "--bpf",
                           "--record", str(rec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}
    readers = [threading.Thread(target=lambda f=f, k=k: chunks[k].extend(iter(lambda: f.read1(65536), b"")))
               for k, f in (("out", gt.stdout), ("err", gt.stderr))]
    for r in readers:
        r.start()
    deadline = time.monotonic() + 60
    while not chunks["out"]:                                          # attached: the first refresh
        assert time.monotonic() < deadline and gt.poll() is None, b"".join(chunks["err"])
        time.sleep(0.05)
    wl = subprocess.Popen([argv[0], b"--wait", os.fsencode(go), *argv[1:]], stdout=subprocess.PIPE,
                          env={**os.environ, **(env or {})})
    try:
        assert wl.stdout is not None and wl.stdout.readline().startswith(b"ready")
        # listed once an object it maps is probed (a fixed second was short beside the QEMU guests: the shim's
        # registrations went unseen and the kernel was named from its host stub's symbol)
        deadline = time.monotonic() + 60
        while not _states(rec, wl.pid):
            assert time.monotonic() < deadline, "the workload was never listed"
            time.sleep(0.05)
        time.sleep(0.6)                  # the objects it maps next (libcuda), a refresh later
        go.touch()
        assert wl.wait(timeout=60) == 0
        deadline = time.monotonic() + 60
        while not _exited(rec, wl.pid):  # shown exited once, in a later refresh
            assert time.monotonic() < deadline, "the workload was never shown exited"
            time.sleep(0.1)
    finally:
        wl.kill()
        gt.terminate()
        gt.wait(timeout=60)
        for r in readers:
            r.join(timeout=60)
    return b"".join(chunks["out"]), b"".join(chunks["err"]), rec, wl.pid


def test_hostile_names_in_batch_table_and_json(workloads, tmp_path: Path) -> None:
    wl_path = hostile_workload(workloads.dynamic, tmp_path)
    go = tmp_path / "go"
    ops = ["launch:3000:40,2,1:128,1,1:2", "sleep:1500"]
    out_bytes, err, rec, pid = _traced(tmp_path, "table", [os.fsencode(wl_path), *map(str.encode, ops)])
    out = out_bytes.decode("utf-8", "strict")         # valid UTF-8: no stray byte either
    assert not _UNSAFE & set(out), sorted(_UNSAFE & set(out))
    assert b"Traceback" not in err
    # every refresh is its status line, the Tasks: line, then the table's header (no GPU lines without NVML)
    lines = out.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("gputop - ")]
    assert len(heads) >= 3 and all(lines[i + 1].startswith("Tasks: ") for i in heads), lines[:12]
    assert all(lines[i + 2].split()[:2] == ["PID", "USER"] for i in heads), lines[:12]
    rows = [r for r in table_rows(out) if r["PID"] == str(pid)]
    command = f"{COMM_SHOWN} --wait {go} {' '.join(ops)}"
    assert rows and {r["COMMAND"] for r in rows} == {command, command + " (exited)"}
    assert rows[-1]["COMMAND"] == command + " (exited)"
    shapes = [(r["GRID"], r["BLOCK"]) for r in rows if r["GRID"] != "N/A"]     # refreshes with launches
    assert shapes and set(shapes) == {("80", "128")}
    # the same refreshes as JSON (--record): the raw text, valid Unicode, exact counts
    snaps = [json.loads(line) for line in rec.read_text(encoding="utf-8").splitlines()]
    mine = [p for s in snaps for p in s["processes"] if p["pid"] == pid]
    last = mine[-1]
    assert last["state"] == "exited" and last["comm"] == COMM_JSON
    assert last["cmdline"] == f"{tmp_path}/{COMM_JSON} --wait {go} {' '.join(ops)}"
    assert last["total"]["launches"] == 3000 and sum(p["interval"]["launches"] for p in mine) == 3000
    assert last["grid_blocks_hist"] == {"2^6": 3000} and last["block_threads_hist"] == {"2^7": 3000}
    assert [(k["name"], k["launches"], k["grid_blocks_avg"]) for k in last["kernels"]] == [(KERNEL_JSON, 3000, 80.0)]


def test_hostile_path_in_doctor(workloads, testbed, tmp_path: Path) -> None:
    """`gputop doctor` lists the CUDA objects each process maps: a libcudart under a folder named
    with escapes is listed with visible escapes. In a PID namespace of its own, so that the
    process is among the 20 doctor lists whatever else runs on the host."""
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/" + COMM))
    folder.mkdir()
    lib = folder / "libcudart.so.12"
    shutil.copy(testbed.libcudart, lib)
    script = (f"{shlex.quote(str(workloads.dlopen))} --cudart \"$LIB\" sleep:60000 & "
              f"sleep 1; {shlex.quote(sys.executable)} -m gputop.cli doctor; kill $!")
    res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script], capture_output=True,
                         cwd=ROOT, timeout=300, env={**os.environ, "LIB": os.fsdecode(os.fsencode(lib))})
    out = res.stdout.decode("utf-8", "strict")
    assert not _UNSAFE & set(out), sorted(_UNSAFE & set(out))
    shown = f"{tmp_path}/{COMM_SHOWN}/libcudart.so.12"
    assert f"OK      pid 2: {shown}" in out.splitlines(), out     # pid 1 is the shell


def test_hostile_kernel_name_captured_at_registration(workloads, testbed, tmp_path: Path) -> None:
    """A kernel named at __cudaRegisterFunction (the BPF side captures the name's bytes): the JSON
    keeps it (the invalid byte as the text \\x9b), never U+FFFD, with exact counts."""
    name = b"\x1b[31mREG\x07\x9b\xe2\x80\xaeK"
    argv = [os.fsencode(workloads.dlopen), b"--cudart", os.fsencode(workloads.shim_runtime), b"register:2:" + name,
            b"launch:700:3,1,1:32,1,1:2", b"sleep:1500"]
    out, _, rec, pid = _traced(tmp_path, "json", argv, {"SHIM_LIBCUDA": str(testbed.libcuda)})
    assert not _UNSAFE & set(out.decode("utf-8", "strict"))         # JSON escapes every control character
    mine = [p for line in rec.read_text().splitlines() for p in json.loads(line)["processes"] if p["pid"] == pid]
    assert mine[-1]["state"] == "exited" and mine[-1]["total"]["launches"] == 700
    assert [(k["name"], k["launches"]) for k in mine[-1]["kernels"]] == [("\x1b[31mREG\x07\\x9b\u202eK", 700)]
