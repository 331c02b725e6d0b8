"""PPO's keys. Torch-free: a config travels to every rollout worker, and unpickling it there
imports the module that defines its class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from volley.algorithms.ppo.keys import PPO_KEYS
from volley.config import AlgorithmConfig, option
from volley.errors import ConfigError
from volley.rllib_keys import RLlibKey
from volley.schedules import Schedulable, check_schedulable


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
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = PPO_KEYS

    gamma: float = option(0.98, "training", "discount factor")
    lr: Schedulable = option(2e-3, "training", "learning rate, or [[timestep, lr], ...] (RLlib's schedule)")
    train_batch_size: int = option(2048, "training", "environment steps per training iteration")
    gae_lambda: float = option(0.9, "training", "GAE lambda: 1 is Monte Carlo, 0 is one-step TD")
    clip_param: float = option(0.2, "training", "PPO's ratio clip epsilon")
    vf_clip_param: float | None = option(
        None, "training", "RLlib's value clipping: cap each step's squared value error at this, so that steps "
        "past it give no value gradient (None: off; RLlib's default is 10.0)")
    clip_range_vf: float | None = option(
        None, "training", "SB3's value clipping (CleanRL's clip_vloss): keep each value update within this "
        "distance of the sampled value, pessimistically (None: off)")
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

