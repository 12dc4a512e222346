"""Attaching the catalogue's uprobes to CUDA objects, and detaching them all quickly.

Where the kernel has uprobe_multi links (Linux 6.6+), each BPF function gets one link per object
holding all its addresses there; otherwise each address is a perf-event uprobe through bcc. The
difference shows when gputop exits: the kernel detaches perf-event uprobes one at a time, each
waiting for an RCU grace period (about 0.1 s here: bench/exit_cost.py), while links are
detached together, about as fast as one.

Perf-event uprobes are attached through libbcc's C function, not ``BPF.attach_uprobe``: bcc 0.26's
Python binding declares one argument too few, so the kernel receives stack garbage as the probe's
USDT semaphore ("reference counter") offset. The kernel then increments that offset of the file
wherever it is mapped writable, refuses every other tracer's probe at the same address
("ref_ctr_offset mismatch" in dmesg; bpftrace fails), and can leak the probe at exit ("failed to
unregister, leaking uprobe"), after which the address stays unprobeable until reboot. Here the
offset is always 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import inspect
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gputop.sources.bpf.attach.catalogue import ALL, LAUNCH, NCCL, Probe
from gputop.sources.bpf.common.linux import BPF_TRACE_UPROBE_MULTI, uprobe_multi_link
from gputop.sources.bpf.cost.trapcost import CalibrationError, empty_prog
from gputop.sources.bpf.program.compilecache import func_load_takes_attach_type

_KPROBE = 2     # BPF_PROG_TYPE_KPROBE (uprobes use it too)
#: the launch handlers, attached first
LAUNCH_ENTRIES = frozenset(p.entry for p in LAUNCH) | {"rt_launch", "rt_launch_checked", "rt_launch_checked_ptsz"}
_EV_UNSAFE = re.compile(rb"[^a-zA-Z0-9_]")
#: the handlers loaded ahead of the first object that needs them (UprobeAttacher.preload): launches first, then
#: what a runtime and a driver use (a real libcudart and libcuda take nearly all); NCCL's only with a libnccl
PRELOAD = tuple(dict.fromkeys(
    [*sorted(LAUNCH_ENTRIES)]
    + [fn for p in ALL if p not in NCCL for fn in (p.entry, p.ret) if fn is not None]
    # the handlers catalogue.probes_for picks by what the runtime has, and the call-site walk
    + ["rt_prefetch_dev", "rt_prefetch_loc", "graph_add_node5", "graph_add_node6", "site_walk"]))
#: how bcc's "Failed to load BPF program" ends when the verifier refused it (not a transient shortage)
_REFUSALS = tuple(os.strerror(e) for e in (errno.EINVAL, errno.E2BIG, errno.EACCES, errno.EPERM))

#: int bpf_attach_uprobe(int progfd, enum bpf_probe_attach_type, const char *ev_name,
#:                       const char *binary_path, uint64_t offset, pid_t pid, uint32_t ref_ctr_offset)
_ATTACH_UPROBE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                  ctypes.c_uint64, ctypes.c_int, ctypes.c_uint32, use_errno=True)


def links_wanted() -> bool:
    """Whether gputop may attach through uprobe_multi links where the kernel and bcc have them: yes
    unless ``GPUTOP_UPROBE_LINKS=off`` (then a perf event per probe, as on Linux before 6.6: a way
    around a kernel whose links misbehave, and how the tests take the older kernels' path here)."""
    return os.environ.get("GPUTOP_UPROBE_LINKS", "").lower() not in ("0", "off", "no", "false")


def links_supported() -> bool:
    """Whether the kernel has uprobe_multi links: libbpf's probe, a link on "/" fails with EBADF
    exactly when it has them. Asked with an empty program of the uprobes' type loaded for links
    (trapcost.empty_prog, no bcc), not one of gputop's handlers: a handler that this kernel's
    verifier refuses must not turn the feature off for all the others (docs/matrix.md, defect 3)."""
    try:
        prog = empty_prog(links=True)   # EINVAL where the kernel does not know the attach type
    except CalibrationError:
        return False
    try:
        fd = uprobe_multi_link(prog, "/", [0], retprobe=False)
    except OSError as e:
        return e.errno == errno.EBADF
    else:
        os.close(fd)
        return False
    finally:
        os.close(prog)


def bcc_loads_for_links(bpf: Any, lib: Any) -> bool:
    """Whether this bcc can load a program for links: ``BPF.load_func`` takes an ``attach_type`` and
    libbcc's ``bcc_func_load`` (what the compile cache calls) passes it on (bcc 0.21+; Debian 11's and
    Ubuntu 22.04's 0.18 do not: perf events then, whatever the kernel). ``bpf``: a ``bcc.BPF`` or the
    class itself."""
    try:
        takes = "attach_type" in inspect.signature(bpf.load_func).parameters
    except (TypeError, ValueError):
        return False
    return takes and func_load_takes_attach_type(lib)


class UprobeAttacher:
    """Owns gputop's uprobes on one ``bcc.BPF`` object."""

    def __init__(self, bpf: Any, lib: Any, *, links: bool | None = None) -> None:
        """``bpf``: a ``bcc.BPF``; ``lib``: bcc's ``libbcc.so`` (``bcc.lib``); ``links``: use uprobe_multi
        links where the kernel has them (asked with a program of this module's own: ``links_supported``;
        False: perf events always; None: ``links_wanted()``)."""
        links = links_wanted() if links is None else links
        self._bpf = bpf
        self._attach_uprobe = _ATTACH_UPROBE(("bpf_attach_uprobe", lib))
        self._lib = lib
        self._closing: list[threading.Thread] = []
        #: set while no attach() runs: a release's closes wait for it (see _close)
        self._not_attaching = threading.Event()
        self._not_attaching.set()
        self._multi = links and bcc_loads_for_links(bpf, lib) and links_supported()
        self._links: list[int] = []
        #: each object's links or perf events (by the ``name`` it was attached under) and probes
        self._owned: dict[object, tuple[list[int], list[bytes], int]] = {}
        self.probes = 0         # addresses probed (entry and return probes counted apart)
        self.failed: list[str] = []     # "path+0xoffset fn: reason" of probes that did not attach
        self._refused: set[tuple[str, int]] = set()     # (fn, file offset) of the last attach() that failed
        #: BPF functions the verifier refused, with bcc's message: not loaded again for the next object
        self._unloadable: dict[str, str] = {}
        #: held while a program loads: attach() and the preload never load one twice
        self._load_mu = threading.Lock()
        self._preloading = threading.Event()        # set: the preload goes on; cleared to stop it
        self._preloader: threading.Thread | None = None
        self._site_walk_done = False
        self.site_walk_error: str | None = None     # why call sites are not sampled (the walk not loaded)

    @property
    def mode(self) -> str:
        """"links" (uprobe_multi) or "perf" (one perf event per probe)."""
        return "links" if self._multi else "perf"

    def attach(self, path: str, wanted: Sequence[tuple[Probe, int, int]], name: str | None = None,
               owner: object = None) -> int:
        """Attach ``(probe, vaddr, file_offset)`` in ``path``; return how many probes attached.

        ``name`` identifies the object in event names and failures (default ``path``; give it
        when ``path`` is a ``/proc/self/fd/N`` whose number is reused later); ``owner``: the key
        detach() takes (default the name). Launch probes go
        first (they have no return probe: a running process is counted before the other handlers
        are verified; alloc_return alone takes 0.1 s), then return probes, then the other entry
        probes: an entry seen without its return would leave a stale depth. A probe that cannot
        attach (an odd symbol, a program the verifier refuses) does not stop the others.
        """
        self._not_attaching.clear()
        try:
            return self._attach(path, wanted, name, owner)
        finally:
            self._not_attaching.set()

    def _attach(self, path: str, wanted: Sequence[tuple[Probe, int, int]], name: str | None,
                owner: object) -> int:
        """attach() itself; releases' closes wait meanwhile."""
        groups: dict[tuple[str, bool], list[tuple[int, int]]] = {}
        #: an entry probe's return probe at the same address: without it the entry is not attached
        returns = {(probe.entry, offset): probe.ret for probe, _v, offset in wanted if probe.ret}
        for probe, vaddr, offset in wanted:
            if not probe.ret and probe.entry in LAUNCH_ENTRIES:
                groups.setdefault((probe.entry, False), []).append((vaddr, offset))
        for probe, vaddr, offset in wanted:
            if probe.ret:
                groups.setdefault((probe.ret, True), []).append((vaddr, offset))
        for probe, vaddr, offset in wanted:
            if probe.ret or probe.entry not in LAUNCH_ENTRIES:
                groups.setdefault((probe.entry, False), []).append((vaddr, offset))
        attached = 0
        label = name or path
        self._refused.clear()
        links_before, perf_before = len(self._links), set(self._bpf.uprobe_fds)
        for (fn, ret), where in groups.items():
            if not ret:         # an entry whose return did not attach would leave a stale depth (nested calls
                                # then look inside it, and are not counted): neither goes
                alone = [w for w in where if (returns.get((fn, w[1])), w[1]) in self._refused]
                for _v, off in alone:
                    self._failed(label, fn, off, f"its return probe ({returns[(fn, off)]}) did not attach")
                where = [w for w in where if w not in alone]
                if not where:
                    continue
            try:
                prog = self._loaded(fn)
            except Exception as e:      # bcc raises Exception when the kernel refuses the program
                for _v, off in where:
                    self._failed(label, fn, off, str(e))
                continue
            attach = self._attach_links if self._multi else self._attach_perf
            attached += attach(prog, path, label, fn, ret, where)
        self.probes += attached
        if attached:
            self._site_walk()           # after the object's probes: they count from the first call
        owner = label if owner is None else owner
        links, events, probes = self._owned.get(owner, ([], [], 0))
        self._owned[owner] = (links + self._links[links_before:],
                              events + [e for e in self._bpf.uprobe_fds if e not in perf_before], probes + attached)
        return attached

    def detach(self, owner: object) -> int:
        """Detach every probe attached for ``owner`` (an object no process maps any more);
        returns how many probes that was. The descriptors are closed on threads of their own
        (each close waits for an RCU grace period: 0.1 s here), wait_detached() waits for them."""
        links, events, probes = self._owned.pop(owner, ([], [], 0))
        gone = set(links)
        self._links = [fd for fd in self._links if fd not in gone]
        perf = [(ev, self._bpf.uprobe_fds.pop(ev)) for ev in events if ev in self._bpf.uprobe_fds]
        self.probes -= probes
        if links or perf:
            t = threading.Thread(target=self._close, args=(links, perf), name="gputop-detach", daemon=True)
            t.start()
            self._closing.append(t)
        return probes

    def _close(self, links: list[int], perf: list[tuple[bytes, int]]) -> None:
        """Close links on up to 32 daemon threads at once (their grace periods overlap), perf events on
        one: the kernel closes those one at a time anyway, each holding the tracing ``event_mutex``
        while it waits for grace periods (perf_uprobe_destroy), and every perf-event attach needs that
        mutex too. Before each close, a running attach() is waited for: an object mapped while
        another is released is probed after at most one close, not after the release's ~12 s
        (tests/bpf/test_short_lived.py). Daemon threads, not an executor's, so that quitting never
        waits for them (the kernel closes what is left)."""
        def some(items: list[int | tuple[bytes, int]]) -> None:
            for item in items:
                self._not_attaching.wait()
                with contextlib.suppress(OSError):
                    os.close(item if isinstance(item, int) else item[1])
                if not isinstance(item, int):
                    self._lib.bpf_detach_uprobe(item[0])     # the tracefs event, where bcc made one
        items: list[int | tuple[bytes, int]] = [*links, *perf]
        n = min(1 if perf else 32, len(items))
        threads = [threading.Thread(target=some, args=(items[i::n],), name="gputop-detach", daemon=True)
                   for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def wait_detached(self) -> None:
        for t in self._closing:
            t.join()
        self._closing.clear()

    def _failed(self, label: str, fn: str, offset: int, why: str) -> None:
        self.failed.append(f"{os.path.basename(label)}+0x{offset:x} {fn}: {why}")
        self._refused.add((fn, offset))

    @staticmethod
    def _why(err: int) -> str:
        why = os.strerror(err)
        if err == errno.EINVAL:
            why += " (if dmesg says ref_ctr_offset mismatch: another tracer's probe is at this address)"
        return why

    def _site_walk(self) -> None:
        """The call-site walk (bpf/sites.bpf.h site_walk), loaded as the launch handlers are (a tail call's
        target must be of their kind) and put where they call it, once; without it launches are counted and
        not sampled."""
        if self._site_walk_done:
            return
        self._site_walk_done = True
        try:
            prog = self._loaded("site_walk")
            table = self._bpf[b"site_tail"]
            table[ctypes.c_int(0)] = ctypes.c_int(prog.fd)
        except Exception as e:          # a program without it (bench/probe_cost.py --before), or refused
            self.site_walk_error = str(e)

    def _loaded(self, fn: str) -> Any:
        """The BPF function ``fn``, loaded on first use (by attach() or the preload, whichever asks first;
        bcc keeps it). One the verifier refused is not loaded again: the same bytecode, the same verifier
        (seconds each); its message is raised again."""
        with self._load_mu:
            if fn in self._unloadable:
                raise Exception(self._unloadable[fn])       # as bcc raises it: attach() says it per probe
            try:
                if self._multi:
                    return self._bpf.load_func(fn.encode(), _KPROBE, None, BPF_TRACE_UPROBE_MULTI)
                return self._bpf.load_func(fn.encode(), _KPROBE)
            except Exception as e:
                if str(e).endswith(_REFUSALS):
                    self._unloadable[fn] = str(e)
                raise

    def preload(self, fns: Sequence[str] = PRELOAD) -> None:
        """Load ``fns`` on a thread of its own, ahead of the first object that needs them: the
        verifier takes most of a second for a runtime's handlers (longer beside busy processes), which
        attach() would otherwise spend on the collector's thread, holding
        the refresh that sees the first CUDA process (tests/bpf/test_fair_share_live.py). detach_all() stops
        it. It waits while an attach() runs, and is not niced: an attach() waits for the load it is in, which
        a busy host would stretch. A function it could not load is attach()'s to try again (or to say
        refused)."""
        if self._preloader is not None:
            return
        self._preloading.set()
        self._preloader = threading.Thread(target=self._preload, args=(list(fns),), name="gputop-preload",
                                           daemon=True)
        self._preloader.start()

    def _preload(self, fns: list[str]) -> None:
        for fn in fns:
            self._not_attaching.wait()              # an attach() first: it is what a refresh waits for
            if not self._preloading.is_set():
                return
            with contextlib.suppress(Exception):
                self._loaded(fn)
        self._preloading.clear()

    def wait_preloaded(self) -> None:
        """Until the preload is done (or stopped)."""
        if self._preloader is not None:
            self._preloader.join()

    def _stop_preload(self) -> None:
        """Stop the preload and wait for the load it is in: bcc's cleanup frees the module it loads from."""
        self._preloading.clear()
        self.wait_preloaded()

    def _attach_links(self, prog: Any, path: str, label: str, fn: str, ret: bool,
                      where: list[tuple[int, int]]) -> int:
        try:
            self._links.append(uprobe_multi_link(prog.fd, path, [off for _v, off in where], retprobe=ret))
            return len(where)
        except OSError as e:
            if len(where) == 1:
                self._failed(label, fn, where[0][1], self._why(e.errno or errno.EINVAL))
                return 0
        # one bad address fails the whole link: attach the rest one by one
        return sum(self._attach_links(prog, path, label, fn, ret, [w]) for w in where)

    def _attach_perf(self, prog: Any, path: str, label: str, fn: str, ret: bool,
                     where: list[tuple[int, int]]) -> int:
        done = 0
        for _vaddr, offset in where:
            # bcc's own naming, so its cleanup() detaches it like one of its own
            # a hostile file name may hold any bytes (surrogate-escaped in label): back to those bytes
            ev_name = b"%s_%s_0x%x" % (b"r" if ret else b"p", _EV_UNSAFE.sub(b"_", os.fsencode(label)), offset)
            ctypes.set_errno(0)
            fd = self._attach_uprobe(prog.fd, 1 if ret else 0, ev_name, path.encode(), offset, -1, 0)
            if fd < 0:
                self._failed(label, fn, offset, self._why(ctypes.get_errno() or errno.EINVAL))
                continue
            self._bpf.uprobe_fds[ev_name] = fd
            done += 1
        return done

    def detach_all(self) -> None:
        """Stop the preload, then close every link at once (their grace periods overlap); perf events stay
        for bcc's cleanup."""
        self._stop_preload()
        links, self._links = self._links, []
        self._owned.clear()
        if not links:
            return
        try:
            with ThreadPoolExecutor(min(32, len(links)), thread_name_prefix="gputop-detach") as pool:
                list(pool.map(os.close, links))
        except RuntimeError:    # no new threads while the interpreter shuts down (the exit hook)
            for fd in links:
                with contextlib.suppress(OSError):
                    os.close(fd)
