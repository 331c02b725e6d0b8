"""RLlib's spellings and what volley does with each: the shared table behind the builder and docs/rllib.md.

volley promises RLlib users that their scripts run with only the import changed. A
key RLlib and volley share under one name needs nothing; a key volley knows under
another name is an alias (``ALIASES`` of each config class). Everything else RLlib's
configs take is an entry of a table, in one of four kinds:

- **same**: a volley key under RLlib's name, listed for the docs and because RLlib
  sets it from another builder method (``env_runners(explore=...)``);
- **renamed**: RLlib's name for a volley key, set from RLlib's builder method
  (``learners(num_gpus_per_learner=1)`` sets ``num_gpus``);
- **translated**: a value that becomes several volley keys (``replay_buffer_config``,
  ``exploration_config``);
- **accepted** values and **refused** ones: where a value asks for what volley does
  anyway (``num_gpus_per_worker=0``, ``model={"use_attention": False}``) it changes nothing;
  any other value is refused in one line naming the key, saying that volley does not
  support it and what to use instead. A key is never silently dropped, and a real RLlib
  key is never "unknown".

:data:`RLLIB_KEYS` holds the keys every algorithm shares; an algorithm's own keys are its
slice, ``RLLIB_KEYS`` of its config class (written in ``volley/algorithms/<name>/keys.py``), and
:func:`rllib_key` reads a config class's slices before this table (``AlgorithmConfig.rllib_keys``).
The entries and their factories are in ``volley.rllib_keys``, beside the keys of RLlib's
``to_dict()`` that users seldom write (plumbing accepted at RLlib's own default, read
from the dump of RLlib in ``volley/rllib_keys.json``); this table takes them in, so every
key of the dump has a line. ``docs/generate.py`` writes docs/rllib.md from every entry
(``volley.algorithms.rllib_table()``, read through the registry) and the config classes,
``tests/unit/test_rllib.py`` sets every entry through its builder
method, and ``tests/unit/test_rllib_keys.py`` feeds it every key of the dump at RLlib's
default, so the page, the table, the code and RLlib cannot drift apart. RLlib's result keys
are in ``volley.rllib_results``; environment and model classes given as objects are named
by ``volley.named``. It sits in the config layer and imports nothing of volley but
``errors`` and ``rllib_keys``.
"""

from __future__ import annotations

import dataclasses
import secrets
import warnings
from collections.abc import Collection
from typing import Any, Protocol

from volley.errors import ConfigError, shown
from volley.rllib_keys import (
    DUMP_KEYS,
    RLlibKey,
    Translate,
    accepted,
    check_dict,
    refused,
    renamed,
    rllib_defaults,
    same,
    stored_as,
    sub_keys,
    translated,
    type_name,
)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"RLlib's {name} must be True or False, got {shown(value)}")
    return value


# -- translations -----------------------------------------------------------------------------


def stochastic_sampling(value: Any) -> dict[str, Any]:
    """A policy-gradient ``exploration_config``: sampling from the policy is what ``explore`` does."""
    value = check_dict("exploration_config", value)
    if "type" in value:
        type_name("exploration_config", value, ("StochasticSampling",))
    return sub_keys("exploration_config", value, {}, {"random_timesteps": (0,)})


def num_cpus_per_learner(value: Any) -> dict[str, Any]:
    return {} if value == "auto" else {"num_cpus_for_driver": value}


def random_seed(value: Any) -> dict[str, Any]:
    """RLlib's ``seed=None`` (unseeded) as a seed drawn now, which the config then keeps."""
    return {"seed": secrets.randbelow(2**31) if value is None else value}


def as_model(key: str) -> Translate:
    """A model dict under another name (``rl_module(model_config=...)``)."""
    return lambda value: {"model": check_dict(key, value)}


# -- the table ----------------------------------------------------------------------------------

DQN, SAC, IMPALA = ("dqn",), ("sac",), ("impala", "appo")  # IMPALA: both (APPOConfig extends IMPALAConfig)
ONE_LEARNER = ("volley trains one learner, in this process; for data-parallel learners use "
               "engine='mpi' with mpi_mode='allreduce' (PPO, PG)")
NO_CALLBACKS = ("volley takes RLlib's hooks as methods of a DefaultCallbacks subclass (from volley import "
                "DefaultCallbacks), given as callbacks_class, not as functions")


