"""The start-up's parts that need no BPF: the program's text (bpf/'s headers written in) and
declarations, the cache's key and trust rules, the CUDA pre-filter's string tables, and the compiler
mappings it may drop."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gputop.sources.bpf.attach import symbols
from gputop.sources.bpf.common import elfread
from gputop.sources.bpf.program import compilecache as bpfcache
from gputop.sources.bpf.program import ctext, startup
from gputop.sources.bpf.program.program import program_path, program_text

SNIPPET = r"""
#include <uapi/linux/ptrace.h>
#define TWO { 1, 2 }   /* braces in a macro { */
#define LONG(a) \
    do { a; } while (0)
struct pair_t {
    u64 a;  // a } in a comment
    u64 b;
};
BPF_HASH(pairs, u32, struct pair_t, 16);
static __always_inline int helper(u32 x) {
    char *s = "} {";
    if (x) { return 1; }
    return 0;
}
int handler(struct pt_regs *ctx) {
    u32 k = 0;
    return helper(k);
}
BPF_ARRAY(later, u64, 4);
TRACEPOINT_PROBE(sched, sched_process_exit) {
    return 0;
}
"""


def test_declarations_keep_types_maps_and_preprocessor_lines_only() -> None:
    out = bpfcache.declarations_only(SNIPPET)
    assert "BPF_HASH(pairs, u32, struct pair_t, 16);" in out
    assert "BPF_ARRAY(later, u64, 4);" in out
    assert "struct pair_t {\n    u64 a;  // a } in a comment\n    u64 b;\n};" in out
    assert "#define TWO { 1, 2 }" in out and "    do { a; } while (0)" in out
    for gone in ("helper", "handler", "TRACEPOINT_PROBE", "return"):
        assert gone not in out
    assert out.count("\n") == SNIPPET.count("\n")        # lines kept: compiler messages point right


def test_a_comment_before_a_header_guard_keeps_the_guard() -> None:
    text = "// a header\n#ifndef __H\n#define __H\nstatic int f(void) {\n    return 0;\n}\n#endif\n"
    out = bpfcache.declarations_only(text)
    assert out == "// a header\n#ifndef __H\n#define __H\n\n\n\n#endif\n"


def test_the_headers_are_written_in_once_with_line_markers(tmp_path: Path) -> None:
    (tmp_path / "main.bpf.c").write_text('#include <uapi/linux/ptrace.h>\n#include "a.h"\n#include "b.bpf.h"\n'
                                         'int x;\n')
    (tmp_path / "a.h").write_text("#ifndef A\n#define A\nstruct a_t { u64 v; };\n#endif\n")
    (tmp_path / "b.bpf.h").write_text('#include "a.h"  // again: written once\nstatic int b;')
    assert ctext.expand(tmp_path / "main.bpf.c") == (
        '#line 1 "main.bpf.c"\n#include <uapi/linux/ptrace.h>\n'
        '#line 1 "a.h"\n#ifndef A\n#define A\nstruct a_t { u64 v; };\n#endif\n#line 3 "main.bpf.c"\n'
        '#line 1 "b.bpf.h"\n\nstatic int b;\n#line 4 "main.bpf.c"\n'
        'int x;\n')
    (tmp_path / "b.bpf.h").write_text('#include "c.h"\n')
    with pytest.raises(FileNotFoundError, match=r"c\.h not found"):
        ctext.expand(tmp_path / "main.bpf.c")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "c.h").write_text("int c;\n")           # found in a directory searched next
    assert "int c;" in ctext.expand(tmp_path / "main.bpf.c", [tmp_path / "inc"])


def test_the_program_text_holds_every_header_and_a_header_change_changes_the_cache_key(tmp_path: Path) -> None:
    bpf = program_path().parent
    text = program_text()
    headers = sorted(p.name for p in bpf.iterdir() if p.suffix == ".h")
    assert "gputop.h" in headers and "bits.bpf.h" in headers and len(headers) > 8
    for name in headers:
        assert f'#line 1 "{name}"' in text and (bpf / name).read_text() in text, name
    assert not re.search(r'^\s*#\s*include\s*"', text, re.M)           # nothing left for bcc to include
    copy = tmp_path / "bpf"
    copy.mkdir()
    for p in bpf.iterdir():
        (copy / p.name).write_text(p.read_text())
    assert program_text(copy / "gputop.bpf.c") == text
    with (copy / "sync.bpf.h").open("a") as f:
        f.write("// changed\n")
    bcc = type("bcc", (), {"__version__": "0.26.0"})

    def key(t: str) -> str:
        return bpfcache.key(bcc, t.encode(), ["-DX=1"], None, tmp_path)

    assert key(program_text(copy / "gputop.bpf.c")) != key(text)


def test_the_programs_declarations_hold_every_map_and_no_function() -> None:
    text = program_text()
    decls = bpfcache.declarations_only(text)
    maps = re.compile(r"^BPF_\w+\(.*\);", re.M)
    assert maps.findall(decls) == maps.findall(text) and len(maps.findall(text)) > 20
    assert not re.search(r"^(int|TRACEPOINT_PROBE)\b", decls, re.M)
    assert not re.search(r"\bstatic __always_inline\b", decls)


def test_the_cache_loads_only_files_of_this_user_nobody_else_can_write(tmp_path: Path) -> None:
    d = tmp_path / "cache"
    data = {"license": "GPL", "funcs": {"f": {"code": "", "maps": []}}}
    bpfcache.write("bpf-k1", data, d)
    assert oct(d.stat().st_mode & 0o777) == oct(0o700)
    assert bpfcache.read("bpf-k1", d) == {**data, "key": "bpf-k1"}
    assert bpfcache.read("bpf-k2", d) is None
    (d / "bpf-k1.json").chmod(0o620)                        # group-writable
    assert bpfcache.read("bpf-k1", d) is None
    (d / "bpf-k1.json").chmod(0o600)
    d.chmod(0o777)                                          # the directory writable by anyone
    assert bpfcache.read("bpf-k1", d) is None
    d.chmod(0o700)
    (d / "bpf-k1.json").write_text(json.dumps({**data, "key": "bpf-other"}))  # renamed into place
    assert bpfcache.read("bpf-k1", d) is None


def test_the_cache_keeps_the_newest_entries_of_each_kind(tmp_path: Path) -> None:
    for i in range(bpfcache.KEEP + 3):
        bpfcache.write(f"bpf-{i:02d}", {"funcs": {}}, tmp_path)
    bpfcache.write("btf-x", {"funcs": {}}, tmp_path)
    names = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len([n for n in names if n.startswith("bpf-")]) == bpfcache.KEEP
    assert "btf-x.json" in names and f"bpf-{bpfcache.KEEP + 2:02d}.json" in names


def test_off_turns_the_cache_off(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUTOP_BPF_CACHE", "off")
    assert not bpfcache.enabled()
    calls = []
    assert bpfcache.file_offsets(lambda: calls.append(1) or {"A": 1}, Path("/nonexistent")) == {"A": 1}
    monkeypatch.delenv("GPUTOP_BPF_CACHE")
    assert bpfcache.enabled()


def test_stored_offsets_without_a_member_now_read_are_computed_again(tmp_path: Path) -> None:
    """An older gputop stored fewer members (before OFF_INODE_CTIME_*): read again, and stored."""
    vmlinux = tmp_path / "vmlinux"
    vmlinux.write_bytes(b"btf")
    calls: list[int] = []
    assert bpfcache.file_offsets(lambda: calls.append(1) or {"A": 1}, vmlinux, tmp_path) == {"A": 1}
    assert bpfcache.file_offsets(lambda: calls.append(2) or {"A": 1}, vmlinux, tmp_path, names=("A",)) == {"A": 1}
    assert bpfcache.file_offsets(lambda: calls.append(3) or {"A": 1, "B": 2}, vmlinux, tmp_path,
                                 names=("A", "B")) == {"A": 1, "B": 2}
    assert bpfcache.file_offsets(lambda: calls.append(4) or {}, vmlinux, tmp_path, names=("A", "B")) == {"A": 1, "B": 2}
    assert calls == [1, 3]


def test_the_cuda_prefilter_reads_the_symbol_string_tables(testbed) -> None:  # type: ignore[no-untyped-def]
    """The string tables it searches are the ones the symbol tables name; the verdicts are the
    whole-file search's for the test bed's runtime and driver and for a library without CUDA."""
    import mmap

    libc = next(p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6")
                if Path(p).exists())
    for path, cuda in ((testbed.libcudart, True), (testbed.libcuda, True), (libc, False)):
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            tables = elfread.ElfReader(f.fileno()).symbol_tables()
            ranges = [(t.strtab_offset, t.strtab_offset + t.strtab_size) for t in tables]
            assert ranges and all(0 < lo < hi <= len(mm) for lo, hi in ranges)
            assert sum(hi - lo for lo, hi in ranges) < len(mm) // 4
            whole = any(mm.find(m) >= 0 for m in symbols._MARKERS)
        assert symbols.mentions_cuda(str(path)) is cuda is whole


def test_only_clean_read_only_compiler_mappings_are_dropped(tmp_path: Path) -> None:
    smaps = tmp_path / "smaps"
    smaps.write_text("""\
7f0000000000-7f0000100000 r--p 00000000 fe:00 11 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
Rss:                 400 kB
Anonymous:             0 kB
7f0000100000-7f0000200000 r-xp 00100000 fe:00 11 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
Rss:                1000 kB
Anonymous:             0 kB
7f0000200000-7f0000210000 r--p 00200000 fe:00 11 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
Rss:                  64 kB
Anonymous:            64 kB
7f0000210000-7f0000220000 rw-p 00210000 fe:00 11 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
Rss:                  64 kB
Anonymous:            12 kB
7f0000300000-7f0000400000 r-xp 00000000 fe:00 12 /usr/lib/llvm-14/lib/libclang-cpp.so.14
Rss:                 200 kB
Anonymous:             0 kB
7f0000400000-7f0000500000 r-xp 00000000 fe:00 13 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 900 kB
Anonymous:             0 kB
7f0000500000-7f0000600000 r-xp 00000000 00:00 0
Rss:                 100 kB
Anonymous:           100 kB
""")
    assert startup._clean_mappings(str(smaps)) == [
        (0x7F0000000000, 0x7F0000100000, 400), (0x7F0000100000, 0x7F0000200000, 1000),
        (0x7F0000300000, 0x7F0000400000, 200)]
