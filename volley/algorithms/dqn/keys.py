"""DQN's and Ape-X DQN's slices of RLlib's keys (``DQNConfig.RLLIB_KEYS``, ``ApexDQNConfig.RLLIB_KEYS``;
the shared ones are in ``volley.rllib_compat``, the replay buffer's in ``volley.algorithms.replay_keys``)."""

from __future__ import annotations

from typing import Any

from volley.errors import ConfigError, shown
from volley.rllib_keys import (
    RLlibKey,
    Translate,
    accepted,
    check_dict,
    refused,
    renamed,
    rllib_defaults,
    same,
    sub_keys,
    translated,
    type_name,
)

EPSILON_KEYS = {"initial_epsilon": "epsilon_start", "final_epsilon": "epsilon_end",
                "epsilon_timesteps": "epsilon_decay_steps"}


def epsilon_greedy(*types: str) -> Translate:
    """``exploration_config`` of an ε-greedy ``type`` as volley's linear ε schedule."""
    def translate(value: Any) -> dict[str, Any]:
        value = check_dict("exploration_config", value)
        if "type" in value:
            type_name("exploration_config", value, types)
        return {"epsilon_schedule": "linear",
                **sub_keys("exploration_config", value, EPSILON_KEYS, {"warmup_timesteps": (0,)})}
    return translate


def epsilon_points(value: Any) -> dict[str, Any]:
    """The new stack's DQN ``epsilon``: a constant, or ``[[0, start], [steps, end]]`` (linear)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"epsilon_start": value, "epsilon_end": value}
    points = value if isinstance(value, (list, tuple)) else []
    if len(points) == 2 and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in points) \
            and points[0][0] == 0:
        (_, start), (steps, end) = points
        return {"epsilon_start": start, "epsilon_end": end, "epsilon_decay_steps": steps,
                "epsilon_schedule": "linear"}
    raise ConfigError(f"RLlib's epsilon={shown(value)} is not supported by volley: it takes a number or "
                      "two points [[0, start], [timesteps, end]] (a linear decay)")


def apex_optimizer(value: Any) -> dict[str, Any]:
    """RLlib 2.9's Ape-X ``optimizer`` dict (its actors' settings) as volley's Ape-X keys."""
    return sub_keys("optimizer", check_dict("optimizer", value),
                    {"num_replay_buffer_shards": "num_replay_shards", "max_weight_sync_delay": "weight_sync_interval"},
                    {"debug": (False,)})


DQN_KEYS: tuple[RLlibKey, ...] = (
    translated("exploration_config", ("exploration",), epsilon_greedy("EpsilonGreedy"),
               ("epsilon_start", "epsilon_end", "epsilon_decay_steps", "epsilon_schedule"),
               "`type` `'EpsilonGreedy'`; `initial_epsilon`, `final_epsilon`, `epsilon_timesteps` set "
               "`epsilon_start`, `epsilon_end`, `epsilon_decay_steps` (linear); other types refused by name",
               example={"type": "EpsilonGreedy", "initial_epsilon": 1.0, "final_epsilon": 0.02,
                        "epsilon_timesteps": 10_000}),
    same("double_q", "training", example=False),
    same("dueling", "training", example=True),
    same("hiddens", "training", example=[64]),
    translated("epsilon", ("training",), epsilon_points,
               ("epsilon_start", "epsilon_end", "epsilon_decay_steps", "epsilon_schedule"),
               "a number, or `[[0, start], [timesteps, end]]`: `epsilon_start`, `epsilon_end`, "
               "`epsilon_decay_steps` (linear)", example=[[0, 1.0], [10_000, 0.05]]),
    renamed("buffer_size", "replay_buffer_capacity", "training", example=50_000),
    refused("store_buffer_in_checkpoints", ("training",), "volley's synchronous DQN refills its buffer "
            "after a restore; Ape-X checkpoints its shards (checkpoint_replay)"),
    refused("noisy", ("training",), "volley explores ε-greedily (exploration_config, or the epsilon_* "
            "keys)"),
    accepted("sigma0", ("training",), "only used with noisy=True, which volley refuses", example=0.5),
    refused("num_atoms", ("training",), "volley's Q-networks are not distributional", allowed=(1,),
            example=51),
    accepted("v_min", ("training",), "only used with num_atoms > 1, which volley refuses", example=-10.0),
    accepted("v_max", ("training",), "only used with num_atoms > 1, which volley refuses", example=10.0),
    refused("td_error_loss_fn", ("training",), "volley's DQN loss is the Huber loss", allowed=("huber",),
            example="mse"),
    refused("num_epochs", ("training",), "volley's DQN takes each gradient step on a fresh replay minibatch; "
            "set train_intensity", allowed=(1,), example=4),
    refused("training_intensity", ("training",), "volley's train_intensity counts gradient steps per "
            "sampled step: set train_intensity = training_intensity / minibatch_size",
            allowed=(None, *rllib_defaults("training_intensity")), example=8),
    refused("adam_epsilon", ("training",), "volley's DQN uses Adam's default epsilon", allowed=(1e-8,),
            example=1e-4),
)

# Ape-X DQN's own, looked up before DQN's
APEX_DQN_KEYS: tuple[RLlibKey, ...] = (
    translated("exploration_config", ("exploration",), epsilon_greedy("EpsilonGreedy", "PerWorkerEpsilonGreedy"),
               ("epsilon_start", "epsilon_end", "epsilon_decay_steps", "epsilon_schedule"),
               "`type` `'EpsilonGreedy'` or `'PerWorkerEpsilonGreedy'` (every Ape-X worker has its "
               "own ε anyway); `initial_epsilon`, `final_epsilon`, `epsilon_timesteps` set "
               "`epsilon_start`, `epsilon_end`, `epsilon_decay_steps` (linear)",
               example={"type": "PerWorkerEpsilonGreedy", "initial_epsilon": 1.0, "final_epsilon": 0.05,
                        "epsilon_timesteps": 20_000}),
    translated("optimizer", ("training",), apex_optimizer, ("num_replay_shards", "weight_sync_interval"),
               "RLlib 2.9's Ape-X settings: `num_replay_buffer_shards` → `num_replay_shards`, "
               "`max_weight_sync_delay` → `weight_sync_interval`; other keys refused by name",
               example={"num_replay_buffer_shards": 2, "max_weight_sync_delay": 256}),
    renamed("store_buffer_in_checkpoints", "checkpoint_replay", "training", example=True),
)
