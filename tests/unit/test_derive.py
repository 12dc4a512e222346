"""The launch-bound heuristic."""

from __future__ import annotations

import dataclasses

import pytest

from gputop.derive import LaunchBoundRule, is_launch_bound

NAN = float("nan")


def test_defaults() -> None:
    assert LaunchBoundRule() == LaunchBoundRule(min_launches_per_s=5000.0, max_gpu_util_pct=50.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        LaunchBoundRule().min_launches_per_s = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("launches", "util", "expected"),
    [
        (20000.0, 15.0, True),  # small-batch eager inference: many tiny kernels, idle GPU
        (5000.0, 49.9, True),  # both thresholds are inclusive on the launch side, strict on util
        (5000.0, 50.0, False),
        (4999.9, 10.0, False),
        (300.0, 98.0, False),  # big kernels, busy GPU
        (50000.0, 95.0, False),  # many launches but the GPU is kept busy: not launch-bound
        (0.0, 0.0, False),  # idle process
        (None, 10.0, None),
        (20000.0, None, None),
        (None, None, None),
        (NAN, 10.0, None),
        (20000.0, NAN, None),
    ],
)
def test_default_rule(launches: float | None, util: float | None, expected: bool | None) -> None:
    assert is_launch_bound(launches, util, LaunchBoundRule()) is expected


def test_custom_rule() -> None:
    rule = LaunchBoundRule(min_launches_per_s=1000.0, max_gpu_util_pct=80.0)
    assert is_launch_bound(1000.0, 79.0, rule) is True
    assert is_launch_bound(999.0, 10.0, rule) is False
    assert is_launch_bound(1000.0, 80.0, rule) is False
