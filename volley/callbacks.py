"""Callbacks: RLlib's ``DefaultCallbacks`` hooks, the ``Episode`` they see, custom metrics.

A user subclasses :class:`DefaultCallbacks` (RLlib's old-stack protocol, its hook names and
keyword arguments) and passes the class with ``config.callbacks(MyCallbacks)``. Every rollout
worker builds its own instance and calls the episode hooks where the episodes run (in this
process, in Ray actors, on MPI ranks); the driver's instance gets the rest (``on_train_result``,
``on_evaluate_start``, ...). Which hooks a class overrides is found once, when a worker or the
algorithm is built (:class:`Hooks`), and a hook nobody overrides is never called: a class that
overrides nothing samples as fast as no class at all.

What an episode's hooks put in ``episode.custom_metrics`` and ``episode.hist_data`` travels
back with the worker's samples, and the driver summarises it over the same window of recent
episodes as ``episode_reward_mean``, as RLlib's ``summarize_episodes`` does
(:class:`EpisodeMetrics`): ``custom_metrics/<key>_mean``, ``_min``, ``_max`` and
``hist_stats/<key>``.

A config keeps the class as a name, ``"module:QualName"`` (in checkpoints too); a config restored
in another process finds the class where this process has it already, and never imports
anything (:func:`callbacks_class_of`).
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from volley.errors import CallbackError, ConfigError, shown
from volley.named import has_methods, unique_name

AGENT_ID = "agent0"  # RLlib's single agent (_DUMMY_AGENT_ID)
POLICY_ID = "default_policy"

# hooks run where the episodes run (rollout workers), and those the driver runs
WORKER_HOOKS = ("on_sub_environment_created", "on_episode_created", "on_episode_start", "on_episode_step",
                "on_episode_end", "on_postprocess_trajectory", "on_sample_end")
DRIVER_HOOKS = ("on_algorithm_init", "on_learn_on_batch", "on_train_result", "on_evaluate_start",
                "on_evaluate_end", "on_checkpoint_loaded")
# RLlib's hooks for what volley does not have: accepted, never called
NEVER_CALLED = ("on_workers_recreated", "on_create_policy")
EPISODE_HOOKS = ("on_episode_created", "on_episode_start", "on_episode_step", "on_episode_end",
                 "on_postprocess_trajectory")


class DefaultCallbacks:
    """RLlib's callbacks (old API stack): subclass it and override the hooks you need.

    Every hook takes keyword arguments only, and ``**kwargs`` for arguments later versions
    add. ``worker`` is the :class:`~volley.rollout.worker.RolloutWorker` (``worker_index``,
    ``config``, ``env``, ``policy``); ``policies`` maps ``"default_policy"`` to the worker's
    torch network, built when first read (a worker otherwise acts in numpy); ``base_env``
    has ``get_sub_environments()`` (empty for a native vector env: CartPole's, ALE's);
    ``env_index`` is the environment's index in the worker's vector.
    """

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        """The algorithm was built (workers, policy, optimizers), before its first iteration."""

    def on_sub_environment_created(self, *, worker: Any, sub_environment: Any, env_context: EnvContext,
                                   env_index: int | None = None, **kwargs: Any) -> None:
        """An environment of a worker was made (or made again after it failed). A native vector
        env has no sub-environments: it comes once, as itself, with ``env_index=None``."""

    def on_episode_created(self, *, worker: Any, base_env: Any, policies: Mapping[str, Any],
                           env_index: int, episode: Episode, **kwargs: Any) -> None:
        """A new episode exists; its environment is reset next (one that failed and was made
        again was reset already)."""

    def on_episode_start(self, *, worker: Any, base_env: Any, policies: Mapping[str, Any],
                         episode: Episode, env_index: int | None = None, **kwargs: Any) -> None:
        """The environment was reset: ``episode.length`` is 0 and ``last_observation_for()``
        is the first observation."""

    def on_episode_step(self, *, worker: Any, base_env: Any, policies: Mapping[str, Any] | None = None,
                        episode: Episode, env_index: int | None = None, **kwargs: Any) -> None:
        """The episode took a step (its last one included)."""

    def on_episode_end(self, *, worker: Any, base_env: Any, policies: Mapping[str, Any], episode: Episode,
                       env_index: int | None = None, **kwargs: Any) -> None:
        """The episode terminated or was truncated: set ``episode.custom_metrics`` here. (An
        episode dropped because its environment failed ends without this call.)"""

    def on_postprocess_trajectory(self, *, worker: Any, episode: Episode, agent_id: str, policy_id: str,
                                  policies: Mapping[str, Any], postprocessed_batch: Any,
                                  original_batches: dict, **kwargs: Any) -> None:
        """One episode's rows of a postprocessed fragment (the algorithm's columns: ``advantages``,
        ...), which may be changed. volley postprocesses a fragment in one pass, so
        ``original_batches`` is empty."""

    def on_sample_end(self, *, worker: Any, samples: Any, **kwargs: Any) -> None:
        """A worker's sample (its postprocessed batch, which may be changed) is about to go to
        the learner."""

    def on_learn_on_batch(self, *, policy: Any, train_batch: Any, result: dict, **kwargs: Any) -> None:
        """The learner received its batch for this training step (before updating on it); keys
        set in ``result`` are averaged over the iteration into ``learner_custom_metrics``."""

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        """``algorithm.train()`` is about to return ``result``; keys added to it are returned,
        logged and reported to Tune."""

    def on_evaluate_start(self, *, algorithm: Any, **kwargs: Any) -> None:
        """``algorithm.evaluate()`` begins."""

    def on_evaluate_end(self, *, algorithm: Any, evaluation_metrics: dict, **kwargs: Any) -> None:
        """``algorithm.evaluate()`` is about to return ``evaluation_metrics``, which may be changed."""

    def on_checkpoint_loaded(self, *, algorithm: Any, **kwargs: Any) -> None:
        """``algorithm.restore()`` loaded a checkpoint."""

    def on_workers_recreated(self, **kwargs: Any) -> None:
        """Never called: a replaced Ray worker needs no state of its own (weights and filters come
        with every sample call)."""

    def on_create_policy(self, *, policy_id: str, policy: Any) -> None:
        """Never called: volley trains one policy, built with the algorithm."""

    def parts(self) -> list[DefaultCallbacks]:
        """The instances whose hooks run: this one (several for :func:`make_multi_callbacks`)."""
        return [self]


RLlibCallback = DefaultCallbacks  # RLlib's newer name of the same class


def make_multi_callbacks(callback_class_list: Sequence[type[DefaultCallbacks]]) -> type[DefaultCallbacks]:
    """One callbacks class that runs each of ``callback_class_list``'s hooks, in list order."""
    classes = [_checked_class(cls) for cls in callback_class_list]

    class MultiCallbacks(DefaultCallbacks):
        callback_classes = classes

        def __init__(self) -> None:
            super().__init__()
            self._callback_list = [cls() for cls in classes]

        def parts(self) -> list[DefaultCallbacks]:
            return [part for callbacks in self._callback_list for part in parts_of(callbacks)]

    for name in (*WORKER_HOOKS, *DRIVER_HOOKS, *NEVER_CALLED):
        setattr(MultiCallbacks, name, _calling_each(name))
    MultiCallbacks.__qualname__ = MultiCallbacks.__name__ = (
        f"MultiCallbacks[{', '.join(cls.__qualname__ for cls in classes)}]")
    return MultiCallbacks


