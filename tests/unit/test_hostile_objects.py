"""Issue 25: a mapped object is another user's file. Each attack the review found, on the real
reading code: a FIFO or a symlink in a file's place, a file truncated under the reader, a sparse
1 GiB memfd, a symbol table of entry size 1, 300 symbols sharing one unterminated 1 MiB name, and
names that demangle to hundreds of megabytes. Files are made by uid 65534 (nobody) where the
owner matters; the memory-bound checks run in a child process and read its peak RSS."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from hostile_objects import demangling_bomb, entsize_one, symbols_sharing_one_name

from gputop.sources.bpf.attach import discovery, symbols
from gputop.sources.bpf.common import elfread
from gputop.sources.bpf.names.kernelnames import DEMANGLE_BUDGET_S

NOBODY = 65534
ROOT = Path(__file__).resolve().parent.parent.parent


def _child(code: str) -> tuple[str, int]:
    """Run ``code`` in a fresh interpreter; returns its stdout and its peak RSS in KiB."""
    # VmHWM is this image's own peak (ru_maxrss also counts the parent's memory at a vfork)
    peak = "print('maxrss', [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0])"
    wrapped = textwrap.dedent(code) + "\n" + peak + "\n"
    res = subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
    assert res.returncode == 0, (res.returncode, res.stderr[-2000:])
    *lines, last = res.stdout.strip().splitlines()
    return "\n".join(lines), int(last.split()[1])


def _opened_within(fn, timeout_s: float = 5.0):  # type: ignore[no-untyped-def]
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), "the open is stuck (a FIFO opened for reading waits for a writer)"
    return out[0]


def test_a_fifo_in_the_files_place_is_never_opened(tmp_path: Path) -> None:
    """The review's hang: a regular file and a FIFO swapped between the check and the open. The
    object is checked on a descriptor that opens nothing (O_PATH): a FIFO is refused, at once."""
    lib = tmp_path / "libcudart.so.12"
    lib.write_bytes(b"\x7fELF")
    st = lib.stat()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY, NOBODY)
    os.rename(lib, tmp_path / "moved")
    os.rename(fifo, lib)                    # the path the process mapped is a FIFO now
    assert _opened_within(lambda: discovery.open_object(str(lib), st.st_dev, st.st_ino)) is None
    # even a FIFO that has the inode asked for (the check is on the file, not on the numbers)
    fst = lib.stat()
    assert _opened_within(lambda: discovery.open_object(str(lib), fst.st_dev, fst.st_ino)) is None


def test_a_symlink_in_the_files_place_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "root-only"
    target.write_bytes(b"\x7fELF secret")
    st = target.stat()
    link = tmp_path / "libcudart.so.12"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    assert discovery.open_object(str(link), st.st_dev, st.st_ino) is None
    fd = discovery.open_object(str(target), st.st_dev, st.st_ino)
    assert fd is not None
    os.close(fd)


def test_a_file_truncated_under_the_reader_is_no_sigbus(tmp_path: Path, testbed) -> None:  # type: ignore[no-untyped-def]
    """The review's SIGBUS: a mapped file truncated while gputop scanned it through mmap. Reads
    are pread now: a truncated file reads short. 300 reads against a writer that truncates and
    restores the file without pause; the child must exit 0 (SIGBUS: -7)."""
    lib = tmp_path / "lib.so"
    lib.write_bytes(testbed.libcudart.read_bytes())
    out, _rss = _child(f"""
        import os, threading
        from gputop.sources.bpf.attach import symbols
        path, data = {str(lib)!r}, open({str(testbed.libcudart)!r}, "rb").read()
        stop = False
        def churn():
            while not stop:
                with open(path, "r+b") as f:
                    f.truncate(0)
                    f.write(data)
        t = threading.Thread(target=churn); t.start()
        verdicts = set()
        for _ in range(300):
            fd = os.open(path, os.O_RDONLY)
            try:
                verdicts.add(symbols.mentions_cuda(fd))
                symbols.read_symbols(fd, path)
            finally:
                os.close(fd)
        stop = True; t.join()
        print(sorted(verdicts))
    """)
    assert out in ("[False, True]", "[True]", "[False]")


def test_a_sparse_memfd_is_not_read_into_memory() -> None:
    """The review's OOM: a 1 GiB sparse memfd named libcudart.so.12, paged in by the old whole-file
    search (430 MB charged to gputop). Not an ELF object: refused from its first bytes; an ELF
    object whose string table spans the whole GiB with the CUDA name in its last bytes: found,
    with reads of one MiB at a time (holes read as zeros without being allocated)."""
    out, rss_kib = _child("""
        import os
        from hostile_objects import huge_string_table
        from gputop.sources.bpf.attach import symbols
        size = 1 << 30
        plain = os.memfd_create("libcudart.so.12")
        os.ftruncate(plain, size)
        os.pwrite(plain, b"cudaLaunchKernel", size - 64)
        crafted = os.memfd_create("libcudart.so.12")
        head, at = huge_string_table(size)
        os.pwrite(crafted, head, 0)
        os.ftruncate(crafted, size)
        os.pwrite(crafted, b"cudaLaunchKernel", at)
        print(symbols.mentions_cuda(plain), symbols.mentions_cuda(crafted), symbols.read_symbols(plain))
    """)
    assert out == "False True None"
    assert rss_kib < 128 * 1024, f"peak RSS {rss_kib} KiB reading a 1 GiB sparse object"


def test_a_symbol_table_of_entry_size_one_is_refused_at_once(tmp_path: Path) -> None:
    """The review's CPU stall: .symtab with sh_entsize 1 over a 2 MiB file cost 31 s in pyelftools
    (a symbol per byte). The entry size is checked: the object is refused, reading nothing more."""
    path = tmp_path / "libcudart.so.12"
    path.write_bytes(entsize_one(2 << 20))
    with open(path, "rb") as f:
        reader = elfread.ElfReader(f.fileno())
        try:
            reader.symbol_tables()
        except elfread.ElfError as e:
            assert str(e) == "bad symbol table"
        else:
            raise AssertionError("a symbol table of entry size 1 was accepted")
    assert symbols.read_symbols(str(path)) is None
    assert symbols.mentions_cuda(str(path)) is False


def test_symbols_sharing_one_unterminated_name_cost_4_kib_once() -> None:
    """The review's memory amplification: 300 symbols naming one unterminated 1 MiB string cost
    350 MB. A name is cut at 4 KiB (kept, ending in an ellipsis) and read once."""
    out, rss_kib = _child("""
        import os
        from hostile_objects import symbols_sharing_one_name
        from gputop.sources.bpf.attach import symbols
        fd = os.memfd_create("crafted")
        os.write(fd, symbols_sharing_one_name(300, 1 << 20))
        syms = symbols.read_symbols(fd, "crafted")
        names = syms._names
        print(len(names), {len(n) for n in names}, {n[-1] for n in names}, len({id(n) for n in names}),
              list(syms.functions.values())[:1])
    """)
    assert out == "300 {4097} {'…'} 1 [8880]"          # the last global definition of the name wins
    assert rss_kib < 96 * 1024, f"peak RSS {rss_kib} KiB"


def test_whole_names_are_kept_whole(tmp_path: Path) -> None:
    """The cut applies only past 4 KiB: a 4,096-byte name is kept whole."""
    path = tmp_path / "lib.so"
    blob = bytearray(symbols_sharing_one_name(1, 4096))
    blob[-1:] = b"\0"                           # its last byte ends it: 4,095 bytes of name
    path.write_bytes(bytes(blob))
    syms = symbols.read_symbols(str(path))
    assert syms is not None and [len(n) for n in syms._names] == [4095]


def _started() -> None:
    """What starting c++filt costs here, measured before the runs are timed (once per program: symbols._start_s)."""
    cxxfilt = symbols.cxxfilt_path()
    assert cxxfilt is not None
    symbols._start_s(cxxfilt)


def test_a_demangling_bomb_costs_half_a_second_a_few_times() -> None:
    """The review's c++filt stall: names of 250 bytes whose demangled form doubles per level
    (10 s timeouts, a 109 MB name in every JSON line). A run is killed after 0.5 s (the name
    stays mangled); a failed run is tried again DEMANGLE_TRIES times in all (a busy host's run may
    miss its deadline: its name must not stay mangled for good), then the name is kept as it is; a
    demangled name is cut at 4 KiB; both are cached."""
    d = symbols.Demangler()
    bomb = demangling_bomb(24)               # 400 MB demangled
    _started()
    for _ in range(symbols.DEMANGLE_TRIES):
        t0 = time.monotonic()
        assert d(bomb) == bomb
        first = time.monotonic() - t0
        assert first >= symbols.DEMANGLE_TIMEOUT_S / 2
    t0 = time.monotonic()
    assert d(bomb) == bomb                   # cached: no more runs
    assert time.monotonic() - t0 < first / 10
    small = d(demangling_bomb(10))           # 24 KB demangled: cut
    assert small is not None and len(small) == symbols.DEMANGLED_MAX + 1 and small.endswith("…")
    assert small.startswith("f(A<int>, A<A<int>, A<int> >, ")
    assert d("_Z10fused_stepPfS_i") == "fused_step(float*, float*, int)"
    long = "_Z" + "x" * symbols.DEMANGLE_INPUT_MAX
    assert d(long) == long                   # past the input cap: not run at all


def test_demangling_has_a_budget_per_refresh() -> None:
    """Many bombs in one refresh: once the refresh's demangling time is spent, names wait for
    the next refresh (None) instead of stalling the collector."""
    d = symbols.Demangler()
    _started()
    d.deadline = time.monotonic() + DEMANGLE_BUDGET_S
    t0 = time.monotonic()
    results = [d(demangling_bomb(24) + "i" * k) for k in range(8)]
    spent = time.monotonic() - t0
    assert results[0] is not None and results[-1] is None
    # one run past the budget: its limit, 0.5 s past what starting c++filt costs here (symbols._start_s)
    limit = symbols.DEMANGLE_TIMEOUT_S + 2 * symbols._start_s(symbols.cxxfilt_path() or "")
    assert spent < DEMANGLE_BUDGET_S + limit + 0.5


def test_a_worker_stuck_in_a_read_is_left_behind_and_replaced(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A read that never returns (a file its owner serves through FUSE) fails with Stuck once it
    outlasts STUCK_S; a new worker reads what comes next; after MAX_ABANDONED stuck workers the
    pool reads no more instead of leaving threads without end."""
    import threading as th

    from gputop.sources.bpf.attach import objreads

    monkeypatch.setattr(objreads, "STUCK_S", 0.2)
    monkeypatch.setattr(objreads, "MAX_ABANDONED", 2)
    pool: objreads.SmallestFirst[int] = objreads.SmallestFirst(1, "test-stuck")
    release = th.Event()
    try:
        stuck = pool.submit(0, lambda: release.wait() and 0)
        after = pool.submit(1, lambda: 7)
        time.sleep(0.4)
        assert not after.done()                  # queued behind the stuck call
        pool.check_stuck()
        assert isinstance(stuck.exception(timeout=1), objreads.Stuck)
        assert after.result(timeout=1) == 7      # the replacement worker
        again = pool.submit(0, lambda: release.wait() and 0)
        time.sleep(0.4)
        pool.check_stuck()
        assert isinstance(again.exception(timeout=1), objreads.Stuck) and pool.abandoned == 2
        refused = pool.submit(0, lambda: 1)
        assert isinstance(refused.exception(timeout=1), objreads.Stuck)     # no workers left
    finally:
        release.set()
        pool.close()


