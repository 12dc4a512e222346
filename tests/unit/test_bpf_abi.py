"""What the BPF program and user space share, held to each other as compiled: the ring buffer's events,
which user space reads through its own ctypes declarations (gputop/sources/bpf/lifecycle/events.py; bcc gives a
map's types, not an event's), against bpf/gputop.h's structs as bcc lays them out; and the constants
abi.py passes. (struct proc_t against the catalogue: test_counters.py.)"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from gputop import model
from gputop.sources.bpf import has_privileges, load_bcc, use_headers
from gputop.sources.bpf.common import abi
from gputop.sources.bpf.common.abi import PATH_DEPTH, PATH_NAME
from gputop.sources.bpf.lifecycle import events
from gputop.sources.bpf.lifecycle.procid import pid_gen_words
from gputop.sources.bpf.program import ctext
from gputop.sources.bpf.program.program import program_path


def _leaves(ctype: Any, at: int = 0) -> list[tuple[str, int, int]]:
    """(name, offset, size) of each member that is not a struct, nested structs flattened."""
    out: list[tuple[str, int, int]] = []
    for name, t in ctype._fields_:
        offset = getattr(ctype, name).offset + at
        if isinstance(t, type) and issubclass(t, ctypes.Structure):
            out += _leaves(t, offset)
        else:
            out.append((name, offset, ctypes.sizeof(t)))
    return out


def test_the_events_user_space_reads_are_laid_out_as_the_header_compiles_them(tmp_path: Path) -> None:
    if not has_privileges():
        pytest.skip("compiling BPF declarations creates maps: needs the tracing privileges")
    bcc = load_bcc()
    use_headers()
    main = tmp_path / "layouts.bpf.c"
    main.write_text('#include "gputop.h"\nBPF_ARRAY(event, struct event_t, 1);\n'
                    'BPF_ARRAY(file_event, struct file_event_t, 1);\n')
    text = ctext.expand(main, [program_path().parent])
    bpf = bcc.BPF(text=text.encode(), cflags=[*abi.cflags(), f"-DPID_GEN_WORDS={pid_gen_words()}", "-DFILE_KEYS"])
    lib = bcc.lib
    lib.bpf_table_leaf_size.restype = ctypes.c_size_t
    lib.bpf_table_leaf_size.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    try:
        event, file_event = bpf[b"event"].Leaf, bpf[b"file_event"].Leaf
        # the struct's size as the compiler laid it out (bcc's ctypes type keeps one dimension of a 2D array)
        sizes = {name: lib.bpf_table_leaf_size(bpf.module, name) for name in (b"event", b"file_event")}
    finally:
        bpf.cleanup()
    assert ctypes.sizeof(events._Event) == ctypes.sizeof(event) == sizes[b"event"]
    assert _leaves(events._Event) == _leaves(event)
    assert ctypes.sizeof(events._FileEvent) == sizes[b"file_event"]
    ours, compiled = _leaves(events._FileEvent), _leaves(file_event)
    assert ours[:-1] == compiled[:-1]                   # all but names[PATH_DEPTH][PATH_NAME], the last
    assert ours[-1][:2] == compiled[-1][:2] == ("names", sizes[b"file_event"] - PATH_DEPTH * PATH_NAME)


def test_the_shared_constants_are_one_per_name_and_in_the_models_order() -> None:
    assert [model.MEMCPY_DIRECTIONS[i] for i in (abi.D_H2D, abi.D_D2H, abi.D_D2D, abi.D_H2H, abi.D_UNK)] == [
        "h2d", "d2h", "d2d", "h2h", "unknown"]
    assert abi.D_UNK == abi.NDIR - 1                     # the C side counts a direction out of range as unknown
    drops = [abi.SHARED[f"DROP_{k.upper()}"] for k in abi.DROP_KINDS]
    assert drops == list(range(abi.NDROP))
    flags = abi.cflags({"MAX_KERNELS": 2})
    names = [f[2:].split("=")[0] for f in flags]
    assert len(names) == len(set(names)) and "-DMAX_KERNELS=2" in flags and "-DMAX_PROCS=4096" in flags
    assert set(abi.LIMITS) <= set(names)
    with pytest.raises(ValueError, match="MAX_NOTHING"):
        abi.cflags({"MAX_NOTHING": 1})
