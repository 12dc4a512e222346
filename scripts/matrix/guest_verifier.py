"""In a matrix guest (guest-verifier.sh): compile each source with the system's bcc and load each of its
uprobe programs alone; write OUT/SRC/result.txt and each refused program's verifier log (NAME.log).

    python3 guest_verifier.py REPO OUT SOURCE.c [SOURCE.c ...]
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path


def main() -> int:
    repo, out = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(repo))
    from bcc import BPF  # type: ignore[import-not-found]

    from gputop.sources.bpf.common import abi, linux
    from gputop.sources.bpf.lifecycle import procid
    from gputop.sources.bpf.program import ctext
    cflags = [*abi.cflags(), f"-DPID_GEN_WORDS={procid.pid_gen_words()}"]
    if linux.atomic_cmpxchg() is False:        # as gputop/sources/bpf/program/program.py's cflags: Linux < 5.12
        cflags.append(linux.NO_CMPXCHG)
    bad = 0
    for src in map(Path, sys.argv[3:]):
        dst = out / src.stem
        dst.mkdir(parents=True, exist_ok=True)
        try:        # a variant of gputop.bpf.c (srcs/) includes the headers of the repository's bpf/
            text = ctext.expand(src, [repo / "bpf"])
        except OSError as e:
            (dst / "result.txt").write_text(f"COMPILE {e}\n")
            bad += 1
            continue
        names = re.findall(r"^int (\w+)\(struct pt_regs \*ctx\)", text, re.M)
        try:
            b = BPF(text=text, cflags=cflags)
        except Exception as e:
            (dst / "result.txt").write_text(f"COMPILE {e}\n")
            bad += 1
            continue
        lines = []
        for name in names:
            log = dst / f"{name}.log"
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            saved = os.dup(2)
            os.dup2(fd, 2)
            try:
                b.load_func(name, BPF.KPROBE)
                ok = True
            except Exception as e:
                print(f"\n{e}", file=sys.stderr)
                ok = False
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                os.close(fd)
            if ok:
                log.unlink()
            else:
                bad += 1
            lines.append(f"{'ok' if ok else 'FAIL'} {name}")
        (dst / "result.txt").write_text("".join(f"{x}\n" for x in lines))
        b.cleanup()
    return 3 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