def _calling_each(name: str) -> Callable[..., None]:
    def hook(self: Any, **kwargs: Any) -> None:
        for callbacks in self._callback_list:
            getattr(callbacks, name)(**kwargs)
    return hook


# RLlib's callbacks protocol: a class with these hooks is taken, volley's DefaultCallbacks
# subclassed or RLlib's own (ray.rllib.algorithms.callbacks)
PROTOCOL = ("on_algorithm_init", "on_episode_start", "on_episode_end", "on_train_result")


def is_callbacks_class(value: Any) -> bool:
    return isinstance(value, type) and (issubclass(value, DefaultCallbacks) or has_methods(value, PROTOCOL))


def _checked_class(value: Any) -> type[DefaultCallbacks]:
    if is_callbacks_class(value):
        return value
    raise ConfigError(f"config key 'callbacks_class' takes a subclass of DefaultCallbacks (volley's or RLlib's: "
                      f"a class with the hooks {', '.join(PROTOCOL)}), or a list of them; got {shown(value)}")


def parts_of(callbacks: Any) -> list[Any]:
    """The instances whose hooks run: ``parts()``, or the instance itself for RLlib's own classes."""
    return callbacks.parts() if isinstance(callbacks, DefaultCallbacks) else [callbacks]


def _is_default(owner: type) -> bool:
    """Whether ``owner`` is a base class whose hooks do nothing: volley's DefaultCallbacks, or RLlib's
    (``DefaultCallbacks`` / ``RLlibCallback`` of ``ray.rllib``)."""
    return owner is DefaultCallbacks or (owner.__module__.startswith("ray.rllib.")
                                         and owner.__name__ in ("DefaultCallbacks", "RLlibCallback"))


