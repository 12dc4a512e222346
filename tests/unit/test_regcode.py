"""Device names from an object's registration code (attach/regcode.py): nvcc's registration calls as gcc
emits them at -O0, -O2 and -O3, position-independent (a shared object calling the runtime's PLT) and at a
fixed address (a program defining the function, as one linked with the static runtime), each host stub
mapped to the device name it registers, whatever the stub's own symbol; and what a hostile object can make
of it: bounded in time, and data that is not a name is not taken for one."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest
from support import build_native

from gputop.sources.bpf.attach import regcode, symbols
from gputop.sources.bpf.common import elfread

NAMES = {"host_side_stub": b"_ZN6gputop4test13device_lambdaIZ4mainEUlfE_EEvT_", "second_stub": b"second_kernel"}


def _registered(path: Path) -> dict[str | None, bytes | None]:
    fd = os.open(path, os.O_RDONLY)
    try:
        syms = symbols.read_symbols(fd, str(path))
        assert syms is not None
        out: dict[str | None, bytes | None] = {}
        for stub, at in syms.registered.items():
            off = syms.offset_of_constant(at)
            out[syms.name_at(stub)] = os.pread(fd, 128, off).split(b"\0")[0] if off is not None else None
        return out
    finally:
        os.close(fd)


@pytest.mark.parametrize("opt", ["-O0", "-O2", "-O3"])
def test_a_shared_objects_registrations(opt: str) -> None:
    lib = build_native("registered_kernels.c", f"regcode/libkernels{opt}.so", opt, "-shared", "-fPIC")
    assert _registered(lib) == NAMES


def test_a_program_at_a_fixed_address() -> None:
    exe = build_native("registered_kernels.c", "regcode/kernels-no-pie", "-O2", "-no-pie", "-DOWN_REGISTER")
    assert _registered(exe) == NAMES


def test_an_object_that_does_not_name_the_function_is_not_scanned() -> None:
    plain = build_native("untouched_names.c", "libuntouched_names.so", "-shared", "-fPIC")
    fd = os.open(plain, os.O_RDONLY)
    try:
        syms = symbols.read_symbols(fd, str(plain))
        assert syms is not None and syms.registered == {}
    finally:
        os.close(fd)


def test_hostile_code_is_bounded_and_its_data_not_taken_for_names(tmp_path: Path) -> None:
    """4 MiB of thread-limit markers each followed by a call and argument loads (every shape the scanner
    looks for, as densely as possible): the scan stops at its deadline; a name that is not one is refused."""
    site = b"\x48\x8d\x35\x00\x00\x00\x00" b"\x48\x8d\x0d\x00\x00\x00\x00" b"\x41\xb8\xff\xff\xff\xff"
    # every site's call reaches vaddr 0: all of them are taken as registrations (the most work there is)
    code = b"".join(site + b"\xe8" + struct.pack("<i", -(i * 25 + 25)) for i in range((4 << 20) // 25))
    blob = tmp_path / "code"
    blob.write_bytes(code)
    fd = os.open(blob, os.O_RDONLY)
    try:
        with pytest.raises(elfread.ElfError):
            regcode.registrations(fd, [(0, 0, len(code))], time.monotonic() + 0.05)
        found = regcode.registrations(fd, [(0, 0, len(code))], time.monotonic() + 60)
        assert len(found) == len(code) // 25
    finally:
        os.close(fd)
    assert regcode.is_name(b"_ZN6gputop4test13device_lambdaIZ4mainEUlfE_EEvT_")
    assert regcode.is_name(b"second_kernel")
    for junk in (b"UH\x89\xe5AVI", b"", b"a b", b"%s: error\n", b"1abc"):
        assert not regcode.is_name(junk)
