"""The Prometheus exporter: ``metrics`` turns snapshots into metric families, ``server`` serves them."""
