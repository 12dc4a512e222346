"""`gputop doctor`: check what gputop needs, one line per check with OK/WARN/FAIL and a fix."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gputop.sources import bpf
from gputop.sources.bpf.attach import catalogue, discovery
from gputop.sources.bpf.attach.uprobes import UprobeAttacher, bcc_loads_for_links
from gputop.sources.bpf.common import linux
from gputop.sources.bpf.common.btf import VMLINUX
from gputop.sources.bpf.lifecycle.purge import batch_ops
from gputop.sources.bpf.program import kheaders, privileges
from gputop.sources.bpf.program.program import QUIET
from gputop.sources.bpf.program.startup import read_object
from gputop.sources.cudalibs import library_line
from gputop.textsafe import sanitize


@dataclass(frozen=True)
class Check:
    name: str
    level: str          # "OK", "WARN", "FAIL"
    detail: str
    fix: str = ""
    #: a FAIL here means gputop cannot run with BPF
    needed_for_bpf: bool = True


def _privileges() -> list[Check]:
    """One line for the whole, then one per missing capability of the least set that traces fully
    (CAP_SYS_ADMIN too where uprobes attach as perf events and this process may not open one)."""
    from gputop.modes.common import no_privileges

    missing = privileges.missing_caps()
    blockers = privileges.tracing_blockers()
    admin = None if blockers else privileges.perf_admin_refusal()
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    if not missing and admin is None:
        needed = ", ".join(privileges.TRACING_CAPS)
        if privileges.why_perf() is not None:
            needed += " and CAP_SYS_ADMIN (uprobes attach as perf events here)"
        return [Check("privileges", "OK", f"{who}, with every capability tracing needs: {needed}")]
    refusal = no_privileges() if blockers or admin else None
    if refusal is not None:     # the words of gputop --bpf, gputop -b's line, the banner, demo, --selftest
        head = Check("privileges", "FAIL", f"{who}: tracing is off ({refusal[0]})", refusal[1])
    else:
        head = Check("privileges", "WARN", f"{who}: tracing works, but some processes may go untraced",
                     privileges.ENABLE_HINT, needed_for_bpf=False)
    caps = [Check(f"  {cap}", "FAIL" if cap in blockers else "WARN", f"missing: needed to {why}",
                  needed_for_bpf=cap in blockers)
            for cap, why in privileges.TRACING_CAPS.items() if cap in missing]
    if admin is not None:
        caps.append(Check("  CAP_SYS_ADMIN", "FAIL", f"missing: needed to {privileges.PERF_ADMIN_WHY}"))
    return [head, *caps]


def _kernel() -> list[Check]:
    rel = platform.release()
    parts = [int(x) for x in rel.split(".")[:2] if x.isdigit()]
    out = [Check("kernel", "OK" if parts >= [5, 8] else "FAIL", f"Linux {rel}",
                 "" if parts >= [5, 8] else "gputop needs Linux 5.8+ (ring buffer, BPF stats)")]
    uprobes = Path("/sys/bus/event_source/devices/uprobe").is_dir()
    out.append(Check("uprobes", "OK" if uprobes else "FAIL",
                     "uprobe PMU present" if uprobes else "no uprobe PMU (CONFIG_UPROBE_EVENTS)",
                     "" if uprobes else "use a kernel built with CONFIG_UPROBE_EVENTS=y"))
    kprobes = Path("/sys/bus/event_source/devices/kprobe").is_dir()
    out.append(Check("kprobes", "OK" if kprobes else "WARN",
                     "kprobe PMU present" if kprobes else
                     "no kprobes: UVM GPU faults, migrations and thrashing (nvidia_uvm) are unavailable",
                     "" if kprobes else "a kernel with CONFIG_KPROBE_EVENTS=y enables them; the rest works",
                     needed_for_bpf=False))
    cas = linux.atomic_cmpxchg()        # None: not allowed to ask (see privileges)
    if cas is not None:
        out.append(Check("BPF cmpxchg", "OK" if cas else "WARN",
                         "atomic compare-and-exchange: launch slots (a kernel's usual launch is one atomic add)" if cas
                         else "no atomic compare-and-exchange (Linux < 5.12): every launch is counted through the "
                         "kernels table, without launch slots: the same counts, a hash lookup per launch",
                         "" if cas else "none needed; Linux 5.12+ makes each launch cheaper", needed_for_bpf=False))
    btf = VMLINUX.is_file()
    out.append(Check("BTF", "OK" if btf else "WARN", "/sys/kernel/btf/vmlinux present" if btf else "no BTF",
                     "" if btf else "not needed by gputop's uprobes; CONFIG_DEBUG_INFO_BTF=y", needed_for_bpf=False))
    return out + _warning_at_load()


def _warning_at_load() -> list[Check]:
    """Before Linux 6.1 gputop's first load logs a kernel WARNING; with panic_on_warn that is a panic."""
    if not linux.warns_at_load():
        return []
    refusal = linux.load_refusal()
    if refusal is not None:
        return [Check("kernel WARNING at load", "FAIL", refusal + ": gputop will not load its program",
                      linux.PANIC_HINT)]
    return [Check("kernel WARNING at load", "WARN",
                  "no bpf_mem_alloc (Linux before 6.1): gputop's first load each boot logs \"WARNING … trace type BPF "
                  "program uses run-time allocation\" and taints the kernel W; harmless here: gputop's programs "
                  "run only on traps from user space and at exec, fork, exit, mmap and user page faults, never "
                  "inside the kernel's allocator, which the warning is about",
                  "none needed; Linux 6.1+ does not warn (docs/collector.md, \"Kernels before 6.1\")",
                  needed_for_bpf=False)]


