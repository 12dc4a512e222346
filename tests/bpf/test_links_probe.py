"""uprobe_multi links are detected with a program of their own (docs/matrix.md, defect 3): a handler the
kernel's verifier refuses must not turn links off for every other handler."""

from __future__ import annotations

import os
import platform

import pytest

from gputop.sources.bpf import BpfUnavailable, has_privileges, load_bcc, use_headers
from gputop.sources.bpf.attach import symbols
from gputop.sources.bpf.attach.catalogue import Probe
from gputop.sources.bpf.attach.uprobes import UprobeAttacher, bcc_loads_for_links, links_supported

#: an unbounded index into a map value: every verifier refuses it (as 6.12 refused gputop's launch
#: handlers before 3f9d562)
REFUSED = b"""
#include <uapi/linux/ptrace.h>
struct eight_t { u64 n[8]; };
BPF_ARRAY(slots, struct eight_t, 1);
int refused(struct pt_regs *ctx) {
    u32 z = 0;
    struct eight_t *v = slots.lookup(&z);
    if (v)
        v->n[PT_REGS_PARM1(ctx)] += 1;
    return 0;
}
"""


def _kernel_has_links() -> bool:
    """uprobe_multi links came in Linux 6.6."""
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 6)


def _bcc():  # type: ignore[no-untyped-def]
    if not has_privileges():
        pytest.skip("BPF tests need root (or CAP_BPF + CAP_PERFMON)")
    try:
        bcc = load_bcc()
        use_headers()                   # the kernel headers bcc compiles against (as gputop does)
    except BpfUnavailable as e:
        pytest.skip(e.reason)
    return bcc


def test_links_are_used_though_the_named_handler_is_refused() -> None:
    bcc = _bcc()
    b = bcc.BPF(text=REFUSED)
    try:
        with pytest.raises(Exception, match="Failed to load BPF program"):
            b.load_func(b"refused", bcc.BPF.KPROBE)
        mode = UprobeAttacher(b, bcc.lib).mode
    finally:
        b.cleanup()
    # links where the kernel has them and this bcc can load programs for them (not 0.18's: Debian 11)
    assert mode == ("links" if _kernel_has_links() and bcc_loads_for_links(bcc.BPF, bcc.lib) else "perf")


def test_the_kernel_is_asked_without_bcc() -> None:
    _bcc()
    assert links_supported() is _kernel_has_links()


def test_links_can_be_refused_by_the_caller() -> None:
    bcc = _bcc()
    b = bcc.BPF(text=b"int probe(struct pt_regs *ctx) { return 0; }")
    try:
        assert UprobeAttacher(b, bcc.lib, links=False).mode == "perf"
    finally:
        b.cleanup()


def test_an_entry_whose_return_probe_is_refused_is_not_attached(testbed) -> None:  # type: ignore[no-untyped-def]
    """An entry probe without its return would leave a stale depth: every call nested in it would look
    inside it and go uncounted (Debian 11's bcc 0.18 built alloc_return so that 6.18's verifier refused
    it, and then every copy counted 0). Neither is attached, both are named; other entries attach."""
    bcc = _bcc()
    syms = symbols.read_symbols(str(testbed.libcudart))
    assert syms is not None
    at = {n: (syms.functions[n], syms.offset_of_vaddr(syms.functions[n])) for n in ("cudaMalloc", "cudaFree")}
    for links in (True, False):
        # a program object of its own per mode, as gputop's (a program loaded for uprobe_multi links is
        # refused by a perf event's PERF_EVENT_IOC_SET_BPF: EINVAL on 6.18.44)
        b = bcc.BPF(text=REFUSED + b"int fine(struct pt_regs *ctx) { return 0; }\n")
        try:
            att = UprobeAttacher(b, bcc.lib, links=links)
            wanted = [(Probe("cudaMalloc", "fine", "refused"), *at["cudaMalloc"]),
                      (Probe("cudaFree", "fine"), *at["cudaFree"])]
            assert att.attach(str(testbed.libcudart), wanted) == 1, att.failed
            m, f = at["cudaMalloc"][1], at["cudaFree"][1]
            assert [x.split(": ", 1)[0] for x in att.failed] == [f"libcudart.so.12+0x{m:x} refused",
                                                                  f"libcudart.so.12+0x{m:x} fine"]
            assert att.failed[1].endswith(": its return probe (refused) did not attach")
            assert not any(f"0x{f:x}" in x for x in att.failed)
            # the refused program is not loaded again for the next object (its verification took
            # seconds each time with bcc 0.18's code: docs/matrix.md, defect 7)
            loads: list[bytes] = []
            real = b.load_func
            b.load_func = lambda name, *a, loads=loads, real=real: loads.append(name) or real(name, *a)
            try:
                assert att.attach(str(testbed.libcudart), wanted, name="again") == 1
            finally:
                del b.load_func
            assert b"refused" not in loads and att.failed[2] == att.failed[0].replace("libcudart.so.12", "again")
            att.detach_all()
        finally:
            b.cleanup()


def test_a_file_name_of_any_bytes_attaches_with_perf_events(testbed) -> None:  # type: ignore[no-untyped-def]
    """A perf-event probe's tracefs name is made from the object's name, which another user chose: a name
    that is not UTF-8 (kept surrogate-escaped, as os.fsdecode gives it) attached nothing and raised (a
    hostile library's probes were then left behind half attached); its bytes make the name now."""
    bcc = _bcc()
    b = bcc.BPF(text=b"int fine(struct pt_regs *ctx) { return 0; }\n")
    syms = symbols.read_symbols(str(testbed.libcudart))
    assert syms is not None
    vaddr = syms.functions["cudaFree"]
    offset = syms.offset_of_vaddr(vaddr)
    assert offset is not None
    try:
        att = UprobeAttacher(b, bcc.lib, links=False)
        name = os.fsdecode(b"/tmp/\x1b[31mEVIL\x9b/libcudart.so.12")
        assert att.attach(str(testbed.libcudart), [(Probe("cudaFree", "fine"), vaddr, offset)], name=name) == 1
        assert att.failed == [] and att.probes == 1
        att.detach_all()
    finally:
        b.cleanup()
