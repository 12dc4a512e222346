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
