"""Start-up (gputop/sources/bpf/program/compilecache.py, gputop/sources/bpf/program/startup.py): the program
reused from the cache is the compiled one, a process running before gputop starts is counted exactly by the
start-up scan alone (cached and compiled), and the memory the compile held is given back."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.sources.bpf import TRACEFS, BpfSource, load_bcc, use_headers
from gputop.sources.bpf.common import btf
from gputop.sources.bpf.program import compilecache as bpfcache

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gputop's BPF cache in an empty directory of this test's own (filled by the first start)."""
    d = tmp_path / "bpf-cache"
    monkeypatch.setattr(bpfcache, "cache_dir", lambda: d)
    monkeypatch.delenv("GPUTOP_BPF_CACHE", raising=False)
    return d


def _tables(bpf: object) -> dict[str, tuple[int, int, int, str, str]]:
    """Every map of a bcc.BPF: name -> (type, max entries, flags, key type, value type)."""
    from gputop.sources.bpf.program.compilecache import _lib

    lib = _lib(load_bcc())
    module = bpf.module  # type: ignore[attr-defined]
    out = {}
    for i in range(lib.bpf_num_tables(module)):
        name = lib.bpf_table_name(module, i)
        out[name.decode()] = (lib.bpf_table_type_id(module, i), lib.bpf_table_max_entries_id(module, i),
                              lib.bpf_table_flags_id(module, i), lib.bpf_table_key_desc(module, name).decode(),
                              lib.bpf_table_leaf_desc(module, name).decode())
    return out


def _tags(bpf: object, names: list[str]) -> dict[str, str]:
    """Each function loaded as gputop loads it, by the kernel's tag: a hash of the instructions as
    given, map descriptors left out."""
    out = {}
    for name in names:
        # the uprobe programs' type, without an attach type (perf-event attach), which every bcc takes
        # (0.18 has no attach_type argument): the kernel's tag is the instructions' either way
        fn = bpf.load_func(name.encode(), bpf.KPROBE)  # type: ignore[attr-defined]
        info = Path(f"/proc/self/fdinfo/{fn.fd}").read_text()
        out[name] = next(line.split()[1] for line in info.splitlines() if line.startswith("prog_tag:"))
    return out


def test_the_cached_program_is_the_compiled_one(tmp_path: Path) -> None:
    """A cache hit creates the same maps and loads, function for function, the instructions of
    the full compile (the kernel's tags match); the tracepoints are attached as bcc attaches them."""
    bcc = load_bcc()
    headers = use_headers()
    src = BpfSource()
    src.uvm_cpu_faults = True
    src.file_offsets = btf.file_offsets()
    text, cflags = src.program_text().encode(), src.program.compilable(bcc, src.cflags())
    full, how = bpfcache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path)
    try:
        assert how == "compiled"
        stored = bpfcache.extract(bcc, full)
        assert stored is not None
        names = [n for n in stored["funcs"] if not n.startswith("tracepoint__")]
        assert len(names) > 60
        full_tables, full_tps, full_tags = _tables(full), sorted(full.tracepoint_fds), _tags(full, names)
    finally:
        full.cleanup()
    cached, how = bpfcache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path)
    try:
        assert how == "cached"
        assert _tables(cached) == full_tables
        assert sorted(cached.tracepoint_fds) == full_tps and len(full_tps) == 6
        again = bpfcache.extract(bcc, cached)   # the declarations have no function of their own
        assert again is not None and again["funcs"] == {}
        assert _tags(cached, names) == full_tags
    finally:
        cached.cleanup()


def test_a_changed_key_or_foreign_file_compiles_again(tmp_path: Path) -> None:
    bcc = load_bcc()
    headers = use_headers()
    src = BpfSource()
    text, cflags = src.program_text().encode(), src.program.compilable(bcc, src.cflags())
    k = bpfcache.key(bcc, text, cflags, headers.path, TRACEFS)
    assert k != bpfcache.key(bcc, text + b"\n// changed\n", cflags, headers.path, TRACEFS)
    assert k != bpfcache.key(bcc, text, [*cflags, "-DMAX_CODE=1"], headers.path, TRACEFS)
    bpf, how = bpfcache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path)
    bpf.cleanup()
    assert how == "compiled" and bpfcache.read(k, tmp_path) is not None
    (tmp_path / f"{k}.json").chmod(0o666)           # writable by anyone: not loaded into the kernel
    assert bpfcache.read(k, tmp_path) is None
    bpf, how = bpfcache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path)
    bpf.cleanup()
    assert how == "compiled"
    (tmp_path / f"{k}.json").write_text(json.dumps({"key": "another", "funcs": {}}))
    assert bpfcache.read(k, tmp_path) is None