def _tracefs() -> list[Check]:
    mounted = linux.tracefs_mounted()
    if mounted is None:
        return [Check("tracefs", "FAIL", f"{bpf.TRACEFS} is not readable (root's only): tracepoints cannot be "
                      "checked or used", "run as root, or grant CAP_DAC_READ_SEARCH")]
    out = [Check("tracefs", "OK" if mounted else "WARN",
                 f"mounted at {bpf.TRACEFS}" if mounted else f"not mounted at {bpf.TRACEFS}",
                 "" if mounted else "gputop mounts it when it starts; or: mount -t tracefs nodev /sys/kernel/tracing",
                 needed_for_bpf=False)]
    if mounted:
        for cat, ev, what in (("sched", "sched_process_exec", "new processes"),
                              ("syscalls", "sys_enter_mmap", "late dlopen"),
                              ("sched", "sched_process_exit", "process exit"),
                              ("exceptions", "page_fault_user", "UVM CPU faults")):
            ok = bpf.tracepoint_exists(cat, ev)
            out.append(Check(f"tracepoint {cat}:{ev}", "OK" if ok else "WARN",
                             f"{what}: {'available' if ok else 'missing'}", "" if ok else f"{what} will not be seen",
                             needed_for_bpf=False))
    return out


def _bcc() -> list[Check]:
    """The bcc in use, then each of its optional features gputop uses or falls back from (asked of
    this bcc, never decided by its version)."""
    try:
        mod = bpf.load_bcc()
    except bpf.BpfUnavailable as e:
        return [Check("bcc", "FAIL", e.reason, e.hint)]
    version = getattr(mod, "__version__", "unknown version")
    features = (
        ("batch map operations", batch_ops(mod.lib), "bpf_lookup_batch, bpf_delete_batch (bcc 0.20+)",
         "exited processes' map entries are deleted key by key: the same entries, more system calls",
         "none needed; with bcc 0.20+ they are deleted in batches"),
        ("load_func attach_type", bcc_loads_for_links(mod.BPF, mod.lib), "programs loaded for uprobe_multi links "
         "(bcc 0.21+)", "uprobes attach as a perf event each (see uprobe attach): the same counts",
         "none needed; with bcc 0.21+ on Linux 6.6+ probes detach together at exit"),
    )
    used = [name for name, has, *_ in features if has]
    missing = [name for name, has, *_ in features if not has]
    head = Check("bcc", "OK", f"bcc {version} from {Path(mod.__file__ or '?').parent}; uses "
                 f"{', '.join(used) or 'none of its optional features'}"
                 + (f"; falls back from {', '.join(missing)}" if missing else ""))
    return [head] + [Check(f"  {name}", "OK", f"used: {what}") if has else
                     Check(f"  {name}", "WARN", f"not in this bcc, falls back: {fallback}", fix, needed_for_bpf=False)
                     for name, has, what, fallback, fix in features]


