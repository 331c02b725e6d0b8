"""PG's (REINFORCE's) keys (torch-free, as every algorithm's config module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from volley.config import AlgorithmConfig, ModelConfig, option
from volley.errors import ConfigError
from volley.schedules import Schedulable


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
    standardize_returns: bool = option(True, "training", "subtract the returns' mean, divide by their std")
    standardize_over: Literal["batch", "episode"] = option(
        "batch", "training", "standardise over the whole batch, or each episode on its own (Karpathy's script)")
    grad_clip: float | None = option(None, "training", "max global gradient norm (None: no clipping)")
    model: ModelConfig = option(ModelConfig(fcnet_hiddens=[200], fcnet_activation="relu",
                                            vf_share_layers=True), "training",
                                "network settings (PG reads only the policy head)")

    @property
    def standardizes_batch(self) -> bool:
        """Whether the learner standardises the returns with the whole batch's mean and deviation."""
        return self.standardize_returns and self.standardize_over == "batch"

    def validate(self) -> None:
        super().validate()
        if self.batch_episodes <= 0:
            raise ConfigError(f"config key 'batch_episodes' must be > 0, got {self.batch_episodes!r}")
        if not 0.0 < self.decay_rate < 1.0:
            raise ConfigError(f"config key 'decay_rate' must be in (0, 1), got {self.decay_rate!r}")

