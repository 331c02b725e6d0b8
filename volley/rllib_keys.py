"""RLlib's keys as the table holds them: what an entry is, RLlib's own defaults, and the keys of
RLlib's ``to_dict()`` that users seldom write.

An :class:`RLlibKey` says what volley does with one of RLlib's keys; the factories below
(``same``, ``renamed``, ``translated``, ``refused``, ``accepted``, ``at_default``) make
them, and ``volley.rllib_compat`` holds the table of the keys users write.

``AlgorithmConfig.to_dict()`` of RLlib holds some 260 keys, most of them plumbing that
volley has no use for: connector pipelines, offline data, multi-agent policy maps,
TensorFlow switches, ``_``-prefixed internals. A user meets them when they pass a whole
RLlib config on (``PPOConfig.from_dict(rllib_config.to_dict())``, a Tune ``param_space``
built from one). Each is named here (:data:`INTERNAL`, :data:`DUMP_KEYS`) with why volley
needs none of it: accepted at RLlib's default, which changes nothing, and refused in one
line naming it otherwise.

RLlib's defaults are not copied by hand: ``docs/dump_rllib_keys.py``, run with RLlib
installed, writes ``volley/rllib_keys.json`` (every algorithm volley has, both API
stacks, RLlib 2.60 and 2.9), and :func:`rllib_defaults` reads them from there. A key
that a newer RLlib adds fails ``tests/unit/test_rllib_keys.py`` until it is named here
or given a line of its own in the table. Imports nothing of volley but ``errors``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from volley.errors import ConfigError, did_you_mean, shown

DUMP = Path(__file__).with_name("rllib_keys.json")

# RLlib's DEPRECATED_VALUE: what its to_dict() holds for a deprecated key nobody set
DEPRECATED = -1


@dataclass(frozen=True)
class RLlibObject:
    """A class or function of RLlib's that its configs hold by default (``callbacks``, the
    default ``policy_mapping_fn``): equal to any object with that import path, so RLlib's own
    default is recognised without importing RLlib."""

    path: str  # "module:QualName"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RLlibObject):
            return self.path == other.path
        module, qualname = getattr(other, "__module__", None), getattr(other, "__qualname__", None)
        return isinstance(module, str) and f"{module}:{qualname}" == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"RLlib's {self.path.rpartition(':')[2]}"


def _decoded(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__object__"}:
            return RLlibObject(value["__object__"])
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


@functools.cache
def dumped_configs() -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``{rllib_version: {algorithm: {"new_stack" | "old_stack": to_dict()}}}`` as RLlib wrote
    them, RLlib's classes and functions as :class:`RLlibObject`."""
    return _decoded(json.loads(DUMP.read_text())["rllib"])


@functools.cache
def _defaults_by_key() -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for algorithms in dumped_configs().values():
        for stacks in algorithms.values():
            for config in stacks.values():
                items = [*config.items(), *((f"model.{k}", v) for k, v in config.get("model", {}).items())]
                for key, value in items:
                    seen = found.setdefault(key, [])
                    if value not in seen:
                        seen.append(value)
    return found


def rllib_defaults(name: str) -> tuple[Any, ...]:
    """Every default that any dumped RLlib config has for ``name`` (``"model.<key>"`` for a key of
    ``model={...}``), each once; () for a key the dump lacks."""
    return tuple(_defaults_by_key().get(name, ()))


def unset_deprecated(name: str, value: Any) -> bool:
    """Whether ``value`` is RLlib's marker for a deprecated key nobody set (``-1``, where RLlib's
    own default for ``name`` is that marker): such a key means nothing, as in RLlib."""
    return (value == DEPRECATED and not isinstance(value, bool)
            and any(d == DEPRECATED and not isinstance(d, bool) for d in rllib_defaults(name)))


# -- the table's entries (volley.rllib_compat holds the table) ------------------------------

