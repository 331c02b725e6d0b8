"""Algorithm: the learner's side of a run: workers, policy, counters, results, checkpoints.

Subclasses (one file each in ``volley/algorithms``) write only what is theirs:
``setup()`` (optimizers), ``postprocess`` (what a worker adds to its batch) and
``training_step()``, which reads like the paper's pseudocode. Everything an
iteration shares (sampling from the workers with the current weights, merging the
observation filter, episode statistics, timing) lives here.
"""

from __future__ import annotations

import math
import os
import re
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
import torch

from volley.acting import zero_actions
from volley.callbacks import EpisodeMetrics, Hooks, LearnerMetrics
from volley.catalog import build_policy
from volley.checkpoint import (
    SavedCheckpoint,
    flatten_optimizer,
    read_checkpoint,
    unflatten_optimizer,
    write_checkpoint,
)
from volley.config import AlgorithmConfig
from volley.engines import WorkerGroup, make_worker_group
from volley.envs import EnvCreator, SingleEnv, check_env_id, env_actions, registered_creator
from volley.errors import CheckpointError, ConfigError, TrainingError, VolleyError
from volley.evaluation import (
    custom_evaluation,
    episodes_of,
    recorded_evaluation,
    set_env_tasks,
    summarize_episodes,
)
from volley.models import ActorCriticPolicy, Policy
from volley.modelv2 import adds_custom_loss
from volley.optim import Optimizer
from volley.registry import REGISTRY, algorithm_class, registered_name, unknown_algorithm
from volley.rllib_results import DEFAULT_POLICY, evaluation_views, training_views
from volley.rollout.batch import Batch
from volley.rollout.filters import FilterStats, RunningStats, make_filter
from volley.rollout.sequences import Sequences
from volley.rollout.streams import EnvStreams
from volley.rollout.worker import RolloutWorker, SampleResult
from volley.schedules import value_at
from volley.spaces import action_layout

EVAL_SEED_OFFSET = 1_000_000  # evaluation environments never replay training seeds

# Every algorithm class defined so far, by its class name in lower case ("ppo", "apexdqn"): the
# subclasses that volley.registry does not name (a user's own); filled by __init_subclass__.
_REGISTRY: dict[str, type[Algorithm]] = {}


