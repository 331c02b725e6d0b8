"""The schema: every key every algorithm shares, a dataclass field with a type, a default and a
one-line help text (:func:`option`); the docs are generated from them.

The rest of :class:`~volley.config.AlgorithmConfig` is layered on top, one role a module:
``setter`` (the one validated setter), ``builder`` (RLlib's builder methods), ``access``
(serialisation and RLlib's dict-like access), ``checks`` (derived values and validation).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from volley.config.model import ModelConfig
from volley.rllib_keys import RLlibKey
from volley.schedules import Schedulable

GROUPS = ("environment", "rollouts", "training", "exploration", "resources", "framework", "debugging",
          "evaluation", "reporting", "fault_tolerance", "learners", "api_stack", "rl_module", "multi_agent",
          "callbacks", "offline_data", "checkpointing", "experimental")


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
class ConfigFields:
    """The keys shared by every algorithm, with RLlib's other names for them."""

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
    remote_worker_envs: bool = option(
        False, "rollouts", "each environment of a worker in a Ray actor of its own (RLlib's key; the ray "
        "engine): the worker steps them all at once and acts for them in one forward pass, so slow "
        "environments step in parallel (each step costs a Ray call per environment, milliseconds: not "
        "for fast ones); algorithm.workers.foreach_env gives the actors, whose methods include the "
        "environment's own (env.set_task.remote(task))")
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
    logger_config: dict | None = option(
        None, "debugging", "RLlib's result logger: {'type': a ray.tune.logger.Logger class or its dotted path, "
        "'logdir': its directory (default: the run's results directory), other keys: the logger's own config}, "
        "built as type(config, logdir=logdir); its on_result() gets every train() result, flush() and close() "
        "come at stop(). Without 'type': volley's own progress.jsonl and TensorBoard, as RLlib's default")
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
        100, "reporting", "episodes averaged in episode_reward_mean (and in custom_metrics): the latest this "
        "many, or all of the iteration's where it has more (RLlib's rule)")
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

    policies: dict[str, dict[str, Any]] | None = option(
        None, "multi_agent", "RLlib's policies: a set of ids, or ids to PolicySpec(policy_class, observation_space, "
        "action_space, config); None: every agent acts with 'default_policy' (volley.policies)")
    policy_mapping_fn: str | None = option(
        None, "multi_agent", "fn(agent_id, episode, worker, **kwargs) -> policy id, called once per agent per "
        "episode (kept as 'module:name')")
    policies_to_train: list[str] | str | None = option(
        None, "multi_agent", "the policies that learn (a list, or fn(policy_id, batch) -> bool kept as "
        "'module:name'); None: every learned policy")
    observation_fn: str | None = option(
        None, "multi_agent", "fn(agent_obs, worker, base_env, policies, episode, **kw) -> agent_obs: rewrites (or "
        "drops, or adds) the agents' observations of each reset and step before the policies see them "
        "(RLlib's ObservationFunction; kept as 'module:name')")
    count_steps_by: Literal["env_steps", "agent_steps"] = option(
        "env_steps", "multi_agent", "what train_batch_size and rollout_fragment_length count in a multi-agent "
        "run: environment steps, or the steps of every agent")

    callbacks_class: str | list[str] | None = option(
        None, "callbacks", "a volley.DefaultCallbacks subclass (RLlib's hooks: custom metrics, ...), or "
        "a list of them; kept as 'module:QualName', found again in a process that has the class")
