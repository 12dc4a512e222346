"""Boot one Debian kernel of the matrix under QEMU (TCG) with gputop's checks inside; run as root.

    python3 scripts/matrix/vm.py SUITE OUTDIR [--timeout-s N] [--on-host]

1. scripts/matrix/build-root.sh SUITE: the suite's root image, kernel and initrd (cached, see there).
2. A run disk (ext4, made with mkfs.ext4 -d, the cloud kernels have no 9p): guest-run.sh, a copy of
   this repository (its tracked and unignored files as they are in the work tree) and the test bed the
   host already fetched (.cache/testbed/{cudart,cudart13,nvidia}: nothing is fetched again under
   emulation), and an empty out/.
3. qemu-system-x86_64 -accel tcg -cpu max -m 2G -smp 2, the root disk in snapshot mode (the cache is
   never written), the run disk writable, the serial console to OUTDIR/console.log, a hard timeout
   after which QEMU is killed. An arm64 suite (SUITE-arm64: bookworm-arm64, trixie-arm64) boots under
   qemu-system-aarch64 -M virt -cpu max -m 4G -smp 2 (full emulation), with the arm64 test bed
   (.cache/testbed-arm64: scripts/matrix/testbed_arm64.py, fetched here when missing) as the copy's
   .cache/testbed.
4. out/ copied back with debugfs (no mount, no loop device) into OUTDIR/out; OUTDIR/host-times.json.
--on-host: the suite's userland on this machine's kernel instead of its own (Debian 11's bcc 0.18 and
LLVM 11 on a 5.12+ kernel, as with a backports kernel): the root image's files copied out with debugfs,
the run staged in it, guest-run.sh run there in mount and UTS namespaces of its own, the root pivoted
to (pivot_root; not PID 1: it sets up no network and powers nothing off), /proc, /sys and /dev bound
from the host.
Exit status: the guest's own (out/status), 124 on the timeout, 125 when the guest's kernel locked up
(LOCKUP_REPORTS soft-lockup reports on its console), 1 when no status came back.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
HERE = ROOT / "scripts" / "matrix"
TESTBED_PARTS = ("cudart", "cudart13", "nvidia")
TOOLS = ("debootstrap", "mkfs.ext4", "debugfs", "git")
#: the arm64 suites' test bed (scripts/matrix/testbed_arm64.py), carried in as the copy's .cache/testbed
TESTBED_ARM64 = ROOT / ".cache" / "testbed-arm64"
#: default hard timeouts of a boot (s): the x86-64 guests', and the arm64 guests' under full emulation
TIMEOUT_S = {"amd64": 2400.0, "arm64": 7200.0}


def arch_of(suite: str) -> str:
    """The suite's Debian architecture: SUITE-arm64 is arm64, the rest amd64 (build-root.sh's rule)."""
    return "arm64" if suite.endswith("-arm64") else "amd64"


def qemu_of(arch: str) -> str:
    return "qemu-system-aarch64" if arch == "arm64" else "qemu-system-x86_64"


def build_root(suite: str) -> Path:
    res = subprocess.run([str(HERE / "build-root.sh"), suite], stdout=subprocess.PIPE, text=True, check=True)
    return Path(res.stdout.strip().splitlines()[-1])


def stage(dst: Path, arch: str = "amd64") -> None:
    """The run disk's content: guest-run.sh, repo/ and out/ (the test bed of the guest's architecture)."""
    shutil.copy(HERE / "guest-run.sh", dst / "guest-run.sh")
    (dst / "out").mkdir()
    copy_repo(dst / "repo")
    testbed = TESTBED_ARM64 if arch == "arm64" else ROOT / ".cache" / "testbed"
    for part in TESTBED_PARTS:
        shutil.copytree(testbed / part, dst / "repo" / ".cache" / "testbed" / part, symlinks=True)


def copy_repo(repo: Path) -> None:
    """This repository's tracked and unignored files, as they are in the work tree, into ``repo``."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           stdout=subprocess.PIPE, check=True).stdout.split(b"\0")
    for raw in names:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file() or src.is_symlink():
            continue
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, repo / rel)


def make_disk(src: Path, img: Path) -> None:
    used = sum(p.stat().st_size for p in src.rglob("*") if p.is_file() and not p.is_symlink())
    size_mib = used // (1 << 20) + 256
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "matrix-run", "-d", str(src), str(img), f"{size_mib}M"],
                   check=True)


