"""Feeds: producers of ``Snapshot``s, each on its own thread (``base``: the contract every feed derives
from; ``live``: this host's collector; ``replay``: a recording played; ``fleet``: every node through
Prometheus)."""
