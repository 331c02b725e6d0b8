"""Custom metrics at the driver, summarised as RLlib's ``summarize_episodes`` does.

What an episode's hooks put in ``episode.custom_metrics`` and ``episode.hist_data`` travels back
with the worker's samples (an :data:`~volley.episode.EpisodeRecord` per episode); the driver keeps
the records of the same window of recent episodes as ``episode_reward_mean``
(:class:`EpisodeMetrics`) and reports ``custom_metrics/<key>_mean``, ``_min``, ``_max`` and
``hist_stats/<key>``. What ``on_learn_on_batch`` sets in its ``result`` is averaged over the
iteration (:class:`LearnerMetrics`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from volley.episode import EpisodeRecord
from volley.errors import CallbackError, shown


def summarize(records: Iterable[EpisodeRecord], keep_per_episode: bool = False
              ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """RLlib's ``summarize_episodes`` for custom metrics: each key's ``_mean``, ``_min`` and ``_max``
    over the episodes that set it (NaN values left out; NaN if none is left), or with
    ``keep_per_episode`` the list of values; and each ``hist_data`` key's values concatenated."""
    values: dict[str, list[Any]] = {}
    hist: dict[str, list[Any]] = {}
    for custom, hist_data in records:
        for key, value in custom.items():
            values.setdefault(key, []).append(value)
        for key, items in hist_data.items():
            hist.setdefault(key, []).extend(_plain(item) for item in items)
    metrics: dict[str, Any] = {}
    for key, found in values.items():
        for value in found:
            if np.asarray(value).dtype.kind not in "biuf":
                raise CallbackError(f"custom metric {key!r} is {shown(value)}: episode.custom_metrics "
                                    "holds numbers (lists of them go in episode.hist_data)")
        kept = [value for value in found if not np.any(np.isnan(value))]
        if keep_per_episode:
            metrics[key] = [_plain(value) for value in kept]
            continue
        for suffix, reduce in (("mean", np.mean), ("min", np.min), ("max", np.max)):
            metrics[f"{key}_{suffix}"] = float(reduce(kept)) if kept else math.nan
    return metrics, hist


def _plain(value: Any) -> Any:
    """numpy numbers and arrays as Python's (progress.jsonl is JSON)."""
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


class EpisodeMetrics:
    """The driver's custom metrics over the episodes ``episode_reward_mean`` averages, summarised
    into every result: as RLlib's, the iteration's records when there are ``window`` or more, else
    the latest ``window``."""

    def __init__(self, window: int, keep_per_episode: bool) -> None:
        self.records: deque[EpisodeRecord] = deque(maxlen=window)
        self.this_iter: list[EpisodeRecord] = []
        self.keep_per_episode = keep_per_episode

    def add(self, records: Iterable[EpisodeRecord]) -> None:
        records = list(records)
        self.records.extend(records)
        self.this_iter.extend(records)

    def result(self, returns: Iterable[float], lengths: Iterable[int]) -> dict[str, Any]:
        """The iteration's ``custom_metrics`` and ``hist_stats``; the next iteration starts."""
        whole = len(self.this_iter) >= (self.records.maxlen or 0)
        records, self.this_iter = (self.this_iter if whole else self.records), []
        return result_of(records, returns, lengths, self.keep_per_episode)


def result_of(records: Iterable[EpisodeRecord], returns: Iterable[float], lengths: Iterable[int],
              keep_per_episode: bool = False) -> dict[str, Any]:
    """``custom_metrics`` and ``hist_stats`` (with RLlib's ``episode_reward`` and
    ``episode_lengths``) of a result over episodes with these records, returns and lengths."""
    metrics, hist = summarize(records, keep_per_episode)
    return {"custom_metrics": metrics,
            "hist_stats": {**hist, "episode_reward": [float(r) for r in returns],
                           "episode_lengths": [int(n) for n in lengths]}}


class LearnerMetrics:
    """What ``on_learn_on_batch`` put in its ``result`` dicts during an iteration, averaged."""

    def __init__(self) -> None:
        self.dicts: list[dict[str, Any]] = []

    def new(self) -> dict[str, Any]:
        self.dicts.append({})
        return self.dicts[-1]

    def pop(self) -> dict[str, Any]:
        """Each key's mean over the iteration's dicts (a value that is not a number: the last)."""
        merged: dict[str, Any] = {}
        for key in dict.fromkeys(key for each in self.dicts for key in each):
            values = [each[key] for each in self.dicts if key in each]
            try:
                merged[key] = _plain(np.mean(values))
            except (TypeError, ValueError):
                merged[key] = values[-1]
        self.dicts = []
        return merged
