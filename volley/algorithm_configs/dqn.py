"""The keys of Q-learning: synchronous DQN and asynchronous Ape-X DQN.

Torch-free, as every module of :mod:`volley.algorithm_configs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from volley.config import AlgorithmConfig, ModelConfig, NetworkKind, option
from volley.errors import ConfigError
from volley.replay import Prioritization
from volley.schedules import Schedulable

if TYPE_CHECKING:
    from volley.algorithms.apex_dqn import ApexDQN
    from volley.algorithms.dqn import DQN


@dataclass(kw_only=True)
class DQNConfig(AlgorithmConfig):
    """DQN's keys on top of :class:`~volley.config.AlgorithmConfig`.

    The defaults are tuned for the time-to-475 on CartPole-v1, starting from rl-zoo's
    settings (minibatch 64, 128 gradient steps per 256 environment steps, ε decayed over
    8k steps, a target update per 256 steps) with gamma 0.98, lr 1e-3, ε down to 0.01
    and a 128x128 ReLU MLP; add ``n_step=3``, which CartPole learns with about twice as
    fast and stays stable with. For Atari start from the Nature paper: lr 1e-4, gamma
    0.99, ``train_intensity`` 0.25 with minibatch 32, ``target_update_freq`` 10_000,
    ``learning_starts`` 50_000, ε to 0.01 over 1M steps, and a buffer that fits in
    memory (each transition stores both of its observations).
    """

    ALIASES: ClassVar[dict[str, str]] = {
        **AlgorithmConfig.ALIASES,
        "target_network_update_freq": "target_update_freq",
        "num_steps_sampled_before_learning_starts": "learning_starts",
    }
    algo_name: ClassVar[str] = "dqn"

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
    replay_buffer_capacity: int = option(100_000, "training", "transitions the replay buffer keeps")
    prioritized_replay: bool = option(
        False, "training", "sample by TD error (Schaul et al., 2016) instead of uniformly")
    prioritized_replay_alpha: float = option(
        0.6, "training", "prioritized replay: how much priorities count (0 is uniform)")
    prioritized_replay_beta: float = option(
        0.4, "training", "prioritized replay: importance-weight exponent (1 corrects the bias fully)")
    prioritized_replay_eps: float = option(
        1e-6, "training", "prioritized replay: added to |TD error| so no transition has priority 0")
    learning_starts: int = option(1000, "training", "transitions in the buffer before the first update")
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
    def head_hiddens(self) -> list[int]:
        return self.hiddens

    @property
    def prioritization(self) -> Prioritization | None:
        """The replay buffers' prioritized-replay settings (None: uniform replay)."""
        if not self.prioritized_replay:
            return None
        return Prioritization(self.prioritized_replay_alpha, self.prioritized_replay_beta,
                              self.prioritized_replay_eps)

    def validate(self) -> None:
        super().validate()
        for key in ("minibatch_size", "train_intensity", "replay_buffer_capacity", "target_update_freq",
                    "n_step", "epsilon_decay_steps", "prioritized_replay_eps"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        if any(width <= 0 for width in self.hiddens):
            raise ConfigError(f"config key 'hiddens' takes layer widths > 0, got {self.hiddens!r}")
        for key in ("learning_starts", "prioritized_replay_alpha", "prioritized_replay_beta"):
            if getattr(self, key) < 0:
                raise ConfigError(f"config key '{key}' must be >= 0, got {getattr(self, key)!r}")
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
        if self.learning_starts > self.replay_buffer_capacity:
            raise ConfigError(f"learning_starts={self.learning_starts} is larger than "
                              f"replay_buffer_capacity={self.replay_buffer_capacity}: "
                              "learning would never start")

    def build(self, env: Any = None) -> DQN:
        from volley.algorithms.dqn import DQN

        return DQN(self._prepare_build(env))

    def async_mode(self, **kwargs: Any) -> DQNConfig:
        """These settings as an :class:`~volley.algorithms.apex_dqn.ApexDQNConfig` (asynchronous
        Ape-X DQN on Ray), with ``kwargs`` (its own keys too) set on top."""
        config = ApexDQNConfig.from_dict(self.to_dict()).update(**kwargs)
        assert isinstance(config, DQNConfig)
        return config


@dataclass(kw_only=True)
class ApexDQNConfig(DQNConfig):
    """Ape-X's keys on top of :class:`~volley.algorithms.dqn.DQNConfig`.

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

    n_step: int = option(3, "training", "rewards summed before bootstrapping (cut at episode ends)")
    prioritized_replay: bool = option(
        True, "training", "sample by TD error (Schaul et al., 2016) instead of uniformly")
    epsilon_start: float = option(0.4, "training", "base exploration ε at step 0 (worker 0's ε)")
    epsilon_end: float = option(0.4, "training", "base exploration ε after epsilon_decay_steps")
    train_intensity: float = option(
        0.5, "training", "the most gradient steps the learner takes per sampled environment step "
        "(it waits when it is ahead)")
    target_update_freq: int = option(128, "training", "learner updates between target-network updates")
    max_sample_lead: int | None = option(
        None, "training", "environment steps the workers may sample beyond train_intensity's share "
        "of the learner's updates before they wait (None: they never wait, as in the paper; set it "
        "where workers and learner share few cores)")
    worker_epsilon_alpha: float = option(
        7.0, "training", "Ape-X: worker i of N explores with ε^(1 + alpha·i/(N-1))")
    num_replay_shards: int = option(1, "training", "replay-buffer actors; the capacity is split among them")
    weight_sync_interval: int = option(
        128, "training", "environment steps each acting worker takes between weight fetches and reports")
    weight_publish_interval: int = option(
        16, "training", "learner updates between sending weights to the parameter server")
    replay_prefetch: int = option(
        4, "training", "minibatch requests the learner keeps in flight per replay shard")
    min_time_s_per_iteration: float = option(
        1.0, "reporting", "seconds train() learns for before it returns a result")
    checkpoint_replay: bool = option(
        False, "training", "save the replay shards' contents in checkpoints (can be gigabytes)")

    def validate(self) -> None:
        super().validate()
        if self.engine != "ray":
            raise ConfigError(
                f"apex_dqn runs its acting workers, replay shards and parameter server as Ray "
                f"actors, so engine={self.engine!r} cannot host it; use engine='ray', or the "
                "synchronous algorithm 'dqn', which runs on every engine")
        if self.num_workers == 0:
            raise ConfigError("apex_dqn needs num_workers >= 1 acting workers, got num_workers=0")
        if self.observation_filter != "NoFilter":
            raise ConfigError(f"apex_dqn takes observation_filter='NoFilter', got "
                              f"{self.observation_filter!r}: workers never wait to merge statistics")
        if self.normalize_rewards:
            raise ConfigError("apex_dqn takes normalize_rewards=False, got True: workers never wait to "
                              "merge statistics (clip_rewards works)")
        for key in ("num_replay_shards", "weight_sync_interval", "weight_publish_interval",
                    "replay_prefetch", "min_time_s_per_iteration"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        if self.max_sample_lead is not None and self.max_sample_lead < 0:
            raise ConfigError(f"config key 'max_sample_lead' must be >= 0 or None, got {self.max_sample_lead!r}")
        if self.worker_epsilon_alpha < 0:
            raise ConfigError(f"config key 'worker_epsilon_alpha' must be >= 0, "
                              f"got {self.worker_epsilon_alpha!r}")

    def to_play(self) -> dict[str, Any]:
        """Only Ray can host Ape-X's actors: an embedded cluster and one acting worker, never
        started (episodes are played in this process, by the learner's network)."""
        return {**super().to_play(), "engine": "ray", "num_workers": 1}

    def build(self, env: Any = None) -> ApexDQN:
        from volley.algorithms.apex_dqn import ApexDQN

        return ApexDQN(self._prepare_build(env))
