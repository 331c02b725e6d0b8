"""Errors that describe a user's mistake, and helpers to phrase them.

Every error a user can cause (a bad config key, an unknown environment id, a
corrupt checkpoint) is a :class:`VolleyError`: the CLI prints its message on one
line and exits 2 instead of showing a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class VolleyError(Exception):
    """A problem with the user's input, reported as one readable paragraph."""


class ConfigError(VolleyError, ValueError):
    """An unknown config key, or a value of the wrong type or range."""


class EnvError(VolleyError):
    """An environment id that does not exist, or an environment that misbehaves."""


class CheckpointError(VolleyError):
    """A checkpoint that is missing, corrupt, or of another algorithm or format version."""


class WorkerError(VolleyError):
    """A rollout worker failed; the message names the worker and the original error."""


class CallbackError(VolleyError):
    """A hook of the user's callbacks class raised; the message names the hook, where it ran
    (the worker, for hooks run with the episodes) and the exception."""


class TrainingError(VolleyError):
    """Training cannot go on: too many updates in a row had a non-finite loss or gradient."""


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters so one error message stays one paragraph."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest choices, or ``""`` when none is close."""
    matches = difflib.get_close_matches(word, list(choices), n=n, cutoff=0.6)
    if not matches:
        return ""
    if len(matches) == 1:
        return f"; did you mean '{matches[0]}'?"
    return "; did you mean one of " + ", ".join(f"'{m}'" for m in matches) + "?"