class Algorithm(ABC):
    """Base of every algorithm; build one with ``SomeConfig(...).build()``."""

    config_class: ClassVar[type[AlgorithmConfig]]
    policy: Policy  # subclasses name the kind they train (ActorCriticPolicy, QNetwork)
    # True where every update goes through reduce_gradients(), so MPI allreduce mode works
    averages_gradients: ClassVar[bool] = False
    # True where the loss adds a custom model's custom_loss() (volley.modelv2.with_custom_loss)
    adds_custom_loss: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__.lower()] = cls

    @staticmethod
    def named(name: str) -> type[Algorithm]:
        """The algorithm called ``name``, any case: a registered one (:mod:`volley.registry`: an
        ``algo_name`` such as 'ppo', RLlib's 'APEX', a class name as checkpoints record it such as
        'ApexDQN'), else a subclass defined so far, by its config's ``algo_name`` or its class name."""
        if registered_name(name) is not None:
            return cast(type[Algorithm], algorithm_class(name))
        by_algo_name = {cls.config_class.algo_name: cls for cls in _REGISTRY.values() if "config_class" in vars(cls)}
        found = by_algo_name.get(name.lower()) or _REGISTRY.get(name.lower())
        if found is None:
            raise unknown_algorithm(name, [*REGISTRY, *by_algo_name])
        return found

    @classmethod
    def get_default_config(cls) -> AlgorithmConfig:
        """A new config of this algorithm with its defaults (RLlib's classmethod)."""
        return cls.config_class()

    @classmethod
    def default_resource_request(cls, config: AlgorithmConfig | dict[str, Any]) -> Any:
        """What a Ray Tune trial of ``config`` reserves (RLlib's classmethod, for
        ``tune.with_resources(fn, PPO.default_resource_request(config))``): a Tune
        ``PlacementGroupFactory`` of one bundle for the trial and one per Ray rollout worker,
        as ``volley.tune`` reserves. The engines make it: this layer never imports Ray."""
        from volley.engines.ray_engine import as_trial, trial_resources

        if isinstance(config, dict):
            config = cls.config_class.from_dict(config)
        return trial_resources(as_trial(config))

    def __init__(self, config: AlgorithmConfig) -> None:
        config = config.copy()
        config.validate()
        if config.mpi_mode == "allreduce" and not self.averages_gradients:
            raise ConfigError(f"mpi_mode='allreduce' is for PPO and PG, not {type(self).__name__}; "
                              "use mpi_mode='gather'")
        if config.num_gpus > 0 and not torch.cuda.is_available():
            raise ConfigError(f"num_gpus={config.num_gpus:g} but torch sees no CUDA device")
        config.freeze()  # as in RLlib: a built algorithm never sees its config change
        check_env_id(config.env)
        self.config = config
        self.hooks = Hooks.of(config.callbacks_class)  # the driver's own instance (workers have theirs)
        self.callbacks = self.hooks.callbacks
        self.workers = self.make_workers(registered_creator(config.env))
        self.eval_workers: WorkerGroup | None = None
        self._driver_worker: RolloutWorker | None = None
        try:
            self._set_up(config)
        except BaseException:  # found unfit once the workers exist (a custom model, a hook that raised):
            if config.engine != "mpi":  # end them; MPI ranks fail alike (or the rank hooks abort the job)
                self.stop()
            raise

    def _set_up(self, config: AlgorithmConfig) -> None:
        """The learner's side of :meth:`__init__`, once the workers exist."""
        self.device = torch.device("cuda" if config.num_gpus > 0 and self.workers.learns else "cpu")
        self.observation_space, self.action_space = self.workers.spaces()
        torch.manual_seed(config.seed)  # after local workers exist, so every engine inits alike
        # on one thread: the orthogonal init's QR rounds differently on two, so the first run
        # of a process (torch's default threads) and later ones (the learner's) would differ
        torch.set_num_threads(1)
        self.preprocess, policy = build_policy(self.observation_space, self.action_space, config.model,
                                               config.network, config.head_hiddens,
                                               action_mask_key=config.action_mask_key)
        self.policy = policy.to(self.device)
        if adds_custom_loss(self.policy) and not self.adds_custom_loss:
            raise ConfigError(f"the custom model overrides custom_loss(), which {type(self).__name__} does not "
                              "add to its loss (PPO and PG do); train it with one of those, or drop custom_loss()")
        torch.set_num_threads(self.learner_threads())
        mask = self.preprocess.mask
        self.obs_filter = make_filter(config.observation_filter, self.preprocess.shape, None if mask is None else mask.mask)
        self.reward_stats = RunningStats(()) if config.normalize_rewards else None
        self.rng = np.random.default_rng(config.seed)
        self.iteration = 0
        self.timesteps_total = 0
        self.episodes_total = 0
        self.time_total_s = 0.0
        self.num_env_errors = 0
        self.num_skipped_updates = 0
        self._skips_in_a_row = 0
        self._returns_this_iter: list[float] = []
        self._lengths_this_iter: list[int] = []
        self._recent_returns: deque[float] = deque(maxlen=config.metrics_num_episodes_for_smoothing)
        self._recent_lengths: deque[int] = deque(maxlen=config.metrics_num_episodes_for_smoothing)
        self._episode_metrics = EpisodeMetrics(config.metrics_num_episodes_for_smoothing,
                                               config.keep_per_episode_custom_metrics)
        self._learner_metrics = LearnerMetrics()
        self._results_dir: Path | None = None  # where save() without a path writes
        self._next_sample: Callable[[], list[Any]] | None = None  # sample_ahead's batch in the making
        self._sample_time = 0.0
        self._steps_this_iter = 0
        self.setup()
        self.eval_workers = self.make_eval_workers()
        if config.create_env_on_driver and self.is_driver:
            self.driver_worker()  # now, so a broken environment fails at build time
        if self.is_driver:  # as every hook of the driver's: MPI's other ranks run only the workers' hooks
            self.hooks("on_algorithm_init", algorithm=self)

    # -- what each algorithm writes ------------------------------------------------------------

    @staticmethod
    @abstractmethod
    def postprocess(columns: dict[str, np.ndarray], config: AlgorithmConfig) -> dict[str, np.ndarray]:
        """Worker-side: add what the update needs (advantages, returns) to a time-major fragment."""

    @abstractmethod
    def setup(self) -> None:
        """Create optimizers and any other learner state."""

    @abstractmethod
    def training_step(self) -> dict[str, float]:
        """One iteration (sample, update, ...); returns the algorithm's own statistics."""

    def make_workers(self, env_creator: EnvCreator | None) -> WorkerGroup:
        """The engine's worker group; an asynchronous algorithm hosts its actors differently."""
        return make_worker_group(self.config, type(self).postprocess, env_creator)

    def learner_threads(self) -> int:
        """Torch threads of the learner: ``num_cpus_for_driver`` when set. Else one for an MLP:
        its small matrix products gain nothing from a second thread, and OpenMP threads stall
        (tens of times slower) whenever another process holds one of their cores, which on a
        small machine is often (benchmarks/RESULTS.md, learner threads). A CNN's convolutions do
        gain, so it gets every core of this machine that no worker uses while it learns
        (:meth:`concurrent_workers`). MPI ranks fill the cores already: one each."""
        if self.config.num_cpus_for_driver is not None:
            return self.config.num_cpus_for_driver
        if self.config.engine == "mpi" or not self.preprocess.is_image:
            return 1
        return max(1, (os.cpu_count() or 1) - self.concurrent_workers())

    def concurrent_workers(self) -> int:
        """Workers that keep sampling while the learner updates (synchronous ones wait for it)."""
        return 0

    def make_eval_workers(self) -> WorkerGroup | None:
        """``evaluation_num_workers`` workers built with the evaluation settings, their
        environments seeded apart from the training ones and the driver's (None for 0)."""
        cfg = self.config
        if cfg.evaluation_num_workers == 0:
            return None
        settings = cfg.evaluation_settings().update(num_workers=cfg.evaluation_num_workers)
        return make_worker_group(settings, type(self).postprocess, registered_creator(cfg.env),
                                 seed_offset=EVAL_SEED_OFFSET + 1,
                                 reserved_cpus=self.workers.plan.num_workers * cfg.num_cpus_per_worker)

    def extra_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Tensors and JSON data a subclass adds to its checkpoints (the base saves none)."""
        return {}, {}

    def load_extra_state(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:  # noqa: B027
        """Restore what :meth:`extra_state` saved; ``tensors`` holds the whole checkpoint's."""

    def optimizers(self) -> dict[str, Optimizer]:
        """Optimizers to checkpoint, by name."""
        return {"optimizer": self.optimizer} if hasattr(self, "optimizer") else {}

    # -- what they share -------------------------------------------------------------------

    @property
    def steps_sampled(self) -> int:
        """Environment steps sampled so far, this iteration's included (``timesteps_total`` counts
        them when the iteration ends)."""
        return self.timesteps_total + self._steps_this_iter

    @property
    def filter_stats(self) -> FilterStats | None:
        """The merged statistics of the observation filter and the reward normaliser (None when
        both are off): sent to the workers with every call, and saved in checkpoints."""
        obs = getattr(self.obs_filter, "stats", None)
        return None if obs is None and self.reward_stats is None else FilterStats(obs, self.reward_stats)

    def sample(self, num_episodes: int | None = None) -> Batch:
        """Every worker samples with the learner's current weights; one concatenated batch.

        With ``num_episodes``, the workers share that many whole episodes (each samples
        ``ceil(num_episodes / workers)``).
        """
        results = self._call_workers("sample", self._per_worker(num_episodes))
        self._merge(results)
        return self._learn_on(Batch.concat([result.batch for result in results]))

    def sample_ahead(self) -> Batch:
        """The batch the workers sampled while the learner was updating, and the next one started
        at once with the current weights (double-buffered sampling, as in Sample Factory and
        RLlib's APPO): the batch is one update behind the weights it is trained on."""
        def start_sampling() -> Callable[[], list[Any]]:
            return self.workers.call_async("sample", self.policy.get_flat_weights(), self.filter_stats, None)

        start = time.perf_counter()
        results = (self._next_sample or start_sampling())()
        self._merge(results)
        self._next_sample = start_sampling()
        self._sample_time += time.perf_counter() - start
        return self._learn_on(Batch.concat([result.batch for result in results]))

    def sequences(self, batch: Batch, keys: tuple[str, ...] | None = None) -> Sequences:
        """The learner's view of ``batch`` (its columns ``keys``, default all), as tensors on the
        learner's device: its rows, or a recurrent policy's padded sequences with their states and
        mask (``volley.rollout.sequences``)."""
        return Sequences.of(batch, keys).map(lambda array: torch.as_tensor(array, device=self.device))

    def _learn_on(self, batch: Batch) -> Batch:
        """The batch the learner trains on next, after the callbacks' ``on_learn_on_batch``."""
        if self.hooks.uses("on_learn_on_batch"):
            self.hooks("on_learn_on_batch", policy=self.policy, train_batch=batch,
                       result=self._learner_metrics.new())
        return batch

    def sample_and_apply(self, fn: Callable[[ActorCriticPolicy, Batch, AlgorithmConfig], Any],
                         num_episodes: int | None = None) -> list[Any]:
        """Every worker samples and returns ``fn(policy, batch, config)`` instead of its batch."""
        pairs = self._call_workers("sample_and_apply", fn, self._per_worker(num_episodes))
        self._merge([result for _, result in pairs])
        return [output for output, _ in pairs]

    def _per_worker(self, num_episodes: int | None) -> int | None:
        return None if num_episodes is None else -(-num_episodes // self.workers.num_workers)

    def _call_workers(self, method: str, *args: Any) -> list[Any]:
        """``worker.method(weights, filter_stats, *args)`` on every worker, timed as sampling."""
        start = time.perf_counter()
        results = self.workers.call(method, self.policy.get_flat_weights(), self.filter_stats, *args)
        self._sample_time += time.perf_counter() - start
        return results

    def _merge(self, results: list[SampleResult]) -> None:
        """Fold the workers' filter statistics and episode counts into the learner's."""
        filters = self.filter_stats
        for result in results:
            if filters is not None:
                filters.merge(result.filter_delta)
            self._returns_this_iter.extend(result.episode_returns.tolist())
            self._lengths_this_iter.extend(result.episode_lengths.tolist())
            self._recent_returns.extend(result.episode_returns.tolist())
            self._recent_lengths.extend(result.episode_lengths.tolist())
            self._steps_this_iter += result.env_steps
            self.num_env_errors += result.env_errors
            self._episode_metrics.add(result.episode_metrics)

    def replica_mean(self, value: float) -> float:
        """``value`` averaged over data-parallel replicas (MPI allreduce mode), else ``value``: what
        replicas adapt from their own data (PPO's KL penalty) they must adapt alike."""
        return float(self.workers.average_over_replicas(np.array([value]))[0])

    def reduce_gradients(self, parameters: Iterable[torch.Tensor]) -> None:
        """Called between ``backward()`` and the optimizer step: averages the gradients over
        data-parallel replicas where there are some (the MPI engine's allreduce mode)."""
        self.workers.average_gradients(list(parameters))

    def optimizer_step(self, optimizer: Optimizer, loss: torch.Tensor | float, grad_clip: float | None) -> bool:
        """After ``backward()``: average the gradients of ``optimizer``'s parameters over replicas,
        clip them to ``grad_clip`` and step, unless the loss or the gradient is NaN/inf (see
        :meth:`update_is_finite`).

        Every optimizer step of every algorithm goes through here. The check costs one
        gradient norm, which clipping needs anyway. Returns whether the step was taken.
        """
        params = [p for p in optimizer.params if p.grad is not None]
        self.reduce_gradients(params)  # first: replicas check the same averaged gradient
        # nn.utils.clip_grad_norm_'s arithmetic for one device and dtype, without its grouping
        # of the tensors by both on every step
        grads = [p.grad for p in params if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        if not self.update_is_finite(loss, norm):
            return False
        if grad_clip is not None:
            torch._foreach_mul_(grads, torch.clamp(grad_clip / (norm + 1e-6), max=1.0))
        optimizer.step()
        return True

    def update_is_finite(self, loss: torch.Tensor | float, gradient_norm: torch.Tensor | float) -> bool:
        """False (and the update counted in ``num_skipped_updates``) if ``loss`` or the gradient's
        norm is NaN/inf: such a step would write NaN into every weight. A TrainingError ends the
        run after ``max_consecutive_skips`` such updates in a row: the data or the step size is
        broken, not one batch. The run's checkpoints are written after good iterations only,
        so the last one stays as it was."""
        total = torch.as_tensor(loss).detach() + gradient_norm  # NaN or inf in either spreads
        if math.isfinite(float(total)):  # one device sync
            self._skips_in_a_row = 0
            return True
        self.num_skipped_updates += 1
        self._skips_in_a_row += 1
        if self._skips_in_a_row >= self.config.max_consecutive_skips:
            raise TrainingError(
                f"{self._skips_in_a_row} updates in a row had a non-finite loss ({float(loss)}) or "
                f"gradient norm ({float(gradient_norm)}), max_consecutive_skips="
                f"{self.config.max_consecutive_skips}; lower lr, scale the rewards, or check the "
                f"environment's observations (iteration {self.iteration + 1})")
        return False

    def scheduled(self, key: str) -> float:
        """``key``'s value now (``lr``, ``entropy_coeff``): a number as it is, a schedule (RLlib's
        ``[[t, v], ...]``, or the old stack's ``<key>_schedule``, which overrides it) at the
        environment steps sampled so far, this iteration's included (``volley.schedules``)."""
        old_stack = getattr(self.config, f"{key}_schedule", None)
        value = old_stack if old_stack is not None else getattr(self.config, key)
        return value_at(value, self.timesteps_total + self._steps_this_iter)

    def schedule_lr(self, optimizer: Optimizer) -> float:
        """After an update, as RLlib's learners do: ``optimizer``'s learning rate becomes ``lr`` at the
        steps sampled so far, for the next update. Returns it (RLlib reports this one)."""
        lr = self.scheduled("lr")
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def train(self) -> dict[str, Any]:
        """Run one training iteration and return its result dict: flat keys (``episode_reward_mean``,
        ``timesteps_total``, the algorithm's statistics, ...), which progress.jsonl and TensorBoard
        record, and RLlib's nested views of the same numbers, which they do not
        (``result["env_runners"]["episode_return_mean"]``, ``result["learners"]["default_policy"]``;
        see ``volley.rllib_results.training_views``).

        The training step repeats until ``min_sample_timesteps_per_iteration`` steps were sampled
        and ``min_time_s_per_iteration`` seconds passed (once by default).
        """
        start = time.perf_counter()
        self.workers.begin_iteration()
        self._sample_time, self._steps_this_iter = 0.0, 0
        self._returns_this_iter, self._lengths_this_iter = [], []
        stats = self.training_step()
        while (self._steps_this_iter < self.config.min_sample_timesteps_per_iteration
               or time.perf_counter() - start < self.config.min_time_s_per_iteration):
            stats = self.training_step()
        self.iteration += 1
        interval = self.config.evaluation_interval
        evaluation = self.evaluate() if interval and self.iteration % interval == 0 else None
        took = time.perf_counter() - start
        eval_time = evaluation["time_s"] if evaluation is not None else 0.0
        self.timesteps_total += self._steps_this_iter
        self.episodes_total += len(self._returns_this_iter)
        self.time_total_s += took
        returns = np.asarray(self._recent_returns) if self._recent_returns else np.array([math.nan])
        result = {
            "training_iteration": self.iteration,
            "seed": self.config.seed,
            "timesteps_total": self.timesteps_total,
            "timesteps_this_iter": self._steps_this_iter,
            "episodes_total": self.episodes_total,
            "episodes_this_iter": len(self._returns_this_iter),
            "episode_reward_mean": float(returns.mean()),
            "episode_reward_min": float(returns.min()),
            "episode_reward_max": float(returns.max()),
            "episode_len_mean": float(np.mean(self._recent_lengths)) if self._recent_lengths else math.nan,
            "episode_returns_this_iter": self._returns_this_iter,
            "episode_lengths_this_iter": self._lengths_this_iter,
            "time_this_iter_s": took,
            "time_total_s": self.time_total_s,
            "sample_time_s": self._sample_time,
            "learn_time_s": took - self._sample_time - eval_time,
            "env_steps_per_s": self._steps_this_iter / (took - eval_time) if took > eval_time else math.nan,
            "num_workers": self.workers.plan.num_workers,
            "num_worker_restarts": self.workers.num_restarts,
            "num_env_errors": self.num_env_errors,
            "num_skipped_updates": self.num_skipped_updates,
            **self._episode_metrics.result(self._recent_returns, self._recent_lengths),
            **stats,
        }
        if self._learner_metrics.dicts:
            result["learner_custom_metrics"] = self._learner_metrics.pop()
        if evaluation is not None:
            result["evaluation"] = {k: v for k, v in evaluation.items() if k != "evaluation"}
        result.update(training_views(result, stats))
        if self.is_driver:
            self.hooks("on_train_result", algorithm=self, result=result)
            set_env_tasks(self, result)  # RLlib's env_task_fn: the next tasks of a curriculum
        return result

    # -- using the policy ------------------------------------------------------------------

    def driver_worker(self) -> RolloutWorker:
        """The driver's own worker: one environment, seeded apart from training ones.

        It is the single mechanism behind ``evaluate()``, ``algo.env`` and evaluation
        videos; built on first use, or at build time with ``create_env_on_driver``.
        Gymnasium ids are made with ``render_mode="rgb_array"`` (drawing only on ``render()``).
        """
        if self._driver_worker is None:
            self._driver_worker = RolloutWorker(
                self.config.evaluation_settings(), 0, type(self).postprocess,
                registered_creator(self.config.env), num_envs=1, seed_offset=EVAL_SEED_OFFSET,
                render_mode="rgb_array", plan=self.workers.plan)
        return self._driver_worker

    @property
    def env(self) -> gym.Env:
        """The driver's environment, to step with ``compute_single_action`` (as in RLlib).

        Its observations are the workers' (same wrappers), so they fit the policy.
        """
        if not self.config.create_env_on_driver:
            raise ConfigError("algo.env needs create_env_on_driver=True, e.g. "
                              "config.rollouts(create_env_on_driver=True)")
        return SingleEnv(self.driver_worker().env)

    def evaluate(self, num_episodes: int | None = None,
                 before_step: Callable[[], None] | None = None) -> dict[str, Any]:
        """Play whole episodes with the evaluation settings (``evaluation_config``; the most likely
        action unless it sets ``explore``) and the current weights and filters, which it does
        not update. Rewards are the environment's own (never clipped or normalised).

        ``num_episodes`` episodes, else ``evaluation_duration`` episodes or timesteps
        (``evaluation_duration_unit``). They are shared by the ``evaluation_num_workers``
        evaluation workers (each plays its share, rounded up), or played one after another on
        the driver's environment, which is also where a ``before_step`` callback (videos grab
        their frames there) makes them go. These steps never count as training timesteps.

        Returns ``episode_reward_mean`` / ``_std`` / ``_min`` / ``_max``, ``episode_len_mean``,
        ``episodes_this_iter``, ``timesteps_this_iter`` and ``time_s``, and RLlib's views of them:
        the new stack's ``env_runners`` (``episode_return_mean``, ...) and the old stack's
        ``evaluation`` (RLlib's ``algo.evaluate()["evaluation"]["episode_reward_mean"]``).

        RLlib's ``custom_evaluation_function`` replaces these episodes with what it returns, and
        ``render_env`` plays them on the driver's environment and records a video in the run
        directory (:mod:`volley.evaluation`).
        """
        self.hooks("on_evaluate_start", algorithm=self)
        if self.config.custom_evaluation_function is not None and num_episodes is None and before_step is None:
            flat = custom_evaluation(self)
            evaluation = {**flat, "evaluation": dict(flat)}
        elif self.config.evaluation_settings().render_env and before_step is None:
            evaluation = recorded_evaluation(self, num_episodes)
        else:
            evaluation = self.play_evaluation(num_episodes, before_step)
        self.hooks("on_evaluate_end", algorithm=self, evaluation_metrics=evaluation)
        return evaluation

    def play_evaluation(self, num_episodes: int | None = None,
                        before_step: Callable[[], None] | None = None) -> dict[str, Any]:
        """volley's evaluation episodes, as :meth:`evaluate` describes them, without its hooks."""
        start = time.perf_counter()
        cfg = self.config
        by_steps = num_episodes is None and cfg.evaluation_duration_unit == "timesteps"
        amount = num_episodes or cfg.evaluation_duration
        weights = self.policy.get_flat_weights()
        if self.eval_workers is None or before_step is not None:
            results = [self.driver_worker().evaluate(weights, self.filter_stats, None if by_steps else amount,
                                                     amount if by_steps else None, before_step)]
        else:
            share = -(-amount // self.eval_workers.num_workers)
            results = self.eval_workers.call("evaluate", weights, self.filter_stats,
                                             None if by_steps else share, share if by_steps else None)
        flat = {**summarize_episodes(episodes_of(results), keep_custom_metrics=cfg.keep_per_episode_custom_metrics),
                "time_s": time.perf_counter() - start}
        return {**flat, **evaluation_views(flat)}

    def compute_single_action(self, observation: Any = None, state: list | None = None, *,
                              prev_action: Any = None, prev_reward: float | None = None,
                              explore: bool = False, full_fetch: bool = False,
                              policy_id: str = DEFAULT_POLICY) -> Any:
        """The action for one observation (the most likely one unless ``explore``), as the
        environment receives it (``normalize_actions``, ``clip_actions``), as in RLlib; drawn as
        the workers draw theirs (:meth:`Policy.act`), with a custom model in eval mode.

        A recurrent policy (``use_lstm``, a recurrent custom model) needs its ``state``: start an
        episode from ``algo.get_policy().get_initial_state()`` and pass each call the state the
        last one returned (and with ``lstm_use_prev_action`` / ``_reward`` the previous action and
        the environment's reward: ``prev_action``, ``prev_reward``; none at an episode start).
        With a state, or ``full_fetch``, it returns RLlib's ``(action, state_out, extra)``:
        ``extra`` holds ``vf_preds``, ``action_dist_inputs``, ``action_logp`` and ``action_prob``."""
        problem = _structure_problem(self.observation_space, observation)
        if problem is not None:
            hint = (f" (an environment's action_masks() is observed as {{{self.config.action_mask_key!r}: "
                    "env.action_masks(), 'observations': obs}: pass that)"
                    if self.preprocess.mask is not None else "")
            raise VolleyError(f"compute_single_action: the observation {problem}, not the structure of the "
                              f"observation space {self.observation_space}{hint}")
        policy = self.get_policy(policy_id)
        state_in = _state_of_one(state, policy.initial_state())
        prev = None
        if policy.reads_prev:
            zeros = zero_actions(self.action_space, 1)  # the flat layout of actions in batches
            action = zeros if prev_action is None else np.asarray(prev_action, zeros.dtype).reshape(zeros.shape)
            prev = (action, np.array([prev_reward or 0.0], np.float32))
        processed = self.obs_filter(self.preprocess(_batch_of_one(observation), 1), update=False)
        mask = self.preprocess.mask
        if mask is not None:  # a mask of the caller's: checked as the workers check the environments'
            mask_problem = action_layout(self.action_space).mask_problem(processed[:, mask.mask], np.ones(1, bool))
            if mask_problem is not None:
                raise VolleyError(f"compute_single_action: the action mask {processed[0, mask.mask]} (observation "
                                  f"key {self.config.action_mask_key!r}): {mask_problem[1]}")
        streams = self.__dict__.setdefault("_single_streams", EnvStreams(self.config.seed, [EVAL_SEED_OFFSET - 1]))
        training = policy.training
        policy.eval()
        try:
            actions, dist_inputs, values, state_out = policy.act(processed, state_in, streams, explore, prev)
        finally:
            policy.train(training)
        cfg = self.config
        action = env_actions(actions, self.action_space, cfg.normalize_actions, cfg.clip_actions)[0]
        if not state and not full_fetch:
            return action
        logp = policy.log_prob(dist_inputs, actions)[0]
        extra = {"vf_preds": values[0], "action_dist_inputs": dist_inputs[0], "action_logp": logp,
                 "action_prob": np.exp(logp)}
        return action, [s[0] for s in state_out], extra

    # -- RLlib's policy API: one policy, "default_policy" ------------------------------------

    def get_policy(self, policy_id: str = DEFAULT_POLICY) -> Policy:
        """The network being trained, a torch module (RLlib's ``algo.get_policy()``): its
        ``get_weights()`` are numpy arrays by name and ``set_weights()`` loads them; the next
        ``train()`` sends them to the workers. volley trains one policy, ``"default_policy"``."""
        if policy_id != DEFAULT_POLICY:
            raise ConfigError(f"no policy {policy_id!r}: volley trains one policy, {DEFAULT_POLICY!r}")
        return self.policy

    def get_weights(self, policies: Iterable[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """``{"default_policy": weights}`` as RLlib returns them, to give to ``set_weights()`` of another
        algorithm with the same network (or to save with numpy)."""
        return {policy_id: self.get_policy(policy_id).get_weights() for policy_id in policies or [DEFAULT_POLICY]}

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        """Load :meth:`get_weights` output (policy ids as keys, as in RLlib)."""
        for policy_id, policy_weights in weights.items():
            self.get_policy(policy_id).set_weights(policy_weights)

    # -- checkpoints -----------------------------------------------------------------------

    @property
    def results_dir(self) -> Path:
        """Where this run writes what is given no path (``save()``'s checkpoints, ``render_env``'s
        videos): the run directory under ``volley train`` and Tune, else, as RLlib's
        ``~/ray_results``, ``~/volley_results/<Algo>_<env>_<time>/``."""
        if self._results_dir is None:
            name = f"{type(self).__name__}_{self.config.env}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
            self._results_dir = Path.home() / "volley_results" / re.sub(r"[^\w.-]", "-", name)
        return self._results_dir

    @results_dir.setter
    def results_dir(self, path: str | Path) -> None:
        self._results_dir = Path(path)

    def save(self, path: str | Path | None = None) -> SavedCheckpoint:
        """Write a checkpoint directory at ``path`` (atomically) and return its path.

        Without ``path``, as in RLlib, it goes to ``~/volley_results/<Algo>_<env>_<time>/
        checkpoint_<iteration>``. The path returned is a string that also answers RLlib 2.x's
        ``algo.save().checkpoint.path``.
        """
        if path is None:
            path = self.results_dir / f"checkpoint_{self.iteration:06d}"
        tensors = {f"policy.{k}": v for k, v in self.policy.state_dict().items()}
        optimizers = {}
        for name, optimizer in self.optimizers().items():
            opt_tensors, optimizers[name] = flatten_optimizer(optimizer.state_dict(), name)
            tensors.update(opt_tensors)
        tensors["rng.torch"] = torch.get_rng_state()
        extra_tensors, extra = self.extra_state()
        tensors.update(extra_tensors)
        state = {
            "iteration": self.iteration, "timesteps_total": self.timesteps_total,
            "episodes_total": self.episodes_total, "time_total_s": self.time_total_s,
            "recent_returns": list(self._recent_returns), "recent_lengths": list(self._recent_lengths),
            "filter": self.obs_filter.stats.to_state() if hasattr(self.obs_filter, "stats") else None,
            "reward_filter": self.reward_stats.to_state() if self.reward_stats is not None else None,
            "rng": self.rng.bit_generator.state, "optimizers": optimizers, "extra": extra,
            "faults": {"num_worker_restarts": self.workers.num_restarts,
                       "num_env_errors": self.num_env_errors,
                       "num_skipped_updates": self.num_skipped_updates},
        }
        manifest = {"algorithm": type(self).__name__, "config": self.config.to_dict(), "state": state}
        return SavedCheckpoint(write_checkpoint(path, tensors, manifest))

    def save_to_path(self, path: str | Path | None = None) -> str:
        """RLlib's newer name of :meth:`save`."""
        return self.save(path)

    def restore_from_path(self, path: str | Path) -> None:
        """RLlib's newer name of :meth:`restore`."""
        self.restore(path)

    def restore(self, path: str | Path) -> None:
        """Load weights, optimizer, filter, counters and RNG state from a checkpoint."""
        tensors, manifest = read_checkpoint(path)
        if manifest.get("algorithm") != type(self).__name__:
            raise CheckpointError(f"checkpoint '{path}' holds a {manifest.get('algorithm')} "
                                  f"algorithm, not {type(self).__name__}")
        state = manifest["state"]
        try:
            self.policy.load_state_dict({k[len("policy."):]: v for k, v in tensors.items()
                                         if k.startswith("policy.")})
            for name, optimizer in self.optimizers().items():
                optimizer.load_state_dict(unflatten_optimizer(tensors, state["optimizers"][name], name))
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint '{path}' does not fit this model: {exc}") from None
        torch.set_rng_state(tensors["rng.torch"])
        self.rng.bit_generator.state = state["rng"]
        if state["filter"] is not None and hasattr(self.obs_filter, "stats"):
            self.obs_filter.set_stats(RunningStats.from_state(state["filter"]))
        if state.get("reward_filter") is not None and self.reward_stats is not None:
            self.reward_stats = RunningStats.from_state(state["reward_filter"])
        self.iteration = state["iteration"]
        self.timesteps_total = state["timesteps_total"]
        self.episodes_total = state["episodes_total"]
        self.time_total_s = state["time_total_s"]
        self._recent_returns.extend(state["recent_returns"])
        self._recent_lengths.extend(state["recent_lengths"])
        faults = state.get("faults", {})  # checkpoints from before volley counted faults have none
        self.workers.num_restarts = faults.get("num_worker_restarts", 0)
        self.num_env_errors = faults.get("num_env_errors", 0)
        self.num_skipped_updates = faults.get("num_skipped_updates", 0)
        self.load_extra_state(tensors, state.get("extra", {}))
        if self.is_driver:
            self.hooks("on_checkpoint_loaded", algorithm=self)

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, to_play: bool = False, **overrides: Any) -> Algorithm:
        """Build the algorithm a checkpoint was saved from (config keys overridable) and restore it;
        with ``to_play``, on the fewest processes that can host it (``AlgorithmConfig.to_play``),
        to play episodes with its policy rather than train on."""
        _, manifest = read_checkpoint(path)
        try:
            algo_cls = cls.named(str(manifest.get("algorithm")))
        except ConfigError as exc:
            raise CheckpointError(f"checkpoint '{path}' cannot be loaded: {exc}") from None
        config = algo_cls.config_class.from_dict(manifest["config"])
        config = config.update(**{**(config.to_play() if to_play else {}), **overrides})
        algo = algo_cls(config)
        try:
            algo.restore(path)
        except BaseException:
            algo.stop()
            raise
        return algo

    @property
    def is_driver(self) -> bool:
        """False on MPI ranks other than 0, which do not train: they :meth:`serve_forever`."""
        return self.workers.is_driver

    def serve_forever(self) -> None:
        """On MPI ranks other than 0: serve rank 0 (gather mode) or train in step with it
        (allreduce mode) until rank 0 calls :meth:`stop`. On the driver it returns at once.

        ``volley.run.train_until`` and ``volley train`` call it; a script does::

            with config.build() as algo:
                if algo.is_driver:
                    ...  # train, evaluate, save
                else:
                    algo.serve_forever()
        """
        self.workers.serve_forever(self)

    def stop(self) -> None:
        """Shut down every worker (and Ray, if this algorithm started it)."""
        if self.eval_workers is not None:  # first: stopping the training workers may stop Ray
            self.eval_workers.stop()
            self.eval_workers = None
        self.workers.stop()
        if self._driver_worker is not None:
            self._driver_worker.env.close()
            self._driver_worker = None

    def __enter__(self) -> Algorithm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _structure_problem(space: gym.Space, obs: Any) -> str | None:
    """How ``obs`` differs from the nesting of a Dict or Tuple ``space`` (None: it has it)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping) or set(obs) != set(space.spaces):
            keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            return f"has keys {keys}" if isinstance(obs, Mapping) else f"is a {keys}"
        return next((p for k, sub in space.spaces.items() if (p := _structure_problem(sub, obs[k])) is not None), None)
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple | list) or len(obs) != len(space.spaces):
            return f"has {len(obs)} parts" if isinstance(obs, tuple | list) else f"is a {type(obs).__name__}"
        return next((p for sub, o in zip(space.spaces, obs, strict=True)
                     if (p := _structure_problem(sub, o)) is not None), None)
    return None


def _state_of_one(state: list | None, initial: list[np.ndarray]) -> list[np.ndarray]:
    """``state`` as a batch of one, each part checked against the shape of the policy's initial
    state; a VolleyError naming the part that does not fit."""
    if initial and state is None:
        raise VolleyError(f"the policy is recurrent: compute_single_action needs its state, "
                          f"state=algo.get_policy().get_initial_state() at an episode start ({len(initial)} "
                          f"arrays of shapes {[tuple(s.shape) for s in initial]}), then the state_out it returned")
    given = list(state or [])
    if len(given) != len(initial):
        raise VolleyError(f"compute_single_action got a state of {len(given)} arrays; this policy's has "
                          f"{len(initial)} (get_policy().get_initial_state())")
    batched = []
    for k, (part, expected) in enumerate(zip(given, initial, strict=True)):
        array = np.asarray(part.detach().cpu() if hasattr(part, "detach") else part, np.float32)
        if array.shape != expected.shape:
            raise VolleyError(f"compute_single_action got state[{k}] of shape {array.shape}; this policy's "
                              f"state[{k}] has shape {expected.shape} (get_policy().get_initial_state())")
        batched.append(array[None])
    return batched


def _batch_of_one(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _batch_of_one(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_batch_of_one(v) for v in obs)
    return np.asarray(obs)[None]
