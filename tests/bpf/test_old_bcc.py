"""What an old bcc needs of gputop beyond its fallbacks (docs/matrix.md, defects 11 and 12), on this
machine's kernel: bcc 0.18 reads tracepoints' formats under debugfs only, so gputop mounts debugfs
where nothing is mounted there; and bcc 0.18's LLVM 11 cannot emit the BPF cmpxchg a 5.12+ kernel
takes (the compile aborts the process), so a full compile is preceded by a one-line compile in a child,
and the program is compiled without cmpxchg where that fails. The real bcc 0.18 runs on this kernel in
tests/matrix/test_kernels.py[bullseye-on-host]."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gputop.sources.bpf import TRACEFS, BpfSource, load_bcc, use_headers
from gputop.sources.bpf.common import linux
from gputop.sources.bpf.program import compilecache

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_bcc_reading_tracepoints_under_debugfs_gets_debugfs_mounted() -> None:
    """In a mount namespace of its own (this machine keeps debugfs unmounted) and, beside it, where
    debugfs is mounted already (nothing more is mounted)."""
    code = textwrap.dedent("""
        import subprocess, sys
        from pathlib import Path
        from gputop.sources.bpf.common import linux
        want = Path("/sys/kernel/debug/tracing")
        subprocess.run(["umount", "-l", "/sys/kernel/debug"], capture_output=True)
        assert not (want / "events").is_dir()
        assert linux.ensure_tracefs(want) is None
        assert (want / "events" / "sched" / "sched_process_exit" / "format").is_file()
        mounts = Path("/proc/self/mounts").read_text()
        assert mounts.count(" /sys/kernel/debug debugfs ") == 1, mounts
        assert linux.ensure_tracefs(want) is None          # again: nothing more mounted
        assert Path("/proc/self/mounts").read_text().count(" /sys/kernel/debug") == mounts.count(" /sys/kernel/debug")
        assert linux.ensure_tracefs(linux.TRACEFS) is None and linux.ensure_tracefs() is None
        print("ok")
    """)
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (res.returncode, res.stdout.strip()) == (0, "ok"), res.stderr


def _llvm_major() -> int:
    """The major version of the LLVM this process's bcc loaded, mapped with libbcc: libLLVM-N.so
    (Debian 12's LLVM 14) or libLLVM.so.N.M (Debian 13's LLVM 19)."""
    majors = {int(m.group(1) or m.group(2)) for line in Path("/proc/self/maps").read_text().splitlines()
              for m in [re.search(r"/libLLVM(?:-(\d+)[.\d]*\.so|\.so\.(\d+))", line)] if m}
    assert len(majors) == 1, majors
    return majors.pop()


def test_the_compiler_emits_cmpxchg_from_llvm_12_on() -> None:
    """The child compile's verdict against bcc's LLVM: 12+ emits BPF cmpxchg (this machine's 14),
    11 aborts (Debian 11's bcc 0.18, run here by tests/matrix[bullseye-on-host] and ./test.sh in its root)."""
    bcc = load_bcc()
    use_headers()
    assert linux.compiler_cmpxchg(bcc) is (_llvm_major() >= 12)


def test_an_aborting_compile_is_told_apart_from_other_failures(tmp_path: Path) -> None:
    """A stand-in module named bcc whose compile does what LLVM 11's does (its message, then abort),
    and one whose compile fails otherwise: False, then None (cannot tell)."""
    real = sys.modules.get("bcc")
    for name, body, want in (
            ("llvm11", "sys.stderr.write('LLVM ERROR: Cannot select: 0x1: i64,ch = AtomicCmpSwap<...>\\n'); "
                       "sys.stderr.flush(); os.abort()", False),
            ("broken", "raise Exception('Failed to compile BPF module <text>')", None)):
        pkg = tmp_path / name / "bcc"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"import os, sys\nclass BPF:\n    def __init__(self, text):\n        {body}\n")
        sys.path.insert(0, str(tmp_path / name))
        try:
            sys.modules.pop("bcc", None)
            fake = importlib.import_module("bcc")
            assert linux.compiler_cmpxchg(fake) is want, name
        finally:
            sys.path.remove(str(tmp_path / name))
            sys.modules.pop("bcc", None)
            if real is not None:
                sys.modules["bcc"] = real


def test_flags_a_compiler_cannot_take_are_asked_before_a_full_compile_only(tmp_path: Path) -> None:
    """The program is compiled (and cached) with the flags ``before_full`` gives; the next start finds
    it under those after asking again; a program cached with the original flags is used without asking."""
    bcc = load_bcc()
    headers = use_headers()
    if linux.atomic_cmpxchg() and linux.compiler_cmpxchg(bcc) is False:
        # the original flags' compile would abort this process, as it would gputop without the fallback
        pytest.skip("this bcc's compiler cannot emit the cmpxchg this kernel takes (LLVM before 12)")
    src = BpfSource()
    text, cflags = src.program_text().encode(), src.cflags()
    assert linux.NO_CMPXCHG not in cflags
    asked: list[list[str]] = []

    def without_cas(flags: list[str]) -> list[str]:
        asked.append(flags)
        return [*flags, linux.NO_CMPXCHG]

    for want in ("compiled", "cached"):
        bpf, how = compilecache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path, without_cas)
        bpf.cleanup()
        assert how == want and len(asked) == (1 if want == "compiled" else 2)
    assert compilecache.read(compilecache.key(bcc, text, cflags, headers.path, TRACEFS), tmp_path) is None
    assert compilecache.read(compilecache.key(bcc, text, [*cflags, linux.NO_CMPXCHG], headers.path, TRACEFS),
                         tmp_path) is not None
    bpf, how = compilecache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path)    # as ever
    bpf.cleanup()
    bpf, how = compilecache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path, without_cas)
    bpf.cleanup()
    assert how == "cached" and len(asked) == 2          # the original flags' program: nothing asked
