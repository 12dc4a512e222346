"""The dashboard's garbage-collector settings (gputop.ui.gcsettings)."""

from __future__ import annotations

import gc

from gputop.ui import gcsettings


def test_tune_raises_the_young_threshold_and_freezes_what_is_alive() -> None:
    before = gc.get_threshold()
    try:
        gcsettings.tune()
        assert gc.get_threshold() == (5000, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    assert gc.get_freeze_count() == 0
