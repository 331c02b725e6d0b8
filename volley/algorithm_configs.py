"""The keys of every built-in algorithm: PPO, TRPO, PG, DQN and Ape-X DQN.

Each algorithm's file holds its training step; its config lives here, apart from it, because
a config travels to every rollout worker, and unpickling it there imports the module that
defines its class. This module imports no torch, so a worker whose network acts in numpy
(:mod:`volley.acting`) starts without importing torch: about a second of each Ray worker's
start-up (benchmarks/RESULTS.md, start-up). ``build()`` imports its algorithm when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from volley.config import AlgorithmConfig, ModelConfig, NetworkKind, option
from volley.errors import ConfigError
from volley.replay import Prioritization

if TYPE_CHECKING:
    from volley.algorithms.apex_dqn import ApexDQN
    from volley.algorithms.dqn import DQN
    from volley.algorithms.pg import PG
    from volley.algorithms.ppo import PPO
    from volley.algorithms.trpo import TRPO


@dataclass(kw_only=True)
class PPOConfig(AlgorithmConfig):
    """PPO's keys on top of :class:`~volley.config.AlgorithmConfig`.

    The defaults are tuned for the time-to-475 on CartPole-v1 (a short horizon, gamma
    0.98 as in rl-zoo, lambda 0.9; a large learning rate; 16 envs x 128 steps a batch,
    shared among the workers): a median of 65k steps over 60 seeds (SB3 with rl-zoo's
    settings: 66k) and about 3 s of training on two cores. For
    MuJoCo or Atari start from gamma 0.99, gae_lambda 0.95, lr 3e-4 (see
    benchmarks/RESULTS.md for measured settings).
    """

    ALIASES: ClassVar[dict[str, str]] = {
        **AlgorithmConfig.ALIASES,
        "sgd_minibatch_size": "minibatch_size",
        "num_sgd_iter": "num_epochs",
        "lambda_": "gae_lambda",
        "lambda": "gae_lambda",
    }
    algo_name: ClassVar[str] = "ppo"

    gamma: float = option(0.98, "training", "discount factor")
    lr: float = option(2e-3, "training", "learning rate")
    train_batch_size: int = option(2048, "training", "environment steps per training iteration")
    gae_lambda: float = option(0.9, "training", "GAE lambda: 1 is Monte Carlo, 0 is one-step TD")
    clip_param: float = option(0.2, "training", "PPO's ratio clip epsilon")
    vf_clip_param: float | None = option(
        None, "training", "clip value updates to this distance from the old values (None: off)")
    vf_loss_coeff: float = option(0.5, "training", "weight of the value loss")
    entropy_coeff: float = option(0.0, "training", "weight of the entropy bonus")
    num_epochs: int = option(10, "training", "SGD passes over each batch (alias num_sgd_iter)")
    minibatch_size: int = option(512, "training", "rows per SGD step (alias sgd_minibatch_size)")
    kl_coeff: float = option(
        0.0, "training", "initial weight of the KL(old ‖ new) penalty in the loss, adapted after every "
        "iteration towards kl_target (RLlib's adaptive KL; 0: no penalty)")
    kl_target: float = option(
        0.01, "training", "the sampled KL the penalty's weight steers towards: x1.5 above 2·kl_target, "
        "x0.5 below kl_target/2")
    target_kl: float | None = option(
        None, "training", "stop the epochs once the approximate KL exceeds this (volley's early stop, "
        "not RLlib's kl_target; None: never)")
    normalize_advantages: bool = option(True, "training", "standardise advantages per minibatch")
    sample_async: bool = option(
        False, "rollouts", "Ray workers sample the next batch while the learner updates on this one "
        "(one update of policy lag; the ratio uses the sampling policy's probabilities)")

    def validate(self) -> None:
        super().validate()
        for key in ("clip_param", "num_epochs", "minibatch_size", "kl_target"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        if self.kl_coeff < 0:
            raise ConfigError(f"config key 'kl_coeff' must be >= 0, got {self.kl_coeff!r}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"config key 'gae_lambda' must be in [0, 1], got {self.gae_lambda!r}")
        if self.minibatch_size > self.train_batch_size:
            raise ConfigError(f"minibatch_size={self.minibatch_size} is larger than "
                              f"train_batch_size={self.train_batch_size}")
        if self.sample_async and (self.engine != "ray" or self.num_workers == 0):
            raise ConfigError(f"sample_async=True needs Ray workers (engine='ray', num_workers >= 1), got "
                              f"engine={self.engine!r}, num_workers={self.num_workers!r}: workers in the "
                              "learner's process cannot sample while it learns")
        if self.target_kl is not None and self.mpi_mode == "allreduce":  # ranks would stop apart
            raise ConfigError(f"target_kl={self.target_kl} cannot be used with mpi_mode='allreduce'")

    def build(self, env: Any = None) -> PPO:
        from volley.algorithms.ppo import PPO

        return PPO(self._prepare_build(env))


@dataclass(kw_only=True)
class TRPOConfig(AlgorithmConfig):
    """TRPO's keys on top of :class:`~volley.config.AlgorithmConfig`.

    The defaults are modular_rl's (max_kl 0.01, 10 CG iterations, damping 0.1, lambda
    0.97). TRPO reads ``vf_lr``, not ``lr``: the policy step size is set by ``max_kl``.
    """

    ALIASES: ClassVar[dict[str, str]] = {
        **AlgorithmConfig.ALIASES,
        "lambda_": "gae_lambda",
        "lambda": "gae_lambda",
    }
    algo_name: ClassVar[str] = "trpo"

    batch_mode: Literal["truncate_episodes", "complete_episodes"] = option(
        "complete_episodes", "rollouts", "fixed-length fragments, or whole episodes only")
    gamma: float = option(0.99, "training", "discount factor")
    train_batch_size: int = option(4000, "training", "environment steps per training iteration")
    grad_clip: float | None = option(
        None, "training", "max global gradient norm of the value-function steps (None: no clipping)")
    max_kl: float = option(0.01, "training", "trust region: the largest mean KL(old ‖ new) per step")
    cg_iters: int = option(10, "training", "conjugate-gradient iterations for the natural gradient")
    cg_damping: float = option(0.1, "training", "added to the Fisher matrix's diagonal in CG")
    gae_lambda: float = option(0.97, "training", "GAE lambda: 1 is Monte Carlo, 0 is one-step TD")
    vf_lr: float = option(1e-3, "training", "Adam learning rate of the value function")
    vf_epochs: int = option(5, "training", "passes of value-function regression over each batch")
    vf_minibatch_size: int = option(256, "training", "rows per value-function Adam step")
    max_backtracks: int = option(10, "training", "line search: try step fractions 0.5**k for k below this")
    accept_ratio: float = option(
        0.1, "training", "line search: the least actual / expected surrogate improvement accepted")
    sub_sampling_factor: int = option(
        1, "training", "the policy step (gradient, Fisher products, line search) reads every k-th row of "
        "the batch, as sb3-contrib's TRPO does: k times less work; the value fit reads every row")

    def validate(self) -> None:
        super().validate()
        for key in ("max_kl", "cg_iters", "vf_lr", "vf_epochs", "vf_minibatch_size", "max_backtracks",
                    "sub_sampling_factor"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key '{key}' must be > 0, got {getattr(self, key)!r}")
        if self.cg_damping < 0:
            raise ConfigError(f"config key 'cg_damping' must be >= 0, got {self.cg_damping!r}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"config key 'gae_lambda' must be in [0, 1], got {self.gae_lambda!r}")
        if not 0.0 <= self.accept_ratio < 1.0:
            raise ConfigError(f"config key 'accept_ratio' must be in [0, 1), got {self.accept_ratio!r}")
        if self.sub_sampling_factor >= self.train_batch_size:  # one row: no spread of advantages
            raise ConfigError(f"sub_sampling_factor={self.sub_sampling_factor} must be below "
                              f"train_batch_size={self.train_batch_size}: the policy step would read one row")
        if self.model.vf_share_layers:
            raise ConfigError("config key 'model.vf_share_layers' must be False for TRPO, got True: "
                              "TRPO trains the value network apart from the policy")

    def build(self, env: Any = None) -> TRPO:
        from volley.algorithms.trpo import TRPO

        return TRPO(self._prepare_build(env))


@dataclass(kw_only=True)
class PGConfig(AlgorithmConfig):
    """Policy-gradient keys on top of :class:`~volley.config.AlgorithmConfig`.

    The defaults are Karpathy's Pong settings (10 episodes per update, RMSProp with
    decay 0.99, one 200-unit ReLU layer); for CartPole raise ``lr`` to about 1e-2.
    """

    algo_name: ClassVar[str] = "pg"

    lr: float = option(1e-4, "training", "RMSProp learning rate")
    decay_rate: float = option(0.99, "training", "RMSProp decay of the squared-gradient average")
    batch_episodes: int = option(10, "training", "whole episodes per update")
    mode: Literal["samples", "gradients"] = option(
        "samples", "training", "'samples': workers send episodes; 'gradients': workers send gradients")
    reset_return_on_reward: bool = option(
        False, "training", "restart the discounted return at every non-zero reward (Pong: each point)")
    standardize_returns: bool = option(True, "training", "subtract the batch mean, divide by its std")
    grad_clip: float | None = option(None, "training", "max global gradient norm (None: no clipping)")
    model: ModelConfig = option(ModelConfig(fcnet_hiddens=[200], fcnet_activation="relu",
                                            vf_share_layers=True), "training",
                                "network settings (PG reads only the policy head)")

    def validate(self) -> None:
        super().validate()
        if self.batch_episodes <= 0:
            raise ConfigError(f"config key 'batch_episodes' must be > 0, got {self.batch_episodes!r}")
        if not 0.0 < self.decay_rate < 1.0:
            raise ConfigError(f"config key 'decay_rate' must be in (0, 1), got {self.decay_rate!r}")

    def build(self, env: Any = None) -> PG:
        from volley.algorithms.pg import PG

        return PG(self._prepare_build(env))


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
    lr: float = option(1e-3, "training", "Adam learning rate")
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
