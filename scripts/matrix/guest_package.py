"""Inside a kernel-matrix guest, after guest_checks.py: gputop as a package, installed as users of pipx and
uv install a tool (issue 38, item 4), then its doctor and an exact count from its own command.

The wheel is built from the repository's copy on the guest's disk (``pip wheel``, hatchling from the package
index); pipx and uv come from the package index into a venv of their own (neither is in every release's
archive), uv told the index pip is configured with (uv reads no pip.conf). Each installs the wheel for the
distro's python3 into a directory of its own (pipx through its default backend: uv, installed beside it),
with the distro's bcc (python3-bpfcc, found by ``bcc_dirs``: no system site-packages in either venv). With
each installed ``gputop``: ``gputop doctor``, then ``gputop -b -f json`` while one workload launches COUNT
kernels (tests/native/cuda_workload.c against the test bed's libcudart). Writes package.json (the host
asserts: tests/matrix/test_kernels.py) and each step's output beside it. Kept to Python 3.9: bullseye's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from guest_checks import DEADLINE_S, Snapshots, _ready, _state  # noqa: E402
from support import TESTBED, Testbed, runtime  # noqa: E402

COUNT = 4321
WORKLOAD = [f"launch:{COUNT}:8,1,1:64,1,1:0", "sleep:500"]
#: the distro's interpreter, as a user's `pipx install` would pick it
PYTHON = "/usr/bin/python3"


def _run(step: str, cmd: list[str], out: Path, env: dict[str, str] | None = None, timeout: float = 900) -> int:
    """``cmd``, its output to OUT/package-STEP.log; its exit status."""
    with (out / f"package-{step}.log").open("w") as log:
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                              cwd="/").returncode


def _pip_config(key: str) -> str:
    res = subprocess.run([PYTHON, "-m", "pip", "config", "get", key], capture_output=True, text=True)
    return res.stdout.strip() if res.returncode == 0 else ""


def _uv_env(base: dict[str, str]) -> dict[str, str]:
    """uv told what pip is configured with: the index, extra index, find-links and CA bundle (the local ones
    that exist here: the configuration was copied from the host)."""
    env = dict(base)
    for key, var in (("global.index-url", "UV_DEFAULT_INDEX"), ("global.extra-index-url", "UV_INDEX"),
                     ("global.find-links", "UV_FIND_LINKS"), ("global.cert", "SSL_CERT_FILE")):
        values = [v for v in _pip_config(key).split() if not v.startswith("/") or os.path.exists(v)]
        if values:
            env[var] = (" " if var == "UV_INDEX" else ",").join(values) if var != "SSL_CERT_FILE" else values[0]
    env["UV_NATIVE_TLS"] = "1"
    return env


def _count(gputop: Path, tb: Testbed, out: Path, name: str) -> dict[str, Any]:
    """``gputop -b`` of the installed command while a workload launches COUNT kernels: what it counted."""
    r12 = runtime(tb, 12)
    go = Path(tempfile.mkdtemp(prefix="matrix-pkg-go-"))
    gt = subprocess.Popen([str(gputop), "-b", "-f", "json", "-d", "0.5", "--no-nvml", "--bpf"],
                          stdout=subprocess.PIPE, stderr=(out / f"package-{name}-gputop.stderr").open("w"),
                          text=True, cwd="/")
    assert gt.stdout is not None
    snaps = Snapshots(gt.stdout, out / f"package-{name}-snapshots.jsonl")
    seen: dict[str, Any] = {}
    try:
        snaps.wait_for("the first snapshot", lambda s: True)
        wl = subprocess.Popen([str(r12.dynamic), "--wait", str(go / "go"), *WORKLOAD], stdout=subprocess.PIPE)
        pid = _ready(wl)
        snaps.wait_for("the workload", lambda s: _state(s, pid) == "running")
        (go / "go").touch()
        seen["workload_rc"] = wl.wait(timeout=DEADLINE_S)
        snaps.wait_for("the workload's exit", lambda s: _state(s, pid) == "exited")
        last = [p for s in snaps.items for p in s["processes"] if p["pid"] == pid][-1]
        seen["launches"] = (last.get("total") or {}).get("launches")
    finally:
        gt.terminate()
        seen["gputop_rc"] = gt.wait(timeout=60)
    return seen


def main() -> int:
    out = Path(sys.argv[1])
    work = Path(tempfile.mkdtemp(prefix="matrix-pkg-"))
    result: dict[str, Any] = {"times": {}}
    times: dict[str, float] = result["times"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_REQUIRE_VIRTUALENV", "VIRTUAL_ENV"))}

    def done() -> int:
        (out / "package.json").write_text(json.dumps(result, indent=1))
        return 0

    t0 = time.monotonic()
    result["wheel_rc"] = _run("wheel", [str(ROOT / ".venv" / "bin" / "python"), "-m", "pip", "wheel", "-q",
                                        "--no-deps", "-w", str(work / "dist"), str(ROOT)], out)
    wheels = sorted((work / "dist").glob("gputop_ebpf-*.whl"))
    result["wheel"] = wheels[0].name if wheels else None
    times["wheel_s"] = time.monotonic() - t0
    if not wheels:
        return done()
    t0 = time.monotonic()
    tools = work / "tools"
    result["tools_rc"] = _run("tools", [PYTHON, "-m", "venv", str(tools)], out) or _run(
        "tools-pip", [str(tools / "bin" / "pip"), "install", "-q", "pipx", "uv"], out)
    times["tools_s"] = time.monotonic() - t0
    if result["tools_rc"]:
        return done()
    tb = Testbed(TESTBED, TESTBED / "cudart", TESTBED / "nvidia", TESTBED / "cudart13")
    installers = {
        # pipx's default backend (uv, where uv is installed beside it, as here; else pip): told both ways
        "pipx": ([str(tools / "bin" / "pipx"), "install", "--python", PYTHON, str(wheels[0])],
                 _uv_env({**base, "PIPX_HOME": str(work / "pipx"), "PIPX_BIN_DIR": str(work / "pipx-bin"),
                          "PIPX_MAN_DIR": str(work / "pipx-man")}), work / "pipx-bin" / "gputop"),
        "uv": ([str(tools / "bin" / "uv"), "tool", "install", "--python", PYTHON, str(wheels[0])],
               _uv_env({**base, "UV_TOOL_DIR": str(work / "uv"), "UV_TOOL_BIN_DIR": str(work / "uv-bin")}),
               work / "uv-bin" / "gputop"),
    }
    for name, (cmd, env, gputop) in installers.items():
        entry: dict[str, Any] = {}
        result[name] = entry
        t0 = time.monotonic()
        entry["install_rc"] = _run(f"{name}-install", cmd, out, env)
        times[f"{name}_install_s"] = time.monotonic() - t0
        if entry["install_rc"] or not gputop.exists():
            continue
        t0 = time.monotonic()
        entry["doctor_rc"] = _run(f"{name}-doctor", [str(gputop), "doctor"], out, base)
        times[f"{name}_doctor_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        entry.update(_count(gputop, tb, out, name))
        times[f"{name}_count_s"] = time.monotonic() - t0
    return done()


if __name__ == "__main__":
    sys.exit(main())
