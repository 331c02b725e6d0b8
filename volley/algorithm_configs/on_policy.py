"""The keys of the on-policy algorithms that gather samples: PPO, TRPO and PG (REINFORCE).

Torch-free, as every module of :mod:`volley.algorithm_configs`: a config travels to every
rollout worker, and unpickling it there imports the module that defines its class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from volley.config import AlgorithmConfig, ModelConfig, option
from volley.errors import ConfigError
from volley.schedules import Schedulable, check_schedulable

if TYPE_CHECKING:
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
    lr: Schedulable = option(2e-3, "training", "learning rate, or [[timestep, lr], ...] (RLlib's schedule)")
    train_batch_size: int = option(2048, "training", "environment steps per training iteration")
    gae_lambda: float = option(0.9, "training", "GAE lambda: 1 is Monte Carlo, 0 is one-step TD")
    clip_param: float = option(0.2, "training", "PPO's ratio clip epsilon")
    vf_clip_param: float | None = option(
        None, "training", "clip value updates to this distance from the old values (None: off)")
    vf_loss_coeff: float = option(0.5, "training", "weight of the value loss")
    entropy_coeff: Schedulable = option(
        0.0, "training", "weight of the entropy bonus, or [[timestep, weight], ...] (RLlib's schedule)")
    entropy_coeff_schedule: list[list[float]] | None = option(
        None, "training", "RLlib's old spelling of an entropy_coeff schedule; overrides entropy_coeff when set")
    num_epochs: int = option(10, "training", "SGD passes over each batch (alias num_sgd_iter)")
    minibatch_size: int = option(512, "training", "rows per SGD step (alias sgd_minibatch_size)")
    kl_coeff: float = option(
        0.0, "training", "initial weight of the KL(old ‖ new) penalty in the loss, adapted after every "
        "iteration towards kl_target (RLlib's adaptive KL; 0: no penalty)")
    use_kl_loss: bool = option(
        True, "training", "add kl_coeff's KL penalty to the loss (RLlib's switch; False: no penalty, "
        "whatever kl_coeff is)")
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
        check_schedulable("entropy_coeff", self.entropy_coeff)
        if self.entropy_coeff_schedule is not None:
            check_schedulable("entropy_coeff_schedule", self.entropy_coeff_schedule)
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

    lr: Schedulable = option(1e-4, "training", "RMSProp learning rate, or [[timestep, lr], ...] (RLlib's schedule)")
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
