"""Which CUDA library an object is, for `gputop doctor`: the driver branch's version and what gputop probes
in it and what it lacks (``catalogue.coverage``: by its symbols, never by its version)."""

from __future__ import annotations

import os
import re

from gputop.sources.bpf.attach import catalogue

#: NVIDIA's driver library names its version in the path of its application profiles
_DRIVER_VERSION = re.compile(rb"nvidia-application-profiles-(\d{3}\.\d{1,3}(?:\.\d{1,3})?)-rc")
_VERSION_IN_NAME = re.compile(r"libcuda\.so\.(\d{3}\.\d{1,3}(?:\.\d{1,3})?)$")
#: a toolkit's runtime file is named by its version (libcudart.so.12.4.127); wheels' and programs' are not
_RUNTIME_IN_NAME = re.compile(r"libcudart\.so\.(\d+\.\d+(?:\.\d+)?)$")
_CHUNK = 8 << 20
_MAX_READ = 256 << 20


def driver_version(fd: int, path: str = "") -> str | None:
    """The driver branch's version of a ``libcuda.so`` open as ``fd`` (``535.261.03``), read from the file
    (its application-profile path), else from its name (``libcuda.so.535.261.03``); None when neither says."""
    at, tail = 0, b""
    while at < _MAX_READ:
        chunk = os.pread(fd, _CHUNK, at)
        if not chunk:
            break
        m = _DRIVER_VERSION.search(tail + chunk)
        if m:
            return m.group(1).decode()
        tail, at = chunk[-128:], at + len(chunk)
    named = _VERSION_IN_NAME.search(os.path.basename(os.path.realpath(path))) if path else None
    return named.group(1) if named else None


def library_line(fd: int, path: str, functions: dict[str, int]) -> str | None:
    """One library as doctor names it: what it is (the driver's version), which families of entry points
    gputop probes in it and which it lacks, by its symbols (catalogue.coverage); None: no CUDA library."""
    cov = catalogue.coverage(functions)
    if cov is None:
        return None
    what = "CUDA runtime"
    if cov.layer == "runtime":
        named = _RUNTIME_IN_NAME.search(os.path.basename(os.path.realpath(path)))
        what = f"CUDA runtime {named.group(1)}" if named else what
    if cov.layer == "driver":
        version = driver_version(fd, path)
        what = f"driver {version}" if version else "driver of unknown version"
    line = (f"{os.path.basename(path)} ({what}): {len(cov.present)} of {len(cov.present) + len(cov.absent)} "
            "families probed")
    if cov.absent:
        line += "; absent here, not probed: " + ", ".join(f.name for f in cov.absent)
    if cov.uncounted:
        line += "; exported, not counted by gputop: " + ", ".join(f.name for f in cov.uncounted)
    return line + f"; {path}"
