"""Driver handles nobody saw looked up (gputop/sources/bpf/names/handles.py): a layout learned from known
handles, on a made-up address space; never a name the known handles do not all vouch for."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from gputop.sources.bpf.attach.discovery import Mapping
from gputop.sources.bpf.names import handles as h


class Space:
    """A sparse address space: writes of bytes, pointers and strings; reads fail outside what was written."""

    def __init__(self) -> None:
        self.bytes: dict[int, int] = {}
        self.next = 0x10000

    def alloc(self, size: int) -> int:
        at = self.next
        self.next += (size + 0xFFF) & ~0xFFF      # each allocation on pages of its own: no window reaches another
        for i in range(size):
            self.bytes[at + i] = i % 7               # small numbers: no pointers
        return at

    def put(self, at: int, value: int) -> None:
        for i, b in enumerate(value.to_bytes(8, "little")):
            self.bytes[at + i] = b

    def string(self, text: bytes) -> int:
        at = self.alloc(len(text) + 1)
        for i, b in enumerate(text + b"\0"):
            self.bytes[at + i] = b
        return at

    def read(self, addr: int, size: int) -> bytes | None:
        out = bytearray()
        for a in range(addr, addr + size):
            if a not in self.bytes:
                break
            out.append(self.bytes[a])
        return bytes(out) or None


def handle(space: Space, fields: dict[int, bytes | int]) -> int:
    """A structure of 1 KiB with a string's pointer (bytes) or a value (int) at each offset."""
    at = space.alloc(1024)
    for off, v in fields.items():
        space.put(at + off, space.string(v) if isinstance(v, bytes) else v)
    return at


def samples(space: Space, *pairs: tuple[int, bytes]) -> list[h.Sample]:
    return [h.Sample(space, at, name) for at, name in pairs]


def test_a_direct_layout_needs_two_known_handles_and_names_the_others_exactly() -> None:
    s = Space()
    a = handle(s, {8: b"decoy", 0x18: b"after_one"})
    b = handle(s, {8: b"decoy", 0x18: b"_Z9after_twoPKf"})
    old = handle(s, {8: b"decoy", 0x18: b"_Z12before_firstPfi"})
    assert h.learn(samples(s, (a, b"after_one"))) is None                 # one is not enough
    layout = h.learn(samples(s, (a, b"after_one"), (b, b"_Z9after_twoPKf")))
    assert layout == ((0x18,),)
    assert h.read_name(s, old, layout) == b"_Z12before_firstPfi"


def test_a_layout_through_one_more_pointer() -> None:
    s = Space()

    def info_handle(name: bytes) -> int:
        info = s.alloc(64)
        s.put(info + 0x10, s.string(name))
        return handle(s, {8: b"decoy", 0x40: info})
    a, b, old = info_handle(b"after_one"), info_handle(b"after_two"), info_handle(b"before_first")
    layout = h.learn(samples(s, (a, b"after_one"), (b, b"after_two")))
    assert layout == ((0x40, 0x10),)
    assert h.read_name(s, old, layout) == b"before_first"


def test_a_pointer_into_the_structure_itself_is_no_other_structure() -> None:
    s = Space()
    a = handle(s, {0x18: b"after_one"})
    b = handle(s, {0x18: b"after_two"})
    for at in (a, b):
        s.put(at + 0x28, at)                    # an empty list's head: the structure's own address
    assert h.learn(samples(s, (a, b"after_one"), (b, b"after_two"))) == ((0x18,),)


def test_known_handles_that_disagree_teach_nothing() -> None:
    s = Space()
    a = handle(s, {0x18: b"after_one", 0x20: b"another_kernel"})
    b = handle(s, {0x20: b"after_two", 0x18: b"another_kernel"})
    assert h.learn(samples(s, (a, b"after_one"), (b, b"after_two"))) is None