def _callbacks_class(value: Any) -> dict[str, Any]:
    """RLlib's ``callbacks`` (what its ``to_dict()`` holds) as ``callbacks_class``; RLlib's own
    DefaultCallbacks, its default, calls no hook: volley's None."""
    return {"callbacks_class": None if value in rllib_defaults("callbacks") else value}


NO_RL_MODULES = "volley builds its networks from model (ModelConfig); custom RLModules are not supported"
# RLlib 2.9's spec classes (RLlib 2.60 renamed them RLModuleSpec and MultiRLModuleSpec)
RLLIB_29_SPECS = ("SingleAgentRLModuleSpec", "MultiAgentRLModuleSpec")


def _old_stack_module_spec(value: Any) -> dict[str, Any]:
    """``rl_module_spec``: RLlib 2.9 builds RLModules from it only under ``_enable_new_api_stack=True``;
    by default it logs a warning and trains its old stack's ModelV2 network, which is what volley
    implements (custom_recurrent_rnn_tokenizer.py and multi_agent_custom_policy.py train so on RLlib
    2.9). A spec of RLlib 2.9's classes is ignored the same way, with a warning; any other (RLlib
    2.60's, whose RLlib builds it by default) is refused."""
    if value is None:
        return {}
    if type(value).__name__ not in RLLIB_29_SPECS:
        raise ConfigError(f"RLlib's rl_module_spec={shown(value)} is not supported by volley: {NO_RL_MODULES}")
    warnings.warn(f"RLlib's rl_module_spec={type(value).__name__}(...) is ignored, as RLlib 2.9 ignores it "
                  "unless _enable_new_api_stack=True (whose RLModules volley does not implement): the network "
                  "comes from model={...}", stacklevel=4)
    return {}


def model_key(name: str, doc: str, example: Any) -> RLlibKey:
    """A key of ``model={...}`` that is a field of volley's ``ModelConfig`` under RLlib's name."""
    return translated(f"model.{name}", ("model",), lambda value: {"model": {name: value}}, ("model",),
                      f"`model.{name}`: {doc}", example=example)


def _prev_action_reward(value: Any) -> dict[str, Any]:
    """RLlib's deprecated ``lstm_use_prev_action_reward``: both of its newer keys."""
    flag = _flag("model['lstm_use_prev_action_reward']", value)
    return {"model": {"lstm_use_prev_action": flag, "lstm_use_prev_reward": flag}}


# RLlib's newer callbacks(on_...=function) arguments (the new stack's hooks)
CALLBACKS = ("on_algorithm_init", "on_train_result", "on_evaluate_start", "on_evaluate_end",
             "on_episode_created", "on_episode_start", "on_episode_step", "on_episode_end",
             "on_sample_end", "on_environment_created", "on_checkpoint_loaded")

