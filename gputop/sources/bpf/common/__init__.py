"""Leaf helpers every part of the BPF source shares: the constants shared with the BPF program (abi),
what Linux offers (linux, btf), a bounded ELF reader (elfread)."""
