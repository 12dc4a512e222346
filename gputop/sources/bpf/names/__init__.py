"""Kernel names: captured, read from processes' memory, resolved from ELF symbols."""