RLLIB_KEYS: list[RLlibKey] = [
    # environment()
    same("env", "environment", example="CartPole-v1", unset=(None,), note=" (RLlib's None keeps the one set)"),
    same("env_config", "environment", example={}),
    same("clip_rewards", "environment", example=True),
    same("clip_actions", "environment", example=True),
    same("normalize_actions", "environment", example=True, note=" (volley's default is False; RLlib's True)"),
    translated("is_atari", ("environment",),
               lambda v: {"atari_preprocessing": "deepmind" if _flag("is_atari", v) else "none"},
               ("atari_preprocessing",), "`atari_preprocessing`: True is `'deepmind'` (84x84 grayscale, 4 "
               "frames stacked), False `'none'`; it applies to ALE pixel ids", example=True),
    same("render_env", "environment", example=True, note=" (evaluation episodes recorded as videos in the run "
         "directory's videos/)"),
    accepted("disable_env_checking", ("environment",), "volley runs no environment pre-check; it checks "
             "every step for exceptions and NaN/inf instead (env_errors)", example=True),
    refused("observation_space", ("environment",), "volley reads the spaces from the environment",
            allowed=(None,), example="Box"),
    refused("action_space", ("environment",), "volley reads the spaces from the environment",
            allowed=(None,), example="Discrete"),
    same("env_task_fn", "environment", example=None, note=" (RLlib's curriculum: each TaskSettableEnv's task "
         "after every iteration)"),
    # env_runners() / rollouts()
    same("rollout_fragment_length", "rollouts", example=50),
    same("batch_mode", "rollouts", example="complete_episodes"),
    same("observation_filter", "rollouts", example="MeanStdFilter"),
    same("explore", "rollouts", example=False),
    same("horizon", "rollouts", example=200, note=" (RLlib 2.2's and older: episodes truncated after that many steps, "
         "under the environment's own limit)"),
    renamed("num_cpus_per_env_runner", "num_cpus_per_worker", "rollouts", example=1),
    refused("num_gpus_per_env_runner", ("rollouts",), "rollout workers act on the CPU; num_gpus gives "
            "the learner a GPU", allowed=(0,), example=1),
    accepted("sample_timeout_s", ("rollouts",), "volley's sampling has no timeout; a dead worker is "
             "replaced (fault_tolerance)", example=60.0),
    accepted("compress_observations", ("rollouts",), "batches travel as numpy arrays, uncompressed",
             example=True),
    same("remote_worker_envs", "rollouts", example=True,
         note=": each environment in a Ray actor of its own, stepped all at once (volley waits for all of "
              "them, RLlib for the first ready); the ray engine"),
    accepted("validate_env_runners_after_construction", ("rollouts",), "a worker that cannot start "
             "fails build() with its own error", example=True),
    accepted("validate_workers_after_construction", ("rollouts",), "a worker that cannot start fails "
             "build() with its own error", example=True),
    refused("env_to_module_connector", ("rollouts",), "volley has no connector pipelines; "
            "observation_filter and clip_rewards cover the usual ones", allowed=(None,), example="fn"),
    refused("module_to_env_connector", ("rollouts",), "volley has no connector pipelines; clip_actions "
            "and normalize_actions cover the usual ones", allowed=(None,), example="fn"),
    # resources()
    same("num_gpus", "resources", example=0),
    same("num_cpus_per_worker", "resources", example=1),
    same("num_cpus_for_driver", "resources", example=1),
    refused("num_gpus_per_worker", ("resources",), "rollout workers act on the CPU; num_gpus gives the "
            "learner a GPU", allowed=(0,), example=1),
    renamed("num_cpus_for_local_worker", "num_cpus_for_driver", "resources", example=1),
    renamed("num_cpus_for_main_process", "num_cpus_for_driver", "resources", example=1),
    refused("num_learner_workers", ("resources",), ONE_LEARNER, allowed=(0, 1), example=2),
    renamed("num_gpus_per_learner_worker", "num_gpus", "resources", example=0),
    translated("num_cpus_per_learner_worker", ("resources",), num_cpus_per_learner, ("num_cpus_for_driver",),
               "`num_cpus_for_driver` ('auto': volley chooses)", example=1),
    accepted("placement_strategy", ("resources",), "volley spreads its worker actors over the cluster "
             "(SPREAD) or places them in a Tune trial's placement group", example="PACK"),
    refused("_fake_gpus", ("resources",), "volley trains on a GPU only where torch sees one"),
    # learners()
    refused("num_learners", ("learners",), ONE_LEARNER, allowed=(0, 1), example=2),
    renamed("num_gpus_per_learner", "num_gpus", "learners", example=0),
    translated("num_cpus_per_learner", ("learners",), num_cpus_per_learner, ("num_cpus_for_driver",),
               "`num_cpus_for_driver` ('auto': volley chooses)", example=1),
    # framework()
    accepted("eager_tracing", ("framework",), "TensorFlow 2 only; RLlib ignores it under torch, as "
             "volley does", example=True),
    accepted("eager_max_retraces", ("framework",), "TensorFlow 2 only", example=20),
    accepted("tf_session_args", ("framework",), "TensorFlow only", example={}),
    accepted("local_tf_session_args", ("framework",), "TensorFlow only", example={}),
    refused("torch_compile_learner", ("framework",), "volley does not torch.compile its networks"),
    refused("torch_compile_worker", ("framework",), "volley does not torch.compile its networks"),
    # api_stack()
    accepted("enable_rl_module_and_learner", ("api_stack",), "volley has one stack, which takes the keys "
             "of both of RLlib's", example=True),
    accepted("enable_env_runner_and_connector_v2", ("api_stack",), "volley has one stack, which takes the "
             "keys of both of RLlib's", example=True),
    accepted("_enable_learner_api", ("training",), "volley has one stack, which takes the keys of both of "
             "RLlib's", example=True),
    # debugging()
    translated("seed", ("debugging",), random_seed, ("seed",), "`seed`; None (RLlib's default) draws a random "
               "seed, kept in the config, every result and checkpoints, so the run can be repeated", example=3),
    same("log_level", "debugging", example="ERROR"),
    accepted("log_sys_usage", ("debugging",), "volley reports env_steps_per_s, sample_time_s and "
             "learn_time_s in every result", example=False),
    same("logger_config", "debugging", example={"type": "ray.tune.logger.NoopLogger"}),
    refused("fake_sampler", ("debugging",), "volley always samples its environments"),
    # reporting()
    same("metrics_num_episodes_for_smoothing", "reporting", example=20),
    same("min_sample_timesteps_per_iteration", "reporting", example=1000),
    same("min_time_s_per_iteration", "reporting", example=1.0, unset=(None,),
         note=" (RLlib's None keeps volley's default)"),
    renamed("timesteps_per_iteration", "min_sample_timesteps_per_iteration", "reporting", example=1000),
    refused("min_train_timesteps_per_iteration", ("reporting",), "an iteration trains on what it "
            "sampled; use min_sample_timesteps_per_iteration", allowed=(0, None), example=1000),
    same("keep_per_episode_custom_metrics", "reporting", example=True),
    accepted("metrics_episode_collection_timeout_s", ("reporting",), "volley collects episode statistics "
             "with every sample, without a timeout", example=60.0),
    # evaluation()
    same("evaluation_interval", "evaluation", example=1),
    same("evaluation_duration", "evaluation", example=5),
    same("evaluation_duration_unit", "evaluation", example="timesteps"),
    same("evaluation_num_workers", "evaluation", example=0),
    same("evaluation_config", "evaluation", example={"explore": False}, unset=(None,),
         note=" (RLlib's None is `{}`)"),
    same("evaluation_parallel_to_training", "evaluation", example=False),
    accepted("evaluation_sample_timeout_s", ("evaluation",), "volley's evaluation has no timeout: it plays "
             "evaluation_duration in full", example=120.0),
    refused("evaluation_force_reset_envs_before_iteration", ("evaluation",), "volley's evaluation always "
            "starts fresh episodes", allowed=(True,), example=False),
    refused("always_attach_evaluation_results", ("evaluation",), "volley puts result['evaluation'] only "
            "into the iterations that evaluate (every evaluation_interval)", allowed=(False,)),
    same("custom_evaluation_function", "evaluation", example=None,
         note=" (fn(algorithm, eval_workers) -> metrics, under result['evaluation'])"),
    # exploration()
    translated("exploration_config", ("exploration",), stochastic_sampling, (),
               "`type` `'StochasticSampling'` (sampling from the policy is what `explore` does); other "
               "types refused by name", example={"type": "StochasticSampling"},
               algorithms=("ppo", "pg", "trpo", *IMPALA, *SAC)),
    # training(), every algorithm
    same("lr", "training", example=1e-3, note=": a number, or RLlib's schedule `[[timestep, lr], ...]`"),
    same("gamma", "training", example=0.95),
    same("train_batch_size", "training", example=1000, note=" (DQN: the steps sampled per iteration; RLlib's "
         "DQN train_batch_size is the replay minibatch, volley's minibatch_size; SAC's is the replay minibatch, "
         "as RLlib's)"),
    same("model", "training", example={"fcnet_hiddens": [32, 32]}),
    same("grad_clip", "training", example=1.0),
    same("lr_schedule", "training", example=[[0, 1e-3], [10_000, 1e-4]]),
    renamed("train_batch_size_per_learner", "minibatch_size", "training", algorithms=DQN, example=32,
            note=" (DQN's RLlib batch is the replay minibatch; volley's train_batch_size is the steps "
            "sampled per iteration)"),
    renamed("train_batch_size_per_learner", "train_batch_size", "training",
            algorithms=("ppo", "pg", "trpo", *IMPALA),
            example=1000),
    renamed("train_batch_size_per_learner", "train_batch_size", "training", algorithms=SAC, example=128,
            note=" (SAC's, as RLlib's: the replay minibatch)"),
    refused("grad_clip_by", ("training",), "volley clips the global gradient norm", allowed=("global_norm",),
            example="value"),
    refused("optimizer", ("training",), "volley's optimizers are fixed: Adam (PPO, DQN, TRPO's value "
            "function), RMSProp (PG); set lr and grad_clip", allowed=({},), example={"type": "SGD"}),
    refused("learner_class", ("training",), "volley's algorithms are its own classes", allowed=(None,),
            example="cls"),
    same("kl_coeff", "training", example=0.3, note=" (PPO: volley's default 0.0 is no penalty; RLlib's is 0.2)"),
    same("kl_target", "training", example=0.02),
    same("clip_param", "training", example=0.3),
    same("vf_clip_param", "training", example=10.0, note=" (RLlib's meaning, each squared value error capped; "
         "volley's default None is no cap, RLlib's is 10.0)"),
    same("vf_loss_coeff", "training", example=1.0),
    same("entropy_coeff", "training", example=0.01, note=": a number, or RLlib's schedule `[[timestep, weight], ...]`"),
    same("num_epochs", "training", example=5),
    same("minibatch_size", "training", example=128, unset=(None,), note=" (RLlib's None keeps volley's)"),
    same("entropy_coeff_schedule", "training", example=[[0, 0.01], [10_000, 0.0]]),
    same("n_step", "training", example=3),
    same("tau", "training", example=0.5),
    same("use_kl_loss", "training", example=True),
    same("target_network_update_freq", "training", example=4),
    # fault_tolerance()
    translated("ignore_worker_failures", ("fault_tolerance",),
               lambda v: {"on_worker_failure": "use_others"} if _flag("ignore_worker_failures", v) else {},
               ("on_worker_failure",),
               "True: `on_worker_failure='use_others'`", example=True),
    translated("ignore_env_runner_failures", ("fault_tolerance",),
               lambda v: {"on_worker_failure": "use_others"} if _flag("ignore_env_runner_failures", v) else {},
               ("on_worker_failure",),
               "True: `on_worker_failure='use_others'`", example=True),
    translated("restart_failed_sub_environments", ("fault_tolerance",),
               lambda v: {"env_errors": "recreate" if _flag("restart_failed_sub_environments", v) else "raise"},
               ("env_errors",),
               "`env_errors`: True `'recreate'`, False `'raise'`", example=False),
    accepted("delay_between_worker_restarts_s", ("fault_tolerance",), "volley starts a dead worker's "
             "replacement at once", example=10.0),
    # multi_agent(), callbacks(), offline_data(), checkpointing(), rl_module()
    same("policies", "multi_agent", example={"p0", "p1"}, note=" (ids, or ids to PolicySpec: see "
         "docs/multi_agent.md)"),
    same("policy_mapping_fn", "multi_agent", example="my_script:policy_mapping_fn",
         note=" (fn(agent_id, episode, worker, **kwargs), called once per agent per episode)"),
    same("policies_to_train", "multi_agent", example=["p0"]),
    same("count_steps_by", "multi_agent", example="agent_steps"),
    same("observation_fn", "multi_agent", example="my_script:observation_fn",
         note=" (fn(agent_obs, worker, base_env, policies, episode, **kw) -> agent_obs, at every reset and step; "
         "multi-agent runs only)"),
    same("callbacks_class", "callbacks", example="volley.callbacks:DefaultCallbacks",
         note=" (a DefaultCallbacks subclass, or a list of them; RLlib's old stack's hooks: see "
         "docs/extending.md)"),
    *[refused(name, ("callbacks",), NO_CALLBACKS, allowed=(None,), example="fn") for name in CALLBACKS],
    # what RLlib's to_dict() holds for them: the callbacks class, and the new stack's functions
    translated("callbacks", ("callbacks",), _callbacks_class, ("callbacks_class",),
               "`callbacks_class` (RLlib's own DefaultCallbacks: none)", example="volley.callbacks:DefaultCallbacks"),
    *[refused(f"callbacks_{name}", ("callbacks",), NO_CALLBACKS, allowed=(None,), example="fn")
      for name in (*CALLBACKS, "on_env_runners_recreated", "on_evaluate_offline_start", "on_evaluate_offline_end",
                   "on_offline_eval_runners_recreated")],
    refused("input_", ("offline_data",), "volley learns from environments it steps, not from offline "
            "data", allowed=("sampler",), example="/data/*.json"),
    refused("output", ("offline_data",), "volley writes no sample batches; progress.jsonl holds the "
            "results", allowed=(None,), example="/tmp/out"),
    refused("export_native_model_files", ("checkpointing",), "volley's checkpoints hold the weights as "
            "safetensors; algo.get_policy() is the torch module itself"),
    accepted("checkpoint_trainable_policies_only", ("checkpointing",), "volley's checkpoints hold every "
             "learned policy, trained or frozen", example=True),
    translated("model_config", ("rl_module",), as_model("model_config"), ("model",),
               "`model` (the same keys)", example={"fcnet_hiddens": [32]}),
    translated("model_config_dict", ("rl_module",), as_model("model_config_dict"), ("model",),
               "`model` (the same keys)", example={"fcnet_hiddens": [32]}),
    dataclasses.replace(
        refused("rl_module_spec", ("rl_module",), NO_RL_MODULES, allowed=(None,), example="spec"),
        translate=_old_stack_module_spec,
        volley=f"not supported (accepted: `None`): {NO_RL_MODULES}. RLlib 2.9's `SingleAgentRLModuleSpec` and "
               "`MultiAgentRLModuleSpec` are ignored with a warning, as RLlib 2.9 ignores them unless "
               "`_enable_new_api_stack=True`: its old stack trains the ModelV2 network of `model`"),
    # model={...}
    model_key("use_lstm", "an LSTM of `lstm_cell_size` between the MLP (or Nature CNN) and the heads, the "
              "value function's own unless `vf_share_layers`; trained on sequences of up to `max_seq_len` steps "
              "from the states the workers stored ([algorithms/ppo.md](algorithms/ppo.md)); PPO, PG and TRPO "
              "(DQN, Ape-X, IMPALA and APPO refuse it); every action space, action mask and custom_action_dist "
              "of the feed-forward network", example=True),
    model_key("lstm_cell_size", "the LSTM's hidden and cell size", example=64),
    model_key("max_seq_len", "the longest sequence the learner replays, for use_lstm and recurrent custom "
              "models", example=10),
    model_key("lstm_use_prev_action", "the LSTM also reads the previous action (one-hot when Discrete, a float Box's values; other spaces are refused)",
              example=True),
    model_key("lstm_use_prev_reward", "the LSTM also reads the environment's previous reward", example=True),
    refused("model.use_attention", ("model",), "volley's recurrent networks are LSTMs; use use_lstm=True "
            "(or stack frames: ALE ids stack 4)"),
    translated("model.lstm_use_prev_action_reward", ("model",), _prev_action_reward, ("model",),
               "RLlib's older key: True sets `lstm_use_prev_action` and `lstm_use_prev_reward`",
               example=True),
    refused("model.conv_filters", ("model",), "volley's image network is the Nature CNN (three conv "
            "layers and 512 units)", allowed=(None,), example=[[16, [4, 4], 2]]),
    refused("model.conv_activation", ("model",), "the Nature CNN uses relu", allowed=("relu",),
            example="tanh"),
    refused("model.post_fcnet_hiddens", ("model",), "volley's heads are linear on the MLP; add the "
            "layers to fcnet_hiddens", allowed=([],), example=[64]),
    accepted("model.post_fcnet_activation", ("model",), "only used with post_fcnet_hiddens", example="relu"),
    refused("model.head_fcnet_hiddens", ("model",), "volley's heads are linear on the MLP; add the "
            "layers to fcnet_hiddens", allowed=([],), example=[64]),
    accepted("model.head_fcnet_activation", ("model",), "only used with head_fcnet_hiddens", example="relu"),
    accepted("model.free_log_std", ("model",), "volley's Gaussian policies always learn a state-independent "
             "log std (log_std_init), which is RLlib's True; RLlib's default False makes it an output of the "
             "network", example=True),
    translated("model.custom_model", ("model",), lambda v: {"model": {"custom_model": v}}, ("model",),
               "`model.custom_model`: a `TorchModelV2` subclass (kept as `'module:QualName'`) or a name given "
               "to `ModelCatalog.register_custom_model`; its outputs are the action distribution's inputs "
               "(PPO, PG, TRPO) or the features under the Q head (DQN, Ape-X); as a policy it acts in numpy "
               "where its forward pass traces, else in torch, on every engine ([extending.md](extending.md))", example="my_model"),
    translated("model.custom_model_config", ("model",), lambda v: {"model": {"custom_model_config": v}},
               ("model",), "`model.custom_model_config`: keyword arguments of the custom model's "
               "constructor (JSON data)", example={"size": 3}),
    translated("model.custom_action_dist", ("model",), lambda v: {"model": {"custom_action_dist": v}}, ("model",),
               "`model.custom_action_dist`: an `ActionDistribution` / `TorchDistributionWrapper` subclass (kept "
               "as `'module:QualName'`) or a name given to `ModelCatalog.register_custom_action_dist`, built as "
               "`cls(outputs, model)` on the model's `required_model_output_shape` outputs; PPO, PG and TRPO "
               "learn with its `logp`, `entropy` and `kl`, workers act with its `sample()` "
               "([extending.md](extending.md#custom-action-distributions))", example="my_dist"),
    model_key("dim", "ALE pixel ids: frames resized to dim x dim, as RLlib's `wrap_deepmind` (42: RLlib's "
              "42x42 Atari setting; volley's Nature CNN reads either)", example=42),
    refused("model.framestack", ("model",), "atari_preprocessing='deepmind' stacks 4 frames",
            allowed=(True,), example=False),
]

