"""Algorithm configuration: typed dataclass fields plus RLlib-style builder sugar.

A config is data. Every key is a dataclass field with a type, a default and a
one-line help text; the builder methods (``.environment()``, ``.rollouts()``,
``.training()``, ...) all funnel into one validated :meth:`AlgorithmConfig.update`.
Values that follow from others (the fragment length, the worker count on
``"auto"``) are resolved once by the driver into a :class:`RolloutPlan`, never stored twice.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import sys
import types
import typing
import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from volley.callbacks import callbacks_name
from volley.coercion import FieldsAsDict, coerce, is_search_space, picklable_dict
from volley.errors import ConfigError, did_you_mean, shown
from volley.named import CUSTOM_ACTION_DISTS, CUSTOM_MODELS, env_name, function_name
from volley.registry import algorithm_class
from volley.rllib_compat import NOT_PASSED_TO_CUSTOM_MODELS, rllib_key
from volley.rllib_compat import RLLIB_KEYS as SHARED_RLLIB_KEYS
from volley.rllib_keys import RLlibKey, unset_deprecated
from volley.schedules import Schedulable, check_schedulable

# The network workers act with: an actor-critic, Q-values with a linear or dueling head (DQN), or
# a tanh-squashed Gaussian policy (SAC's actor; its critics stay on the learner)
NetworkKind = Literal["actor_critic", "q", "dueling_q", "squashed_gaussian"]

GROUPS = ("environment", "rollouts", "training", "exploration", "resources", "framework", "debugging",
          "evaluation", "reporting", "fault_tolerance", "learners", "api_stack", "rl_module", "multi_agent",
          "callbacks", "offline_data", "checkpointing", "experimental")

# the smallest frames the Nature CNN takes (8x8 stride 4, 4x4 stride 2, 3x3)
MIN_DIM = 36

# keys holding a function, kept by name (volley.named)
FUNCTION_KEYS = ("env_task_fn", "custom_evaluation_function")

# The unknown keys warned about in this process (once each)
_WARNED: set[str] = set()


def _outside_volley() -> int:
    """The ``stacklevel`` of a warning that points at the first caller outside volley."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("volley"):
        frame, level = frame.f_back, level + 1
    return level


# Environments in all when num_envs_per_worker is "auto": the count PPO's defaults were tuned with
# (16 x 128 steps per batch); shared among the workers, every engine samples batches of one shape
AUTO_ENVS = 16


