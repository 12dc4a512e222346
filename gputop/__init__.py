"""gputop: a top for CUDA processes, traced with eBPF."""

__version__ = "0.1.0"
