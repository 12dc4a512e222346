"""Hostile names for the tests of issue 10: a real workload binary whose file name (so its comm and
argv[0]) and whose kernel's ELF symbol carry terminal escapes, a bell, a byte of invalid UTF-8 and a
bidirectional override. gputop must show them as visible escapes, never act on them."""

from __future__ import annotations

import os
from pathlib import Path

#: the file name, 15 bytes: the kernel's whole comm. ESC[2J clears the screen, ESC[31m turns it red,
#: BEL rings, 0x9b is not UTF-8 (and is the C1 CSI in Latin-1)
COMM = b"\x1b[2J\x1b[31mEVIL\x07\x9b"
#: how every display shows it
COMM_SHOWN = "\\x1b[2J\\x1b[31mEVIL\\x07\\x9b"
#: in JSON: the control characters raw (JSON escapes them), the invalid byte as the text \x9b
COMM_JSON = "\x1b[2J\x1b[31mEVIL\x07\\x9b"

#: tests/native/cuda_workload.c's host stub 2, whose symbol names the kernel it launches
STUB2 = b"_ZN6gputop4test12saxpy_kernelEfPKfPf"
#: the same number of bytes, with a right-to-left override (U+202E) too
KERNEL = b"\x1b[2J\x1b[31mEVIL\x07\x9b\xe2\x80\xaeKERNEL".ljust(len(STUB2), b"x")
KERNEL_SHOWN = "\\x1b[2J\\x1b[31mEVIL\\x07\\x9b\\u{202e}KERNEL" + "x" * (len(STUB2) - 24)
KERNEL_JSON = "\x1b[2J\x1b[31mEVIL\x07\\x9b\u202eKERNEL" + "x" * (len(STUB2) - 24)


def hostile_workload(workload: Path, folder: Path) -> Path:
    """A copy of ``workload`` (tests/native/cuda_workload.c, linked with libcudart.so.12) named
    ``COMM`` in ``folder``, with stub 2's symbol renamed ``KERNEL`` (same length: a crafted ELF
    symbol table, the code unchanged)."""
    data = workload.read_bytes()
    assert STUB2 in data, f"{workload} has no symbol {STUB2!r}"
    path = Path(os.fsdecode(os.fsencode(folder) + b"/" + COMM))
    path.write_bytes(data.replace(STUB2, KERNEL))
    path.chmod(0o755)
    return path
