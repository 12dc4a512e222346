"""The GPU-less test bed (real NVIDIA user-space libraries) and native builds, for tests and benchmarks."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTBED = Path(os.environ.get("GPUTOP_TESTBED", ROOT / ".cache" / "testbed"))
NATIVE = ROOT / "tests" / "native"
BUILD = ROOT / ".cache" / "native"
# a test's scan waits for every object's read: the collector's budget (objreads.WAIT_S, 0.25 s) would leave
# an object read slowly on a loaded machine to a later poll, with the workload already launching
SCAN_WAIT_S = 60.0


@dataclass(frozen=True)
class Testbed:
    root: Path
    cudart_dir: Path  # libcudart.so.12, libcudart_static.a
    nvidia_dir: Path  # libcuda.so.1, libnvidia-ml.so.1
    cudart13_dir: Path = TESTBED / "cudart13"  # libcudart.so.13, libcudart_static.a (CUDA 13)

    @property
    def libcudart(self) -> Path:
        return self.cudart_dir / "libcudart.so.12"

    @property
    def libcudart_static(self) -> Path:
        return self.cudart_dir / "libcudart_static.a"

    @property
    def libcuda(self) -> Path:
        return self.nvidia_dir / "libcuda.so.1"

    @property
    def libnvidia_ml(self) -> Path:
        return self.nvidia_dir / "libnvidia-ml.so.1"

    def libnccl(self, version: str) -> Path:
        """libnccl.so.2 of an NCCL wheel (``NCCL_VERSIONS``)."""
        return self.root / "nccl" / version / "libnccl.so.2"


#: the NCCL versions of the test bed (scripts/testbed.sh): the cu12 wheel PyTorch 2.9 and 2.10 pin, the newest cu13
NCCL_VERSIONS = ("2.27.5", "2.32.6")


#: the fake NVML's script (tests/native/fake_nvml.c) of one H100 as GPU 0, with its driver version
NVML_H100 = """\
driver 550.54.15
gpu 0 name NVIDIA H100 80GB HBM3
gpu 0 uuid GPU-11111111-2222-3333-4444-555555555555
gpu 0 util 87 45
gpu 0 memory 85899345920 42949672960 536870912
gpu 0 temp 61
gpu 0 power 412345
gpu 0 power_limit 700000
gpu 0 sm_clock 1980
gpu 0 pcie 1500 250
gpu 0 ecc 7 2
"""


def build_native(source: str, out: str, *args: str) -> Path:
    """Compile ``tests/native/<source>`` with gcc into ``.cache/native/<out>``, cached by the source's mtime
    and the arguments (a run-path to another tree's test bed is not this tree's: ``.<out>.args``)."""
    src = NATIVE / source
    dst = BUILD / out
    dst.parent.mkdir(parents=True, exist_ok=True)       # ``out`` may name a folder (fake_nvml/libnvidia-ml.so.1)
    cc = shutil.which("gcc") or "cc"
    argv = [cc, "-O1", "-g", "-Wall", "-o", "OUT", str(src), *args]
    stamp = dst.with_name(f".{dst.name}.args")

    def fresh() -> bool:
        try:
            return dst.stat().st_mtime >= src.stat().st_mtime and stamp.read_text() == "\0".join(argv)
        except OSError:
            return False

    if fresh():
        return dst
    # test processes side by side (pytest-xdist) build the same file: one at a time, each into a file of its
    # own renamed into place, so that none runs or loads a half-written one
    with open(dst.parent / f".{dst.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not fresh():
            part = dst.with_name(f".{dst.name}.{os.getpid()}")
            subprocess.run([str(part) if a == "OUT" else a for a in argv], check=True)
            os.replace(part, dst)
            stamp.write_text("\0".join(argv))
    return dst


@dataclass(frozen=True)
class Runtime:
    """One CUDA runtime of the test bed (12.x or 13.x) with the workloads built against it."""
    major: int
    lib: Path           # libcudart.so.<major>, for --cudart
    dynamic: Path       # linked against it
    static: Path        # its libcudart_static.a linked in


def runtime(tb: Testbed, major: int) -> Runtime:
    d = tb.cudart_dir if major == 12 else tb.cudart13_dir
    so = f"libcudart.so.{major}"
    linked = ("-DLINKED", "-DHAVE_INTERNAL_LAUNCH")
    suffix = "" if major == 12 else str(major)
    return Runtime(
        major, d / so,
        dynamic=build_native("cuda_workload.c", f"wl_dynamic{suffix}", *linked, f"-L{d}", f"-l:{so}",
                             f"-Wl,-rpath,{d}", "-ldl", "-lpthread"),
        static=build_native("cuda_workload.c", f"wl_static{suffix}", *linked, str(d / "libcudart_static.a"),
                            "-ldl", "-lpthread", "-lrt"))


@dataclass(frozen=True)
class Workloads:
    dynamic: Path       # linked against libcudart.so.12
    static: Path        # libcudart_static.a linked in
    dlopen: Path        # loads --cudart / --cuda with dlopen
    shim_runtime: Path  # tests/native/shim_runtime.c: a runtime that calls the real libcuda.so.1


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def table_rows(out: str) -> list[dict[str, str]]:
    """Every process row of `gputop -b -f table` output by header: the cells before COMMAND hold no
    spaces (an empty LB cell is absent), COMMAND is the rest of the line."""
    from gputop.batch import TABLE_COLUMNS

    headers = [c.header for c in TABLE_COLUMNS]
    rows: list[dict[str, str]] = []
    at = 0
    for line in out.splitlines():
        if line.lstrip().startswith("PID "):
            at = line.index("COMMAND")
            if line.split()[1] == "NODE":          # the fleet view's table
                from gputop.view import columns

                headers = [columns.BY_KEY[k].header for k in columns.visible([c.key for c in TABLE_COLUMNS], True)]
        elif line[:at].split()[:1] and line.split()[0].isdigit():
            rows.append({**dict(zip(headers[:-1], line[:at].split())), "COMMAND": line[at:]})
    return rows


def make_certs(d: Path) -> None:
    """In ``d``: a CA (ca.crt, ca.key), a server certificate for 127.0.0.1 it signed (server.crt, server.key)
    and a client certificate (client.crt, client.key), by openssl, P-256 keys, valid two days."""
    def run(*a: str) -> None:
        subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=gputop-test-ca")
    (d / "san").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", *(["-extfile", "san"] if name == "server" else []))


def pysites_launch_line(function: str) -> int:
    """The line of tests/native/pysites.py where ``function`` calls the runtime (LAUNCH): a call site's line."""
    import ast
    tree = ast.parse((NATIVE / "pysites.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and getattr(sub.func, "id", None) == "LAUNCH":
                    return sub.lineno
    raise AssertionError(function)
