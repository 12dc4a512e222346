"""Reaching a file a gone process mapped: kernel struct offsets from BTF, and the paths a dentry
walk gives in gputop's own mount namespace (mountinfo), checked by device and inode."""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

import pytest

from gputop.sources.bpf.attach import discovery

# a bind mount of a subfolder, an escaped space, and another filesystem
from gputop.sources.bpf.common import btf

MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 254:0 /srv/data /mnt/my\\040data rw,relatime shared:1 - ext4 /dev/vda rw
31 22 0:45 / /var/lib/containers/merged rw - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
"""
DEV = os.makedev(254, 0)


def test_paths_from_a_dentry_walk_through_each_mount_of_the_filesystem() -> None:
    names = [b"libcudart.so.12", b"lib", b"data", b"srv", b"/"]
    assert discovery.paths_here(DEV, names, MOUNTINFO) == ["/srv/data/lib/libcudart.so.12",
                                                          "/mnt/my data/lib/libcudart.so.12"]
    # outside the bind mount's root: only through /
    assert discovery.paths_here(DEV, [b"libc.so.6", b"lib", b"usr", b"/"], MOUNTINFO) == ["/usr/lib/libc.so.6"]
    assert discovery.paths_here(os.makedev(0, 45), [b"x.so", b"/"], MOUNTINFO) == \
        ["/var/lib/containers/merged/x.so"]
    assert discovery.paths_here(os.makedev(8, 1), names, MOUNTINFO) == []       # not mounted here


def test_a_walk_that_cannot_be_a_path_gives_none() -> None:
    assert discovery.paths_here(DEV, [b"/"], MOUNTINFO) == []
    assert discovery.paths_here(DEV, [b"a/b", b"/"], MOUNTINFO) == []
    assert discovery.paths_here(DEV, [b"", b"x", b"/"], MOUNTINFO) == []


def test_device_numbers_both_ways() -> None:
    dev = os.makedev(259, 1048575)
    assert discovery.kernel_dev(dev) == (259 << 20) | 1048575
    assert discovery.user_dev(discovery.kernel_dev(dev)) == dev


def test_reach_checks_device_and_inode(tmp_path: Path) -> None:
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x7fELF" + bytes(8192))
    st = lib.stat()
    names = [os.fsencode(p) for p in reversed(lib.parts[1:])] + [b"/"]
    ref = discovery.reach(st.st_dev, st.st_ino, names, 4242)
    if ref is None:
        pytest.skip(f"{tmp_path} is not reachable through its dentry path from / here")
    assert (ref.dev, ref.inode, ref.path, ref.open_path, ref.pid) == (st.st_dev, st.st_ino, str(lib), str(lib), 4242)
    # another file now at that path (a library replaced): not the one the process mapped
    shutil.copy(lib, tmp_path / "new.so")
    os.replace(tmp_path / "new.so", lib)
    assert discovery.reach(st.st_dev, st.st_ino, names, 4242) is None


def _btf(types: list[bytes], strings: bytes) -> bytes:
    body = b"".join(types)
    return struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(body), len(body), len(strings)) + body + strings


def test_member_offsets_through_anonymous_unions_typedefs_and_bitfield_encoding() -> None:
    strs = b"\0u64\0inner\0a\0b\0outer\0x\0in\0c\0"
    s = {n: strs.index(b"\0" + n.encode() + b"\0") + 1 for n in ("u64", "inner", "a", "b", "outer", "x", "in", "c")}
    types = [
        struct.pack("<IIII", s["u64"], 1 << 24, 8, 64),                                      # 1 int u64
        struct.pack("<III", s["inner"], (4 << 24) | 2, 16)                                  # 2 struct inner
        + struct.pack("<III", s["a"], 1, 0) + struct.pack("<III", s["b"], 1, 64),
        struct.pack("<III", 0, (5 << 24) | 1, 8) + struct.pack("<III", s["c"], 1, 0),       # 3 anonymous union
        struct.pack("<III", 0, 10 << 24, 2),                                                # 4 const inner
        struct.pack("<III", s["outer"], (4 << 24) | (1 << 31) | 3, 40)                      # 5 struct outer, kind_flag
        + struct.pack("<III", s["x"], 1, 0) + struct.pack("<III", 0, 3, 64)
        + struct.pack("<III", s["in"], 4, 128),
    ]
    b = btf.Btf(_btf(types, strs))
    assert b.offset("outer", "x") == 0
    assert b.offset("outer", "c") == 8              # inside the anonymous union
    assert b.offset("outer", "in.b") == 24          # through the const
    assert b.offset("outer", "nope") is None and b.offset("nope", "x") is None


@pytest.mark.parametrize(("members", "expected"), [
    (None, (16, 28)),                   # 6.11+: i_ctime_sec ... i_ctime_nsec
    ("__i_ctime", (16, 24)),            # 6.6 to 6.10
    ("i_ctime", (16, 24)),              # before 6.6
], ids=["split", "__i_ctime", "i_ctime"])
def test_the_change_time_as_each_kernel_spells_it(members: str | None, expected: tuple[int, int]) -> None:
    """struct inode { u64 i_ino; u64 i_size; <change time> }, as 6.11+, 6.6 to 6.10 and older kernels
    declare it; a struct without one has none."""
    strs = b"\0u64\0u32\0timespec64\0tv_sec\0tv_nsec\0inode\0i_ino\0i_size\0i_ctime_sec\0i_ctime_nsec\0" \
           b"__i_ctime\0i_ctime\0"
    s = {n: strs.index(b"\0" + n.encode() + b"\0") + 1 for n in (
        "u64", "u32", "timespec64", "tv_sec", "tv_nsec", "inode", "i_ino", "i_size", "i_ctime_sec", "i_ctime_nsec",
        "__i_ctime", "i_ctime")}
    types = [
        struct.pack("<IIII", s["u64"], 1 << 24, 8, 64),                                      # 1 u64
        struct.pack("<IIII", s["u32"], 1 << 24, 4, 32),                                      # 2 u32
        struct.pack("<III", s["timespec64"], (4 << 24) | 2, 16)                             # 3 timespec64
        + struct.pack("<III", s["tv_sec"], 1, 0) + struct.pack("<III", s["tv_nsec"], 1, 64),
    ]
    head = struct.pack("<III", s["i_ino"], 1, 0) + struct.pack("<III", s["i_size"], 1, 64)
    if members is None:
        inode = struct.pack("<III", s["inode"], (4 << 24) | 4, 32) + head \
            + struct.pack("<III", s["i_ctime_sec"], 1, 128) + struct.pack("<III", s["i_ctime_nsec"], 2, 224)
    else:
        inode = struct.pack("<III", s["inode"], (4 << 24) | 3, 32) + head + struct.pack("<III", s[members], 3, 128)
    assert btf.ctime_offsets(btf.Btf(_btf([*types, inode], strs))) == expected
    bare = struct.pack("<III", s["inode"], (4 << 24) | 2, 16) + head
    assert btf.ctime_offsets(btf.Btf(_btf([*types, bare], strs))) is None


def test_the_running_kernels_offsets() -> None:
    offs = btf.file_offsets()
    if offs is None:
        pytest.skip("no /sys/kernel/btf/vmlinux here")
    assert set(offs) == set(btf.OFFSET_NAMES)
    # members whose place has not moved in a decade: struct fdtable { unsigned int max_fds; struct
    # file __rcu **fd; ...}, struct super_block { struct list_head s_list; dev_t s_dev; ...}
    assert offs["OFF_FDT_FD"] == 8 and offs["OFF_SB_DEV"] == 16


def test_not_btf() -> None:
    with pytest.raises(ValueError):
        btf.Btf(b"\0" * 64)
    assert btf.file_offsets.__wrapped__(Path("/nonexistent-vmlinux")) is None


def test_a_file_is_probed_only_while_it_is_the_one_read(tmp_path: Path) -> None:
    """Before its probes are attached, an object's probed pages are read through its descriptor (the page
    cache's read path, under the file's invalidate lock: ext4 on Linux 6.16+ warns when uprobe_register
    reads a page whose extent is not cached, issue 40), and the file must still be the one read: a file
    whose change time moved (written, truncated, chmod) or that no longer holds every probed offset is
    not probed now."""
    from gputop.sources.bpf.attach.attaching import PAGE, change_time, stable_for_probes

    lib = tmp_path / "lib.so"
    lib.write_bytes(bytes(range(256)) * (4 * PAGE // 256))
    fd = os.open(lib, os.O_RDONLY)
    try:
        ctime = change_time(os.fstat(fd))
        offsets = [10, PAGE + 1, 3 * PAGE + 7]
        assert stable_for_probes(fd, offsets, ctime)
        assert not stable_for_probes(fd, [*offsets, 4 * PAGE], ctime)          # past the end
        time.sleep(0.01)
        os.chmod(lib, 0o600)
        assert not stable_for_probes(fd, offsets, ctime)                       # changed since it was read
        assert stable_for_probes(fd, offsets, change_time(os.fstat(fd)))
        os.truncate(lib, PAGE)
        assert not stable_for_probes(fd, offsets, change_time(os.fstat(fd)))   # the offsets are gone
    finally:
        os.close(fd)
