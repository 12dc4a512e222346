"""Kernel memory of gputop's run-time allocated hash maps, preallocated or not (docs/collector.md,
"Kernels before 6.1"): each map created as bpf/gputop.bpf.c declares it (key and value sizes, entries),
once with BPF_F_NO_PREALLOC and once without, and the ``memlock:`` the kernel shows for it in
/proc/self/fdinfo. Needs CAP_BPF (root).

    sudo .venv/bin/python bench/map_prealloc.py
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from gputop.sources.bpf.common.abi import LIMITS

_SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_BPF_MAP_CREATE, _BPF_MAP_TYPE_HASH, _BPF_F_NO_PREALLOC = 0, 1, 1
_libc = ctypes.CDLL(None, use_errno=True)

#: (map, key bytes, value bytes, entries) as bpf/gputop.bpf.c declares them (the sizes of bpf/gputop.h's
#: structs; the entries of abi.LIMITS)
MAPS = (("name_ptrs", 16, 16, LIMITS["MAX_NAME_PTRS"]), ("gids", 16, 24, LIMITS["MAX_GRAPHS"]),
        ("graphs", 16, 16, LIMITS["MAX_GRAPHS"]), ("execs", 16, 8, LIMITS["MAX_GRAPHS"]),
        ("gnodes", 24, 8, LIMITS["MAX_GRAPH_NODES"]), ("gparts", 24, 8, LIMITS["MAX_GRAPHS"]))


def memlock_bytes(key: int, value: int, entries: int, flags: int) -> int:
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("IIIII", attr, 0, _BPF_MAP_TYPE_HASH, key, value, entries, flags)
    fd = int(_libc.syscall(_SYS_BPF, _BPF_MAP_CREATE, attr, 128))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "BPF_MAP_CREATE")
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("memlock:"))
    finally:
        os.close(fd)


def main() -> None:
    total = [0, 0]
    print(f"{'map':<10} {'preallocated MiB':>17} {'run-time MiB':>13}")
    for name, key, value, entries in MAPS:
        pre, rt = (memlock_bytes(key, value, entries, f) for f in (0, _BPF_F_NO_PREALLOC))
        total[0] += pre
        total[1] += rt
        print(f"{name:<10} {pre / 2**20:>17.1f} {rt / 2**20:>13.1f}")
    print(f"{'all six':<10} {total[0] / 2**20:>17.1f} {total[1] / 2**20:>13.1f}   (Linux {platform.release()})")


if __name__ == "__main__":
    main()
