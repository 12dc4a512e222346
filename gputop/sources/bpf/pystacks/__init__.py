"""Python stacks of CUDA launches: CPython's thread and frame layout (cpython), code objects as file:line (lines)."""