def test_a_memory_read_that_blocks_returns_none_in_its_time() -> None:
    """Reads of a process's memory run bounded (BoundedCalls): one that blocks returns None after
    its timeout, and the next call runs on a fresh worker."""
    import threading as th

    from gputop.sources.bpf.attach import objreads

    calls = objreads.BoundedCalls("test-mem", 0.2)
    release = th.Event()
    try:
        t0 = time.monotonic()
        assert calls.call(lambda: release.wait() and b"never") is None
        assert time.monotonic() - t0 < 1.0
        assert calls.call(lambda: b"name") == b"name"
    finally:
        release.set()
        calls.close()


def test_reads_nobody_came_back_for_do_not_block_later_ones(tmp_path: Path, testbed) -> None:  # type: ignore[no-untyped-def]
    """Objects whose reads outlasted their scan, and whose processes then went, leave finished
    reads behind: they neither count against MAX_QUEUED nor stay for good (the full suite found
    gputop, after many short-lived processes, reading nothing more)."""
    from gputop.sources.bpf.attach import objreads

    reads = objreads.ObjectReads()
    lib = tmp_path / "lib.so"
    lib.write_bytes(testbed.libcudart.read_bytes())
    fd = os.open(lib, os.O_RDONLY)
    try:
        for i in range(objreads.MAX_QUEUED + 6):
            with reads.budget(0.0), contextlib.suppress(objreads.Pending):
                reads.read((0, i), fd, str(lib))
        deadline = time.monotonic() + 30
        while reads.running() and len(reads.done()) < objreads.MAX_QUEUED:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with reads.budget(10.0):
            syms = reads.read((0, 10_000), fd, str(lib))
        assert syms is not None and "cudaLaunchKernel" in syms.functions
        for key in reads.done():
            reads.discard(key)
        assert reads.running() <= 6
    finally:
        os.close(fd)
        reads.close()


def test_a_demangling_run_that_failed_once_is_tried_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A c++filt run killed at its deadline on a busy host (two QEMU guests beside the BPF tests) left
    its name mangled for good: kernels shown as _Z10fused_stepPfS_i ever after. A failed run is not the
    name's answer: the next call runs it again."""
    real = symbols._demangle
    fails = iter([True])
    monkeypatch.setattr(symbols, "_demangle", lambda name: None if next(fails, False) else real(name))
    d = symbols.Demangler()
    assert d("_Z10fused_stepPfS_i") == "_Z10fused_stepPfS_i"          # this run failed
    assert not d.settled("_Z10fused_stepPfS_i")                        # (a kernel's name is not kept)
    assert d("_Z10fused_stepPfS_i") == "fused_step(float*, float*, int)"
    assert d.settled("_Z10fused_stepPfS_i")