Translate = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class RLlibKey:
    """One RLlib config key and what volley does with it."""

    name: str  # RLlib's spelling; "model.<key>" for a key of model={...}
    groups: tuple[str, ...]  # RLlib's builder methods that set it ("rollouts" also means env_runners)
    volley: str  # what volley does with it, for docs/rllib.md
    translate: Translate  # value -> volley keys ({}: nothing to change); a ConfigError if refused
    algorithms: tuple[str, ...] = ()  # algo_name of the volley configs it applies to; (): all
    example: Any = None  # a value tutorials pass; the table's test sets it (refused kinds: a refused one)
    kind: str = "same"  # "same", "renamed", "translated", "accepted" or "refused"
    sets: tuple[str, ...] = ()  # the volley keys it may set
    allowed: tuple[Any, ...] = ()  # a refused key's values that are accepted (volley does that anyway)

    def applies_to(self, algo_names: Collection[str]) -> bool:
        return not self.algorithms or any(name in algo_names for name in self.algorithms)


def same(name: str, *groups: str, example: Any = None, note: str = "",
         unset: tuple[Any, ...] = ()) -> RLlibKey:
    """A volley key under RLlib's name that RLlib also sets from ``groups`` (``note``: how it differs).
    A value in ``unset`` (RLlib's ``None`` where volley's key has another default) leaves it as it is."""
    return RLlibKey(name, groups, f"`{name}`{note}", lambda value: {} if is_one_of(value, unset) else {name: value},
                    example=example, sets=(name,))


def renamed(name: str, to: str, *groups: str, algorithms: tuple[str, ...] = (), example: Any = None,
            note: str = "") -> RLlibKey:
    """RLlib's ``name`` for volley's key ``to``."""
    return RLlibKey(name, groups, f"`{to}`{note}", lambda value: {to: value}, algorithms, example,
                    "renamed", (to,))


def translated(name: str, groups: tuple[str, ...], translate: Translate, sets: tuple[str, ...], doc: str,
               example: Any, algorithms: tuple[str, ...] = ()) -> RLlibKey:
    """A key whose value becomes the volley keys ``sets``."""
    return RLlibKey(name, groups, doc, translate, algorithms, example, "translated", sets)