def test_pointers_to_other_strings_only_teach_nothing() -> None:
    s = Space()
    a = handle(s, {8: b"after_onex", 0x10: b"after_on", 0x18: b"other"})
    b = handle(s, {8: b"after_twox", 0x10: b"after_tw", 0x18: b"other"})
    assert h.learn(samples(s, (a, b"after_one"), (b, b"after_two"))) is None


def test_two_paths_that_agree_must_name_a_handle_alike() -> None:
    s = Space()
    a = handle(s, {0x10: b"after_one", 0x18: b"after_one"})
    b = handle(s, {0x10: b"after_two", 0x18: b"after_two"})
    layout = h.learn(samples(s, (a, b"after_one"), (b, b"after_two")))
    assert layout == ((0x10,), (0x18,))
    assert h.read_name(s, handle(s, {0x10: b"before_first", 0x18: b"another_kernel"}), layout) is None
    assert h.read_name(s, handle(s, {0x10: b"before_first", 0x18: b"before_first"}), layout) == b"before_first"
    # a path that agreed by chance and leads nowhere on another handle says nothing: the other names it
    assert h.read_name(s, handle(s, {0x10: b"before_first", 0x18: 0}), layout) == b"before_first"


def test_what_is_no_name_names_nothing() -> None:
    s = Space()
    layout = ((0x18,),)
    assert h.read_name(s, handle(s, {0x18: b"two words"}), layout) is None
    assert h.read_name(s, handle(s, {0x18: b"\x1b[31mred"}), layout) is None
    assert h.read_name(s, handle(s, {0x18: b""}), layout) is None
    assert h.read_name(s, handle(s, {0x18: 0x7FFF_0000_0000}), layout) is None    # a read that fails
    assert h.read_name(s, handle(s, {0x18: 5}), layout) is None                  # no pointer
    assert h.read_name(s, 0xDEAD_0000, layout) is None                          # no structure there
    endless = s.alloc(h.NAME_MAX + 100)
    for i in range(h.NAME_MAX + 100):
        s.bytes[endless + i] = ord("a")
    assert h.read_name(s, handle(s, {0x18: endless}), layout) is None          # no NUL within NAME_MAX
    long = b"_Z" + b"x" * 3000
    assert h.read_name(s, handle(s, {0x18: long}), layout) == long


def test_a_cut_capture_agrees_with_the_whole_name_it_begins() -> None:
    s = Space()
    long_a, long_b = b"_Z" + b"a" * 400, b"_Z" + b"b" * 400
    a, b = handle(s, {0x30: long_a}), handle(s, {0x30: long_b})
    assert h.learn([h.Sample(s, a, long_a[:255], True), h.Sample(s, b, long_b[:255], True)]) == ((0x30,),)


