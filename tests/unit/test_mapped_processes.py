"""Without BPF, the processes mapping a CUDA library are listed (issue 35, item 4): `MappedProcesses` finds
them by the file name of an executable mapping, as `gputop doctor` does, and walks /proc at most every
`RESCAN_S`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.feeds.live import Sampler, SamplerConfig
from gputop.model import SourceStatus
from gputop.sources import mapped
from gputop.sources.bpf import BpfUnavailable
from gputop.sources.mapped import MappedProcesses, maps_cuda

#: maps the file named on the command line (executable unless told "ro"), says so, waits for stdin to close
_MAPPER = r"""
import mmap, os, sys
prot = mmap.PROT_READ | (0 if sys.argv[2] == "ro" else mmap.PROT_EXEC)
m = mmap.mmap(os.open(sys.argv[1], os.O_RDONLY), 0, prot=prot)
print("mapped", flush=True)
sys.stdin.read()
"""


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def mapper(tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[str]] = []

    def start(name: str, how: str = "exec") -> subprocess.Popen[str]:
        lib = tmp_path / name
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.write_bytes(b"\x7fELF" + bytes(8188))
        p = subprocess.Popen([sys.executable, "-c", _MAPPER, str(lib), how], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        started.append(p)
        assert p.stdout is not None and p.stdout.readline() == "mapped\n"
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()


def test_processes_mapping_a_cuda_library_by_file_name(mapper) -> None:  # type: ignore[no-untyped-def]
    runtime, driver, bare = mapper("libcudart.so.13"), mapper("libcuda.so.1"), mapper("libcudart.so")
    other = mapper("libcudnn.so.9")             # a CUDA library, but neither the runtime nor the driver
    spaced = mapper("a dir/libcudart.so.12")  # a path with a space
    lookalike = mapper("libcudart.so.13.txt")
    readonly = mapper("libcudart.so.12", "ro")  # mapped, not executable: nothing runs from it
    found = MappedProcesses().pids()
    assert {runtime.pid, driver.pid, bare.pid, spaced.pid} <= found
    assert not {other.pid, lookalike.pid, readonly.pid} & found
    assert maps_cuda(runtime.pid) and not maps_cuda(other.pid)


def test_a_vanished_process_is_not_cuda() -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    assert not maps_cuda(p.pid)


def test_proc_is_walked_at_most_every_rescan_interval(mapper, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    clock = _Clock()
    walks: list[float] = []
    real = mapped.discovery.all_pids

    def counted() -> list[int]:
        walks.append(clock.t)
        return real()

    monkeypatch.setattr(mapped.discovery, "all_pids", counted)
    seen = MappedProcesses(clock)
    seen.pids()                                 # the first call walks
    first = mapper("libcudart.so.13")
    clock.t += mapped.RESCAN_S / 2
    assert first.pid not in seen.pids()         # not walked again yet: the last walk's answer
    clock.t += mapped.RESCAN_S / 2
    assert first.pid in seen.pids()
    first.kill()
    first.wait()
    clock.t += mapped.RESCAN_S
    assert first.pid not in seen.pids()
    assert walks == [100.0, 100.0 + mapped.RESCAN_S, 100.0 + 2 * mapped.RESCAN_S]


class _NoPrivileges:
    """A BPF source that cannot start, as for a user without the capabilities."""

    def start(self) -> None:
        raise BpfUnavailable("no privileges to trace (test)", "run as root")

    def close(self) -> None:
        pass


def test_a_sampler_whose_tracing_is_unavailable_lists_the_cuda_processes(mapper) -> None:  # type: ignore[no-untyped-def]
    cuda, plain = mapper("libcudart.so.13"), mapper("libfoo.so.1")
    s = Sampler(SamplerConfig(use_bpf=True, use_nvml=False), bpf=_NoPrivileges())  # type: ignore[arg-type]
    s.open_bpf()
    snap = s.collect()
    assert snap.sources["bpf"] == SourceStatus("unavailable", "no privileges to trace (test)")
    listed = {p.pid: p for p in snap.processes}
    assert cuda.pid in listed and plain.pid not in listed
    assert listed[cuda.pid].total is None and listed[cuda.pid].rates is None     # unknown, never 0
    assert s.last_refresh is not None and [p for p, _ in s.last_refresh.phases] == ["mapped", "host", "build"]


def test_with_no_bpf_asked_only_nvml_processes_are_listed(mapper) -> None:  # type: ignore[no-untyped-def]
    cuda = mapper("libcudart.so.13")
    s = Sampler(SamplerConfig(use_bpf=False, use_nvml=False))
    snap = s.collect()
    assert cuda.pid not in {p.pid for p in snap.processes}
    assert s.last_refresh is not None and [p for p, _ in s.last_refresh.phases] == ["host", "build"]
