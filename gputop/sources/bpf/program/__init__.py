"""The BPF program: its text, compile (and cache), kernel headers, load through bcc, and the privileges
it needs."""