def _overrides(cls: type, name: str) -> bool:
    owner = next((base for base in cls.__mro__ if name in vars(base)), None)
    return owner is not None and not _is_default(owner)


# -- a config keeps the class's name ---------------------------------------------------------------

_CLASSES: dict[str, type[DefaultCallbacks]] = {}


def callbacks_name(value: Any) -> str | list[str]:
    """What a config keeps for ``callbacks_class``: ``"module:QualName"``, or a list of names for a
    list of classes or a :func:`make_multi_callbacks` class (so each is found again alone)."""
    if isinstance(value, (list, tuple)):
        return [str(callbacks_name(cls)) for cls in value]
    cls = _checked_class(value)
    if "callback_classes" in vars(cls):  # make_multi_callbacks's: a name per class it combines
        return callbacks_name(vars(cls)["callback_classes"])
    return unique_name(cls, _CLASSES)


def callbacks_class_of(name: str | list[str] | None) -> type[DefaultCallbacks] | None:
    """The class a config's ``callbacks_class`` names (None for none): named in this process, or
    found again in a module this process has imported already (a config from a checkpoint);
    nothing is imported. A ConfigError names a class this process does not have."""
    if name is None:
        return None
    if isinstance(name, list):
        return make_multi_callbacks([_named(each) for each in name])
    return _named(name)


def classes_named(name: str | list[str] | None) -> dict[str, type[DefaultCallbacks]]:
    """Each class a config's ``callbacks_class`` names, by name (for :func:`remember` elsewhere)."""
    names = name if isinstance(name, list) else [] if name is None else [name]
    return {each: _named(each) for each in names}


def remember(classes: dict[str, type[DefaultCallbacks]]) -> None:
    """File classes under the names another process gave them (a Tune trial's configs name them)."""
    _CLASSES.update(classes)


def _named(name: str) -> type[DefaultCallbacks]:
    if name in _CLASSES:
        return _CLASSES[name]
    module, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module)
    for part in qualname.split("#")[0].split("."):
        found = getattr(found, part, None)
    if is_callbacks_class(found):
        _CLASSES[name] = found
        return found
    short = qualname.split(".")[-1].split("#")[0] or name
    raise ConfigError(f"callbacks class '{name}' is not in this process: its config names it, and "
                      f"volley never imports a class by name; import or define {short} first and pass it "
                      f"again (config.callbacks({short})), or set callbacks_class=None")


# -- calling the hooks ----------------------------------------------------------------------------


