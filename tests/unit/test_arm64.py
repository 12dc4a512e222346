"""Issue 39: what gputop decodes of arm64 code and arguments, checked on any host (the arm64 guests of the kernel
matrix run it for real: docs/matrix.md). The thunk detection on the aarch64 runtimes' own code (when
scripts/matrix/testbed_arm64.py fetched them), the trap calibration's machine code, and the BPF text's
architecture switch: every handler that reads past the argument registers goes through arch.bpf.h."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from gputop.sources.bpf.attach import catalogue, symbols
from gputop.sources.bpf.common import elfread
from gputop.sources.bpf.cost import trapcost

ROOT = Path(__file__).resolve().parent.parent.parent
ARM64_TESTBED = ROOT / ".cache" / "testbed-arm64"


def _words(*ws: int) -> bytes:
    return b"".join(struct.pack("<I", w) for w in ws)


def _b(offset_insns: int) -> int:
    return 0x14000000 | (offset_insns & 0x3FFFFFF)


def test_arm64_thunks_are_told_from_bodies() -> None:
    syms = symbols.ObjectSymbols("libcudart.so.12", machine=elfread.EM_AARCH64,
                                 functions={"__cudaLaunchKernel": 0x1000, "__cudaLaunchKernel_ptsz": 0x2000})
    # the aarch64 runtimes' own: sub sp, sp, #0x20; mov w4, w4; mov w2, w2; add sp, sp, #0x20; b +0x100
    syms.code_heads["__cudaLaunchKernel"] = _words(0xD10083FF, 0x2A0403E4, 0x2A0203E2, 0x910083FF, _b(0x40),
                                                   0xD503201F)
    assert syms.jump_target("__cudaLaunchKernel") == 0x1000 + 16 + 0x100
    # bti c, then a backwards branch
    syms.code_heads["__cudaLaunchKernel_ptsz"] = _words(0xD503245F, _b(-8))
    assert syms.jump_target("__cudaLaunchKernel_ptsz") == 0x2000 + 4 - 32
    # a body: stp x29, x30, [sp, #-304]! then a store: not a thunk
    syms.code_heads["__cudaLaunchKernel"] = _words(0xA9AD7BFD, 0x910003FD, 0xA90153F3, _b(4))
    assert syms.jump_target("__cudaLaunchKernel") == -1
    # mov w4, w5 changes a value: not a thunk's
    syms.code_heads["__cudaLaunchKernel"] = _words(0x2A0503E4, _b(4))
    assert syms.jump_target("__cudaLaunchKernel") == -1
    # x86-64 bytes are not read as arm64's, nor arm64's as x86-64's
    x86 = symbols.ObjectSymbols("x", functions={"__cudaLaunchKernel": 0x1000},
                                code_heads={"__cudaLaunchKernel": _words(0xD503245F, _b(2))})
    assert x86.jump_target("__cudaLaunchKernel") == -1


@pytest.mark.parametrize("folder,soname", [("cudart", "libcudart.so.12"), ("cudart13", "libcudart.so.13")])
def test_the_aarch64_runtimes_launch_thunks_jump_to_the_public_entries(folder: str, soname: str) -> None:
    lib = ARM64_TESTBED / folder / soname
    if not lib.is_file():
        pytest.skip(f"no {lib} (python3 scripts/matrix/testbed_arm64.py fetches it)")
    syms = symbols.read_symbols(str(lib))
    assert syms is not None and syms.machine == elfread.EM_AARCH64
    f = syms.functions
    assert syms.jump_target("__cudaLaunchKernel") == f["cudaLaunchKernel"]
    assert syms.jump_target("__cudaLaunchKernel_ptsz") == f["cudaLaunchKernel_ptsz"]
    probes = dict((p.symbol, p.entry) for p, _ in catalogue.probes_for(f, syms.jump_target))
    # the thunk is not probed (a launch counted twice), the public entry counts every launch
    assert "__cudaLaunchKernel" not in probes and probes["cudaLaunchKernel"] == "rt_launch"


def test_the_calibrations_machine_code_for_each_architecture() -> None:
    loop, func = trapcost._LOOP_AARCH64, trapcost._FUNC_AARCH64
    assert len(loop) % 4 == 0 and len(func) % 4 == 0
    assert len(loop) <= min(trapcost._OFFSETS.values())
    assert all(b - a >= len(func) for a, b in zip(sorted(trapcost._OFFSETS.values()),
                                                  sorted(trapcost._OFFSETS.values())[1:]))
    words = struct.unpack(f"<{len(func) // 4}I", func)
    assert words[0] == 0xA9BF7BFD and words[-1] == 0xD65F03C0       # stp x29, x30, [sp, #-16]! ... ret
    assert struct.unpack("<I", loop[-4:])[0] == 0xD65F03C0
    assert trapcost._LOOP_X86_64.endswith(b"\xc3") and trapcost._FUNC_X86_64.startswith(b"\x55")


_BPF = ROOT / "bpf"


def test_no_handler_reads_the_stack_but_through_arch_bpf_h() -> None:
    """Where arguments lie past the registers (or the return address) differs by architecture: the
    handlers read them through arch.bpf.h's macros, or inside an explicit #ifdef GPUTOP_ARM64 ... #else."""
    for path in sorted(_BPF.glob("*.bpf.h")):
        if path.name == "arch.bpf.h":
            continue
        text = path.read_text()
        stripped = re.sub(r"#ifdef GPUTOP_ARM64.*?#endif", "", text, flags=re.S)
        for m in re.finditer(r"PT_REGS_SP\(ctx\)\s*\+|read_u\d+\(sp\b|read_u\d+\(PT_REGS_SP", stripped):
            line = stripped[:m.start()].count("\n") + 1
            raise AssertionError(f"{path.name}: a stack read outside arch.bpf.h and #ifdef GPUTOP_ARM64 "
                                 f"(near line {line}): {stripped.splitlines()[line - 1].strip()}")
    arch = (_BPF / "arch.bpf.h").read_text()
    for macro in ("ARG7", "ARG8", "STACK_ARG", "RA_SLOT", "RA_OF", "BIG_BYVAL"):
        assert len(re.findall(rf"#define {macro}\(", arch)) == 2, macro      # one per architecture
    assert '#include "arch.bpf.h"' in (_BPF / "gputop.bpf.c").read_text()


