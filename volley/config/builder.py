"""RLlib's builder methods (``.environment()``, ``.rollouts()``, ``.training()``, ...): sugar over the
one validated setter, each accepting the keys of its group (every key in docs/rllib.md).
"""

from __future__ import annotations

import typing
from typing import Any

from volley.config.setter import ConfigSetter


class BuilderMethods(ConfigSetter):
    """RLlib's fluent builder methods, each a group of keys for :meth:`update`."""

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
        """RLlib's ``policies``, ``policy_mapping_fn``, ``policies_to_train``, ``observation_fn`` and
        ``count_steps_by`` (docs/multi_agent.md); its policy-map cache keys are accepted at their defaults."""
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
