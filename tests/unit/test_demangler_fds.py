"""The demangler's bounded read from c++filt works whatever descriptor number its pipe gets: gputop
raises its descriptor limit to hold a probe per descriptor, so a pipe above 1,023 is ordinary there
(select() refused it: 'filedescriptor out of range', and every kernel name stayed mangled)."""

from __future__ import annotations

import os
import resource

from gputop.sources.bpf.attach import symbols


def test_demangling_with_the_pipe_above_descriptor_1023() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2048
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    fillers = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            fillers.append(fd)
            if fd >= 1100:
                break
        assert symbols._cxxfilt("_Z10fused_stepPfS_i") == "fused_step(float*, float*, int)"
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
