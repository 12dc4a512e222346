"""Kernels before 6.1 log a WARNING when gputop's program loads ("trace type BPF program uses run-time
allocation": its hash maps allocate at run time); the matrix's bullseye guest showed it on its console.
gputop says so in `gputop doctor`, and refuses to load where kernel.panic_on_warn would turn the
warning into a panic (docs/collector.md, "Kernels before 6.1").

The real kernel here is 6.18 (it has bpf_mem_alloc and does not warn): an older kernel is stood in for by
a copy of this kernel's own BTF with that one name changed, and panic_on_warn by a file holding 1, both
bind-mounted over the real paths in a mount namespace of the test's own, around the real program. The
real 5.10, 6.1 and 6.12 are the matrix's (tests/matrix/test_kernels.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputop.sources.bpf import has_privileges
from gputop.sources.bpf.common import btf, linux

ROOT = Path(__file__).resolve().parents[2]
WARNS = ("this kernel logs a WARNING when a tracing program's hash maps allocate at run time (no bpf_mem_alloc: "
         "Linux before 6.1), as gputop's do, and kernel.panic_on_warn=1 makes any WARNING a panic")


def _old_btf(tmp_path: Path) -> Path:
    """This kernel's BTF with ``bpf_mem_alloc`` renamed (same length: still valid BTF)."""
    data = btf.VMLINUX.read_bytes()
    assert data.count(b"\0bpf_mem_alloc\0") == 1
    path = tmp_path / "vmlinux"
    path.write_bytes(data.replace(b"\0bpf_mem_alloc\0", b"\0bpf_mem_allod\0"))
    return path


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_this_kernel_does_not_warn() -> None:
    assert linux.warns_at_load() is False
    assert linux.load_refusal() is None


def test_a_kernel_without_bpf_mem_alloc_warns_by_its_btf_or_else_its_symbols(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert linux.warns_at_load(_old_btf(tmp_path)) is True
    assert linux.warns_at_load(missing, linux.KALLSYMS) is False          # no BTF: this kernel's symbols
    syms = linux.KALLSYMS.read_bytes()
    old = b"".join(line for line in syms.splitlines(keepends=True) if not line.endswith(b" bpf_mem_alloc\n"))
    assert len(old) < len(syms)
    assert linux.warns_at_load(missing, _file(tmp_path, "kallsyms", old.decode())) is True
    assert linux.warns_at_load(missing, missing) is None                  # neither: unknown


def test_panic_on_warn(tmp_path: Path) -> None:
    assert linux.panic_on_warn(_file(tmp_path, "p1", "1\n")) is True
    assert linux.panic_on_warn(_file(tmp_path, "p0", "0\n")) is False
    assert linux.panic_on_warn(tmp_path / "missing") is False
    assert linux.panic_on_warn() is (linux.PANIC_ON_WARN.read_text().strip() != "0")


def _as_on_an_old_kernel(tmp_path: Path, panic: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``gputop ARGS`` with an older kernel's BTF and ``panic_on_warn`` = ``panic`` at the real paths."""
    if not has_privileges():
        pytest.skip("needs root (mount namespaces, tracing)")
    binds = {_old_btf(tmp_path): btf.VMLINUX, _file(tmp_path, "panic_on_warn", panic + "\n"): linux.PANIC_ON_WARN}
    mounts = " && ".join(f"mount --bind {src} {dst}" for src, dst in binds.items())
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f'{mounts} && exec "$@"', "sh", sys.executable, "-m", "gputop.cli", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_with_panic_on_warn_gputop_refuses_to_load_and_says_why(tmp_path: Path) -> None:
    res = _as_on_an_old_kernel(tmp_path, "1", "-b", "-n", "1", "--bpf", "--no-nvml")
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [f"gputop: error: {WARNS}", f"hint: {linux.PANIC_HINT}"]
    assert res.stdout == ""


def test_doctor_fails_with_panic_on_warn_and_warns_without(tmp_path: Path) -> None:
    res = _as_on_an_old_kernel(tmp_path, "1", "doctor")
    lines = res.stdout.splitlines()
    assert res.returncode == 1, res.stdout
    i = lines.index(f"FAIL  kernel WARNING at load: {WARNS}: gputop will not load its program")
    assert lines[i + 1] == f"      fix: {linux.PANIC_HINT}"
    assert lines[-1] == "gputop cannot trace with BPF here (see FAIL)"
    res = _as_on_an_old_kernel(tmp_path, "0", "doctor")
    lines = res.stdout.splitlines()
    assert res.returncode == 0, res.stdout
    (warn,) = [line for line in lines if "kernel WARNING at load" in line]
    assert warn.startswith("WARN  kernel WARNING at load: no bpf_mem_alloc (Linux before 6.1): gputop's first load")
    assert lines[-1] == "gputop can trace with BPF"


def test_without_panic_on_warn_gputop_loads(tmp_path: Path) -> None:
    res = _as_on_an_old_kernel(tmp_path, "0", "-b", "-n", "1", "-d", "0.2", "--bpf", "--no-nvml")
    assert res.returncode == 0, res.stderr


def test_batch_mode_without_bpf_runs_untraced_and_says_why(tmp_path: Path) -> None:
    res = _as_on_an_old_kernel(tmp_path, "1", "-b", "-n", "1", "-d", "0.2", "--no-nvml")
    assert res.returncode == 0, res.stderr
    assert f"gputop: tracing is off ({WARNS}): NVML and host data only. To trace: {linux.PANIC_HINT}" in (
        res.stderr.splitlines())
