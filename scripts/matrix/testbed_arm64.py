#!/usr/bin/env python3
"""The arm64 test bed of the kernel matrix's arm64 suites (docs/matrix.md), fetched on the host (stdlib only):

    python3 scripts/matrix/testbed_arm64.py [DEST]      (default .cache/testbed-arm64)

* ``cudart/`` and ``cudart13/``: ``libcudart.so.12`` / ``.so.13`` (and ``libcudart_static.a``) of the same
  CUDA runtime wheels as the x86-64 test bed (scripts/testbed.sh), their ``manylinux`` aarch64 builds,
  downloaded by the venv's pip for that platform (the machine's own pip configuration);
* ``nvidia/``: ``libcuda.so.1`` and ``libnvidia-ml.so.1`` of Debian's arm64 ``libcuda1`` and
  ``libnvidia-ml1`` (non-free) of this machine's release, through its own mirror with a private apt state
  (scripts/privapt.py) told the arm64 architecture: the machine's package lists and dpkg database are left
  alone;
* ``headers/``: Debian's ``linux-headers-arm64`` (its header packages, unpacked): tests/unit/test_arm64_compile.py
  compiles gputop's BPF program for arm64 on an x86-64 host with them (bcc told ``ARCH=arm64``).

vm.py carries DEST into an arm64 guest as the copy's ``.cache/testbed``: nothing is fetched under emulation.
Cached: a folder holding its files is not fetched again.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import privapt  # noqa: E402

#: (folder, wheel, soname): the x86-64 test bed's runtimes (scripts/testbed.sh)
RUNTIMES = (("cudart", "nvidia-cuda-runtime-cu12==12.9.79", "libcudart.so.12"),
            ("cudart13", "nvidia-cuda-runtime==13.0.96", "libcudart.so.13"))
#: pip's platform tags of the aarch64 wheels (newest first)
PLATFORMS = ("manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux2014_aarch64")
ARCH = "arm64"


class Arm64Apt(privapt.PrivateApt):
    """The private apt state with arm64 as its (only) architecture."""

    def options(self) -> list[str]:
        return [*super().options(), "-o", f"APT::Architecture={ARCH}", "-o", f"APT::Architectures={ARCH}"]


def fetch_runtime(dest: Path, spec: str, soname: str) -> None:
    if (dest / soname).is_file():
        return
    print(f"testbed-arm64: fetching {spec} (aarch64)")
    with tempfile.TemporaryDirectory() as tmp:
        plats = [a for p in PLATFORMS for a in ("--platform", p)]
        subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "pip", "download", "-q", "--no-deps",
                        "--only-binary=:all:", *plats, "-d", tmp, spec], check=True)
        wheels = glob.glob(tmp + "/*.whl")
        if not wheels:
            raise SystemExit(f"testbed-arm64: no aarch64 wheel of {spec}")
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for n in z.namelist():
                base = n.rsplit("/", 1)[-1]
                if n.startswith("nvidia/") and "/lib/" in n and base in (soname, "libcudart_static.a"):
                    (dest / base).write_bytes(z.read(n))
    if not (dest / soname).is_file():
        raise SystemExit(f"testbed-arm64: {soname} is not in {spec}'s aarch64 wheel")


def fetch_nvidia(state: Path, dest: Path) -> None:
    if (dest / "libcuda.so.1").is_file() and (dest / "libnvidia-ml.so.1").is_file():
        return
    print("testbed-arm64: fetching Debian's arm64 libcuda1 and libnvidia-ml1 with a private apt state")
    base, _ = privapt.machine_apt(state, nvidia=True, pockets=privapt.RELEASE_ONLY)
    apt = Arm64Apt(state, base.sources)
    apt.update()
    got = apt.download(apt.files(privapt.DEBIAN_NVIDIA), state / "debs")
    with tempfile.TemporaryDirectory(dir=state) as tmp:
        for d in got:
            subprocess.run(["dpkg", "-x", str(state / "debs" / d.filename), tmp], check=True)
        dest.mkdir(parents=True, exist_ok=True)
        for lib in ("libcuda.so.1", "libnvidia-ml.so.1"):
            found = sorted(Path(tmp).rglob(lib))
            if not found:
                raise SystemExit(f"testbed-arm64: {lib} is not in {', '.join(d.filename for d in got)}")
            shutil.copyfile(found[0].resolve(), dest / lib)
    (dest / "VERSION").write_text("".join(f"{d.name} {d.version} {d.arch}\n" for d in got))
    print(f"testbed-arm64: {', '.join(d.filename for d in got)} -> {dest}")


def fetch_headers(state: Path, dest: Path) -> None:
    """linux-headers-arm64's header packages, unpacked into DEST (its usr/src/linux-headers-*)."""
    if any((dest / "usr" / "src").glob("linux-headers-*-arm64")):
        return
    print("testbed-arm64: fetching Debian's linux-headers-arm64 with a private apt state")
    base, _ = privapt.machine_apt(state, pockets=privapt.RELEASE_ONLY)
    apt = Arm64Apt(state, base.sources)
    apt.update()
    got = apt.download(privapt.headers_only(apt.closure(["linux-headers-arm64"])), state / "headers")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for d in got:
        subprocess.run(["dpkg", "-x", str(state / "headers" / d.filename), str(tmp)], check=True)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    print(f"testbed-arm64: {', '.join(d.filename for d in got)} -> {dest}")


def main() -> int:
    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".cache" / "testbed-arm64"
    for folder, spec, soname in RUNTIMES:
        fetch_runtime(dest / folder, spec, soname)
    try:
        fetch_nvidia((dest / "apt").resolve(), dest / "nvidia")
        fetch_headers((dest / "apt-headers").resolve(), dest / "headers")
    except privapt.PrivAptError as e:
        print(f"testbed-arm64: error: {e}\nhint: {e.hint}", file=sys.stderr)
        return 1
    print(f"testbed-arm64: ready in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
