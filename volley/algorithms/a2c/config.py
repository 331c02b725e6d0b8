"""A2C's keys, RLlib 2.9's names (``A2CConfig``: A3C's keys and ``microbatch_size``) with
Stable-Baselines3's defaults. Torch-free, as every algorithm's config module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from volley.config import AlgorithmConfig, option
from volley.errors import ConfigError
from volley.schedules import Schedulable, check_schedulable


@dataclass(kw_only=True)
class A2CConfig(AlgorithmConfig):
    """A2C's keys on top of :class:`~volley.config.AlgorithmConfig`.

    The defaults are SB3's A2C (8 environments x 5 steps a batch, one RMSProp step on it, lr 7e-4,
    lambda 1: 5-step returns, value weight 0.5, gradient norm 0.5), which rl-zoo runs on CartPole
    unchanged. RLlib 2.9's differ (lr 1e-4, entropy 0.01, gradient norm 40, fragments of 10) and
    its loss sums over the batch where SB3's and volley's average.
    """

    ALIASES: ClassVar[dict[str, str]] = {**AlgorithmConfig.ALIASES, "lambda_": "gae_lambda", "lambda": "gae_lambda"}
    algo_name: ClassVar[str] = "a2c"

    num_envs_per_worker: int | Literal["auto"] = option(
        8, "rollouts", "environments each worker steps as one vector ('auto': volley's 16 shared among workers)")
    lr: Schedulable = option(7e-4, "training", "RMSProp learning rate, or [[timestep, lr], ...] (RLlib's schedule)")
    train_batch_size: int = option(40, "training", "environment steps per update (8 environments x 5 steps)")
    gae_lambda: float = option(1.0, "training", "GAE lambda: 1 is the n-step return of each fragment")
    vf_loss_coeff: float = option(0.5, "training", "weight of the value loss (the mean squared error)")
    entropy_coeff: Schedulable = option(
        0.0, "training", "weight of the entropy bonus, or [[timestep, weight], ...] (RLlib's schedule)")
    entropy_coeff_schedule: list[list[float]] | None = option(
        None, "training", "RLlib's old spelling of an entropy_coeff schedule; overrides entropy_coeff when set")
    decay_rate: float = option(0.99, "training", "RMSProp decay of the squared-gradient average")
    microbatch_size: int | None = option(
        None, "training", "accumulate the gradient over microbatches of this many rows, one step per train "
        "batch (RLlib's; None: the whole batch at once)")
    use_critic: bool = option(True, "training", "RLlib's switch; volley's A2C always learns a value function")
    use_gae: bool = option(True, "training", "RLlib's switch; volley's A2C always uses GAE (lambda 1: n-step returns)")

    def validate(self) -> None:
        super().validate()
        for key in ("use_critic", "use_gae"):
            if not getattr(self, key):
                raise ConfigError(f"config key '{key}' must be True for A2C, got False: volley's A2C learns "
                                  "a value function and takes GAE advantages (gae_lambda=1.0: n-step returns)")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"config key 'gae_lambda' must be in [0, 1], got {self.gae_lambda!r}")
        if not 0.0 < self.decay_rate < 1.0:
            raise ConfigError(f"config key 'decay_rate' must be in (0, 1), got {self.decay_rate!r}")
        check_schedulable("entropy_coeff", self.entropy_coeff)
        if self.entropy_coeff_schedule is not None:
            check_schedulable("entropy_coeff_schedule", self.entropy_coeff_schedule)
        if self.microbatch_size is not None and not 0 < self.microbatch_size <= self.train_batch_size:
            raise ConfigError(f"config key 'microbatch_size' must be in [1, train_batch_size="
                              f"{self.train_batch_size}], got {self.microbatch_size!r}")
