"""Whether this process may open a uprobe as a perf event of the kernel's uprobe PMU (how uprobes attach
where there are no uprobe_multi links: Linux before 6.6, or bcc before 0.21). docs/matrix.md, the
least capability set on the perf-event path:

    C=+bpf,+perfmon,+dac_read_search,+sys_ptrace,+checkpoint_restore
    setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps $C --ambient-caps $C \\
        python3 bench/uprobe_pmu_open.py /tmp/libcudart.so.12      # add ,+sys_admin to compare

Prints ``opened`` or ``refused: <errno text>``; exit 0 or 1. The probe is at FILE's offset 0x1000 (it is
never hit: nothing maps the file through it), system-wide on CPU 0, and closed at once.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from pathlib import Path

_PERF_EVENT_OPEN = 298          # x86-64
_FD_CLOEXEC = 8                 # PERF_FLAG_FD_CLOEXEC
_ATTR_SIZE = 128


def open_uprobe(path: str, offset: int) -> int:
    """perf_event_open of the uprobe PMU at ``path`` + ``offset``: the descriptor, or -errno."""
    pmu = int(Path("/sys/bus/event_source/devices/uprobe/type").read_text())
    name = ctypes.create_string_buffer(os.fsencode(path))
    attr = bytearray(_ATTR_SIZE)
    # type, size, config, sample_period, sample_type, read_format, flags, wakeup_events, bp_type,
    # config1 (the path), config2 (the offset)
    struct.pack_into("<IIQQQQQIIQQ", attr, 0, pmu, _ATTR_SIZE, 0, 1, 0, 0, 0, 1, 0, ctypes.addressof(name), offset)
    buf = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.syscall(_PERF_EVENT_OPEN, buf, -1, 0, -1, _FD_CLOEXEC))
    return fd if fd >= 0 else -ctypes.get_errno()


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: uprobe_pmu_open.py FILE", file=sys.stderr)
        return 2
    fd = open_uprobe(sys.argv[1], 0x1000)
    if fd < 0:
        print(f"refused: {os.strerror(-fd)}")
        return 1
    os.close(fd)
    print("opened")
    return 0


if __name__ == "__main__":
    sys.exit(main())
