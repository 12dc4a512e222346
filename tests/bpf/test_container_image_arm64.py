"""The image of deploy/Containerfile built for arm64 (Grace Hopper nodes: GH200, GB200) on this x86-64
machine, as a build host builds the arm64 half of the manifest list (``podman build --platform
linux/arm64``), and checked inside under qemu-user (qemu-user-static registered with binfmt_misc, F flag):
an arm64 userland, gputop's entry point, Debian's bcc as gputop loads it, the arm64 kernel headers, and
what ``gputop doctor`` can check under emulation.

On demand only (``GPUTOP_ARM64_IMAGE=1``; ./test.sh's run does not collect it): the emulated debootstrap and build
take many minutes (docs/deploy.md, "The image for arm64 nodes"). The arm64 Debian base is made as
amd64's (test_container_image.build_image: debootstrap ``--arch=arm64 --variant=minbase bookworm``,
``podman import --arch arm64``) and kept for the next run; it replaces ``FROM debian:12-slim`` through
``podman build --from`` (no image registry is reachable here; a build host pulls the arm64 instance of
debian:12-slim's manifest list itself).

Not proven here: tracing. The kernel is this machine's x86-64 one: the BPF program compiled inside would
be built for arm64's pt_regs and loaded into an x86-64 kernel, so doctor runs without the tracing
capabilities (its compile, load and trap-cost checks are skipped, and say so). Tracing on an arm64
kernel is the ``bookworm-arm64`` and ``trixie-arm64`` matrix suites' (docs/matrix.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_container_image import base_image, build_image, image_name, podman, ulimits

ARCH = "arm64"
VENV = "/opt/gputop/.venv"
EM_AARCH64 = 183            # ELF e_machine of AArch64
BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")

pytestmark = pytest.mark.skipif(os.environ.get("GPUTOP_ARM64_IMAGE") != "1",
                                reason="the arm64 image is built under emulation (many minutes): "
                                       "GPUTOP_ARM64_IMAGE=1 runs it")


def binfmt_reason() -> str | None:
    """Why arm64 binaries cannot run here (None: qemu-aarch64 is registered with the F flag, which
    containers need: the interpreter is opened at registration, outside the container's root)."""
    try:
        text = BINFMT.read_text()
    except OSError:
        return (f"{BINFMT} is missing: apt-get install qemu-user-static binfmt-support; mount -t binfmt_misc "
                "binfmt_misc /proc/sys/fs/binfmt_misc; update-binfmts --enable qemu-aarch64")
    if not text.startswith("enabled"):
        return "qemu-aarch64 is registered with binfmt_misc but disabled: update-binfmts --enable qemu-aarch64"
    flags = next((line.split(None, 1)[1] for line in text.splitlines() if line.startswith("flags:")), "")
    if "F" not in flags:
        return (f"qemu-aarch64's binfmt_misc entry lacks the F flag (flags: {flags or 'none'}): "
                "reinstall qemu-user-static")
    return None


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup.sh --test installs it)")
    why = binfmt_reason()
    if why:
        pytest.skip(why)
    build = build_image(tmp_path_factory.mktemp("image"), ARCH)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    yield image_name(ARCH)
    podman("rmi", "-f", image_name(ARCH), check=False)     # about 1 GB; the arm64 base stays for the next run


