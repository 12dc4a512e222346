"""The offline bundle for GPU hosts without a package registry (scripts/offline-bundle.sh,
docs/offline-install.md), for real: gathered here from the machine's own mirrors and pip configuration
(cached in .cache/offline-bundle: a refresh fetches only what changed), installed into a prefix, and
tracing a test-bed workload with exact counts -- on this host with the prefix's bcc, python and headers,
and in a bare Debian 12 container that has no python3, no bcc and no kernel headers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, Workloads
from test_container_image import BASE_IMAGE, podman, ulimits

from gputop.sources.bpf import has_privileges

BUNDLE = ROOT / ".cache" / "offline-bundle"
needs_bpf = pytest.mark.skipif(not has_privileges(), reason="gputop --bpf needs root (or CAP_BPF + CAP_PERFMON)")


@pytest.fixture(scope="module")
def bundle() -> dict[str, Any]:
    """The gathered bundle's manifest (the bundle is in BUNDLE)."""
    for tool in ("apt-get", "dpkg", "getconf"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: gathering needs a Debian or Ubuntu machine")
    res = subprocess.run([str(ROOT / "scripts" / "offline-bundle.sh"), "gather", str(BUNDLE)],
                         capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    manifest: dict[str, Any] = json.loads((BUNDLE / "MANIFEST.json").read_text())
    return manifest


def installed(pkg: str) -> bool:
    res = subprocess.run(["dpkg-query", "--show", "--showformat=${db:Status-Abbrev}", pkg],
                         capture_output=True, text=True)
    return res.returncode == 0 and res.stdout.startswith("ii")


def _bcc_features(prefix: Path, bcc_dir: Path) -> tuple[list[str], list[str]]:
    """The optional bcc features doctor names, (used, missing), read from the bundle's own files: its
    libbcc's dynamic symbols (the batch operations, bcc 0.20+) and its BPF.load_func's signature
    (attach_type, 0.21+). Debian 12's bcc has both, Debian 11's neither."""
    lib = next(p for p in prefix.rglob("libbcc.so*") if p.is_file() and not p.is_symlink())
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    source = (bcc_dir / "__init__.py").read_text()
    signature = source[source.index("def load_func("):].split(")", 1)[0]
    has = {"batch map operations": {"bpf_lookup_batch", "bpf_delete_batch"} <= names,
           "load_func attach_type": "attach_type" in signature}
    return [k for k, v in has.items() if v], [k for k, v in has.items() if not v]


def version_of(manifest: dict[str, Any], pkg: str) -> str:
    """Upstream version of a bundled package (0.26.0+ds-1 -> 0.26.0)."""
    return next(p["version"] for p in manifest["packages"] if p["name"] == pkg).split("+")[0].split("-")[0]


def snapshots(stdout: Any) -> Iterator[dict[str, Any]]:
    for line in stdout:
        if line.strip():
            yield json.loads(line)


def trace_workload(snaps: Iterator[dict[str, Any]], workloads: Workloads, tmp_path: Path) -> dict[str, Any]:
    """Start the workload once gputop runs, return its last row (exited)."""
    first = next(snaps, None)
    assert first is not None, "gputop printed no snapshot"
    assert first["sources"]["bpf"]["status"] == "ok", first["sources"]["bpf"]
    go = tmp_path / "go"
    wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0",
                           "memcpy:4:1:1000", "memcpy:2:2:500", "sync:3", "sleep:1200"], stdout=subprocess.PIPE)
    try:
        last = None
        deadline = time.monotonic() + 90
        for snap in snaps:
            row = {p["pid"]: p for p in snap["processes"]}.get(wl.pid)
            assert row is not None or go.exists() or time.monotonic() < deadline, "gputop never listed the workload"
            if row is not None and not go.exists():
                go.touch()          # listed: the exec event attached gputop to it (a fixed 1.5 s was short
            elif row is not None:   # on a loaded host: its syncs were lost)
                last = row
                if row["state"] == "exited":
                    break
        assert last is not None, "gputop never listed the workload"
        return last
    finally:
        wl.kill()
        wl.wait()