def _headers() -> Check:
    # prepared as the collector prepares them (the compile check next does the same): the path named is
    # the one gputop compiles against, as sources.bpf.headers says in the JSON (the merged tree in the cache)
    choice = kheaders.choose()
    if choice.kind == "exact":
        return Check("kernel headers", "OK", choice.detail)
    if choice.kind == "fallback":
        return Check("kernel headers", "WARN", choice.detail,
                     f"install linux-headers-{platform.release()} if your distro has it; the fallback works",
                     needed_for_bpf=False)
    return Check("kernel headers", "FAIL", choice.detail, "apt-get install linux-headers-$(uname -r) "
                 "or your distro's linux-headers package (./gputop.sh does it)")


def _compile() -> list[Check]:
    """Compile and load a one-line BPF program with the chosen headers: proof the chain works.
    Then ask the kernel how uprobes will attach."""
    if privileges.tracing_blockers():   # CAP_SYS_ADMIN, where the perf-event path lacks it, is not needed here
        return [Check("BPF compile", "FAIL", "skipped: tracing is off (see privileges)", privileges.ENABLE_HINT)]
    try:
        mod = bpf.load_bcc()
        bpf.use_headers()
        err = bpf.ensure_tracefs(linux.bcc_tracefs(mod))
        if err is not None:
            return [Check("BPF compile", "FAIL", err, "mount -t tracefs nodev /sys/kernel/tracing (bcc before 0.20: "
                          "mount -t debugfs nodev /sys/kernel/debug)")]
        # a tracepoint's arguments too: bcc reads their format from tracefs where it expects it
        prog = mod.BPF(text=b"int gputop_doctor(struct pt_regs *ctx) { return 0; }\n"
                       b"TRACEPOINT_PROBE(sched, sched_process_exit) { return args->pid < 0; }", cflags=[QUIET])
        try:
            links = UprobeAttacher(prog, mod.lib).mode == "links"     # asks the kernel (links_supported)
            _ATTACH["mode"] = "links" if links else "perf"
            prog.load_func(b"gputop_doctor", mod.BPF.KPROBE)         # the compiled program loads
        finally:
            prog.cleanup()
    except Exception as e:
        return [Check("BPF compile", "FAIL", f"{type(e).__name__}: {e}",
                      "run gputop doctor again after fixing the lines above")]
    attach = (Check("uprobe attach", "OK", "uprobe_multi links: probes detach together at exit", needed_for_bpf=False)
              if links else
              Check("uprobe attach", "WARN", f"a perf event per probe ({privileges.why_perf()}): each needs "
                    "CAP_SYS_ADMIN",
                    "none needed as root (quitting then takes about 0.1 s per probe); without root, grant "
                    "CAP_SYS_ADMIN too (systemd: deploy/systemd/perf-event-uprobes.conf)", needed_for_bpf=False))
    out = [Check("BPF compile", "OK", "a test program compiled and loaded"), attach]
    if linux.atomic_cmpxchg() and linux.compiler_cmpxchg(mod) is False:
        out.append(Check("BPF cmpxchg compile", "WARN", "the kernel takes atomic compare-and-exchange but this "
                         "bcc's compiler (LLVM before 12) cannot emit it: every launch is counted through the kernels "
                         "table, without launch slots: the same counts, a hash lookup per launch",
                         "none needed; a bcc built with LLVM 12+ makes each launch cheaper", needed_for_bpf=False))
    return out