def run_in(image: str, *cmd: str, caps: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``cmd`` in a container of ``image`` (its arm64 binaries under qemu-user)."""
    return podman("run", "--rm", "--runtime=runc", *ulimits(), "--network=none", f"--platform=linux/{ARCH}",
                  *caps, "--entrypoint", cmd[0], image, *cmd[1:], timeout_s=900, check=False)


def test_the_images_metadata_and_its_base_say_arm64(image: str) -> None:
    for name in (image, base_image(ARCH)):
        meta = json.loads(podman("image", "inspect", name).stdout)[0]
        assert (meta["Os"], meta["Architecture"]) == ("linux", ARCH), name


def test_the_userland_is_arm64_under_emulation(image: str) -> None:
    arch = run_in(image, "dpkg", "--print-architecture")
    assert (arch.returncode, arch.stdout.strip()) == (0, "arm64"), arch.stderr
    machine = run_in(image, "uname", "-m")
    assert machine.stdout.strip() == "aarch64", machine.stderr          # qemu-user's answer, not the host's
    # the venv's interpreter is Debian's arm64 python3 (an AArch64 ELF), not an x86-64 one
    elf = run_in(image, f"{VENV}/bin/python", "-c",
                 "import os, sys; h = open(os.path.realpath(sys.executable), 'rb').read(20); "
                 "print(os.path.realpath(sys.executable), int.from_bytes(h[18:20], 'little'))")
    assert elf.returncode == 0, elf.stderr
    path, machine_id = elf.stdout.split()
    assert path.startswith("/usr/bin/python3") and int(machine_id) == EM_AARCH64, elf.stdout


def test_gputop_runs(image: str) -> None:
    version = run_in(image, f"{VENV}/bin/gputop", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, "gputop 0.1.0"), version.stderr
    usage = run_in(image, f"{VENV}/bin/gputop", "--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: gputop "), usage.stderr
    assert "Traceback" not in version.stderr + usage.stderr


def test_the_venv_loads_debians_arm64_bcc(image: str) -> None:
    """The venv has no system site-packages (the PyPI package named bcc is unrelated): gputop loads
    python3-bpfcc's module from Debian's dist-packages itself (gputop/sources/bpf/program/program.py,
    load_bcc), and with it the arm64 libbcc.so through ctypes. Debian's own python3 imports it plainly."""
    plain = run_in(image, "python3", "-c", "import bcc; print(bcc.__file__)")
    assert (plain.returncode, plain.stdout.strip()) == (0, "/usr/lib/python3/dist-packages/bcc/__init__.py"), \
        plain.stderr
    venv = run_in(image, f"{VENV}/bin/python", "-c",
                  "from gputop.sources.bpf import load_bcc; m = load_bcc(); import bcc; "
                  "print(m.__file__, m.__version__, m.lib._name, bcc is m, hasattr(bcc, 'BPF'))")
    assert venv.returncode == 0, venv.stderr
    path, version, lib, same, has_bpf = venv.stdout.split()
    assert path == "/usr/lib/python3/dist-packages/bcc/__init__.py"
    assert version.startswith("0.26."), venv.stdout                 # Debian 12's bcc
    assert lib.startswith("libbcc.so") and (same, has_bpf) == ("True", "True"), venv.stdout
    maps = run_in(image, f"{VENV}/bin/python", "-c",
                  "from gputop.sources.bpf import load_bcc; load_bcc(); "
                  "print(*sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libbcc' in l}))")
    assert maps.returncode == 0 and "/usr/lib/aarch64-linux-gnu/libbcc.so" in maps.stdout, maps.stdout + maps.stderr


def test_the_arm64_kernel_headers_are_installed(image: str) -> None:
    pkgs = run_in(image, "dpkg-query", "-W", "-f", r"${Package} ${Architecture} ${db:Status-Status}\n",
                  "linux-headers-*")
    assert pkgs.returncode == 0, pkgs.stderr
    installed = {line.split()[0]: line.split()[1] for line in pkgs.stdout.splitlines()
                 if line.split()[-1] == "installed"}
    assert installed.get("linux-headers-arm64") == "arm64", pkgs.stdout
    assert not any(name.endswith("-amd64") for name in installed), pkgs.stdout
    tree = run_in(image, "sh", "-c", "ls -d /usr/src/linux-headers-*-arm64/arch/arm64/include")
    assert tree.returncode == 0 and tree.stdout.strip(), tree.stderr


def test_doctor_under_emulation(image: str) -> None:
    """What doctor can check honestly under qemu-user on this x86-64 kernel: bcc (the arm64 libbcc's
    optional features asked of it), the fallback headers (this kernel has no Debian headers: it picks
    the arm64 flavour, the machine's), the demanglers, the fair-share limits. Run with every capability
    dropped, so that it compiles and loads nothing: its privileges check fails, and the BPF compile and
    the trap cost say they are skipped."""
    doctor = run_in(image, f"{VENV}/bin/gputop", "doctor", caps=("--cap-drop=ALL",))
    out = doctor.stdout
    assert doctor.returncode == 1, out + doctor.stderr
    assert "Traceback" not in out + doctor.stderr
    checks = {line[6:].split(":", 1)[0]: line for line in out.splitlines() if line[:4] in ("OK  ", "WARN", "FAIL")}
    assert checks["privileges"].startswith("FAIL  privileges: root: tracing is off"), out
    assert checks["bcc"].startswith("OK    bcc: bcc 0.26.") and \
        "from /usr/lib/python3/dist-packages/bcc" in checks["bcc"], out
    headers = checks["kernel headers"]
    assert headers.startswith("WARN  kernel headers: no headers package for the running kernel"), out
    assert "-arm64 (" in headers and "-amd64" not in headers, out            # the machine's flavour: arm64
    # binutils' c++filt (arm64) runs; the image has no llvm-cxxfilt, so doctor warns what GNU's cannot demangle
    assert "kernel names: demangled by /usr/bin/c++filt" in checks["kernel names"], out
    assert checks["BPF compile"] == "FAIL  BPF compile: skipped: tracing is off (see privileges)", out
    assert checks["uprobe trap cost"].endswith("not measured: it needs the tracing privileges"), out
    assert checks["fair share"].startswith("OK    fair share: "), out
    assert out.rstrip().endswith("gputop cannot trace with BPF here (see FAIL)"), out


if __name__ == "__main__":     # `build`: the arm64 image ahead of its test (its emulated build is the long part)
    import sys
    import tempfile

    if sys.argv[1:] == ["build"]:
        missing = binfmt_reason() or ("" if all(shutil.which(t) for t in ("podman", "runc", "debootstrap"))
                                      else "podman, runc or debootstrap is missing")
        if missing:
            print(f"gputop: error: the arm64 image cannot be built here: {missing}", file=sys.stderr)
            print("hint: apt-get install podman runc debootstrap qemu-user-static binfmt-support", file=sys.stderr)
            sys.exit(1)
        with tempfile.TemporaryDirectory() as d:
            res = build_image(Path(d), ARCH)
            if res.returncode != 0:
                sys.stderr.write(res.stdout[-3000:] + res.stderr[-3000:])
            sys.exit(res.returncode)
