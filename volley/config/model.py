"""The types a config holds and resolves: the network's settings (:class:`ModelConfig`, RLlib's
model dict) and the sizes of a run (:class:`RolloutPlan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from volley.coercion import FieldsAsDict
from volley.errors import ConfigError

# The network workers act with: an actor-critic, Q-values with a linear or dueling head (DQN), or
# a tanh-squashed Gaussian policy (SAC's actor; its critics stay on the learner)
NetworkKind = Literal["actor_critic", "q", "dueling_q", "recurrent_q", "squashed_gaussian"]

# the smallest frames the Nature CNN takes (8x8 stride 4, 4x4 stride 2, 3x3)
MIN_DIM = 36


@dataclass(kw_only=True)
class ModelConfig(FieldsAsDict):
    """The policy/value network (``config.training(model={...})``); reads and writes like RLlib's
    model dict too (``config.model["use_lstm"] = True``)."""

    DICT_NAME: ClassVar[str] = "model"

    fcnet_hiddens: list[int] = field(default_factory=lambda: [64, 64],
                                     metadata={"help": "hidden layer sizes of the MLP"})
    fcnet_activation: Literal["tanh", "relu", "linear"] = field(
        default="tanh", metadata={"help": "activation between MLP layers ('linear': none)"})
    vf_share_layers: bool = field(
        default=False, metadata={"help": "share the MLP body between policy and value (CNNs always share)"})
    log_std_init: float = field(
        default=0.0, metadata={"help": "initial log standard deviation of a Gaussian policy"})
    use_lstm: bool = field(
        default=False, metadata={"help": "an LSTM between the MLP or CNN and the heads (RLlib's key; PPO, "
                                 "PG, TRPO): trained on sequences of at most max_seq_len steps"})
    lstm_cell_size: int = field(default=256, metadata={"help": "the LSTM's hidden and cell size"})
    max_seq_len: int = field(
        default=20, metadata={"help": "steps per training sequence of a recurrent network (use_lstm or a "
                              "recurrent custom model): the learner unrolls it from the state stored there"})
    lstm_use_prev_action: bool = field(
        default=False, metadata={"help": "the LSTM also reads the previous action (one-hot for Discrete; a float Box's values)"})
    lstm_use_prev_reward: bool = field(
        default=False, metadata={"help": "the LSTM also reads the previous reward (the environment's)"})
    custom_model: str | None = field(
        default=None, metadata={"help": "a TorchModelV2 class (kept as 'module:QualName') or a name given to "
                                "ModelCatalog.register_custom_model; None: volley's own network"})
    custom_model_config: dict = field(
        default_factory=dict, metadata={"help": "keyword arguments of the custom model's constructor (JSON data)"})
    custom_action_dist: str | None = field(
        default=None, metadata={"help": "an ActionDistribution class (kept as 'module:QualName') or a name given "
                                "to ModelCatalog.register_custom_action_dist, built on the outputs (PPO, PG, "
                                "TRPO); None: volley's distribution for the action space"})
    rllib_model_keys: dict = field(
        default_factory=dict, metadata={"help": "RLlib's other model keys set beside a custom_model "
                                        "(conv_filters, post_fcnet_hiddens, ...): passed in its model_config"})
    dim: int = field(
        default=84, metadata={"help": "ALE pixel ids with atari_preprocessing='deepmind': frames resized to "
                              "dim x dim (RLlib's key; 42 is RLlib's small Atari setting)"})
    fcnet_init: Literal["orthogonal", "normal"] = field(
        default="orthogonal",
        metadata={"help": "weights of the MLP and the heads: 'orthogonal' (gain √2, policy head 0.01; "
                          "PPO's) or 'normal' (N(0, 1/fan_in) on every layer; Karpathy's Pong)"})

    def extra_items(self) -> dict[str, Any]:
        """RLlib's other model keys set beside a custom model: ``config.model[key]`` reads them too."""
        return self.rllib_model_keys

    def validate(self, algo_name: str, network: NetworkKind) -> None:
        """A ConfigError naming the first model key out of range or unfit for ``algo_name``."""
        for i, width in enumerate(self.fcnet_hiddens):
            if width <= 0:
                raise ConfigError(f"model.fcnet_hiddens[{i}] must be > 0, got {width}")
        if self.dim < MIN_DIM:
            raise ConfigError(f"model.dim={self.dim} is too small for the Nature CNN's three conv layers: "
                              f"use {MIN_DIM} or more (RLlib's 42, or 84)")
        for key in ("lstm_cell_size", "max_seq_len"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"config key 'model.{key}' must be > 0, got {getattr(self, key)!r}")
        if self.use_lstm and network not in ("actor_critic", "recurrent_q"):
            raise ConfigError(f"model.use_lstm=True is not supported by {algo_name}: it trains feed-forward "
                              "Q-networks on replayed steps; recurrent networks train with ppo, pg, trpo and r2d2")
        if self.use_lstm and self.custom_model is not None:
            raise ConfigError(f"model.use_lstm=True with custom_model={self.custom_model!r}: volley does not "
                              "wrap a custom model in an LSTM; make the model recurrent itself "
                              "(get_initial_state() and forward(input_dict, state, seq_lens))")


@dataclass(frozen=True)
class RolloutPlan:
    """The sizes of a run as numbers: the driver resolves them once (:meth:`AlgorithmConfig.plan`)
    and ships them, so a worker on a machine with another CPU count samples what was planned."""

    num_workers: int  # 0: one worker samples in the driver process
    num_envs_per_worker: int
    fragment_length: int  # steps each environment takes per sample call

    @property
    def num_sampling_workers(self) -> int:
        """Workers that actually sample: ``num_workers=0`` still has one, in the driver process."""
        return max(1, self.num_workers)