def qemu_command(cache: Path, disk: Path, arch: str = "amd64") -> list[str]:
    """The QEMU command line of one boot: x86-64 (2 GiB), or arm64 on QEMU's virt board (4 GiB; pointer
    authentication emulated by QEMU's cheap implementation-defined algorithm, pauth-impdef: Debian's arm64
    kernel signs every return address, and the architected one is many times slower under TCG; the PL011
    UART as the console). Both on one host thread (defect 15)."""
    if arch == "arm64":
        machine = ["qemu-system-aarch64", "-M", "virt", "-accel", "tcg,thread=single", "-cpu", "max,pauth-impdef=on",
                   "-m", "4G"]
        console = "ttyAMA0"
    else:
        machine = ["qemu-system-x86_64", "-accel", "tcg,thread=single", "-cpu", "max", "-m", "2G"]
        console = "ttyS0"
    return [*machine, "-smp", "2", "-nographic",
            "-no-reboot", "-kernel", str(cache / "vmlinuz"), "-initrd", str(cache / "initrd.img"),
            "-append", f"root=/dev/vda rw console={console} init=/usr/local/sbin/matrix-init",
            "-drive", f"file={cache / 'root.img'},format=raw,if=virtio,snapshot=on",
            "-drive", f"file={disk},format=raw,if=virtio",
            "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0"]


def boot(cache: Path, disk: Path, console: Path, timeout_s: float, arch: str = "amd64") -> tuple[int | str, float]:
    """QEMU until the guest powers off (its exit status), the timeout or a lockup (run_logged);
    the wall time."""
    return run_logged(qemu_command(cache, disk, arch), console, timeout_s)


#: soft-lockup reports on the console after which the guest is taken as locked up (the kernel
#: reports a CPU stuck for 22 s, then again while it stays stuck): about 90 s stuck
LOCKUP_REPORTS = 4
_LOCKUP = b"soft lockup - CPU#"