RLLIB_KEYS += DUMP_KEYS  # the rest of what RLlib's to_dict() holds (volley/rllib_keys.py)
# RLlib's to_dict() holds these public keys under their attribute's name
RLLIB_KEYS += [stored_as(entry, f"_{entry.name}") for entry in list(RLLIB_KEYS) if entry.name in (
    "is_atari", "learner_class", "model_config", "rl_module_spec", "env_to_module_connector",
    "module_to_env_connector", "learner_connector", "train_batch_size_per_learner")]

# RLlib's model keys that change what volley builds around a custom model, so are never just passed
# to it: refused as volley's own networks refuse them (use_lstm and custom_action_dist are fields:
# ModelConfig.validate refuses use_lstm beside a custom model)
NOT_PASSED_TO_CUSTOM_MODELS = ("use_attention",)


def _passed_to_custom_models(entries: list[RLlibKey]) -> list[RLlibKey]:
    """The table with what its model keys do beside a ``custom_model`` said: volley's networks do not
    read them, a custom model gets them in its ``model_config`` (``ModelConfig.rllib_model_keys``)."""
    def passed(entry: RLlibKey) -> bool:
        return (entry.name.startswith("model.") and entry.kind in ("refused", "accepted")
                and entry.name.removeprefix("model.") not in NOT_PASSED_TO_CUSTOM_MODELS)
    return [dataclasses.replace(entry, volley=f"{entry.volley}; beside a custom_model, any value is passed "
                                "to it in model_config") if passed(entry) else entry for entry in entries]


