"""Whether this process may open a uprobe as a perf event of the kernel's uprobe PMU (how uprobes attach
where there are no uprobe_multi links: Linux before 6.6, or bcc before 0.21). docs/deploy.md, "Hosts
whose uprobes attach as perf events"; gputop asks the same (``privileges.uprobe_pmu_allowed``, on a
memfd of its own) before it traces:

    C=+bpf,+perfmon,+dac_read_search,+sys_ptrace,+checkpoint_restore
    setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps $C --ambient-caps $C \\
        .venv/bin/python bench/uprobe_pmu_open.py /tmp/libcudart.so.12      # add ,+sys_admin to compare

Prints ``opened`` or ``refused: <errno text>``; exit 0 or 1. The probe is at FILE's offset 0x1000 (it is
never hit: nothing maps the file through it), system-wide on CPU 0, and closed at once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop.sources.bpf.common.linux import open_uprobe


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
