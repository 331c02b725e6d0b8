"""R2D2's keys: DQN's, a recurrent Q-network and replayed sequences with burn-in (RLlib 2.9's names).

Torch-free, as every algorithm's config module.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from volley.algorithms.dqn.config import DQNConfig
from volley.algorithms.replay_keys import REPLAY_FIXED, REPLAY_KEYS, replay_buffer_config
from volley.config import ModelConfig, NetworkKind, option
from volley.errors import ConfigError
from volley.rllib_keys import RLlibKey, translated

# R2D2's buffer holds sequences (RLlib's StorageUnit.SEQUENCES), with their burn-in
R2D2_REPLAY_KEYS = {**REPLAY_KEYS, "replay_burn_in": "replay_burn_in", "zero_init_states": "zero_init_states",
                    "replay_zero_init_states": "zero_init_states"}
R2D2_REPLAY_FIXED: dict[str, tuple[Any, ...]] = {
    **{k: v for k, v in REPLAY_FIXED.items() if k not in R2D2_REPLAY_KEYS},
    "storage_unit": ("sequences",), "replay_sequence_length": (-1, None)}


@dataclass(kw_only=True)
class R2D2Config(DQNConfig):
    """Recurrent replay DQN (Kapturowski et al., 2019): DQN's keys, with the replay buffer holding
    sequences of ``model.max_seq_len`` steps, each with the LSTM state it started from (or zeros,
    ``zero_init_states``), the ``replay_burn_in`` steps before it that only warm the state up, and
    the value rescaling ``h`` (``use_h_function``). ``replay_buffer_capacity`` and
    ``minibatch_size`` count sequences. The defaults learn CartPole-v1 (see
    docs/algorithms/r2d2.md); RLlib's own (lr 1e-4, gamma 0.997) are the paper's Atari ones."""

    algo_name: ClassVar[str] = "r2d2"
    RLLIB_KEYS: ClassVar[tuple[RLlibKey, ...]] = (
        translated("replay_buffer_config", ("training",),
                   functools.partial(replay_buffer_config, renames=R2D2_REPLAY_KEYS, fixed=R2D2_REPLAY_FIXED),
                   ("replay_buffer_capacity", "prioritized_replay", "prioritized_replay_alpha", "learning_starts",
                    "replay_burn_in", "zero_init_states"),
                   "as DQN's, the buffer of sequences (`storage_unit` 'sequences'), and `replay_burn_in`, "
                   "`zero_init_states` → R2D2's keys", example={"type": "MultiAgentPrioritizedReplayBuffer",
                                                                "storage_unit": "sequences", "replay_burn_in": 20,
                                                                "zero_init_states": True}),
    )

    replay_buffer_capacity: int = option(5_000, "training", "sequences the replay buffer keeps")
    learning_starts: int = option(1000, "training", "environment steps sampled before the first update")
    minibatch_size: int = option(32, "training", "sequences per gradient step, drawn from the buffer")
    train_intensity: float = option(
        0.125, "training", "gradient steps per sampled environment step; each replays minibatch_size sequences")
    gamma: float = option(0.99, "training", "discount factor")
    zero_init_states: bool = option(
        True, "training", "replay each sequence (its burn-in first) from a zero state; False: from the "
        "state the worker stored at the sequence's start (replay_burn_in must then be 0)")
    replay_burn_in: int = option(
        0, "training", "steps of the episode before each sequence that the LSTM reads, without a "
        "gradient and outside the loss, to warm its state up (fewer at an episode's start)")
    use_h_function: bool = option(
        True, "training", "rescale values by h(x) = sign(x)(sqrt(|x|+1)-1) + εx: targets are "
        "h(r + γ h⁻¹(Q̂(s', a*)))")
    h_function_epsilon: float = option(1e-3, "training", "the ε of h")
    model: ModelConfig = option(
        ModelConfig(fcnet_hiddens=[64], fcnet_activation="relu", use_lstm=True, lstm_cell_size=64),
        "training", "network settings: the body, the LSTM (use_lstm must be True) and max_seq_len")

    @property
    def network(self) -> NetworkKind:
        return "recurrent_q"

    def validate(self) -> None:
        super().validate()
        if not self.model.use_lstm:
            raise ConfigError("r2d2 trains a recurrent Q-network: set model.use_lstm=True, got False")
        if self.dueling:
            raise ConfigError("r2d2 takes dueling=False, got True: its LSTM Q-network has one head")
        if self.n_step != 1:
            raise ConfigError(f"r2d2 takes n_step=1 (it bootstraps each step of a sequence from the next), "
                              f"got {self.n_step!r}")
        if self.replay_burn_in < 0:
            raise ConfigError(f"config key 'replay_burn_in' must be >= 0, got {self.replay_burn_in!r}")
        if self.h_function_epsilon <= 0:
            raise ConfigError(f"config key 'h_function_epsilon' must be > 0, got {self.h_function_epsilon!r}")
        if not self.zero_init_states and self.replay_burn_in:
            raise ConfigError(f"zero_init_states=False with replay_burn_in={self.replay_burn_in}: volley stores "
                              "the state at each sequence's start, not at its burn-in's; set "
                              "zero_init_states=True or replay_burn_in=0")
