"""The BPF source: loads ``bpf/gputop.bpf.c`` and its headers with bcc, attaches probes, reads maps
into counters (docs/architecture.md, "The BPF source"). Its public face, re-exported from the
modules that own each name."""

from gputop.sources.bpf.common.linux import TRACEFS, aligned_blocks, ensure_tracefs, tracepoint_exists
from gputop.sources.bpf.program.privileges import has_privileges
from gputop.sources.bpf.program.program import BpfUnavailable, load_bcc, use_headers
from gputop.sources.bpf.read.readings import BpfReading, IdleProc, RawKernel, RawProc
from gputop.sources.bpf.source import BpfSource

__all__ = ["TRACEFS", "BpfReading", "BpfSource", "BpfUnavailable", "IdleProc", "RawKernel", "RawProc", "aligned_blocks",
           "ensure_tracefs", "has_privileges", "load_bcc", "tracepoint_exists", "use_headers"]