def assert_exact(row: dict[str, Any]) -> None:
    assert row["state"] == "exited" and row["comm"] == "wl_dynamic"
    assert row["total"]["launches"] == 6000
    assert row["total"]["memcpy"]["h2d"] == {"calls": 4, "bytes": 4000}
    assert row["total"]["memcpy"]["d2h"] == {"calls": 2, "bytes": 1000}
    assert row["total"]["sync_calls"] == 3
    assert row["grid_blocks_hist"] == {"2^6": 6000} and row["block_threads_hist"] == {"2^7": 6000}
    k = row["kernels"][0]
    assert (k["name"], k["launches"], k["grid_blocks_avg"], k["block_threads_avg"]) == (
        "fused_step(float*, float*, int)", 6000, 80.0, 128.0)


def _distro_python() -> str:
    """major.minor of the distro's python3 (/usr/bin/python3), which the bundle carries."""
    return subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_manifest_holds_bcc_headers_and_wheels_but_never_the_c_library(bundle: dict[str, Any]) -> None:
    names = {p["name"] for p in bundle["packages"]}
    py = _distro_python()       # the bundle carries the distro's Python (3.11 on Debian 12, 3.9 on 11)
    assert {"python3-bpfcc", "libbpfcc", f"python{py}", f"libpython{py}-stdlib", "binutils"} <= names
    assert any(n.startswith("libllvm") for n in names) and any(n.startswith("libclang-cpp") for n in names)
    assert not names & {"libc6", "libgcc-s1", "libstdc++6", "zlib1g", "dpkg", "tar", "apt"}
    assert not any(n.startswith(("gcc-", "cpp-", "linux-compiler", "linux-kbuild")) for n in names)
    headers = sorted(p["name"] for p in bundle["packages"] if p["file"].startswith("headers/"))
    assert headers[-1] == bundle["headers_meta"] and any(h.endswith("-common") for h in headers)
    wheels = {w["file"].split("/")[1].split("-")[0] for w in bundle["wheels"]}
    assert {"gputop_ebpf", "textual", "rich", "psutil", "plotext", "prometheus_client",
            "nvidia_ml_py"} <= wheels
    sums = (BUNDLE / "SHA256SUMS").read_text().splitlines()
    assert len(sums) == len(bundle["packages"]) + len(bundle["wheels"]) + 1       # + install.sh
    assert subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=BUNDLE).returncode == 0


