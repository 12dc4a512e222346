"""Issue 39: gputop's BPF program compiles for arm64 on this x86-64 host, with and without BPF's atomics
(a unit test: it attaches nothing and counts nothing host-wide, so it runs on every CPU beside the others).

bcc compiles for the architecture its ARCH variable names (its own cross-compile switch: the target triple and
the kernel's arch/ headers), here against Debian's linux-headers-arm64 (.cache/testbed-arm64/headers, fetched by
scripts/matrix/testbed_arm64.py): every #ifdef GPUTOP_ARM64 path of bpf/ is compiled on every run, not only in
the arm64 guests of the kernel matrix (on demand, an hour each: docs/matrix.md). The maps are created by bcc
(the host's kernel); no program is loaded: their instructions are arm64's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
HEADERS = ROOT / ".cache" / "testbed-arm64" / "headers" / "usr" / "src"

_COMPILE = """
import os, sys, tempfile
from pathlib import Path
from gputop.sources.bpf.program import program, kheaders
from gputop.sources.bpf.common import abi
usr_src = Path(sys.argv[1])
build = next(usr_src.glob("linux-headers-*-arm64"))
merged = kheaders._merge(build, kheaders._common_half(usr_src, build.name), Path(tempfile.mkdtemp()))
os.environ["BCC_KERNEL_SOURCE"] = str(merged)
os.environ["ARCH"] = "arm64"
bcc = program.load_bcc()
text = program.program_text() + "\\n#ifndef GPUTOP_ARM64\\n#error not compiled for arm64\\n#endif\\n"
bcc.BPF(text=text, cflags=[*abi.cflags({}), "-DPID_GEN_WORDS=4096", *sys.argv[2:]])
print("compiled for arm64")
"""


@pytest.mark.parametrize("atomics", [True, False], ids=["cmpxchg", "no-cmpxchg"])
def test_the_program_compiles_for_arm64(atomics: bool) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the arm64 compile check runs on x86-64 hosts (an arm64 host compiles for itself)")
    if not HEADERS.is_dir():
        pytest.skip("no arm64 headers: python3 scripts/matrix/testbed_arm64.py fetches them")
    from gputop.sources.bpf.common.linux import NO_CMPXCHG

    res = subprocess.run([sys.executable, "-c", _COMPILE, str(HEADERS), *([] if atomics else [NO_CMPXCHG])],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    errors = [line for line in res.stderr.splitlines() if "error" in line]
    why = "\n".join(errors[:20]) or res.stderr[-3000:]
    assert (res.returncode, res.stdout.strip()) == (0, "compiled for arm64"), why
