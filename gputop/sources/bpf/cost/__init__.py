"""gputop's cost to the traced processes: probe hits, BPF run time, the uprobe trap cost."""