def test_install_beside_the_host_s_packages_unpacks_only_what_it_lacks(bundle: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    prefix = tmp_path / "gputop"
    res = subprocess.run([str(BUNDLE / "install.sh"), str(prefix)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    missing = [p["name"] for p in bundle["packages"] if not installed(p["name"])]
    assert f"install.sh: {len(missing)} packages unpacked into {prefix}, " \
           f"{len(bundle['packages']) - len(missing)} already installed on this host" in res.stdout
    assert sorted(line.split()[0] for line in (prefix / "lib/gputop/packages.txt").read_text().splitlines()) \
        == sorted(missing)
    if installed("python3"):
        assert "exec '/usr/bin/python3' -s" in (prefix / "bin" / "gputop").read_text()


@needs_bpf
def test_installed_prefix_traces_with_its_own_bcc_python_and_headers(bundle: dict[str, Any], workloads: Workloads,
                                                                     tmp_path: Path) -> None:
    """--all: every bundled package unpacked, as on a host without them, and the prefix's copies used."""
    prefix = tmp_path / "gputop"
    res = subprocess.run([str(BUNDLE / "install.sh"), "--all", str(prefix)], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    n = len(bundle["packages"])
    assert f"install.sh: {n} packages unpacked into {prefix}, 0 already installed on this host" in res.stdout
    gputop = str(prefix / "bin" / "gputop")
    env = {k: v for k, v in os.environ.items() if k not in ("BCC_KERNEL_SOURCE", "PYTHONPATH", "LD_LIBRARY_PATH")}
    doctor = subprocess.run([gputop, "doctor"], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    bcc_dir = prefix / "usr/lib/python3/dist-packages/bcc"
    # the bundle's own bcc, then the features of it gputop uses, read here from its files
    used, missing = _bcc_features(prefix, bcc_dir)
    assert (f"OK    bcc: bcc {version_of(bundle, 'python3-bpfcc')} from {bcc_dir}; "
            f"uses {', '.join(used) or 'none of its optional features'}"
            + (f"; falls back from {', '.join(missing)}" if missing else "") + "\n") in doctor.stdout, doctor.stdout
    headers = prefix / "lib/gputop/kernel-headers" / (prefix / "lib/gputop/kernel-headers/default").read_text().strip()
    assert "OK    BPF compile: a test program compiled and loaded" in doctor.stdout
    release = os.uname().release
    if not Path(f"/lib/modules/{release}/build/include").is_dir():
        assert f"kernel headers: BCC_KERNEL_SOURCE={headers} set by the user" in doctor.stdout
        assert (headers / "include" / "linux" / "kconfig.h").exists()     # from the -common half, merged
        # headers gathered with --kernel for exactly the running release are preferred to the newest
        exact = headers.parent / f"linux-headers-{release}"
        exact.symlink_to(headers)
        doctor = subprocess.run([gputop, "doctor"], capture_output=True, text=True, timeout=300, env=env)
        assert f"kernel headers: BCC_KERNEL_SOURCE={exact} set by the user" in doctor.stdout, doctor.stdout
        assert "OK    BPF compile: a test program compiled and loaded" in doctor.stdout
        exact.unlink()

    # cwd = the checkout: its gputop/ must not shadow the prefix's
    gt = subprocess.Popen([gputop, "-b", "-f", "json", "-d", "0.5", "--no-nvml", "--bpf"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        snaps = snapshots(gt.stdout)
        row = trace_workload(snaps, workloads, tmp_path)
        maps = Path(f"/proc/{gt.pid}/maps").read_text()
    finally:
        gt.terminate()
        _, err = gt.communicate(timeout=60)
    assert_exact(row)
    mapped = {line.split()[-1] for line in maps.splitlines() if line.split()[-1].startswith("/")}
    libbcc = {m for m in mapped if "/libbcc.so" in m}
    assert libbcc and all(m.startswith(f"{prefix}/usr/lib/") for m in libbcc), libbcc
    assert any(m.startswith(f"{prefix}/usr/lib/") and "libLLVM" in m for m in mapped)
    assert any(m.startswith(f"{prefix}/usr/bin/python3") for m in mapped)       # the bundle's python3
    assert gt.returncode == 0 and "Traceback" not in err, err


@needs_bpf
def test_bare_debian_container_installs_and_traces_a_host_workload(bundle: dict[str, Any], workloads: Workloads,
                                                                   tmp_path: Path) -> None:
    """A host of the same release without python3, bcc or headers: the bundle is all it gets."""
    if shutil.which("podman") is None or shutil.which("runc") is None:
        pytest.skip("podman and runc are needed (scripts/setup.sh --test installs them)")
    if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
        pytest.skip(f"{BASE_IMAGE} is missing (tests/bpf/test_container_image.py builds it)")
    name = f"gputop-offline-{uuid.uuid4().hex[:8]}"
    script = ("set -e; command -v python3 && exit 3; dpkg-query --show python3-bpfcc 2>/dev/null && exit 4;"
              " ls -d /usr/src/linux-headers-* 2>/dev/null && exit 5;"
              " /bundle/install.sh /opt/gputop >&2;"
              " exec /opt/gputop/bin/gputop -b -f json -d 0.5 --no-nvml --bpf")
    ctr = subprocess.Popen(["podman", "run", "--rm", "--name", name, "--runtime=runc", *ulimits(), "--pid=host",
                            "--network=none", "--privileged", "-v", f"{BUNDLE}:/bundle:ro",
                            "-v", "/sys/kernel/tracing:/sys/kernel/tracing", BASE_IMAGE, "sh", "-c", script],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        row = trace_workload(snapshots(ctr.stdout), workloads, tmp_path)
    finally:
        podman("stop", "--time=30", name, timeout_s=90, check=False)
        _, err = ctr.communicate(timeout=120)
    assert ctr.returncode == 0, err
    assert_exact(row)
    n = len(bundle["packages"])
    assert f"install.sh: {n} packages unpacked into /opt/gputop, 0 already installed on this host" in err, err
    assert "for /opt/gputop/usr/bin/python3 (Python" in err
    assert "Traceback" not in err, err


@needs_bpf
def test_the_gpu_session_on_a_host_without_a_gpu(bundle: dict[str, Any], tmp_path: Path) -> None:
    """bench/gpu_session.sh, the GPU host's one prepared run (docs/GPU-VALIDATION.md), as far as a host
    without a GPU takes it: the bundle in parts (bench/gpu_kit.sh) put together, installed, doctor,
    the self-test and every GPU workload saying why they did not run, the demo on its traced-only path."""
    kits = tmp_path / "kits"
    # parts of 8 MiB: ten and more of them (.kit10 sorts before .kit2 by name; the parts go in their own order)
    env = {**os.environ, "GPUTOP_KIT_DIR": str(kits), "GPUTOP_KIT_PART_MIB": "8", "OUT": str(tmp_path / "out"),
           "GPUTOP_PREFIX": str(tmp_path / "prefix"), "GPUTOP_WORK": str(tmp_path / "work")}
    res = subprocess.run([str(ROOT / "bench" / "gpu_kit.sh"), str(BUNDLE)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    parts = sorted(kits.glob(".kit*/bundle.tar.*"))
    total = sum(p.stat().st_size for p in parts)
    assert len(parts) == -(-total // (8 << 20)) >= 10 and all(p.stat().st_size <= 8 << 20 for p in parts)
    assert {(p.parent / "PARTS").read_text() for p in parts} == {f"{len(parts)}\n"}

    # a part missing (a carry that did not arrive): said, and nothing installed
    hidden = parts[-1].rename(tmp_path / "hidden")
    res = subprocess.run([str(ROOT / "bench" / "gpu_session.sh"), "all"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert f"bundle: {len(parts) - 1} of {len(parts)} parts here" in res.stderr and "stopping: no bundle" in res.stderr
    assert not (tmp_path / "prefix").exists()
    hidden.rename(parts[-1])

    res = subprocess.run([str(ROOT / "bench" / "gpu_session.sh"), "all"], env=env, capture_output=True, text=True,
                         timeout=900, cwd=tmp_path)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["facts.txt", "install.txt", "doctor.txt", "validate.txt", "results.json", "launch.txt", "demo.txt",
         "session.txt"])          # the eight files a device's $OUT brings back
    done = [(line.split("] ", 1)[1].split(":")[0], line.split(": ", 1)[1].split(" in ")[0])
            for line in (out / "session.txt").read_text().splitlines() if ": exit " in line]
    assert done == [("install.txt", "exit 0"), ("doctor.txt", "exit 0"), ("validate.txt", "exit 1"),
                    ("doctor.txt", "exit 1"), ("launch.txt", "exit 1"), ("demo.txt", "exit 0")]
    facts = (out / "facts.txt").read_text()
    assert f"release {os.uname().release}" in facts and "nvidia_uvm: not loaded" in facts
    assert any(line.startswith("kprobes: ") for line in facts.splitlines())
    assert "install.sh: done" in (out / "install.txt").read_text()
    doctor = (out / "doctor.txt").read_text().split("## gputop doctor --selftest\n")
    assert doctor[0].splitlines()[-1] == "gputop can trace with BPF"
    assert doctor[1].startswith("gputop: error: selftest: no NVIDIA driver here")
    # no PyTorch (or no GPU for it) here: the launch cost says it has no runtime to launch through
    assert (out / "launch.txt").read_text().startswith("gputop: error: ")
    validate = (out / "validate.txt").read_text().splitlines()
    assert validate[-1] == "gpu validation: 0/16 exact"
    assert any(line.startswith("before: not measured: ") for line in validate)     # no torch, or no GPU for it
    assert any(line.startswith("driver_peer_before: not measured: ") for line in validate)
    assert (out / "demo.txt").read_text().startswith("demo without a GPU: launches through ")
