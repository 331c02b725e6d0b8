"""TRPO's keys (torch-free, as every algorithm's config module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from volley.config import AlgorithmConfig, option
from volley.errors import ConfigError


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

