"""The keys of Q-learning: synchronous DQN and asynchronous Ape-X DQN.

Torch-free, as every algorithm's config module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from volley.algorithms.dqn.keys import APEX_DQN_KEYS, DQN_KEYS
from volley.algorithms.replay_keys import ApexKeys, ReplayKeys
from volley.config import ModelConfig, NetworkKind, option
from volley.errors import ConfigError
from volley.rllib_keys import RLlibKey
from volley.schedules import Schedulable


@dataclass(kw_only=True)
class DQNConfig(ReplayKeys):
    """DQN's keys on top of :class:`~volley.config.AlgorithmConfig` and the replay buffer's.

    The defaults are tuned for the time-to-475 on CartPole-v1, starting from rl-zoo's
    settings (minibatch 64, 128 gradient steps per 256 environment steps, ε decayed over
    8k steps, a target update per 256 steps) with gamma 0.98, lr 1e-3, ε down to 0.01
    and a 128x128 ReLU MLP; add ``n_step=3``, which CartPole learns with about twice as
    fast and stays stable with. For Atari start from the Nature paper: lr 1e-4, gamma
    0.99, ``train_intensity`` 0.25 with minibatch 32, ``target_update_freq`` 10_000,
    ``learning_starts`` 50_000, ε to 0.01 over 1M steps, and a buffer that fits in
    memory (each transition stores both of its observations).
    """

    ALIASES: ClassVar[dict[str, str]] = {**ReplayKeys.ALIASES, "target_network_update_freq": "target_update_freq"}
    algo_name: ClassVar[str] = "dqn"
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = DQN_KEYS

    num_envs_per_worker: int = option(8, "rollouts", "environments each worker steps as one vector")
    gamma: float = option(0.98, "training", "discount factor")
    lr: Schedulable = option(1e-3, "training", "Adam learning rate, or [[timestep, lr], ...] (RLlib's schedule)")
    grad_clip: float | None = option(10.0, "training", "max global gradient norm (None: no clipping)")
    train_batch_size: int = option(
        256, "training", "environment steps sampled per iteration (divided over the environments)")
    minibatch_size: int = option(64, "training", "transitions per gradient step, drawn from the buffer")
    train_intensity: float = option(
        0.5, "training", "gradient steps per sampled environment step; each replays minibatch_size "
        "transitions, so RLlib's training_intensity (a replay ratio) is train_intensity x minibatch_size")
    target_update_freq: int = option(
        256, "training", "environment steps between target-network updates (checked once an iteration)")
    tau: float | None = option(
        None, "training", "each target update moves the target this fraction towards the online "
        "network (Polyak); None copies it (a hard update)")
    double_q: bool = option(True, "training", "double DQN: the online network picks the target's action")
    dueling: bool = option(False, "training", "dueling heads: Q = V + A - mean(A) (Wang et al., 2016)")
    hiddens: list[int] = option(
        [], "training", "hidden layers between the body and the Q-values (RLlib's hiddens, e.g. [256]; "
        "with dueling both streams share them); []: the Q-values sit on the body")
    n_step: int = option(1, "training", "rewards summed before bootstrapping (cut at episode ends)")
    epsilon_start: float = option(1.0, "training", "exploration ε at step 0")
    epsilon_end: float = option(0.01, "training", "exploration ε after epsilon_decay_steps")
    epsilon_decay_steps: int = option(8000, "training", "environment steps over which ε decays")
    epsilon_schedule: Literal["linear", "exponential"] = option(
        "linear", "training", "ε decays linearly, or by a constant factor per step, to epsilon_end")
    model: ModelConfig = option(ModelConfig(fcnet_hiddens=[128, 128], fcnet_activation="relu"),
                                "training", "network settings (the Q-network's body)")

    @property
    def network(self) -> NetworkKind:
        return "dueling_q" if self.dueling else "q"

    @property
    def replay_batch_size(self) -> int:
        return self.minibatch_size

    @property
    def head_hiddens(self) -> list[int]:
        return self.hiddens

    def validate(self) -> None:
        super().validate()
        for key in ("minibatch_size", "train_intensity", "target_update_freq", "n_step", "epsilon_decay_steps"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        if any(width <= 0 for width in self.hiddens):
            raise ConfigError(f"config key 'hiddens' takes layer widths > 0, got {self.hiddens!r}")
        for key in ("epsilon_start", "epsilon_end"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ConfigError(f"config key '{key}' must be in [0, 1], got {getattr(self, key)!r}")
        if self.epsilon_end > self.epsilon_start:
            raise ConfigError(f"epsilon_end={self.epsilon_end!r} is larger than "
                              f"epsilon_start={self.epsilon_start!r}; ε only decays")
        if self.epsilon_schedule == "exponential" and self.epsilon_end == 0:
            raise ConfigError("epsilon_schedule='exponential' never reaches epsilon_end=0.0; "
                              "use a positive epsilon_end or the 'linear' schedule")
        if self.tau is not None and not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"config key 'tau' must be in (0, 1], got {self.tau!r}")


    def async_mode(self, **kwargs: Any) -> DQNConfig:
        """These settings as an :class:`~volley.algorithms.dqn.config.ApexDQNConfig` (asynchronous
        Ape-X DQN on Ray), with ``kwargs`` (its own keys too) set on top."""
        config = ApexDQNConfig.from_dict(self.to_dict()).update(**kwargs)
        assert isinstance(config, DQNConfig)
        return config


@dataclass(kw_only=True)
class ApexDQNConfig(ApexKeys, DQNConfig):
    """Ape-X's keys (:class:`~volley.algorithms.replay_keys.ApexKeys`) and its exploration on top
    of :class:`~volley.algorithms.dqn.config.DQNConfig`.

    The exploration and replay defaults are the paper's (a constant ``ε = 0.4`` and
    ``α = 7``, 3-step returns, prioritized replay with α 0.6 and β 0.4); the rest are
    DQN's CartPole-tuned ones, with the target copied every 128 updates (DQN's 256 steps
    at 0.5 updates a step) and weights fetched every fragment (8 envs x 16 steps). On
    CartPole-v1 with two workers (:data:`CARTPOLE`) let the base ε decay from 1 to 0 (the
    paper's constant 0.4 leaves worker 0 too random to average 475), replay uniformly, decay
    the learning rate and bound ``max_sample_lead`` where the workers and the learner share
    two cores. For
    Atari, the paper used 360 workers, lr 0.00025/4, ``target_update_freq`` 2500, a
    2M-transition buffer and 50 transitions per chunk.
    """

    algo_name: ClassVar[str] = "apex_dqn"
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = APEX_DQN_KEYS

    n_step: int = option(3, "training", "rewards summed before bootstrapping (cut at episode ends)")
    prioritized_replay: bool = option(
        True, "training", "sample by TD error (Schaul et al., 2016) instead of uniformly")
    epsilon_start: float = option(0.4, "training", "base exploration ε at step 0 (worker 0's ε)")
    epsilon_end: float = option(0.4, "training", "base exploration ε after epsilon_decay_steps")
    train_intensity: float = option(
        0.5, "training", "the most gradient steps the learner takes per sampled environment step "
        "(it waits when it is ahead)")
    target_update_freq: int = option(128, "training", "learner updates between target-network updates")
    worker_epsilon_alpha: float = option(
        7.0, "training", "Ape-X: worker i of N explores with ε^(1 + alpha·i/(N-1))")

    def validate(self) -> None:
        super().validate()
        if self.worker_epsilon_alpha < 0:
            raise ConfigError(f"config key 'worker_epsilon_alpha' must be >= 0, "
                              f"got {self.worker_epsilon_alpha!r}")

