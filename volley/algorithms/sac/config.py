"""The keys of Soft Actor-Critic: synchronous SAC and its asynchronous (Ape-X layout) mode.

Torch-free, as every algorithm's config module.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from volley.algorithms.replay_keys import ApexKeys, ReplayKeys
from volley.algorithms.sac.keys import APEX_SAC_KEYS, SAC_KEYS
from volley.config import ModelConfig, NetworkKind, RolloutPlan, option
from volley.errors import ConfigError, shown
from volley.rllib_keys import RLlibKey
from volley.schedules import Schedulable

SAC_NETWORK = ModelConfig(fcnet_hiddens=[256, 256], fcnet_activation="relu")  # RLlib's and SB3's


def ent_coef(value: Any) -> dict[str, Any]:
    """SB3's ``ent_coef`` as our keys: ``'auto'`` learns α from 1, ``'auto_0.1'`` from 0.1, and a
    number fixes α at that value (``alpha_lr=0``)."""
    if isinstance(value, str) and (value == "auto" or value.startswith("auto_")):
        try:
            return {"initial_alpha": float(value[5:] or 1.0), "alpha_lr": None}
        except ValueError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"initial_alpha": value, "alpha_lr": 0.0}
    raise ConfigError(f"SB3's ent_coef={shown(value)} is not 'auto', 'auto_<initial α>' or a number (a fixed α)")


@dataclass(kw_only=True)
class SACConfig(ReplayKeys):
    """SAC's keys on top of :class:`~volley.config.AlgorithmConfig` and the replay buffer's, with RLlib's names and defaults
    where RLlib has them (SB3's names are aliases: ``batch_size``, ``buffer_size``,
    ``learning_starts``, ``train_freq``, ``gradient_steps``, ``learning_rate``; ``ent_coef`` is
    translated).

    By default one environment takes one step, then the learner takes one gradient step on a
    minibatch of 256 replayed transitions, as in the paper, SB3 and RLlib's tuned examples.
    Replay is uniform (the paper's and SB3's; RLlib's default buffer type is prioritized). Before
    learning starts the workers act uniformly at random (``random_warmup``, SB3's warm-up).
    """

    ALIASES: ClassVar[dict[str, str]] = {
        **ReplayKeys.ALIASES,
        "policy_model_config": "model",
        "store_buffer_in_checkpoints": "checkpoint_replay",
        "target_update_freq": "target_network_update_freq",
    }
    SB3_KEYS: ClassVar[dict[str, str | Callable[[Any], dict[str, Any]]]] = {
        "batch_size": "train_batch_size", "buffer_size": "replay_buffer_capacity",
        "train_freq": "rollout_fragment_length", "learning_rate": "lr", "ent_coef": ent_coef,
    }
    algo_name: ClassVar[str] = "sac"
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = SAC_KEYS

    normalize_actions: bool = option(
        True, "environment", "the squashed policy acts in [-1, 1], rescaled to the action space's bounds "
        "(SAC needs True)")
    clip_actions: bool = option(False, "environment", "clip continuous actions to the action space bounds "
                                "(tanh keeps them inside already)")
    num_workers: int | Literal["auto"] = option(
        0, "rollouts", "rollout workers; 0 (RLlib's SAC default) samples in the driver process: one step "
        "a round leaves remote workers nothing to overlap; 'auto' is the CPU count")
    num_envs_per_worker: int | Literal["auto"] = option(
        1, "rollouts", "environments each worker steps as one vector")
    rollout_fragment_length: int | Literal["auto"] = option(
        1, "rollouts", "steps each environment takes per sampling round, before that round's gradient steps "
        "(SB3's train_freq); 'auto' is n_step, as in RLlib")
    min_sample_timesteps_per_iteration: int = option(
        100, "reporting", "train() repeats its sampling rounds until this many environment steps were sampled")
    min_time_s_per_iteration: float = option(
        1.0, "reporting", "train() repeats its sampling rounds until this many seconds have passed")

    gamma: float = option(0.99, "training", "discount factor")
    lr: Schedulable = option(
        3e-4, "training", "Adam learning rate of the actor, the critics and the temperature, unless actor_lr, "
        "critic_lr or alpha_lr set their own; or [[timestep, lr], ...] (RLlib's schedule)")
    actor_lr: float | None = option(None, "training", "the policy's learning rate (None: lr)")
    critic_lr: float | None = option(None, "training", "the Q-networks' learning rate (None: lr)")
    alpha_lr: float | None = option(
        None, "training", "the temperature's learning rate (None: lr; 0: α stays initial_alpha)")
    grad_clip: float | None = option(None, "training", "max global gradient norm of each network (None: no "
                                     "clipping)")
    train_batch_size: int = option(
        256, "training", "transitions per gradient step, drawn from the replay buffer (RLlib's SAC "
        "train_batch_size, SB3's batch_size)")
    training_intensity: float | None = option(
        None, "training", "transitions replayed per transition sampled (RLlib's): the learner takes "
        "training_intensity / train_batch_size gradient steps per environment step; None: one per step")
    gradient_steps: int | None = option(
        None, "training", "SB3's: gradient steps per sampling round (-1: one per environment step sampled); "
        "None: from training_intensity")
    twin_q: bool = option(True, "training", "two Q-networks, the smaller target of the two (clipped double Q)")
    tau: float = option(5e-3, "training", "Polyak factor: each target update moves the target Q-networks "
                        "this fraction towards the online ones")
    target_network_update_freq: int = option(
        0, "training", "environment steps between target updates (checked once a sampling round); 0: "
        "after every gradient step")
    initial_alpha: float = option(1.0, "training", "initial entropy temperature α")
    target_entropy: float | Literal["auto"] = option(
        "auto", "training", "entropy α steers the policy towards; 'auto' is -(action dimensions)")
    n_step: int = option(1, "training", "rewards summed before bootstrapping (cut at episode ends)")
    replay_buffer_capacity: int = option(1_000_000, "training", "transitions the replay buffer keeps")
    learning_starts: int = option(1500, "training", "environment steps sampled before the first update")
    random_warmup: bool = option(
        True, "training", "act uniformly at random until learning starts (SB3's warm-up; False acts with the "
        "initial policy, as RLlib)")
    checkpoint_replay: bool = option(
        False, "training", "save the replay buffer's contents in checkpoints (RLlib's "
        "store_buffer_in_checkpoints; can be gigabytes)")
    model: ModelConfig = option(SAC_NETWORK, "training", "the policy network (RLlib's policy_model_config)")
    q_model_config: ModelConfig = option(SAC_NETWORK, "training", "each Q-network (over observation and action)")

    def update(self, **kwargs: Any) -> typing.Self:
        """As :meth:`AlgorithmConfig.update`; a dump of RLlib's SACConfig (``to_dict()``) holds both
        stacks' learning rates, the new stack's ``actor_lr`` / ``critic_lr`` / ``alpha_lr`` and the old
        stack's ``optimization``, and RLlib trains with the set its ``enable_rl_module_and_learner``
        names (RLlib 2.60's default ``actor_lr`` 3e-5 against ``optimization``'s 3e-4), so volley
        takes that set and leaves the other."""
        old = {"optimization", "optimization_config"} & kwargs.keys()
        if old and {"actor_lr", "critic_lr", "alpha_lr"} & kwargs.keys():
            unused = old if kwargs.get("enable_rl_module_and_learner", True) else {"actor_lr", "critic_lr", "alpha_lr"}
            kwargs = {key: value for key, value in kwargs.items() if key not in unused}
        return super().update(**kwargs)

    @property
    def network(self) -> NetworkKind:
        return "squashed_gaussian"

    @property
    def replay_batch_size(self) -> int:
        return self.train_batch_size

    def learning_rates(self, lr: float) -> tuple[float, float, float]:
        """The actor's, the critics' and the temperature's learning rates, ``lr`` (``lr``'s value now)
        for each whose own is unset."""
        actor, critic, alpha = (lr if own is None else own for own in (self.actor_lr, self.critic_lr, self.alpha_lr))
        return actor, critic, alpha

    def updates_per_step(self, plan: RolloutPlan) -> float:
        """Gradient steps per sampled environment step: ``training_intensity / train_batch_size``, or
        ``gradient_steps`` per sampling round of ``plan`` (every worker's fragment of every env)."""
        if self.training_intensity is not None:
            return self.training_intensity / self.train_batch_size
        if self.gradient_steps is None or self.gradient_steps == -1:
            return 1.0
        return self.gradient_steps / (plan.fragment_length * plan.num_envs_per_worker * plan.num_sampling_workers)

    def plan(self, num_workers: int | None = None) -> RolloutPlan:
        """As the base plans it, with a fragment of ``n_step`` steps for ``'auto'`` (RLlib's SAC)."""
        plan = super().plan(num_workers)
        if self.rollout_fragment_length == "auto":
            plan = RolloutPlan(plan.num_workers, plan.num_envs_per_worker, self.n_step)
        return plan

    def validate(self) -> None:
        # before the base's checks, which look a custom model up by name
        for key in ("model", "q_model_config"):
            for custom in ("custom_model", "custom_action_dist"):
                if getattr(getattr(self, key), custom) is not None:
                    raise ConfigError(f"{key}['{custom}']={getattr(getattr(self, key), custom)!r} is not supported "
                                      "by SAC: its actor and critics are volley's MLPs (fcnet_hiddens, "
                                      "fcnet_activation); custom models work with PPO, PG, TRPO, DQN, Ape-X DQN, "
                                      "IMPALA and APPO")
        super().validate()
        if self.normalize_actions is not True:
            raise ConfigError("SAC takes normalize_actions=True, got False: its tanh-squashed policy acts in "
                              "[-1, 1], which only normalize_actions rescales to the action space's bounds")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"config key 'tau' must be in (0, 1], got {self.tau!r}")
        if self.training_intensity is not None and not self.training_intensity > 0:
            raise ConfigError(f"config key 'training_intensity' must be > 0 (or None), got "
                              f"{self.training_intensity!r}")
        if self.gradient_steps is not None and self.gradient_steps <= 0 and self.gradient_steps != -1:
            raise ConfigError(f"config key 'gradient_steps' must be > 0 or -1 (or None), got {self.gradient_steps!r}")
        if self.gradient_steps is not None and self.training_intensity is not None:
            raise ConfigError(f"training_intensity={self.training_intensity!r} and gradient_steps="
                              f"{self.gradient_steps!r} both set the gradient steps per sampled step; "
                              "set one of them")
        for key in ("n_step", "initial_alpha"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        for key in ("actor_lr", "critic_lr"):
            if getattr(self, key) is not None and not getattr(self, key) > 0:
                raise ConfigError(f"config key '{key}' must be > 0 (or None), got {getattr(self, key)!r}")
        for key in ("alpha_lr", "target_network_update_freq"):
            if getattr(self, key) is not None and getattr(self, key) < 0:
                raise ConfigError(f"config key '{key}' must be >= 0, got {getattr(self, key)!r}")
        if self.rollout_fragment_length != "auto" and self.rollout_fragment_length < self.n_step:
            raise ConfigError(f"rollout_fragment_length={self.rollout_fragment_length} is smaller than n_step="
                              f"{self.n_step}: n-step returns stop at a fragment's end; set "
                              f"rollout_fragment_length >= {self.n_step}, or 'auto' (n_step, as in RLlib)")
        if self.replay_buffer_capacity < self.train_batch_size:
            raise ConfigError(f"replay_buffer_capacity={self.replay_buffer_capacity} is smaller than "
                              f"train_batch_size={self.train_batch_size}, the transitions each gradient step "
                              "draws from it")
        for i, width in enumerate(self.q_model_config.fcnet_hiddens):
            if width <= 0:
                raise ConfigError(f"q_model_config.fcnet_hiddens[{i}] must be > 0, got {width}")


    def async_mode(self, **kwargs: Any) -> SACConfig:
        """These settings as an :class:`ApexSACConfig` (asynchronous SAC on Ray), with ``kwargs``
        (its own keys too) set on top; ``num_workers=0`` (sampling in the driver, SAC's default)
        becomes ``'auto'`` acting workers."""
        settings = self.to_dict()
        if settings["num_workers"] == 0:
            del settings["num_workers"]
        config = ApexSACConfig.from_dict(settings).update(**kwargs)
        assert isinstance(config, SACConfig)
        return config


@dataclass(kw_only=True)
class ApexSACConfig(ApexKeys, SACConfig):
    """Asynchronous SAC: SAC's keys and Ape-X's layout (:class:`~volley.algorithms.replay_keys.ApexKeys`).

    Acting workers sample with the weights they last fetched into replay shards while the
    learner takes SAC's gradient steps on prefetched minibatches; it never takes more than
    its share of updates per sampled step (the same ``training_intensity`` or
    ``gradient_steps``), so the replay ratio is synchronous SAC's, without the learner ever
    waiting for a sample.
    """

    algo_name: ClassVar[str] = "apex_sac"
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = APEX_SAC_KEYS

    num_workers: int | Literal["auto"] = option(
        "auto", "rollouts", "acting workers, one CPU each; 'auto' is the CPU count")
    target_network_update_freq: int = option(
        0, "training", "environment steps between target updates (checked after every update); 0: after "
        "every gradient step")