def _nvml() -> Check:
    from gputop.sources.nvml import NvmlSource

    src = NvmlSource(os.environ.get("GPUTOP_NVML_LIBRARY"))
    try:
        reading = src.read()
    finally:
        src.close()
    if reading.status.status == "ok":
        return Check("NVML", "OK", f"{len(reading.gpus)} GPU(s)", needed_for_bpf=False)
    return Check("NVML", "WARN", f"off: {reading.status.reason}",
                 "install the NVIDIA driver (libnvidia-ml.so.1); GPU panels show N/A until then",
                 needed_for_bpf=False)


def _cuda_objects(dirs: tuple[str, ...] = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/lib64",
                                           "/usr/lib/aarch64-linux-gnu")) -> list[Check]:
    found = {}
    libraries: dict[tuple[int, int], str] = {}
    for ref in discovery.scan():
        fd = ref.open()
        if fd is None:
            continue
        try:
            syms = read_object(fd, ref.open_path)
            if syms and catalogue.probes_for(syms.functions):
                found[ref.key] = ref.path
                line = library_line(fd, ref.path, syms.functions)
                if line is not None:
                    libraries[ref.key] = line
        finally:
            os.close(fd)
    files = []
    for d in dirs:
        p = Path(d)
        if p.is_dir():
            files += [str(f) for f in sorted(p.glob("libcuda*.so*")) if f.is_file() and not f.is_symlink()]
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            syms = read_object(fd, f) if key not in libraries else None
            line = library_line(fd, f, syms.functions) if syms else None
            if line is not None:
                libraries[key] = line
        finally:
            os.close(fd)
    procs = discovery.pids_mapping(set(found))
    detail = (f"{len(found)} CUDA object(s) mapped by {len(procs)} process(es); "
              f"libcudart/libcuda files on the host: {', '.join(files) or 'none in the usual places'}")
    if "CAP_PERFMON" in privileges.missing_caps():
        detail += " (only processes of this user: other users' maps need CAP_PERFMON)"
    level = "OK" if found or files else "WARN"
    fix = "" if found else "start a CUDA program; gputop attaches to it within one refresh"
    return [Check("CUDA objects", level, detail, fix, needed_for_bpf=False)] + [
        Check("  library", "OK", line, needed_for_bpf=False) for line in sorted(libraries.values())[:20]
    ] + [
        Check(f"  pid {pid}", "OK", ", ".join(paths), needed_for_bpf=False) for pid, paths in sorted(procs.items())[:20]
    ]


#: how gputop's probes attach here, once _compile asked (bcc 0.18 on Linux 6.6+: perf, though the kernel has links)
_ATTACH: dict[str, str] = {}


def _trap_cost() -> Check:
    """Measure this host's uprobe trap cost now, as gputop attaches here, and cache it (the header's
    cost uses it)."""
    from gputop.sources.bpf.cost import trapcost

    refusal = privileges.privileges_error()
    if refusal is not None:
        return Check("uprobe trap cost", "WARN", "not measured: it needs the tracing privileges", refusal[1],
                     needed_for_bpf=False)
    errors = []
    # as gputop attaches (_compile asked); else uprobe_multi links where the kernel has them
    for mode in (_ATTACH["mode"],) if "mode" in _ATTACH else ("links", "perf"):
        try:
            cost = trapcost.measure(mode)
        except (trapcost.CalibrationError, OSError) as e:
            errors.append(f"{mode}: {e}")
            continue
        trapcost.store(cost)
        return Check("uprobe trap cost", "OK",
                     f"{cost.trap_ns:.0f} ns per probe hit at function entry, +{cost.return_ns:.0f} ns with a "
                     f"return probe ({mode}; medians of {cost.rounds} rounds of {cost.calls} calls); cached in "
                     f"{trapcost.cache_dir() / trapcost.CACHE_NAME} for this kernel", needed_for_bpf=False)
    return Check("uprobe trap cost", "WARN", "could not be measured: " + "; ".join(errors),
                 "gputop shows its cost as N/A (the BPF programs' run time is still shown)", needed_for_bpf=False)


