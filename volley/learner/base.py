"""The learner's state, made once: the workers, the policy, the filters and the counters that
every role of :class:`volley.algorithm.Algorithm` reads; the methods each algorithm writes (or
overrides); the driver's own worker; and the end of a run (:meth:`LearnerBase.stop`).

The roles are mixins over this one object (``sampling``, ``step``, ``results``,
``evaluation``, ``inference``, ``state``), each in its own module, composed in
:mod:`volley.learner.loop`: algorithms call them on ``self`` (``self.sample()``,
``self.optimizer_step(...)``), as RLlib's ``Algorithm`` API has them.
"""

from __future__ import annotations

import os
import re
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import numpy as np
import torch

from volley.callbacks import Hooks
from volley.catalog import build_network
from volley.config import AlgorithmConfig
from volley.custom_metrics import EpisodeMetrics, LearnerMetrics
from volley.engines import WorkerGroup, as_placed, make_worker_group
from volley.envs import EnvCreator, check_env_id, registered_creator
from volley.errors import ConfigError
from volley.network_spec import NetworkSpec
from volley.optim import Optimizer
from volley.policies import PolicySetup
from volley.rollout.filters import RunningStats, make_filter
from volley.rollout.worker import RolloutWorker
from volley.torch_networks.custom_model import adds_custom_loss
from volley.torch_networks.policy import Policy

EVAL_SEED_OFFSET = 1_000_000  # evaluation environments never replay training seeds


class LocalWorker:
    """RLlib's local worker as a script reaches it through ``algo.workers.local_worker()``: the
    driver's environment (``algo.env``) and the policy."""

    def __init__(self, algorithm: Any) -> None:
        self.algorithm = algorithm

    @property
    def env(self) -> Any:
        return self.algorithm.env

    def get_policy(self, policy_id: str = "default_policy") -> Any:
        return self.algorithm.get_policy(policy_id)


class LearnerBase(ABC):
    """What every role of the learner reads, built by :meth:`__init__`."""

    policy: Policy  # subclasses name the kind they train (ActorCriticPolicy, QNetwork)
    # True where every update goes through reduce_gradients(), so MPI allreduce mode works
    config_class: ClassVar[type[AlgorithmConfig]]  # each algorithm's own
    averages_gradients: ClassVar[bool] = False
    # True where the loss adds a custom model's custom_loss() (volley.torch_networks.custom_model.with_custom_loss)
    adds_custom_loss: ClassVar[bool] = False
    # how a multi-agent run (volley.learner.multi_agent) feeds each policy's learner of the algorithm:
    # "sample", its part of each synchronous sample of the run's workers; "stream", its part of each train
    # batch of a stream of fragments (its learner updates one at a time: StreamLearner); None where a
    # multi-agent run cannot feed it yet (asynchronous actors and replay shards; a postprocess that reads
    # a single-agent worker's fragments as they are), and refuses it
    multi_agent_feed: ClassVar[Literal["sample", "stream"] | None] = "sample"
    # logger_config's logger, built at the first result (None until then, and where stop() follows
    # a construction that failed part way)
    _result_logger: Any = None

    def __init__(self, config: AlgorithmConfig | dict[str, Any] | None = None, env: Any = None, *,
                 workers: WorkerGroup | None = None) -> None:
        """Build from ``config``; as RLlib's, it may be a dict of keys (``PPO(config=d)``) or missing
        (``PPO(env="CartPole-v1")``: the defaults), and ``env`` sets the environment. ``workers``: a
        group to learn from instead of the one the config describes (a multi-agent run gives each
        policy's learner its view of the run's workers: :mod:`volley.learner.multi_agent`)."""
        if not isinstance(config, AlgorithmConfig):
            config = type(self).config_class().update_from_dict(config or {})
        config = config.copy(copy_frozen=False) if env is not None else config.copy()
        if env is not None:
            config.environment(env)
        config = as_placed(config)  # a Tune function trial's PPO(config=d) fits the trial's bundles
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
        self.workers = workers or self.make_workers(registered_creator(config.env))
        self.workers.local = LocalWorker(self)
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
        if config.observation_fn is not None:
            raise ConfigError(f"observation_fn rewrites the observations of a multi-agent environment's agents, and "
                              f"'{config.env}' is a single-agent environment: wrap it in a gymnasium.ObservationWrapper")
        self.device = torch.device("cuda" if config.num_gpus > 0 and self.workers.learns else "cpu")
        self.observation_space, self.action_space = self.workers.spaces()
        torch.manual_seed(config.seed)  # after local workers exist, so every engine inits alike
        # on one thread: the orthogonal init's QR rounds differently on two, so the first run
        # of a process (torch's default threads) and later ones (the learner's) would differ
        torch.set_num_threads(1)
        # the policy the workers were sent, bound to their spaces
        self.network_spec = NetworkSpec.of(config).with_spaces(self.observation_space, self.action_space)
        self.preprocess = self.network_spec.observation
        self.policy = build_network(self.network_spec).to(self.device)
        if adds_custom_loss(self.policy) and not self.adds_custom_loss:
            raise ConfigError(f"the custom model overrides custom_loss(), which {type(self).__name__} does not "
                              "add to its loss (PPO and PG do); train it with one of those, or drop custom_loss()")
        torch.set_num_threads(self.learner_threads())
        self.obs_filter = make_filter(config.observation_filter, self.preprocess)
        self.reward_stats = RunningStats(()) if config.normalize_rewards else None
        self._start_counters(config)
        self.setup()
        self._finish_set_up(config)

    def _start_counters(self, config: AlgorithmConfig) -> None:
        """The run's counters and random generator, and the episodes it keeps for its statistics."""
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

    def _finish_set_up(self, config: AlgorithmConfig) -> None:
        """The evaluation workers, the driver's environment where asked for, and the callbacks'
        ``on_algorithm_init``."""
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

    def make_workers(self, env_creator: EnvCreator | None, setup: PolicySetup | None = None) -> WorkerGroup:
        """The engine's worker group (multi-agent workers with a multi-agent run's ``setup``); an
        asynchronous algorithm hosts its actors differently."""
        return make_worker_group(self.config, type(self).postprocess, env_creator, setup=setup)

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

    # -- the driver's own worker and the run's directory -------------------------------------

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
                render_mode="rgb_array", plan=self.workers.plan, network_spec=self.network_spec)
        return self._driver_worker

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

    # -- MPI's ranks and the end of a run ---------------------------------------------------

    @property
    def is_driver(self) -> bool:
        """False on MPI ranks other than 0, which do not train: they :meth:`serve_forever`."""
        return self.workers.is_driver

    def stop(self) -> None:
        """Close logger_config's logger; shut down every worker (and Ray, if this algorithm started it)."""
        if self._result_logger is not None:
            self._result_logger.flush()
            self._result_logger.close()
            self._result_logger = None
        if self.eval_workers is not None:  # first: stopping the training workers may stop Ray
            self.eval_workers.stop()
            self.eval_workers = None
        self.workers.stop()
        if self._driver_worker is not None:
            self._driver_worker.env.close()
            self._driver_worker = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
