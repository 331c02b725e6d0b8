"""PPO's slice of RLlib's keys (``PPOConfig.RLLIB_KEYS``; the shared ones are in ``volley.rllib_compat``)."""

from __future__ import annotations

from volley.rllib_keys import RLlibKey, accepted, refused, translated

PPO_KEYS: tuple[RLlibKey, ...] = (
    translated("vf_share_layers", ("training",), lambda v: {"model": {"vf_share_layers": v}}, ("model",),
               "`model.vf_share_layers` (RLlib's old top-level PPO key)", example=True),
    refused("use_critic", ("training",), "volley's PPO always learns a value function for GAE",
            allowed=(True,), example=False),
    refused("use_gae", ("training",), "volley's PPO always uses GAE; lambda=1.0 gives Monte-Carlo "
            "returns less the value baseline", allowed=(True,), example=False),
    accepted("shuffle_sequences", ("training",), "minibatches are rows drawn without replacement, "
             "shuffled every epoch", example=True),
)