def _fair_share() -> Check:
    """What each tenant of this host may hold of what gputop keeps, and where its losses show."""
    from gputop.sources.bpf.common import abi
    from gputop.sources.bpf.common import linux as bpfsys

    pct = abi.LIMITS["TENANT_SHARE_PCT"]
    budget = bpfsys.fd_budget()
    fds = "the probes' descriptors" if budget is None else f"the probes' {budget:,} descriptors"
    return Check("fair share", "OK",
                 f"each tenant (a uid; a cgroup for uid 0) may hold {pct} % of each BPF table, of the code trie and of "
                 f"{fds}, and emit {abi.LIMITS['TENANT_EVENTS']:,} process events a second; what a tenant loses is "
                 "its own, shown per tenant: the header, sources.bpf.dropped_by_tenant (JSON), "
                 "gputop_tenant_dropped_total", needed_for_bpf=False)


def _demangling() -> Check:
    """The demanglers kernel names go through (symbols.Demangler)."""
    from gputop.sources.bpf.attach import symbols

    gnu, llvm = symbols.cxxfilt_path(), symbols.llvm_cxxfilt_path()
    if gnu is None and llvm is None:
        return Check("kernel names", "WARN", "no c++filt or llvm-cxxfilt this user may run: C++ kernel names stay "
                     "mangled", "install binutils (c++filt) and llvm (llvm-cxxfilt)", needed_for_bpf=False)
    if llvm is None:
        return Check("kernel names", "WARN", f"demangled by {gnu}; no llvm-cxxfilt: the names binutils cannot "
                     "demangle stay mangled (PyTorch's CUTLASS GEMMs among them)", "install llvm (llvm-cxxfilt)",
                     needed_for_bpf=False)
    how = f"demangled by {gnu}, and by {llvm} where it cannot" if gnu else f"demangled by {llvm}"
    return Check("kernel names", "OK", how, needed_for_bpf=False)


CHECKS: tuple[Callable[[], Check | list[Check]], ...] = (
    _privileges, _kernel, _tracefs, _bcc, _headers, _compile, _trap_cost, _nvml, _cuda_objects, _demangling,
    _fair_share,
)


def run(out: TextIO) -> int:
    """Print every check; 0 when gputop can run with BPF, 1 otherwise."""
    failed = False
    for fn in CHECKS:
        res = fn()
        for c in res if isinstance(res, list) else [res]:
            # details quote paths and errors from other processes' files: sanitised (gputop.textsafe)
            line = f"{c.level:<4}  {sanitize(c.name)}: {sanitize(c.detail)}"
            if c.fix:
                line += f"\n      fix: {sanitize(c.fix)}"
            out.write(line + "\n")
            failed = failed or (c.level == "FAIL" and c.needed_for_bpf)
    out.write("gputop can trace with BPF\n" if not failed else "gputop cannot trace with BPF here (see FAIL)\n")
    return 1 if failed else 0


def main(argv: list[str], out: TextIO) -> int:
    """`gputop doctor [--selftest [-n N] [--cudart PATH]]`."""
    from gputop.modes.commands import doctor_parser

    p = doctor_parser()
    args = p.parse_args(argv)
    if not args.selftest and (args.cudart or args.n != 1000):
        p.error("-n and --cudart apply to --selftest only")
    if not 1 <= args.n <= 10_000_000:
        p.error(f"-n must be from 1 to 10000000, not {args.n}")
    if args.selftest:
        from gputop.modes import selftest

        return selftest.run(out, launches=args.n, cudart=args.cudart)
    return run(out)