LIBCUDA = Mapping(0x7000_0000, 0x7100_0000, 0, 1, 77, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01")
OTHER_LIBCUDA = Mapping(0x7000_0000, 0x7100_0000, 0, 1, 78, "/opt/other/libcuda.so.1")


class Names:
    """HandleNames over a Space for the processes ``pids`` (their maps given), and what it unnamed."""

    def __init__(self, space: Space, maps: dict[int, list[Mapping]], known: list[h.Known],
                 unname: Callable[[set[tuple[int, int]]], None] = lambda keys: None) -> None:
        self.now = 0.0
        self.known = known
        self.unnamed: set[tuple[int, int]] = set()
        self.opened: list[int] = []

        @contextlib.contextmanager
        def memory(pid: int) -> Iterator[h.Memory | None]:
            self.opened.append(pid)
            yield space
        def unnamed(keys: set[tuple[int, int]]) -> None:
            self.unnamed.update(keys)
            unname(keys)
        self.names = h.HandleNames(lambda wanted: [k for k in self.known if wanted(k[0])],
                                   lambda pid: maps.get(pid, []), unnamed, clock=lambda: self.now, memory=memory,
                                   stamp=lambda pid, m: (1 << 20, 1))


def test_handle_names_learn_per_libcuda_and_give_a_layout_up_that_a_handle_disagrees_with() -> None:
    s = Space()
    me = os.getpid()                    # its user is this test's: identity() stats /proc/PID
    a = handle(s, {0x18: b"after_one"})
    old = handle(s, {0x18: b"before_first"})
    other = 1 << 22                     # no such PID: no user, no identity
    n = Names(s, {me: [LIBCUDA], other: [OTHER_LIBCUDA]}, [(me, a, b"after_one", False)])
    assert n.names.name(me, old) is None                    # one known handle: nothing learned
    b = handle(s, {0x18: b"after_two"})
    n.known.append((me, b, b"after_two", False))
    assert n.names.name(me, old) is None                    # not tried again before RETRY_S
    n.now += h.RETRY_S
    assert n.names.name(me, old) == "before_first"
    assert n.names.name(other, old) is None                 # another libcuda, no user: not this layout
    n.names.seen(me, a, b"after_one", False)                # agrees: kept
    assert n.names.name(me, old) == "before_first" and not n.unnamed
    bad = handle(s, {0x20: b"after_three", 0x18: b"another_kernel"})
    n.names.seen(me, bad, b"after_three", False)            # disagrees: given up, its names forgotten
    assert n.unnamed == {(me, old)}
    n.now += h.RETRY_S
    assert n.names.name(me, old) is None


def test_known_handles_of_code_or_of_a_process_without_that_libcuda_are_no_samples() -> None:
    s = Space()
    me = os.getpid()
    stub_code = Mapping(0x40_0000, 0x50_0000, 0, 1, 99, "/opt/app/bin/app")
    a = handle(s, {0x18: b"after_one"})
    n = Names(s, {me: [LIBCUDA, stub_code]}, [(me, a, b"after_one", False), (me, 0x40_1000, b"host_stub", False)])
    assert n.names.name(me, handle(s, {0x18: b"before_first"})) is None
    # two libcuda files mapped: which one a handle is of is not known
    n2 = Names(s, {me: [LIBCUDA, OTHER_LIBCUDA]}, [(me, a, b"after_one", False), (me, a + 1, b"after_two", False)])
    assert n2.names.name(me, a) is None and n2.opened == []


def test_the_namer_asks_for_a_handle_only_where_nothing_else_names_it() -> None:
    """kernelnames.KernelNamer: a handle with a captured name is named so (and checked against a learned
    layout); one without, outside every mapping, is named from its structure (demangled); a host stub's
    address is never read as a structure; a program that is gone is never read."""
    from gputop.sources.bpf.names.kernelnames import KernelNamer

    s = Space()
    me = os.getpid()
    a, b = handle(s, {0x18: b"after_one"}), handle(s, {0x18: b"_Z9after_twoPKf"})
    old = handle(s, {0x18: b"_Z12before_firstPfi"})
    captured = {a: b"after_one", b: b"_Z9after_twoPKf"}
    stale = [False]
    namer = KernelNamer(lambda pid, addr: captured.get(addr), lambda pid, addr: None, {},
                        lambda pid: [LIBCUDA], lambda pid, maps: None, memory_ok=lambda pid: not stale[0])
    namer.maps = lambda pid: [LIBCUDA]      # type: ignore[method-assign]   # not this process's own maps
    n = Names(s, {me: [LIBCUDA]}, [(me, a, b"after_one", False), (me, b, b"_Z9after_twoPKf", False)],
              namer.unname)
    namer.handles = n.names
    stale[0] = True
    assert namer.name(me, old) == (None, None)              # a program gone: its memory is not read
    stale[0] = False
    namer.forget(me)
    assert namer.name(me, old) == ("before_first(float*, int)", None)
    assert namer.name(me, LIBCUDA.start + 0x100) == (None, LIBCUDA.path)     # code: no structure read
    captured[a] = b"after_three"                            # a known handle the layout does not read so
    assert namer.name(me, a) == ("after_three", None)
    assert n.unnamed == {(me, old)}
    assert namer.name(me, old) == (None, None)              # forgotten, and the layout given up


def _gpu_validate():  # type: ignore[no-untyped-def]
    """bench/gpu_validate.py as a module (it imports bench/gpu_workloads.py, found beside it)."""
    import importlib.util
    import sys
    from pathlib import Path

    gv = sys.modules.get("gpu_validate")
    if gv is None:
        spec = importlib.util.spec_from_file_location("gpu_validate", Path(__file__).resolve().parents[2] / "bench"
                                                      / "gpu_validate.py")
        assert spec is not None and spec.loader is not None
        gv = importlib.util.module_from_spec(spec)
        sys.modules["gpu_validate"] = gv        # its dataclasses look their module up there
        spec.loader.exec_module(gv)
    return gv


def test_the_gpu_runs_count_of_kernels_shown_by_address() -> None:
    """bench/gpu_validate.py's `kernels shown as addresses` (driver_before's own 0): kernels launched in the
    phase that its row after the phase shows by address."""
    gv = _gpu_validate()
    t0, t1 = 100.0, 104.0

    def row(*kernels: tuple[str, int, int | None]) -> dict[str, object]:
        return {"kernels": [{"name": n, "launches": k, "address": a} for n, k, a in kernels]}
    rows = [(t0 - 0.5, row(("0xabc0", 5, 0xABC0), ("seen_a", 1, None))),
            (t1 + 0.5, row(("0xabc0", 5, 0xABC0), ("0xdef0", 100, 0xDEF0), ("gputop_before_axpy", 100, None),
                           ("seen_a", 1, None)))]
    assert gv.shown_as_addresses(rows, (t0, t1)) == 1        # 0xabc0 not launched in the phase
    assert gv.shown_as_addresses(rows[1:], (t0, t1)) is None


def test_one_users_handles_name_only_that_users_processes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    s = Space()
    uids = {101: 1000, 102: 1000, 201: 2000}
    monkeypatch.setattr(h, "_uid", uids.get)
    a, b = handle(s, {0x18: b"after_one"}), handle(s, {0x18: b"after_two"})
    old = handle(s, {0x18: b"before_first"})
    n = Names(s, {pid: [LIBCUDA] for pid in uids}, [(101, a, b"after_one", False), (101, b, b"after_two", False)])
    assert n.names.name(201, old) is None          # another user: its own layout, learned from nothing
    assert n.names.name(102, old) == "before_first"


def test_known_handles_of_one_name_teach_nothing() -> None:
    """Two look-ups of one kernel (two modules, two processes) agree on whatever path reaches that name's
    string, a shared one included: at least two names are needed."""
    s = Space()
    shared = s.string(b"after_one")
    a, b = handle(s, {0x18: b"after_one", 0x20: shared}), handle(s, {0x18: b"after_one", 0x20: shared})
    assert h.learn(samples(s, (a, b"after_one"), (b, b"after_one"))) is None
    c = handle(s, {0x18: b"after_two", 0x20: shared})
    assert h.learn(samples(s, (a, b"after_one"), (b, b"after_one"), (c, b"after_two"))) == ((0x18,),)
    me = os.getpid()
    n = Names(s, {me: [LIBCUDA]}, [(me, a, b"after_one", False), (me, b, b"after_one", False)])
    assert n.names.name(me, handle(s, {0x18: b"before_first"})) is None


def test_a_libcuda_file_is_known_by_its_size_and_change_time_too(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """identity(): the same (device, inode) with another size or change time is another file (an inode
    number a deleted driver had, reused); a path that is not the mapped file gives no identity."""
    import time

    me = os.getpid()
    lib = tmp_path / "libcuda.so.1"
    lib.write_bytes(b"\x7fELF" + bytes(60))

    def mapping(path: str) -> Mapping:
        st = os.stat(path)
        return Mapping(0x7000_0000, 0x7100_0000, 0, st.st_dev, st.st_ino, path)
    first = h.identity(me, [mapping(str(lib))])
    assert first is not None and first[:3] == (os.stat(lib).st_dev, os.stat(lib).st_ino, 64)
    assert first[4] == os.getuid()
    time.sleep(0.05)                        # change times are of the kernel's coarse clock
    lib.chmod(0o600)
    second = h.identity(me, [mapping(str(lib))])
    assert second is not None and second[:3] == first[:3] and second != first
    other = tmp_path / "other" / "libcuda.so.1"
    other.parent.mkdir()
    other.write_bytes(b"\x7fELF" + bytes(60))
    third = h.identity(me, [mapping(str(other))])
    assert third is not None and third[:2] != first[:2]
    swapped = Mapping(0x7000_0000, 0x7100_0000, 0, first[0], first[1], str(other))   # the path is another file
    assert h.identity(me, [swapped]) is None
    assert h.identity(me, [mapping(str(lib)), mapping(str(other))]) is None          # two libcuda files
    # HandleNames keys what it learns by that identity: the same (device, inode) of another change time is
    # another file, whose processes the layout learned from the first's never names
    monkeypatch.setattr(h, "_uid", {101: 1000, 102: 1000}.get)
    s = Space()
    a, b = handle(s, {0x18: b"after_one"}), handle(s, {0x18: b"after_two"})
    old = handle(s, {0x18: b"before_first"})
    stamps = {101: (64, 1), 102: (64, 2)}
    n = h.HandleNames(lambda wanted: [k for k in [(101, a, b"after_one", False), (101, b, b"after_two", False)]
                                      if wanted(k[0])], lambda pid: [LIBCUDA], lambda keys: None,
                      memory=lambda pid: contextlib.nullcontext(s), stamp=lambda pid, m: stamps[pid])
    assert n.name(102, old) is None
    assert n.name(101, old) == "before_first"


def test_the_gpu_runs_peer_process_lives_as_long_as_its_workload(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """bench/gpu_workloads.py's driver_peer_before (issue 34 item 4 on a GPU): its phase runs before
    driver_before's (whose own look-ups would teach gputop otherwise), both started before gputop; its other
    process is waited for until ready, and exits when the workload does, however the workload ends. Without
    a GPU, what needs none: the ordering, and start_peer with stand-in processes."""
    import subprocess
    import sys
    import time

    gv = _gpu_validate()
    import gpu_workloads as gw

    assert gv.BEFORE.index("driver_peer_before") < gv.BEFORE.index("driver_before")
    assert all(n.endswith("before") and n in gw.WORKLOADS for n in gv.BEFORE)
    assert len([*gv.BEFORE, *gv.ORDER]) == len({*gv.BEFORE, *gv.ORDER}) == 16
    gone = tmp_path / "peer-gone"
    peer = [sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read(); "
            f"open({str(gone)!r}, 'w').close()"]
    workload = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(gv.HERE)!r}); "
                               f"import gpu_workloads as gw; gw.start_peer({peer!r}); print(gw._PEERS[0].pid)"],
                              capture_output=True, text=True, timeout=30, check=True)
    assert int(workload.stdout) > 0
    deadline = time.monotonic() + 10
    while not gone.exists():                # the workload exited: its peer's standard input ended
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        gw.start_peer([sys.executable, "-c", "import sys; sys.exit(3)"])
    except RuntimeError as e:
        assert "exited (3) before it was ready" in str(e)
    else:
        raise AssertionError("a peer that never got ready")
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return
    # with no PyTorch (here), the peer fails as the workload's other lines do: an error, no "ready"
    try:
        gw.start_peer([sys.executable, str(gv.HERE / "gpu_workloads.py"), gw.PEER])
    except RuntimeError as e:
        assert "before it was ready" in str(e)
    else:
        raise AssertionError("a peer without PyTorch got ready")