def test_the_matrix_boots_an_arm64_suite_on_qemus_virt_board() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("matrix_vm_arm64", ROOT / "scripts" / "matrix" / "vm.py")
    assert spec is not None and spec.loader is not None
    vm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vm)
    assert (vm.arch_of("bookworm-arm64"), vm.arch_of("trixie-arm64"), vm.arch_of("bookworm")) == (
        "arm64", "arm64", "amd64")
    cmd = vm.qemu_command(Path("/c"), Path("/d"), "arm64")
    assert cmd[:3] == ["qemu-system-aarch64", "-M", "virt"] and "max,pauth-impdef=on" in cmd
    assert "root=/dev/vda rw console=ttyAMA0 init=/usr/local/sbin/matrix-init" in cmd
    # the x86-64 suites' command line as it was
    assert vm.qemu_command(Path("/c"), Path("/d")) == [
        "qemu-system-x86_64", "-accel", "tcg,thread=single", "-cpu", "max", "-m", "2G", "-smp", "2", "-nographic",
        "-no-reboot", "-kernel", "/c/vmlinuz", "-initrd", "/c/initrd.img",
        "-append", "root=/dev/vda rw console=ttyS0 init=/usr/local/sbin/matrix-init",
        "-drive", "file=/c/root.img,format=raw,if=virtio,snapshot=on", "-drive", "file=/d,format=raw,if=virtio",
        "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0"]


_CROSS_CC = "aarch64-linux-gnu-gcc"
_REG_NAMES = {"host_side_stub": b"_ZN6gputop4test13device_lambdaIZ4mainEUlfE_EEvT_", "second_stub": b"second_kernel"}


@pytest.mark.parametrize("flags", [("-O0", "-shared", "-fPIC"), ("-O2", "-shared", "-fPIC"),
                                   ("-O3", "-shared", "-fPIC"), ("-O2", "-no-pie", "-DOWN_REGISTER"),
                                   ("-O2", "-DOWN_REGISTER")],
                         ids=["O0", "O2", "O3", "no-pie", "pie"])
def test_arm64_registration_code_gives_each_stubs_device_name(flags: tuple[str, ...], tmp_path: Path) -> None:
    """tests/unit/test_regcode.py's objects built for aarch64 (gcc-aarch64-linux-gnu): regcode_arm64 maps each
    host stub to the device name it registers, whatever the stub's own symbol."""
    import os
    import shutil
    import subprocess

    if shutil.which(_CROSS_CC) is None:
        pytest.skip(f"no {_CROSS_CC} (apt-get install gcc-aarch64-linux-gnu)")
    obj = tmp_path / "kernels"
    subprocess.run([_CROSS_CC, *flags, "-o", str(obj), str(ROOT / "tests" / "native" / "registered_kernels.c")],
                   check=True, capture_output=True)
    fd = os.open(obj, os.O_RDONLY)
    try:
        syms = symbols.read_symbols(fd, str(obj))
        assert syms is not None and syms.machine == elfread.EM_AARCH64
        got = {}
        for stub, at in syms.registered.items():
            off = syms.offset_of_constant(at)
            got[syms.name_at(stub)] = os.pread(fd, 128, off).split(b"\0")[0] if off is not None else None
    finally:
        os.close(fd)
    assert got == _REG_NAMES


def test_arm64_registration_scan_of_hostile_code_is_bounded(tmp_path: Path) -> None:
    """4 MiB of thread-limit markers, adrp/add pairs and calls, as densely as possible: the scan stops at its
    deadline (ElfError), and without one it returns within its bounds."""
    import os
    import time

    from gputop.sources.bpf.attach import regcode, regcode_arm64

    site = struct.pack("<6I", 0x90000001, 0x91000021, 0x90000003, 0x91000063, 0x12800004, 0x94000100)
    code = tmp_path / "code"
    code.write_bytes(site * ((4 << 20) // len(site)))
    fd = os.open(code, os.O_RDONLY)
    try:
        with pytest.raises(elfread.ElfError):
            regcode_arm64.registrations(fd, [(0x10000, 0, code.stat().st_size)], time.monotonic() - 1)
        t0 = time.monotonic()
        out = regcode_arm64.registrations(fd, [(0x10000, 0, code.stat().st_size)], time.monotonic() + 120)
        assert len(out) <= regcode.MAX_REGISTRATIONS and time.monotonic() - t0 < 120
    finally:
        os.close(fd)