def option(default: Any, group: str, help: str) -> Any:
    """A config field with its builder group and help text (the docs are generated from these)."""
    assert group in GROUPS, group
    meta = {"group": group, "help": help}
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(kw_only=True)
class ModelConfig(FieldsAsDict):
    """The policy/value network (``config.training(model={...})``); reads and writes like RLlib's
    model dict too (``config.model["use_lstm"] = True``)."""

    DICT_NAME: ClassVar[str] = "model"

    fcnet_hiddens: list[int] = field(default_factory=lambda: [64, 64],
                                     metadata={"help": "hidden layer sizes of the MLP"})
    fcnet_activation: Literal["tanh", "relu", "linear"] = field(
        default="tanh", metadata={"help": "activation between MLP layers ('linear': none)"})
    vf_share_layers: bool = field(
        default=False, metadata={"help": "share the MLP body between policy and value (CNNs always share)"})
    log_std_init: float = field(
        default=0.0, metadata={"help": "initial log standard deviation of a Gaussian policy"})
    use_lstm: bool = field(
        default=False, metadata={"help": "an LSTM between the MLP or CNN and the heads (RLlib's key; PPO, "
                                 "PG, TRPO): trained on sequences of at most max_seq_len steps"})
    lstm_cell_size: int = field(default=256, metadata={"help": "the LSTM's hidden and cell size"})
    max_seq_len: int = field(
        default=20, metadata={"help": "steps per training sequence of a recurrent network (use_lstm or a "
                              "recurrent custom model): the learner unrolls it from the state stored there"})
    lstm_use_prev_action: bool = field(
        default=False, metadata={"help": "the LSTM also reads the previous action (one-hot for Discrete; a float Box's values)"})
    lstm_use_prev_reward: bool = field(
        default=False, metadata={"help": "the LSTM also reads the previous reward (the environment's)"})
    custom_model: str | None = field(
        default=None, metadata={"help": "a TorchModelV2 class (kept as 'module:QualName') or a name given to "
                                "ModelCatalog.register_custom_model; None: volley's own network"})
    custom_model_config: dict = field(
        default_factory=dict, metadata={"help": "keyword arguments of the custom model's constructor (JSON data)"})
    custom_action_dist: str | None = field(
        default=None, metadata={"help": "an ActionDistribution class (kept as 'module:QualName') or a name given "
                                "to ModelCatalog.register_custom_action_dist, built on the outputs (PPO, PG, "
                                "TRPO); None: volley's distribution for the action space"})
    rllib_model_keys: dict = field(
        default_factory=dict, metadata={"help": "RLlib's other model keys set beside a custom_model "
                                        "(conv_filters, post_fcnet_hiddens, ...): passed in its model_config"})
    dim: int = field(
        default=84, metadata={"help": "ALE pixel ids with atari_preprocessing='deepmind': frames resized to "
                              "dim x dim (RLlib's key; 42 is RLlib's small Atari setting)"})
    fcnet_init: Literal["orthogonal", "normal"] = field(
        default="orthogonal",
        metadata={"help": "weights of the MLP and the heads: 'orthogonal' (gain √2, policy head 0.01; "
                          "PPO's) or 'normal' (N(0, 1/fan_in) on every layer; Karpathy's Pong)"})

    def extra_items(self) -> dict[str, Any]:
        """RLlib's other model keys set beside a custom model: ``config.model[key]`` reads them too."""
        return self.rllib_model_keys

    def validate(self, algo_name: str, network: NetworkKind) -> None:
        """A ConfigError naming the first model key out of range or unfit for ``algo_name``."""
        for i, width in enumerate(self.fcnet_hiddens):
            if width <= 0:
                raise ConfigError(f"model.fcnet_hiddens[{i}] must be > 0, got {width}")
        if self.dim < MIN_DIM:
            raise ConfigError(f"model.dim={self.dim} is too small for the Nature CNN's three conv layers: "
                              f"use {MIN_DIM} or more (RLlib's 42, or 84)")
        for key in ("lstm_cell_size", "max_seq_len"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key 'model.{key}' must be > 0, got {getattr(self, key)!r}")
        if self.use_lstm and network != "actor_critic":
            raise ConfigError(f"model.use_lstm=True is not supported by {algo_name}: it trains feed-forward "
                              "Q-networks on replayed steps; recurrent networks train with ppo, pg and trpo")
        if self.use_lstm and self.custom_model is not None:
            raise ConfigError(f"model.use_lstm=True with custom_model={self.custom_model!r}: volley does not "
                              "wrap a custom model in an LSTM; make the model recurrent itself "
                              "(get_initial_state() and forward(input_dict, state, seq_lens))")


@dataclass(frozen=True)
class RolloutPlan:
    """The sizes of a run as numbers: the driver resolves them once (:meth:`AlgorithmConfig.plan`)
    and ships them, so a worker on a machine with another CPU count samples what was planned."""

    num_workers: int  # 0: one worker samples in the driver process
    num_envs_per_worker: int
    fragment_length: int  # steps each environment takes per sample call

    @property
    def num_sampling_workers(self) -> int:
        """Workers that actually sample: ``num_workers=0`` still has one, in the driver process."""
        return max(1, self.num_workers)


@dataclass(kw_only=True)
class AlgorithmConfig:
    """Settings shared by every algorithm. Subclasses add their training keys.

    Build one with the fluent methods and call :meth:`build`::

        algo = PPOConfig().environment("CartPole-v1").rollouts(num_rollout_workers=2).build()
    """

    # Older and newer RLlib names that mean one of our keys.
    ALIASES: ClassVar[dict[str, str]] = {
        "num_rollout_workers": "num_workers",
        "num_env_runners": "num_workers",
        "num_envs_per_env_runner": "num_envs_per_worker",
        "evaluation_num_episodes": "evaluation_duration",
        "evaluation_num_env_runners": "evaluation_num_workers",
        "framework": "framework_str",
        "recreate_failed_workers": "restart_failed_workers",
        "restart_failed_env_runners": "restart_failed_workers",
        "recreate_failed_env_runners": "restart_failed_workers",
        "max_num_worker_restarts": "max_worker_restarts",
        "max_num_env_runner_restarts": "max_worker_restarts",
        "create_env_on_local_worker": "create_env_on_driver",
        "create_env_on_local_env_runner": "create_env_on_driver",
    }
    # Stable-Baselines3's names: of one of our keys (a string), or a translation of the value into
    # ours (a function). Apart from ALIASES, so docs/rllib.md lists RLlib's names only.
    SB3_KEYS: ClassVar[dict[str, str | Callable[[Any], dict[str, Any]]]] = {}
    # This class's own slice of RLlib's keys (its package's keys.py); rllib_keys() adds the rest
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = ()
    algo_name: ClassVar[str] = ""
    # RLlib 2.9's examples branch on it (checkpoint_by_custom_criteria): volley is the old API stack
    _enable_new_api_stack: ClassVar[bool] = False

    env: str = option("CartPole-v1", "environment", "Gymnasium id, or a name given to register_env")
    env_config: dict = option({}, "environment", "keyword arguments for the environment creator (any picklable "
                              "values; a checkpoint stores the JSON ones; an ALE frameskip [low, high] becomes "
                              "ale-py's stochastic pair)")
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = option(
        "NoFilter", "environment", "running mean/std normalisation of observations, merged across workers")
    atari_preprocessing: Literal["deepmind", "karpathy", "none"] = option(
        "deepmind", "environment", "ALE pixels: 'deepmind' 84x84 grayscale x4 frames, noop starts; "
        "'karpathy' Pong from Pixels (80x80 frame differences, 2 actions); 'none' raw frames")
    action_mask_key: str = option(
        "action_mask", "environment", "the key of a Dict observation that holds the action mask (0/1 per "
        "logit): masked actions get probability 0 (PPO, PG, TRPO) and are never taken (DQN, Ape-X)")
    clip_actions: bool = option(True, "environment", "clip continuous actions to the action space bounds")
    normalize_actions: bool = option(
        False, "environment", "continuous actions: the policy acts in [-1, 1], rescaled to the action "
        "space's bounds (RLlib's default); False: in the space's own units, clipped by clip_actions")
    normalize_rewards: bool = option(
        False, "environment", "divide rewards by the running std of the discounted return (SB3's "
        "VecNormalize norm_reward), merged across workers; episode returns stay raw")
    clip_rewards: bool | float | None = option(
        None, "environment", "clip the rewards learned from: True takes their sign (Atari), a number "
        "x clips to [-x, x] (before normalize_rewards); None leaves them")

    num_workers: int | Literal["auto"] = option(
        "auto", "rollouts", "rollout workers; 0 samples in the driver process; 'auto' is the CPU count "
        "(0 on the local engine)")
    num_envs_per_worker: int | Literal["auto"] = option(
        "auto", "rollouts", f"environments each worker steps as one vector; 'auto' shares {AUTO_ENVS} "
        "among the workers (all on the local engine, half each for 2 workers), so a batch has one shape "
        "on every engine")
    rollout_fragment_length: int | Literal["auto"] = option(
        "auto", "rollouts", "steps per environment per sample; 'auto' divides train_batch_size evenly")
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = option(
        "truncate_episodes", "rollouts", "fixed-length fragments, or whole episodes only")
    create_env_on_driver: bool = option(
        False, "rollouts", "build the driver's environment (algo.env, used by evaluate()) at build "
        "time, so a broken environment fails early")
    vectorize_mode: Literal["auto", "sync", "vector_entry_point"] = option(
        "auto", "rollouts", "a worker's vector of environments: 'sync' steps copies one after another "
        "in its process (each seeded seed+i; RLlib's default), 'vector_entry_point' the environment's "
        "own vector (CartPole's numpy one), 'auto' the latter where there is one; ALE pixel ids always "
        "use ale-py's vector, which does the DeepMind preprocessing")
    horizon: int | None = option(
        None, "rollouts", "RLlib's older key: truncate episodes after this many steps, under the "
        "environment's own time limit (None: the environment's own)")
    env_task_fn: str | None = option(
        None, "environment", "RLlib's curriculum: fn(train_result, env, env_context) -> task, called after "
        "every iteration on each TaskSettableEnv, whose set_task() gets a new task (kept as 'module:name')")
    render_env: bool = option(
        False, "environment", "record the evaluation episodes as videos (videos/ in the run directory)")

    engine: Literal["local", "ray", "mpi"] = option(
        "ray", "resources", "where workers run: 'local' in this process, 'ray' as Ray actors, "
        "'mpi' one per rank under mpiexec")
    mpi_mode: Literal["gather", "allreduce"] = option(
        "gather", "resources", "MPI engine: 'gather' batches to rank 0, or 'allreduce' gradients "
        "between replicas (PPO, PG)")
    ray_address: str | None = option(
        None, "resources", "Ray cluster to join ('auto', 'host:port', 'ray://...'); None starts one")
    num_cpus: int | None = option(None, "resources", "CPUs for an embedded Ray cluster (None: all)")
    num_cpus_per_worker: float = option(1.0, "resources", "CPUs Ray reserves for each worker")
    num_gpus: float = option(0.0, "resources", "GPUs for the learner (0: train on the CPU)")
    num_cpus_for_driver: int | None = option(
        None, "resources", "torch threads of the learner in the driver process; None: 1 for an MLP, "
        "for a CNN the cores no worker uses while it learns (1 under MPI and in a Tune trial)")

    framework_str: Literal["torch"] = option("torch", "framework", "deep-learning framework")

    seed: int = option(
        0, "debugging", "seed of weights, sampling and environment i (seeded seed+i); None (RLlib's "
        "default) draws a random one, kept in the config, every result and checkpoints, so the run repeats")
    log_level: Literal["DEBUG", "INFO", "WARN", "WARNING", "ERROR", "CRITICAL"] = option(
        "WARN", "debugging", "level of Ray's log messages when volley starts Ray (volley itself logs "
        "nothing)")

    explore: bool = option(
        True, "exploration", "sample actions from the policy while training (False: always the most "
        "likely action)")

    gamma: float = option(0.99, "training", "discount factor")
    lr: Schedulable = option(3e-4, "training", "learning rate, or [[timestep, lr], ...] (RLlib's schedule)")
    lr_schedule: list[list[float]] | None = option(
        None, "training", "RLlib's old spelling of a schedule [[timestep, lr], ...]; overrides lr when set")
    train_batch_size: int = option(2048, "training", "environment steps per training iteration")
    grad_clip: float | None = option(0.5, "training", "max global gradient norm (None: no clipping)")
    model: ModelConfig = option(ModelConfig(), "training", "network settings, see ModelConfig")

    evaluation_interval: int | None = option(
        None, "evaluation", "evaluate every N training iterations (results under result['evaluation']); "
        "None: only when evaluate() is called")
    evaluation_duration: int = option(
        10, "evaluation", "episodes (or timesteps, see evaluation_duration_unit) an evaluation plays")
    evaluation_duration_unit: Literal["episodes", "timesteps"] = option(
        "episodes", "evaluation", "'episodes', or 'timesteps': whole episodes until at least that many "
        "steps were taken")
    evaluation_num_workers: int = option(
        0, "evaluation", "evaluation workers (Ray actors on the Ray engine) that share the episodes; 0 "
        "plays them on the driver's own environment")
    evaluation_config: dict = option(
        {}, "evaluation", "config keys that differ while evaluating, e.g. {'explore': True}; actions are "
        "the most likely ones unless 'explore' is set here")
    custom_evaluation_function: str | None = option(
        None, "evaluation", "RLlib's fn(algorithm, eval_workers) -> metrics, called in place of volley's "
        "evaluation episodes; its metrics go under result['evaluation'] (kept as 'module:name')")
    evaluation_parallel_to_training: bool = option(
        False, "evaluation", "RLlib's overlap of evaluation with training: accepted, and volley evaluates "
        "after the iteration's training step either way (the same result keys; the time is not overlapped)")

    metrics_num_episodes_for_smoothing: int = option(
        100, "reporting", "episodes averaged in episode_reward_mean (and in custom_metrics)")
    keep_per_episode_custom_metrics: bool = option(
        False, "reporting", "custom_metrics holds each key's per-episode values instead of their "
        "_mean, _min and _max")
    min_sample_timesteps_per_iteration: int = option(
        0, "reporting", "train() repeats its training step until this many environment steps were "
        "sampled (the result has the last step's learner statistics)")
    min_time_s_per_iteration: float = option(
        0.0, "reporting", "train() repeats its training step until this many seconds have passed")

    restart_failed_workers: bool = option(
        True, "fault_tolerance", "Ray engine: replace an actor (a worker, an Ape-X replay shard) whose "
        "process or node died (False: stop with a WorkerError)")
    max_worker_restarts: int = option(
        10, "fault_tolerance", "replacements of each kind of actor (workers, replay shards) in a run; "
        "one more death stops it with a WorkerError")
    on_worker_failure: Literal["resample", "use_others"] = option(
        "resample", "fault_tolerance", "a dead worker's share of an iteration: 'resample' it on the "
        "replacement, or 'use_others' (the other workers' samples only; all dead: resample)")
    env_errors: Literal["recreate", "raise"] = option(
        "recreate", "fault_tolerance", "an environment that raises or returns NaN/inf: 'recreate' it "
        "and drop its unfinished episode, or 'raise' an EnvError naming it")
    max_consecutive_skips: int = option(
        10, "fault_tolerance", "updates in a row skipped for a non-finite loss or gradient "
        "before the run stops with a TrainingError")

    callbacks_class: str | list[str] | None = option(
        None, "callbacks", "a volley.DefaultCallbacks subclass (RLlib's hooks: custom metrics, ...), or "
        "a list of them; kept as 'module:QualName', found again in a process that has the class")

    # -- builder sugar (RLlib's methods; every key in docs/rllib.md) ----------------------------

    def environment(self, env: Any = None, **kwargs: Any) -> typing.Self:
        """Set environment keys: ``env`` (a Gymnasium id, a ``register_env`` name, or as in RLlib a
        ``gymnasium.Env`` subclass or creator function), ``env_config``, ``clip_rewards``, ..."""
        if env is not None:
            kwargs["env"] = env
        return self._update_group("environment", kwargs)

    def rollouts(self, **kwargs: Any) -> typing.Self:
        """Set rollout keys: ``num_workers`` (or ``num_rollout_workers``), ``num_envs_per_worker``, ..."""
        return self._update_group("rollouts", kwargs)

    def env_runners(self, **kwargs: Any) -> typing.Self:
        """Newer RLlib name of :meth:`rollouts` (``num_env_runners``, ``num_envs_per_env_runner``)."""
        return self._update_group("rollouts", kwargs)

    def training(self, **kwargs: Any) -> typing.Self:
        """Set training keys: ``lr``, ``gamma``, ``train_batch_size``, ``model``, algorithm keys."""
        return self._update_group("training", kwargs)

    def resources(self, **kwargs: Any) -> typing.Self:
        """Set resource keys: ``engine``, ``ray_address``, ``num_cpus``, ``num_gpus``, ..."""
        return self._update_group("resources", kwargs)

    def learners(self, **kwargs: Any) -> typing.Self:
        """RLlib's learner keys: ``num_learners`` (0 or 1: one learner, here), ``num_gpus_per_learner``."""
        return self._update_group("learners", kwargs)

    def framework(self, framework: str | None = None, **kwargs: Any) -> typing.Self:
        """Choose the framework; only ``"torch"`` exists (``eager_tracing`` and TensorFlow's keys change
        nothing)."""
        if framework is not None:
            kwargs["framework"] = framework
        return self._update_group("framework", kwargs)

    def api_stack(self, **kwargs: Any) -> typing.Self:
        """RLlib's choice of API stack; volley has one, which takes both stacks' keys."""
        return self._update_group("api_stack", kwargs)

    def debugging(self, **kwargs: Any) -> typing.Self:
        """Set ``seed`` and ``log_level``."""
        return self._update_group("debugging", kwargs)

    def exploration(self, **kwargs: Any) -> typing.Self:
        """Set ``explore``, and for DQN RLlib's ``exploration_config``."""
        return self._update_group("exploration", kwargs)

    def evaluation(self, **kwargs: Any) -> typing.Self:
        """Set ``evaluation_interval``, ``evaluation_duration`` (and its unit),
        ``evaluation_num_workers`` (or ``evaluation_num_env_runners``), ``evaluation_config``."""
        return self._update_group("evaluation", kwargs)

    def reporting(self, **kwargs: Any) -> typing.Self:
        """Set ``metrics_num_episodes_for_smoothing``, ``min_sample_timesteps_per_iteration``, ..."""
        return self._update_group("reporting", kwargs)

    def fault_tolerance(self, **kwargs: Any) -> typing.Self:
        """Set ``restart_failed_workers`` (or RLlib's ``restart_failed_env_runners``),
        ``max_worker_restarts``, ``on_worker_failure``, ``env_errors``, ``max_consecutive_skips``."""
        return self._update_group("fault_tolerance", kwargs)

    def rl_module(self, **kwargs: Any) -> typing.Self:
        """RLlib's ``model_config`` (volley's ``model``); custom RLModules are refused."""
        return self._update_group("rl_module", kwargs)

    def multi_agent(self, **kwargs: Any) -> typing.Self:
        """Refused, naming the key: volley trains one policy on single-agent environments."""
        return self._update_group("multi_agent", kwargs)

    def callbacks(self, callbacks_class: Any = ..., **kwargs: Any) -> typing.Self:
        """Set ``callbacks_class``: a ``DefaultCallbacks`` subclass (or a list of them) whose hooks
        run with the episodes and the training (None: no callbacks)."""
        if callbacks_class is not ...:  # not given: other keys only (RLlib's on_...=function ones)
            kwargs["callbacks_class"] = callbacks_class
        return self._update_group("callbacks", kwargs)

    def offline_data(self, **kwargs: Any) -> typing.Self:
        """Refused, naming the key: volley learns from the environments it steps."""
        return self._update_group("offline_data", kwargs)

    def checkpointing(self, **kwargs: Any) -> typing.Self:
        """RLlib's checkpoint options (see docs/rllib.md)."""
        return self._update_group("checkpointing", kwargs)

    def experimental(self, **kwargs: Any) -> typing.Self:
        """RLlib's internal switches (``_validate_config``, ...): accepted at RLlib's defaults."""
        return self._update_group("experimental", kwargs)

    @classmethod
    def overrides(cls, **kwargs: Any) -> dict[str, Any]:
        """RLlib's partial config: the keys given, checked against this class, as a dict (for
        ``evaluation_config``, or another config's ``update_from_dict``)."""
        cls().update(**kwargs)
        return dict(kwargs)

    # -- the one validated setter --------------------------------------------------------------

    @classmethod
    def field_specs(cls) -> dict[str, tuple[dataclasses.Field, Any]]:
        """Every key with its dataclass field and resolved type."""
        hints = typing.get_type_hints(cls)
        return {f.name: (f, hints[f.name]) for f in dataclasses.fields(cls)}

    @classmethod
    def rllib_keys(cls) -> list[RLlibKey]:
        """RLlib's keys this config takes: the slices of its class and the classes it extends, in
        that order (Ape-X's entry for a key settles it before DQN's), then the shared table."""
        return [key for c in cls.__mro__ for key in vars(c).get("RLLIB_KEYS", ())] + SHARED_RLLIB_KEYS

    @classmethod
    def algo_names(cls) -> set[str]:
        """``algo_name`` of this class and the classes it extends (Ape-X's keys include DQN's)."""
        return {vars(c)["algo_name"] for c in cls.__mro__ if vars(c).get("algo_name")}

    def update(self, **kwargs: Any) -> typing.Self:
        """Set any keys (aliases and RLlib's spellings accepted), checking each name and type."""
        return self._update_group(None, kwargs, lenient=vars(self).get("_lenient", False))

    def _update_group(self, group: str | None, kwargs: dict[str, Any], lenient: bool = False) -> typing.Self:
        """Set ``kwargs``; with ``lenient`` (a dict of keys, as RLlib takes one), a key volley does not
        know is kept beside the config (:meth:`unknown_keys`) and warned about once, not refused."""
        specs = self.field_specs()
        for key, value in kwargs.items():
            if unset_deprecated(key, value):  # RLlib's -1 for a deprecated key nobody set
                continue
            if is_search_space(value):  # Tune resolves it per trial: kept as given until then
                self._set_search_space(key, value, specs)
                continue
            sb3 = self.SB3_KEYS.get(key)
            if callable(sb3):
                self._update_group(group, sb3(value))
                continue
            name = self.ALIASES.get(key) or sb3 or key
            # RLlib's spellings (docs/rllib.md); an SB3 name is never RLlib's
            rllib = None if sb3 is not None else rllib_key(key, type(self), specs)
            if name not in specs and rllib is None:
                known = list(specs) + list(self.ALIASES) + list(self.SB3_KEYS)
                if not lenient:
                    raise ConfigError(f"unknown config key {key!r} for {type(self).__name__}"
                                      f"{did_you_mean(key, known)}")
                self._keep_unknown(key, value, known)
                continue
            groups = {*(rllib.groups if rllib is not None else ()),
                      *([specs[name][0].metadata["group"]] if name in specs else [])}
            if group is not None and group not in groups and sb3 is None:  # SB3 has no builder methods
                raise ConfigError(f"config key {key!r} is set with "
                                  f"{' or '.join(f'.{g}()' for g in sorted(groups))}, not .{group}()")
            if rllib is None:
                self._set(key, name, value, specs[name][1])
            else:  # RLlib's key, as the table says (RLlib's unset values change nothing)
                for target, item in rllib.translate(value).items():
                    label = key if target == name else f"{target} (from RLlib's {key})"
                    self._set(label, target, item, specs[target][1])
        return self

    def _keep_unknown(self, key: str, value: Any, known: list[str]) -> None:
        """Keep a key volley does not know, as RLlib keeps it (a script's own, popped later by it);
        a warning, once per key and process, names the closest known key in case of a typo."""
        self._keep(key, value)
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(f"config key {key!r} is not one of {type(self).__name__}'s: kept (config[{key!r}] "
                          f"and to_dict() hold it), unused by volley{did_you_mean(key, known)}",
                          stacklevel=_outside_volley())

    def _set_search_space(self, key: str, value: Any, specs: dict[str, tuple[dataclasses.Field, Any]]) -> None:
        """Keep a Tune search space under the key as given: ``to_dict()`` hands it to Tune, which
        resolves it per trial; :meth:`validate` refuses to build with one."""
        name = self.ALIASES.get(key, key)
        if name in specs:
            setattr(self, name, value)
        else:  # RLlib's spelling of a key: translated once Tune has picked the value
            self._keep(key, value)

    def _keep(self, key: str, value: Any) -> None:
        """Keep ``key`` beside the fields (refused, as every change, once the config is frozen)."""
        self.__setattr__("_unknown", {**self.unknown_keys(), key: value})

    def unknown_keys(self) -> dict[str, Any]:
        """The keys a dict gave this config that volley does not know (kept, as RLlib keeps them),
        and Tune search spaces under RLlib's spellings of a key."""
        return dict(self.__dict__.get("_unknown", {}))

    def search_spaces(self) -> dict[str, Any]:
        """The keys (``model.fcnet_hiddens`` for a model key) holding a Tune search space."""
        found = {}
        for key, value in self.to_dict().items():
            items = value.items() if isinstance(value, dict) and not is_search_space(value) else ()
            found.update({f"{key}.{k}": v for k, v in items if is_search_space(v)})
            if is_search_space(value):
                found[key] = value
        return found

    def _set(self, label: str, name: str, value: Any, hint: Any) -> None:
        if hint is ModelConfig:  # `model`, and SAC's q_model_config
            value = self._merge_model(name, value)
        elif name == "env_config":  # any picklable objects (gymnasium spaces...), as RLlib takes
            setattr(self, name, picklable_dict(label, value))
            return
        elif name == "env" and not isinstance(value, str):
            value = env_name(value)
        elif name in FUNCTION_KEYS and value is not None and not isinstance(value, str):
            value = function_name(name, value)
        elif name == "callbacks_class" and value is not None and not isinstance(value, str) and not (
                isinstance(value, list) and all(isinstance(item, str) for item in value)):
            value = callbacks_name(value)
        setattr(self, name, coerce(label, value, hint))

    def _merge_model(self, name: str, value: Any) -> ModelConfig:
        """The network settings of key ``name`` with the keys of ``value`` changed, each checked."""
        if isinstance(value, ModelConfig):  # checked key by key like a dict
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(ModelConfig)}
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{name}' must be a dict, got {shown(value)}")
        model = copy.deepcopy(getattr(self, name))
        hints = typing.get_type_hints(ModelConfig)
        custom = value.get("custom_model", model.custom_model) is not None
        for key, item in value.items():
            rllib = rllib_key(f"model.{key}", type(self))
            if unset_deprecated(f"model.{key}", item):
                continue
            if key == "custom_model" and item is not None and not isinstance(item, str):
                item = CUSTOM_MODELS.name_of(item)  # a class given directly (RLlib takes either)
            if key == "custom_action_dist" and item is not None and not isinstance(item, str):
                item = CUSTOM_ACTION_DISTS.name_of(item)
            if key in hints and is_search_space(item):  # resolved per trial by Tune
                setattr(model, key, item)
            elif key in hints:
                setattr(model, key, coerce(f"{name}.{key}", item, hints[key]))
            elif rllib is not None and custom and key not in NOT_PASSED_TO_CUSTOM_MODELS:
                model.rllib_model_keys = {**model.rllib_model_keys, **coerce(f"{name}.{key}", {key: item}, dict)}
            elif rllib is not None:  # RLlib's model keys volley has none of: accepted, refused or translated
                for field_name, translated in rllib.translate(item).get("model", {}).items():
                    setattr(model, field_name, coerce(f"{name}.{key}", translated, hints[field_name]))
            else:
                hint = "; a custom model's own options go in custom_model_config" if custom else ""
                raise ConfigError(f"unknown {name} key {key!r}{did_you_mean(str(key), hints)}{hint}")
        return model

    # -- derived values and checks ------------------------------------------------------------

    @property
    def network(self) -> NetworkKind:
        """The kind of network the learner trains and the workers act with."""
        return "actor_critic"

    @property
    def head_hiddens(self) -> list[int]:
        """Hidden layers between the network's body and its outputs (DQN's ``hiddens``; none elsewhere)."""
        return []

    def to_play(self) -> dict[str, Any]:
        """The keys that host a trained policy in as few processes as possible, to play
        episodes with it (``volley evaluate``): in this process, no workers, and no callbacks
        (their class may be in the script that trained, not in the process that plays)."""
        return {"engine": "local", "num_workers": 0, "mpi_mode": "gather", "ray_address": None,
                "evaluation_num_workers": 0, "evaluation_interval": None, "callbacks_class": None}

    def plan(self, num_workers: int | None = None) -> RolloutPlan:
        """The sizes of a run, resolved once by the driver (workers get the numbers, never ``"auto"``).

        ``num_workers`` is a count the engine imposes (the MPI engine: one worker per rank);
        otherwise ``"auto"`` is this machine's CPU count (0 on the local engine).
        """
        if num_workers is None:
            if self.num_workers != "auto":
                num_workers = int(self.num_workers)
            else:
                num_workers = 0 if self.engine == "local" else (os.cpu_count() or 1)
        if self.num_envs_per_worker != "auto":
            num_envs = int(self.num_envs_per_worker)
        else:
            num_envs = math.ceil(AUTO_ENVS / max(1, num_workers))
        if self.rollout_fragment_length != "auto":
            fragment = int(self.rollout_fragment_length)
        else:
            fragment = max(1, math.ceil(self.train_batch_size / (max(1, num_workers) * num_envs)))
        return RolloutPlan(num_workers, num_envs, fragment)

    def validate(self) -> None:
        """Check ranges and combinations; raise a ConfigError that names the value."""
        for key, space in self.search_spaces().items():
            raise ConfigError(f"config key '{key}' holds a Tune search space ({shown(space)}): Tune picks "
                              "one value per trial (tune.Tuner('PPO', param_space=config)); build() needs a value")
        positive = {"train_batch_size": self.train_batch_size,
                    "evaluation_duration": self.evaluation_duration,
                    "metrics_num_episodes_for_smoothing": self.metrics_num_episodes_for_smoothing,
                    "num_cpus_per_worker": self.num_cpus_per_worker,
                    "max_consecutive_skips": self.max_consecutive_skips}
        if self.num_envs_per_worker != "auto":
            positive["num_envs_per_worker"] = self.num_envs_per_worker
        if self.rollout_fragment_length != "auto":
            positive["rollout_fragment_length"] = self.rollout_fragment_length
        if self.num_cpus is not None:
            positive["num_cpus"] = self.num_cpus
        if self.num_cpus_for_driver is not None:
            positive["num_cpus_for_driver"] = self.num_cpus_for_driver
        if self.grad_clip is not None:
            positive["grad_clip"] = self.grad_clip
        for key, value in positive.items():
            if value <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {value!r}")
        if self.num_workers != "auto" and self.num_workers < 0:
            raise ConfigError(f"config key 'num_workers' must be >= 0, got {self.num_workers!r}")
        for key in ("max_worker_restarts", "min_sample_timesteps_per_iteration", "min_time_s_per_iteration"):
            if getattr(self, key) < 0:
                raise ConfigError(f"config key '{key}' must be >= 0, got {getattr(self, key)!r}")
        if not 0.0 <= self.gamma <= 1.0:  # 0 too: RLlib's bandit-like examples (nested_action_spaces) set it
            raise ConfigError(f"config key 'gamma' must be in [0, 1], got {self.gamma!r}")
        if not 0 <= self.seed < 2**31:  # seed + env index must fit every seeding API (torch, ALE)
            raise ConfigError(f"config key 'seed' must be in [0, 2**31), got {self.seed!r}")
        if self.num_gpus < 0:
            raise ConfigError(f"config key 'num_gpus' must be >= 0, got {self.num_gpus!r}")
        check_schedulable("lr", self.lr, positive=True)
        if self.lr_schedule is not None:
            check_schedulable("lr_schedule", self.lr_schedule)
        self.model.validate(self.algo_name, self.network)
        for registry, name in ((CUSTOM_MODELS, self.model.custom_model),
                               (CUSTOM_ACTION_DISTS, self.model.custom_action_dist)):
            if name is not None and registry.find(name) is None:
                raise ConfigError(registry.missing(name))
        if self.mpi_mode == "allreduce" and self.engine != "mpi":
            raise ConfigError(f"mpi_mode='allreduce' needs engine='mpi', got engine={self.engine!r}")
        if self.clip_rewards is not None and self.clip_rewards is not True and not self.clip_rewards > 0:
            raise ConfigError(f"config key 'clip_rewards' must be True, a number > 0 or None, "
                              f"got {self.clip_rewards!r}")
        self._validate_evaluation()

    def check_bounds(self, positive: Collection[str] = (), non_negative: Collection[str] = ()) -> None:
        """A ConfigError naming the first key of ``positive`` that is not > 0, or of ``non_negative``
        that is < 0."""
        for key in positive:
            if not getattr(self, key) > 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        for key in non_negative:
            if not getattr(self, key) >= 0:
                raise ConfigError(f"config key '{key}' must be >= 0, got {getattr(self, key)!r}")

    def _validate_evaluation(self) -> None:
        if self.evaluation_interval is not None and self.evaluation_interval <= 0:
            raise ConfigError(f"config key 'evaluation_interval' must be > 0 or None, "
                              f"got {self.evaluation_interval!r}")
        if self.horizon is not None and self.horizon <= 0:
            raise ConfigError(f"config key 'horizon' must be > 0 or None, got {self.horizon!r}")
        if self.evaluation_num_workers < 0:
            raise ConfigError(f"config key 'evaluation_num_workers' must be >= 0, "
                              f"got {self.evaluation_num_workers!r}")
        if self.evaluation_num_workers > 0 and self.engine == "mpi":
            raise ConfigError(f"evaluation_num_workers={self.evaluation_num_workers} with engine='mpi': "
                              "every MPI rank is a training worker; set evaluation_num_workers=0 (rank 0 "
                              "evaluates on its own environment)")
        nested = {"evaluation_config", "evaluation_interval", "evaluation_num_workers"} & set(
            self.evaluation_config)
        if nested:
            raise ConfigError(f"evaluation_config cannot set {sorted(nested)[0]!r}")
        if self.evaluation_config:
            try:
                self.evaluation_settings().validate()
            except ConfigError as exc:
                raise ConfigError(f"evaluation_config: {exc}") from None

    def evaluation_settings(self) -> typing.Self:
        """This config as evaluation sees it: ``evaluation_config`` on top, and no exploration
        unless it asks for some."""
        return self.copy(copy_frozen=False).update(
            **{"explore": False, **self.evaluation_config, "evaluation_config": {}})

    # -- serialisation, and RLlib's dict-like access ------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """All keys as plain data (JSON-ready but for ``env_config``'s objects and unknown keys),
        the unknown keys a dict gave it included."""
        return {**dataclasses.asdict(self), **copy.deepcopy(self.unknown_keys())}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> typing.Self:
        """Rebuild a config from :meth:`to_dict` output (or any partial dict of keys); keys volley
        does not know are kept, as RLlib keeps them, with a warning."""
        return cls().update_from_dict(data)

    def update_from_dict(self, config_dict: dict[str, Any]) -> typing.Self:
        """RLlib's name for :meth:`update` with a dict of keys; keys volley does not know are kept
        (``config[key]`` reads them back, ``to_dict()`` passes them on) and warned about once."""
        vars(self)["_lenient"] = True  # for update(), which a config class may extend (SAC's does)
        try:
            return self.update(**config_dict)
        finally:
            del vars(self)["_lenient"]

    def __getitem__(self, key: str) -> Any:
        """``config["lr"]``, as in RLlib: a key's value; an alias or RLlib's name reads its key."""
        if key in self.unknown_keys():
            return self.unknown_keys()[key]
        sb3 = self.SB3_KEYS.get(key)
        name = self.ALIASES.get(key) or (sb3 if isinstance(sb3, str) else key)
        rllib = rllib_key(key, type(self), self.field_specs())
        if rllib is not None and rllib.kind == "renamed":
            name = rllib.sets[0]
        if name not in self.field_specs():
            raise KeyError(f"{type(self).__name__} has no key {key!r}{did_you_mean(str(key), self.field_specs())}")
        return getattr(self, name)

    def __setitem__(self, key: str, value: Any) -> None:
        """``config["lr"] = 1e-3``, as in RLlib: :meth:`update_from_dict` of one key."""
        self.update_from_dict({key: value})

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, self) is not self

    def get(self, key: str, default: Any = None) -> Any:
        """``config.get("lr")``, as in RLlib: the key's value, or ``default`` for a key it lacks."""
        try:
            return self[key]
        except KeyError:
            return default

    def freeze(self) -> None:
        """Refuse every later change, as RLlib does (a built algorithm's config is frozen)."""
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise ConfigError(f"cannot set {name!r}: this {type(self).__name__} is frozen (config.freeze(), "
                              "or the config of a built algorithm); change a copy: "
                              "config.copy(copy_frozen=False)")
        super().__setattr__(name, value)

    def copy(self, copy_frozen: bool | None = None) -> typing.Self:
        """A deep copy, so a built algorithm never sees later changes to this config. It is frozen
        if this one is, unless ``copy_frozen`` (RLlib's argument) says otherwise."""
        twin = copy.deepcopy(self)
        if copy_frozen is not None:
            object.__setattr__(twin, "_frozen", copy_frozen)
        return twin

    def build(self, env: Any = None) -> Any:
        """Validate and construct the algorithm that ``algo_name`` names in the registry
        (:mod:`volley.registry`); ``env`` (RLlib's ``build(env=...)``) sets the environment of this
        config first."""
        if not self.algo_name:
            raise NotImplementedError(f"{type(self).__name__} names no algorithm to build")
        return algorithm_class(self.algo_name)(self._prepare_build(env))

    def build_algo(self, env: Any = None) -> Any:
        """RLlib's newer name of :meth:`build`."""
        return self.build(env)

    def _prepare_build(self, env: Any) -> typing.Self:
        """What every ``build(env=...)`` does first: set ``env`` on this config, as RLlib does."""
        return self if env is None else self.environment(env)