def test_a_stored_function_the_kernel_refuses_drops_the_entry(tmp_path: Path) -> None:
    """The next start compiles in full (where a kernel would want what only a fresh compile carries)."""
    bcc = load_bcc()
    headers = use_headers()
    src = BpfSource()
    text, cflags = src.program_text().encode(), src.program.compilable(bcc, src.cflags())
    bpf, how = bpfcache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path)
    bpf.cleanup()
    k = bpfcache.key(bcc, text, cflags, headers.path, TRACEFS)
    data = bpfcache.read(k, tmp_path)
    assert how == "compiled" and data is not None
    data["funcs"]["rt_launch"] = {"code": base64.b64encode(bytes([0x95, 0, 0, 0, 0, 0, 0, 0])).decode(), "maps": []}
    bpfcache.write(k, data, tmp_path)               # "exit" with r0 unset: the verifier refuses it
    bpf, how = bpfcache.compile_program(bcc, text, cflags, headers.path, TRACEFS, tmp_path)
    try:
        assert how == "cached"
        with pytest.raises(Exception, match="rt_launch"):
            bpf.load_func(b"rt_launch", bpf.KPROBE)
        assert not (tmp_path / f"{k}.json").exists()
        assert bpf.load_func(b"rt_memcpy", bpf.KPROBE).fd >= 0
    finally:
        bpf.cleanup()


@pytest.mark.parametrize("cache", ["cached", "uncached"])
def test_a_process_running_before_start_is_counted_exactly(workloads, tmp_path: Path, fresh_cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch, cache: str) -> None:
    """The start-up scan alone (its ELF reads done while the program compiled) probes a process
    that mapped the runtime before gputop started; every launch after is counted."""
    if cache == "uncached":
        monkeypatch.setenv("GPUTOP_BPF_CACHE", "off")
    else:
        first = BpfSource()
        first.start()           # fills the cache
        assert first.compiled == "compiled"
        first.close()
    go = tmp_path / "go"
    wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:1234:7,3,1:64,2,1:1"],
                          stdout=subprocess.PIPE)
    src = BpfSource()
    try:
        assert wl.stdout is not None and wl.stdout.readline().startswith(b"ready")
        src.start()
        assert src.compiled == cache
        assert {"load_bcc", "compile", "attach", "release"} <= set(src.startup_s)
        go.touch()
        deadline = time.monotonic() + 60
        while wl.poll() is None:
            src.poll(0.02)
            assert time.monotonic() < deadline
        assert wl.returncode == 0
        raw = src.read().procs[wl.pid]
        assert raw.counters["launches"] == 1234
        assert raw.counters["grid_sum"] == 1234 * 21 and raw.counters["block_sum"] == 1234 * 128
    finally:
        wl.kill()
        wl.wait()
        src.close()


_RSS_CHILD = """
import json
from gputop.sources.bpf import BpfSource
src = BpfSource()
src.start()
print(json.dumps({"rss": src.startup_rss_bytes, "released": src.startup_released_bytes, "how": src.compiled}))
src.close()
"""


@pytest.mark.parametrize("cache", ["on", "off"])
def test_the_memory_the_compile_held_is_given_back(cache: str) -> None:
    """In a fresh interpreter: resident memory after the compile's pages and heap are handed back
    is well under what it was right after the compile (measured: 0.34 cached, 0.46 compiled)."""
    env = {"PATH": "/usr/bin:/bin", "GPUTOP_BPF_CACHE": cache}
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD], capture_output=True, text=True, timeout=300,
                         check=True, cwd=ROOT, env=env).stdout
    res = json.loads(out.splitlines()[-1])
    rss = res["rss"]
    assert res["how"] in (("cached", "compiled") if cache == "on" else ("uncached",))
    assert res["released"] > 0
    assert rss["release"] < 0.6 * rss["compile"], rss
    assert rss["attach"] < 0.7 * rss["compile"], rss