class Hooks:
    """The hooks of one callbacks instance that do something, found once.

    A hook whose method is DefaultCallbacks' own is left out, so calling it costs a dict
    lookup and nothing is called; code on the hot path asks :meth:`uses` once and skips the
    call altogether. An exception in a hook becomes a :class:`~volley.errors.CallbackError`
    naming the class, the hook, ``where`` it ran (" in rollout worker 1") and the exception.
    """

    def __init__(self, callbacks: DefaultCallbacks | None, where: str = "") -> None:
        self.callbacks = callbacks
        self.where = where
        parts = parts_of(callbacks) if callbacks is not None else []
        self._bound: dict[str, list[Callable[..., Any]]] = {}
        for name in (*WORKER_HOOKS, *DRIVER_HOOKS):
            methods = [getattr(part, name) for part in parts if _overrides(type(part), name)]
            if methods:
                self._bound[name] = methods

    @classmethod
    def of(cls, name: str | list[str] | None, where: str = "",
           callbacks_class: type[DefaultCallbacks] | None = None) -> Hooks:
        """An instance of ``callbacks_class`` (default: the class ``name`` names) and its hooks."""
        callbacks_class = callbacks_class or callbacks_class_of(name)
        return cls(callbacks_class() if callbacks_class is not None else None, where)

    def uses(self, *names: str) -> bool:
        """Whether any of the hooks ``names`` is overridden."""
        return any(name in self._bound for name in names)

    def __call__(self, name: str, **kwargs: Any) -> None:
        for method in self._bound.get(name, ()):
            try:
                method(**kwargs)
            except Exception as exc:
                owner = type(getattr(method, "__self__", None)).__qualname__.rpartition("<locals>.")[2]
                text = (str(exc).strip().splitlines() or [""])[0]
                raise CallbackError(f"{owner}.{name} raised {type(exc).__name__}{self.where}"
                                    f"{': ' + text if text else ''}") from exc


# -- the episode the hooks see ----------------------------------------------------------------------


class EnvContext(dict):
    """RLlib's ``env_context``: the ``env_config`` dict, plus where the environment runs."""

    def __init__(self, env_config: dict, worker_index: int, vector_index: int | None, num_workers: int,
                 remote: bool = False, recreated_worker: bool = False) -> None:
        super().__init__(env_config)
        self.worker_index, self.vector_index, self.num_workers = worker_index, vector_index, num_workers
        self.remote, self.recreated_worker = remote, recreated_worker


# RLlib's Episode internals that volley's episodes have no counterpart of, and what gives the same
RLLIB_EPISODE_INTERNALS = {
    name: "RLlib's collector of the episode's sample batches; on_episode_end runs only once the episode "
          "ended (episode.last_done_for() is True), and on_postprocess_trajectory's postprocessed_batch "
          "holds its rows" for name in ("batch_builder", "new_batch_builder")}


