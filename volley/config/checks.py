"""Values that follow from the keys (the network kind, the :class:`RolloutPlan` of a run) and the
checks of ranges and combinations that ``build()`` runs.
"""

from __future__ import annotations

import math
import os
import typing
from collections.abc import Collection
from typing import Any

from volley.coercion import is_search_space
from volley.config.access import DictAccess
from volley.config.model import NetworkKind, RolloutPlan
from volley.config.schema import AUTO_ENVS
from volley.errors import ConfigError, shown
from volley.named import CUSTOM_ACTION_DISTS, CUSTOM_MODELS
from volley.schedules import check_schedulable


class ConfigChecks(DictAccess):
    """Derived values, resolved once by the driver, and validation naming the offending value."""

    def search_spaces(self) -> dict[str, Any]:
        """The keys (``model.fcnet_hiddens`` for a model key) holding a Tune search space."""
        found = {}
        for key, value in self.to_dict().items():
            items = value.items() if isinstance(value, dict) and not is_search_space(value) else ()
            found.update({f"{key}.{k}": v for k, v in items if is_search_space(v)})
            if is_search_space(value):
                found[key] = value
        return found

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
        if self.remote_worker_envs and self.engine != "ray":
            raise ConfigError(f"remote_worker_envs=True puts each environment in a Ray actor: it needs "
                              f"engine='ray', got engine={self.engine!r}")
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