def _plain(value: Any) -> Any:
    """Tuples as lists, as JSON (and RLlib's dumped defaults) hold them."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def is_one_of(value: Any, allowed: tuple[Any, ...]) -> bool:
    """``value == a`` for some ``a``, where a bool only equals a bool (RLlib's 0 is not False) and a
    tuple equals a list."""
    def equal(a: Any) -> bool:
        try:
            return isinstance(value, bool) == isinstance(a, bool) and bool(_plain(value) == _plain(a))
        except (TypeError, ValueError):  # an array compares element by element
            return False
    return any(equal(a) for a in allowed)


# -- RLlib's sub-configs as volley keys (the translations' parts) --


def check_dict(key: str, value: Any) -> dict:
    """An RLlib sub-config (``replay_buffer_config``, ``exploration_config``), which must be a dict."""
    if not isinstance(value, dict):
        raise ConfigError(f"RLlib's {key} must be a dict, got {shown(value)}")
    return value


def type_name(key: str, value: dict, known: Collection[str], offer: str = "") -> str:
    """The ``"type"`` of an RLlib sub-config (a name, or a class as RLlib also takes); refused by
    name, with the close match, unless volley has it (``offer`` says what it has; else ``known``)."""
    kind = value.get("type")
    name = kind if isinstance(kind, str) else getattr(kind, "__name__", repr(kind))
    if name not in known:
        raise ConfigError(f"RLlib's {key} type {name!r} is not supported by volley"
                          f"{did_you_mean(name, known)}; volley has {offer or ', '.join(map(repr, known))}")
    return name


def sub_keys(key: str, value: dict, renames: dict[str, str], fixed: dict[str, tuple[Any, ...]]
             ) -> dict[str, Any]:
    """An RLlib sub-config's keys as volley keys: ``fixed`` keys are accepted at the values volley has
    (first: a renamed key may also be fixed at RLlib's unset marker), ``renames`` map onto volley
    keys; ``"type"`` is the caller's; anything else is refused."""
    out: dict[str, Any] = {}
    for sub, item in value.items():
        if sub in fixed and is_one_of(item, fixed[sub]):  # RLlib's unset marker of a key renamed too
            continue
        if sub in renames:
            out[renames[sub]] = item
        elif sub in fixed:
            raise ConfigError(f"RLlib's {key}[{sub!r}]={shown(item)} is not supported by volley "
                              f"(it takes {' or '.join(map(repr, fixed[sub]))})")
        elif sub != "type":
            known = [*renames, *fixed]
            raise ConfigError(f"RLlib's {key} key {sub!r} is not supported by volley"
                              f"{did_you_mean(sub, known)}; it takes {', '.join(map(repr, known))}")
    return out


def refused(name: str, groups: tuple[str, ...], why: str, allowed: tuple[Any, ...] = (None, False),
            example: Any = True, algorithms: tuple[str, ...] = ()) -> RLlibKey:
    """A key volley does not implement: the ``allowed`` values (what volley does anyway) change
    nothing; any other is refused naming the key, why, and what to use instead (in ``why``)."""
    def translate(value: Any) -> dict[str, Any]:
        if is_one_of(value, allowed):
            return {}
        shown_key = f"model['{name[6:]}']" if name.startswith("model.") else name
        raise ConfigError(f"RLlib's {shown_key}={shown(value)} is not supported by volley: {why}")
    allowed_text = " or ".join(f"`{a!r}`" for a in allowed)
    return RLlibKey(name, groups, f"not supported (accepted: {allowed_text}): {why}", translate, algorithms,
                    example, "refused", allowed=allowed)


def at_default(name: str, groups: tuple[str, ...], why: str, algorithms: tuple[str, ...] = ()) -> RLlibKey:
    """A key of RLlib's that volley has no use for: RLlib's own defaults (every one the dump of RLlib
    records for it, ``volley.rllib_internal``) are accepted, changing nothing; any other value is
    refused naming the key and ``why``."""
    defaults = rllib_defaults(name)
    entry = refused(name, groups, why, allowed=defaults, example=_other_than(defaults), algorithms=algorithms)
    shown_defaults = " or ".join(f"`{d!r}`" for d in defaults)
    shown_defaults = f" ({shown_defaults})" if len(shown_defaults) <= 60 else ""
    return replace(entry, volley=f"RLlib's default{shown_defaults} accepted, changing nothing; "
                                 f"other values refused: {why}")


def _other_than(defaults: tuple[Any, ...]) -> Any:
    """A value that is none of ``defaults`` (the table's test sets it and expects the refusal)."""
    flags = {d for d in defaults if isinstance(d, bool)}
    if len(flags) == 1:
        return not flags.pop()
    return "not RLlib's default"


def stored_as(entry: RLlibKey, name: str) -> RLlibKey:
    """RLlib's ``name`` under which its ``to_dict()`` holds ``entry``'s key (``_model_config`` for
    ``model_config``): the same, and ``None`` (nothing set) changes nothing."""
    def translate(value: Any) -> dict[str, Any]:
        try:
            return {} if value is None else entry.translate(value)
        except ConfigError as exc:  # the refusal names the key as it was given
            raise ConfigError(re.sub(rf"RLlib's {entry.name}\b", f"RLlib's {name}", str(exc), count=1)) from None
    return replace(entry, name=name, volley=f"as `{entry.name}`: {entry.volley}", translate=translate)


def accepted(name: str, groups: tuple[str, ...], why: str, example: Any,
             algorithms: tuple[str, ...] = ()) -> RLlibKey:
    """A key every value of which leaves volley doing what RLlib did with it (a TensorFlow switch
    under torch, a timeout volley never needs): accepted, changing nothing; ``why`` says why."""
    return RLlibKey(name, groups, f"accepted, changes nothing: {why}", lambda value: {}, algorithms,
                    example, "accepted")


# -- the keys of RLlib's to_dict() that users seldom write ------------------------------------

# What volley needs none of, by kind: (builder methods RLlib sets them with, why, names). The table
# accepts each at RLlib's default (rllib_defaults) and refuses any other value, saying why.
INTERNAL: list[tuple[tuple[str, ...], str, tuple[str, ...]]] = [
    (("experimental",), "an internal switch of RLlib's own code", (
        "_AlgorithmConfig__prior_exploration_config", "_prior_exploration_config", "_per_module_overrides",
        "_disable_action_flattening", "_disable_execution_plan_api", "_disable_initialize_loss_from_dummy_batch",
        "_disable_preprocessor_api", "_dont_auto_sync_env_runner_states", "_enable_rl_module_api", "_is_online",
        "_tf_policy_handles_more_than_one_loss", "_torch_grad_scaler_class", "_torch_lr_scheduler_classes",
        "_use_msgpack_checkpoints", "_validate_config", "in_evaluation", "simple_optimizer",
        "model._disable_action_flattening", "model._disable_preprocessor_api", "model._time_major",
        "model._use_default_native_models", "model.always_check_shapes")),
    (("rollouts",), "volley has no connector pipelines: a worker's environments, its observation filter "
     "and its policy are one RolloutWorker (observation_filter, clip_rewards, clip_actions cover the usual "
     "connectors)", (
        "add_default_connectors_to_env_to_module_pipeline", "add_default_connectors_to_module_to_env_pipeline",
        "episode_lookback_horizon", "episodes_to_numpy", "merge_env_runner_states",
        "broadcast_env_runner_states", "use_worker_filter_stats", "update_worker_filter_stats",
        "synchronize_filters", "use_env_runner_state_server", "env_runner_state_server_max_concurrency",
        "env_runner_cls", "worker_cls", "sample_collector", "ignore_final_observation",
        "max_requests_in_flight_per_sampler_worker", "sampler_perf_stats_ema_coef", "replay_sequence_length")),
    (("training",), "volley's learner is one torch module in the driver process, updated by the "
     "algorithm's own loss", (
        "add_default_connectors_to_learner_pipeline", "learner_connector", "learner_config_dict",
        "before_learn_on_batch", "categorical_distribution_temperature", "burn_in_len",
        "max_requests_in_flight_per_replay_worker")),
    (("learners",), "volley trains one learner, in this process", (
        "num_aggregator_actors_per_learner", "max_requests_in_flight_per_aggregator_actor",
        "max_requests_in_flight_per_learner")),
    (("resources",), "volley's Ray actors reserve CPUs (num_cpus_per_worker) and the learner GPUs "
     "(num_gpus), nothing else", (
        "custom_resources_per_worker", "custom_resources_per_env_runner", "custom_resources_for_main_process",
        "custom_resources_per_learner", "local_gpu_idx", "extra_python_environs_for_driver",
        "extra_python_environs_for_worker")),
    (("offline_data",), "volley learns from environments it steps, not from offline data", (
        "input", "input_config", "input_compress_columns", "input_filesystem", "input_filesystem_kwargs",
        "input_read_batch_size", "input_read_episodes", "input_read_method", "input_read_method_kwargs",
        "input_read_sample_batches", "input_read_schema", "input_spaces_jsonable", "iter_batches_kwargs",
        "map_batches_kwargs", "materialize_data", "materialize_mapped_data", "dataset_num_iters_per_learner",
        "prelearner_buffer_class", "prelearner_buffer_kwargs", "prelearner_class",
        "prelearner_module_synch_period", "prelearner_use_recorded_module_states",
        "off_policy_estimation_methods", "ope_split_batch_by_episode", "postprocess_inputs",
        "shuffle_buffer_size", "actions_in_input_normalized", "output_compress_columns", "output_config",
        "output_filesystem", "output_filesystem_kwargs", "output_max_file_size", "output_max_rows_per_file",
        "output_write_episodes", "output_write_method", "output_write_method_kwargs",
        "output_write_remaining_data", "offline_sampling", "offline_data_class")),
    (("evaluation",), "volley evaluates in environments, not on offline data", (
        "offline_loss_for_module_fn", "dataset_num_iters_per_eval_runner", "broadcast_offline_eval_runner_states",
        "ignore_offline_eval_runner_failures", "restart_failed_offline_eval_runners",
        "max_num_offline_eval_runner_restarts", "num_cpus_per_offline_eval_runner",
        "num_gpus_per_offline_eval_runner", "custom_resources_per_offline_eval_runner",
        "max_requests_in_flight_per_offline_eval_runner", "num_offline_eval_runners",
        "offline_eval_batch_size_per_runner", "offline_eval_rl_module_inference_only",
        "offline_eval_runner_class", "offline_eval_runner_health_probe_timeout_s",
        "offline_eval_runner_restore_timeout_s", "offline_evaluation_duration", "offline_evaluation_interval",
        "offline_evaluation_parallel_to_training", "offline_evaluation_timeout_s", "offline_evaluation_type",
        "validate_offline_eval_runners_after_construction")),
    (("evaluation",), "volley evaluates between training iterations, in whole episodes or timesteps it "
     "plays to the end", (
        "custom_eval_function", "custom_async_evaluation_function", "enable_async_evaluation",
        "evaluation_error_after_n_consecutive_skips")),
    (("multi_agent",), "volley keeps every policy of a run in memory; a policy's own settings go in "
     "PolicySpec(config=...)", (
        "algorithm_config_overrides_per_module", "policy_map_capacity", "policy_map_cache",
        "policy_states_are_swappable")),
    (("fault_tolerance",), "volley counts each kind of actor's replacements (max_worker_restarts), not "
     "failures in a row", ("num_consecutive_env_runner_failures_tolerance",
                           "num_consecutive_worker_failures_tolerance")),
    (("debugging",), "volley writes progress.jsonl and TensorBoard events itself (volley train, or "
     "volley.run.train_until in Python)", ("logger_creator", "log_gradients", "stats_cls_lookup")),
    (("environment",), "volley takes Gymnasium environments; ALE pixel ids get DeepMind's preprocessing "
     "(atari_preprocessing)", ("auto_wrap_old_gym_envs", "preprocessor_pref")),
    (("model",), "volley's MLP is initialized orthogonally (gain √2 between layers, 0.01 for the policy "
     "head, 1 for the value head; Huang et al., 2022) and its CNN is the Nature CNN", (
        "model.fcnet_weights_initializer", "model.fcnet_weights_initializer_config",
        "model.fcnet_bias_initializer", "model.fcnet_bias_initializer_config", "model.conv_kernel_initializer",
        "model.conv_kernel_initializer_config", "model.conv_bias_initializer",
        "model.conv_bias_initializer_config", "model.no_final_linear", "model.log_std_clip_param",
        "model.custom_preprocessor", "model.encoder_latent_dim")),
]


def vectorize_mode(value: Any) -> dict[str, Any]:
    """RLlib's ``gym_env_vectorize_mode`` (a name or ``gymnasium.VectorizeMode``) as volley's."""
    mode = getattr(value, "value", value)
    if mode == "async":
        raise ConfigError("RLlib's gym_env_vectorize_mode='async' is not supported by volley: a worker steps "
                          "its environments in its own process; add workers (num_env_runners) to step more "
                          "at once")
    return {"vectorize_mode": mode}


PPO, DQN, IMPALA, SAC = ("ppo",), ("dqn",), ("impala", "appo"), ("sac",)
LSTM_INIT = ("volley's LSTM is initialized orthogonally, biases zero (CleanRL's ppo_atari_lstm); its heads "
             "as the MLP's")
TIMEOUT = "volley waits for its workers without a timeout; a dead one is replaced (fault_tolerance)"
ONLY_IF = "only used with {}, which volley refuses"

DUMP_KEYS: list[RLlibKey] = [
    same("use_kl_loss", "training", example=False),
    translated("gym_env_vectorize_mode", ("rollouts",), vectorize_mode, ("vectorize_mode",),
               "`vectorize_mode`: `'sync'` (copies stepped one after another, RLlib's default) or "
               "`'vector_entry_point'` (the environment's own vector); `'async'` refused",
               example="vector_entry_point"),
    accepted("enable_connectors", ("rollouts",), "volley has no connector pipelines, so with either value a "
             "worker filters observations (observation_filter) and clips rewards and actions alike",
             example=False),
    accepted("create_local_env_runner", ("rollouts",), "volley builds the driver's environment where it is "
             "used (evaluate(), algo.env) or with create_env_on_driver", example=False),
    refused("shuffle_batch_per_epoch", ("training",), "volley's PPO shuffles the batch every epoch",
            allowed=(True,), example=False, algorithms=PPO),
    accepted("shuffle_batch_per_epoch", ("training",), "replay minibatches are drawn at random",
             example=True, algorithms=DQN + SAC),
    refused("sample_async", ("rollouts",), "only volley's PPO samples while it learns (sample_async)",
            allowed=(False,), algorithms=("pg", "trpo", "dqn")),
    accepted("sample_async", ("rollouts",), "IMPALA's and APPO's workers always sample while the learner "
             "learns", example=True, algorithms=IMPALA),
    at_default("shuffle_batch_per_epoch", ("training",), "IMPALA and APPO take one update on each whole "
               "train batch", algorithms=IMPALA),
    *[at_default(name, ("training",), "an internal switch of RLlib's IMPALA learners and data loaders",
                 algorithms=IMPALA)
      for name in ("_minibatch_size", "num_data_loader_buffers", "_env_runners_only", "_skip_learners")],
    same("action_mask_key", "environment", example="valid_mask", note=": the key of a Dict observation holding "
         "the action mask (0/1 per logit; the network reads the other keys, a custom model all of them): masked "
         "actions get probability 0 in PPO, PG, TRPO, IMPALA and APPO and are never taken by DQN and Ape-X; an environment's "
         "`action_masks()` method (sb3-contrib's) fills it too ([extending.md](extending.md#action-masking))"),
    at_default("max_requests_in_flight_per_env_runner", ("rollouts",), "volley's synchronous algorithms "
               "send each worker one request at a time", algorithms=("ppo", "pg", "trpo", "dqn", "apex_dqn", "sac")),
    *[accepted(name, groups, TIMEOUT, example=5.0) for groups, name in (
        (("fault_tolerance",), "env_runner_health_probe_timeout_s"),
        (("fault_tolerance",), "env_runner_restore_timeout_s"),
        (("fault_tolerance",), "worker_health_probe_timeout_s"), (("fault_tolerance",), "worker_restore_timeout_s"),
        (("fault_tolerance",), "delay_between_env_runner_restarts_s"),
        (("rollouts",), "sync_filters_on_rollout_workers_timeout_s"), (("training",), "timeout_s_replay_manager"),
        (("training",), "timeout_s_sampler_manager"), (("evaluation",), "evaluation_unhealthy_workers_timeout_s"))],
    *[accepted(name, ("evaluation",), "volley's evaluation plays evaluation_duration in full", example=10)
      for name in ("evaluation_auto_duration_max_env_steps_per_sample",
                   "evaluation_auto_duration_min_env_steps_per_sample")],
    accepted("remote_env_batch_wait_ms", ("rollouts",), "volley's remote_worker_envs step in lockstep: the "
             "worker waits for every environment's step, where RLlib acts for those ready", example=10),
    accepted("enable_tf1_exec_eagerly", ("framework",), "TensorFlow 1 only", example=True),
    accepted("_enable_new_api_stack", ("experimental",), "volley has one stack, which takes the keys of both "
             "of RLlib's", example=True),
    *[accepted(name, ("framework",), ONLY_IF.format("torch_compile_learner or torch_compile_worker"),
               example="eager") for name in (
        "torch_compile_learner_dynamo_backend", "torch_compile_learner_dynamo_mode",
        "torch_compile_learner_what_to_compile", "torch_compile_worker_dynamo_backend",
        "torch_compile_worker_dynamo_mode")],
    accepted("torch_ddp_kwargs", ("learners",), ONLY_IF.format("num_learners > 1"), example={}),
    accepted("torch_skip_nan_gradients", ("learners",), "volley always skips an update whose loss or "
             "gradient is not finite (max_consecutive_skips)", example=True),
    *[accepted(f"model.{name}", ("model",), ONLY_IF.format("use_attention"), example=8) for name in (
        "attention_dim", "attention_head_dim", "attention_init_gru_gate_bias", "attention_memory_inference",
        "attention_memory_training", "attention_num_heads", "attention_num_transformer_units",
        "attention_position_wise_mlp_dim", "attention_use_n_prev_actions", "attention_use_n_prev_rewards")],
    *[refused(f"model.{name}", ("model",), LSTM_INIT, allowed=(None,), example="xavier_uniform_") for name in (
        "lstm_weights_initializer", "lstm_weights_initializer_config", "lstm_bias_initializer",
        "lstm_bias_initializer_config")],
    *[accepted(f"model.{name}", ("model",), "only used with post_fcnet_hiddens", example="orthogonal_")
      for name in ("post_fcnet_weights_initializer", "post_fcnet_weights_initializer_config",
                   "post_fcnet_bias_initializer", "post_fcnet_bias_initializer_config")],
    *[accepted(f"model.{name}", ("model",), "only RLlib's decoders (DreamerV3) use it", example="zeros_")
      for name in ("conv_transpose_kernel_initializer", "conv_transpose_kernel_initializer_config",
                   "conv_transpose_bias_initializer", "conv_transpose_bias_initializer_config")],
    *[accepted(f"model.{name}", ("model",), ONLY_IF.format("preprocessor_pref='rllib'"), example=True)
      for name in ("grayscale", "zero_mean")],
]
DUMP_KEYS += [at_default(name, groups, why) for groups, why, names in INTERNAL for name in names]
