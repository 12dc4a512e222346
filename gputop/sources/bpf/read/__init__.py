"""Reading: one reading of the BPF tables per refresh, its records, launch slots and graph kernels."""