def run_logged(cmd: list[str], console: Path, timeout_s: float) -> tuple[int | str, float]:
    """``cmd`` in a session of its own, its output to ``console``, until it exits (its status), the
    timeout ("timed out") or LOCKUP_REPORTS soft-lockup reports on the console ("locked up"); the
    whole session is killed in the last two cases. And the wall time."""
    t0 = time.monotonic()
    ended: int | str = "timed out"
    with console.open("wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            while time.monotonic() - t0 < timeout_s:
                try:
                    ended = proc.wait(timeout=min(5.0, max(0.0, timeout_s - (time.monotonic() - t0))))
                    break
                except subprocess.TimeoutExpired:
                    if console.read_bytes().count(_LOCKUP) >= LOCKUP_REPORTS:
                        ended = "locked up"
                        break
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
    return ended, time.monotonic() - t0


def on_host(cache: Path, src: Path, tmp: Path, console: Path, timeout_s: float) -> tuple[int | str, float]:
    """guest-run.sh in the suite's root on this machine's kernel; (run_logged's end, the wall time)."""
    t0 = time.monotonic()
    root = tmp / "root"
    copy_root(cache, root)
    shutil.move(str(src), str(root / "mnt" / "matrix"))
    rc, _ = run_logged(pivoted(root, "/bin/bash /mnt/matrix/guest-run.sh"), console, timeout_s)
    return rc, time.monotonic() - t0        # the root's copy included


def copy_root(cache: Path, root: Path) -> None:
    """The files of the suite's cached root image, into ``root`` (made), with this machine's resolver."""
    root.mkdir()
    subprocess.run(["debugfs", "-R", f"rdump / {root}", str(cache / "root.img")], check=True, capture_output=True)
    for tmpdir in ("tmp", "var/tmp"):        # rdump keeps the permission bits, not the sticky bit
        (root / tmpdir).chmod(0o1777)
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")


def pivoted(root: Path, command: str) -> list[str]:
    """The command line that runs ``command`` (a shell command) in ``root`` on this machine's kernel, in
    mount and UTS namespaces of their own, /proc, /sys and /dev bound from the host.

    The root a mount point of its own and its mount namespace's root, as a booted system's is:
    unshare --propagation (tests, gputop's own debugfs mount) refuses a root that is not a mount point
    ("cannot change root filesystem propagation"), and under a plain chroot the kernel writes the
    maps of a process in a mount namespace of its own from the namespace's root (/proc/PID/maps:
    /tmp/.../root/opt/...), which no path from the chroot reaches once the process is gone."""
    (root / ".host").mkdir(exist_ok=True)
    script = (f"mount --bind {root} {root} || exit 92; "
              f"for d in proc sys dev; do mount --rbind /$d {root}/$d && mount --make-rslave {root}/$d || exit 92; "
              f"done; cd {root} && pivot_root . .host && umount -l /.host || exit 93; "
              f"exec chroot . {command}")
    return ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", script]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--timeout-s", type=float, default=None,
                    help="the boot's hard timeout (default 2400 s; an arm64 suite's 7200 s)")
    ap.add_argument("--on-host", action="store_true", help="the suite's userland on this machine's kernel")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("gputop: error: the kernel matrix needs root (debootstrap, chroot)\nhint: run it with sudo",
              file=sys.stderr)
        return 77
    arch = arch_of(args.suite)
    if arch == "arm64" and args.on_host:
        print("gputop: error: --on-host runs a suite's userland on this machine's kernel: not an arm64 one",
              file=sys.stderr)
        return 2
    timeout_s = args.timeout_s if args.timeout_s is not None else TIMEOUT_S[arch]
    missing = [t for t in (*TOOLS, qemu_of(arch)) if shutil.which(t) is None]
    if missing:
        print(f"gputop: error: {', '.join(missing)} not found\n"
              "hint: scripts/setup.sh --test installs qemu-system-x86 and debootstrap; an arm64 suite needs "
              "qemu-system-arm, qemu-user-static and binfmt-support too", file=sys.stderr)
        return 1
    if arch == "arm64" and not all((TESTBED_ARM64 / part).is_dir() for part in TESTBED_PARTS):
        subprocess.run([sys.executable, str(HERE / "testbed_arm64.py"), str(TESTBED_ARM64)], check=True)
    out: Path = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float | None] = {}
    qemu_rc: int | str
    t0 = time.monotonic()
    cache = build_root(args.suite)
    times["root_s"] = time.monotonic() - t0
    with tempfile.TemporaryDirectory(prefix="gputop-matrix-") as tmp:
        t0 = time.monotonic()
        src = Path(tmp) / "run"
        src.mkdir()
        stage(src, arch)
        shutil.rmtree(out / "out", ignore_errors=True)
        if args.on_host:
            times["run_disk_s"] = time.monotonic() - t0
            qemu_rc, times["qemu_wall_s"] = on_host(cache, src, Path(tmp), out / "console.log", timeout_s)
            shutil.copytree(Path(tmp) / "root" / "mnt" / "matrix" / "out", out / "out")
        else:
            disk = Path(tmp) / "run.img"
            make_disk(src, disk)
            times["run_disk_s"] = time.monotonic() - t0
            qemu_rc, times["qemu_wall_s"] = boot(cache, disk, out / "console.log", timeout_s, arch)
            subprocess.run(["debugfs", "-R", f"rdump /out {out}", str(disk)], check=True, capture_output=True)
    # what was tested: the commit, and the tracked files that differed from it in the work tree
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           stdout=subprocess.PIPE, text=True).stdout.split("\n")
    (out / "host-times.json").write_text(json.dumps({**times, "qemu_rc": qemu_rc, "cache": str(cache),
                                                     "head": head, "modified": [d[3:] for d in dirty if d]},
                                                    indent=1))
    if qemu_rc == "timed out":
        print(f"matrix: {args.suite}: timed out after {timeout_s:.0f} s", file=sys.stderr)
        return 124
    if qemu_rc == "locked up":
        print(f"matrix: {args.suite}: the guest's kernel locked up ({LOCKUP_REPORTS} soft-lockup reports in "
              f"{out / 'console.log'}); killed after {times['qemu_wall_s']:.0f} s", file=sys.stderr)
        return 125
    status = out / "out" / "status"
    if not status.is_file():
        print(f"matrix: {args.suite}: the guest left no status (see {out / 'console.log'})", file=sys.stderr)
        return 1
    return int(status.read_text().strip() or "1")


if __name__ == "__main__":
    sys.exit(main())
