"""Processes' lives: the ring buffer's events, generations (PID reuse), identity, last records,
forgetting and purging."""
