"""RLlib's piecewise-linear schedules: a key's value as a function of the environment steps sampled.

RLlib's new stack takes ``lr=[[0, 1e-3], [1_000_000, 1e-4]]`` (and ``entropy_coeff`` alike)
where a number would go; its old stack spells the same ``lr_schedule`` /
``entropy_coeff_schedule``. The value at ``t`` environment steps sampled (over the run's
life) is interpolated linearly between the two points around ``t``; outside them, before
the first point as after the last, it is the last point's value: RLlib's
``PiecewiseSchedule`` with ``outside_value=schedule[-1][-1]``, as its ``Scheduler`` and old
stack build it. Its learners update the value after every update, at the steps sampled so
far, so each update uses the value the previous one left. Imports nothing of volley but
``errors``.
"""

from __future__ import annotations

from volley.errors import ConfigError

# A number, or [[timestep, value], ...]
Schedulable = float | list[list[float]]


def check_schedulable(key: str, value: Schedulable, positive: bool = False) -> None:
    """A ConfigError naming ``key`` unless ``value`` is a number (> 0 with ``positive``, else >= 0)
    or a schedule: [[timestep, value], ...], timesteps >= 0 in order, values >= 0."""
    if not isinstance(value, list):
        if value < 0 or (positive and value == 0):
            raise ConfigError(f"config key '{key}' must be {'>' if positive else '>='} 0, got {value!r}")
        return
    steps = [point[0] for point in value if len(point) == 2]
    if not value or len(steps) != len(value) or steps != sorted(steps) or steps[0] < 0 \
            or any(point[1] < 0 for point in value):
        raise ConfigError(f"config key '{key}' must be a number or [[timestep, value], ...] with "
                          f"timesteps >= 0 in increasing order and values >= 0, got {value!r}")


def value_at(value: Schedulable, timestep: int) -> float:
    """A number as it is; a schedule at ``timestep`` (RLlib's ``PiecewiseSchedule.value``)."""
    if not isinstance(value, list):
        return float(value)
    points = [(int(t), float(v)) for t, v in value]  # RLlib keeps integer timesteps
    for (left_t, left), (right_t, right) in zip(points[:-1], points[1:], strict=True):
        if left_t <= timestep < right_t:
            return left + (timestep - left_t) / (right_t - left_t) * (right - left)
    return points[-1][1]