RLLIB_KEYS = _passed_to_custom_models(RLLIB_KEYS)

BUILDER_GROUPS = ("environment", "rollouts", "resources", "learners", "framework", "api_stack", "debugging",
                  "reporting", "evaluation", "exploration", "training", "fault_tolerance", "multi_agent",
                  "callbacks", "offline_data", "checkpointing", "rl_module", "experimental", "model")


class KeyedConfig(Protocol):
    """A config class as the lookup reads it (``volley.config.AlgorithmConfig``)."""

    @classmethod
    def algo_names(cls) -> set[str]: ...

    @classmethod
    def rllib_keys(cls) -> list[RLlibKey]: ...

    @classmethod
    def field_specs(cls) -> dict[str, Any]: ...


def rllib_key(name: str, config: type[KeyedConfig], fields: Collection[str] | None = None) -> RLlibKey | None:
    """The entry for RLlib's ``name`` in ``config``'s keys (its slice, then the shared table; None
    if none); with the config's ``fields``, a ``same`` entry counts only where the config has that key."""
    algo_names = config.algo_names()
    return next((key for key in config.rllib_keys() if key.name == name and key.applies_to(algo_names)
                 and (fields is None or key.kind != "same" or key.name in fields)), None)


def takes(entry: RLlibKey, config: type[KeyedConfig]) -> bool:
    """Whether ``config`` takes RLlib's key as ``entry`` says: a ``same`` key where it is a field;
    any other where the builder finds this entry (the first of the entries for that name that applies)."""
    fields = config.field_specs()
    if entry.kind == "same":
        return entry.name in fields
    return rllib_key(entry.name, config, fields) is entry
