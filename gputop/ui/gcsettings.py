"""The garbage collector's settings for the dashboard process.

A repaint of a 64-row table creates and frees thousands of container objects (each Textual strip
holds seven small caches). CPython collects its youngest generation after 700 net new containers,
so with its defaults the collector ran about twice a frame and, every half minute or so, walked
every object of the process (about 185,000, 0.12 s of CPU): a quarter of the dashboard's CPU at
1 Hz (measured with ``gc.callbacks`` during bench/ui_cpu.py's replay). Objects freed by their
reference count never count towards the threshold, so a higher one lets a frame's garbage go
without a collection while cyclic garbage and real growth (the history, a replay's snapshots)
are still collected.
"""

from __future__ import annotations

import gc

#: net new container objects between collections of the youngest generation (CPython: 700)
YOUNG_THRESHOLD = 5000


def tune() -> None:
    """Set the thresholds and move the objects alive now (modules, classes, the parsed options:
    they live as long as the process) out of the collector's sight, so a full collection walks
    only what the dashboard created since. Call once, just before the UI starts."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    gc.freeze()     # no collection first: it would cost the first frame about 0.1 s