class RLlibEpisodeInternals:
    """An episode's refusal of RLlib's internals (``episode.batch_builder``), in one line saying what
    to use instead, where a plain AttributeError would only say that the name is missing."""

    def __getattr__(self, name: str) -> Any:
        if name in RLLIB_EPISODE_INTERNALS:
            raise AttributeError(f"RLlib's Episode.{name} has no counterpart in volley: "
                                 f"{RLLIB_EPISODE_INTERNALS[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class Episode(RLlibEpisodeInternals):
    """One episode of one environment, as RLlib's ``Episode`` / ``EpisodeV2`` shows it to the hooks.

    ``custom_metrics`` (numbers; summarised at the driver), ``hist_data`` (lists; concatenated
    into ``hist_stats``), ``user_data`` (anything, kept for the episode's hooks), ``media``
    (kept, not reported). ``length`` and ``total_reward`` count the steps taken so far; the
    ``last_*_for()`` methods read the latest step (RLlib's ``agent_id`` argument is accepted:
    there is one agent). They read the worker's current step (``step``, a :class:`StepSource`),
    so following an episode costs nothing per step; at its end that step is kept (its arrays
    are new every step: the worker keeps them too, in its fragment).
    """

    def __init__(self, episode_id: int, env_id: int, worker: Any, step: StepSource) -> None:
        self.episode_id = episode_id
        self.env_id = env_id
        self.worker = worker
        self.custom_metrics: dict[str, Any] = {}
        self.user_data: dict[str, Any] = {}
        self.hist_data: dict[str, list[Any]] = {}
        self.media: dict[str, Any] = {}
        self._step = step
        self._first = step  # the reset that started it (its observation and info)
        self._final: tuple[int, float] | None = None  # its length and return, once it ended

    def begin(self, first: StepSource) -> None:
        """The environment was reset: ``first`` holds its first observation and info."""
        self._first = first

    def end(self) -> None:
        """Keep the step the episode ended on (the worker's moves on), its length and its return."""
        self._final = self.length, self.total_reward
        self._step = self._step.frozen()

    def _read(self, key: str) -> Any:
        steps = self.length
        if key in ("action", "prev_action"):
            if steps <= (0 if key == "action" else 1):  # none taken yet: zeros, as in RLlib
                return np.zeros_like(self._step.value("action", self.env_id))
        elif key in ("reward", "prev_reward"):
            if steps <= (0 if key == "reward" else 1):
                return 0.0
        elif steps == 0:
            return False if key in ("terminated", "truncated") else self._first.value(key, self.env_id)
        return self._step.value(key, self.env_id)

    @property
    def length(self) -> int:
        return self._final[0] if self._final is not None else self._step.length(self.env_id)

    @property
    def total_reward(self) -> float:
        return self._final[1] if self._final is not None else self._step.total_reward(self.env_id)

    total_env_steps = total_agent_steps = length

    @property
    def agent_rewards(self) -> dict[tuple[str, str], float]:
        return {(AGENT_ID, POLICY_ID): self.total_reward}

    def last_observation_for(self, agent_id: str = AGENT_ID) -> np.ndarray:
        """The latest observation as the policy takes it (preprocessed, before the observation filter)."""
        return self._read("obs")

    def last_raw_obs_for(self, agent_id: str = AGENT_ID) -> Any:
        """The latest observation as the environment returned it."""
        return self._read("raw_obs")

    def last_info_for(self, agent_id: str = AGENT_ID) -> dict:
        """The info dict of the latest step (or of the reset)."""
        return self._read("info")

    def last_action_for(self, agent_id: str = AGENT_ID) -> np.ndarray:
        """The policy's latest action (zeros before the first step)."""
        return self._read("action")

    def prev_action_for(self, agent_id: str = AGENT_ID) -> np.ndarray:
        """The action before the latest one (zeros before the second step)."""
        return self._read("prev_action")

    def last_reward_for(self, agent_id: str = AGENT_ID) -> float:
        return float(self._read("reward"))

    def prev_reward_for(self, agent_id: str = AGENT_ID) -> float:
        """The reward before the latest one (0 before the second step)."""
        return float(self._read("prev_reward"))

    def last_terminated_for(self, agent_id: str = AGENT_ID) -> bool:
        return bool(self._read("terminated"))

    def last_truncated_for(self, agent_id: str = AGENT_ID) -> bool:
        return bool(self._read("truncated"))

    def last_done_for(self, agent_id: str = AGENT_ID) -> bool:
        return self.last_terminated_for() or self.last_truncated_for()

    def policy_for(self, agent_id: str = AGENT_ID) -> str:
        return POLICY_ID

    def get_agents(self) -> list[str]:
        return [AGENT_ID]

    def record(self) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """What the driver summarises: the custom metrics and the histogram data."""
        return self.custom_metrics, self.hist_data


class StepSource(Protocol):
    """What an :class:`Episode` reads: the latest step of its worker's environments
    (``volley.rollout.episodes.StepView``), or once it ended, the step it ended on."""

    def value(self, key: str, env: int) -> Any: ...

    def length(self, env: int) -> int: ...

    def total_reward(self, env: int) -> float: ...

    def frozen(self) -> StepSource:
        """This step, kept as it is now."""
        ...


# -- custom metrics at the driver -------------------------------------------------------------------

EpisodeRecord = tuple[dict[str, Any], dict[str, list[Any]]]  # (custom_metrics, hist_data) of one episode


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


class Policies(Mapping[str, Any]):
    """RLlib's ``policies``: ``{"default_policy": the worker's torch network}``, built when first read."""

    def __init__(self, policy: Callable[[], Any]) -> None:
        self._policy = policy

    def __getitem__(self, key: str) -> Any:
        if key != POLICY_ID:
            raise KeyError(key)
        return self._policy()

    def __iter__(self) -> Iterator[str]:
        return iter([POLICY_ID])

    def __len__(self) -> int:
        return 1
