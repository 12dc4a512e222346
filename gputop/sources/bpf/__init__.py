"""The BPF source: loads ``bpf/gputop.bpf.c`` with bcc, attaches probes, reads maps into counters
(docs/architecture.md, "Sources"). Its public face, from the modules that own each name."""

from gputop.sources.bpf.source import (
    TRACEFS,
    BpfReading,
    BpfSource,
    BpfUnavailable,
    IdleProc,
    RawKernel,
    RawProc,
    aligned_blocks,
    ensure_tracefs,
    has_privileges,
    load_bcc,
    tracepoint_exists,
    use_headers,
)

__all__ = ["TRACEFS", "BpfReading", "BpfSource", "BpfUnavailable", "IdleProc", "RawKernel", "RawProc", "aligned_blocks",
           "ensure_tracefs", "has_privileges", "load_bcc", "tracepoint_exists", "use_headers"]
