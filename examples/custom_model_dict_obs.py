"""A custom model on Dict observations, written as RLlib's docs write one, trained by volley's PPO.

CartPole's state arrives as a Dict observation: ``cart`` (position, velocity), ``pole`` (angle,
angular velocity) and ``last_action`` (Discrete(2)). The model (``TorchModelV2`` and
``nn.Module``; ``forward(input_dict, state, seq_lens)`` and ``value_function()``, RLlib's
protocol, unchanged) reads the observation in its structure, ``input_dict["obs"]["pole"]``,
the Discrete part one-hot as in RLlib, encodes the cart and the pole each with a layer of its
own, and puts policy logits and a value head on the joined features. Only the imports differ
from an RLlib script: ``from volley import ModelCatalog, PPOConfig, TorchModelV2``.

    python examples/custom_model_dict_obs.py                 # in this process, to 475
    python examples/custom_model_dict_obs.py --workers 2     # on 2 Ray workers
    python examples/custom_model_dict_obs.py --iters 2       # a quick look
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley import ModelCatalog, PPOConfig, TorchModelV2


class DictCartPole(gym.Wrapper):
    """CartPole-v1 with a Dict observation (its dynamics, rewards and time limit unchanged)."""

    def __init__(self, env_config: dict | None = None) -> None:
        super().__init__(gym.make("CartPole-v1"))
        high = np.array([np.finfo(np.float32).max] * 2, np.float32)
        self.observation_space = gym.spaces.Dict({
            "cart": gym.spaces.Box(-high, high), "pole": gym.spaces.Box(-high, high),
            "last_action": gym.spaces.Discrete(2)})

    def _dict(self, state: np.ndarray, last_action: int) -> dict[str, Any]:
        return {"cart": state[:2], "pole": state[2:], "last_action": last_action}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict]:
        state, info = self.env.reset(**kwargs)
        return self._dict(state, 0), info

    def step(self, action: Any) -> tuple[dict[str, Any], Any, bool, bool, dict]:
        state, reward, terminated, truncated, info = self.env.step(action)
        return self._dict(state, int(action)), reward, terminated, truncated, info


class DictObsModel(TorchModelV2, nn.Module):
    """A layer for the cart, one for the pole, then a policy head and a value head on both
    encodings and the last action (one-hot)."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int,
                 model_config: dict, name: str, encoder_size: int = 32) -> None:
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        original = getattr(obs_space, "original_space", obs_space)  # the Dict, as in RLlib
        self.cart = nn.Linear(original["cart"].shape[0], encoder_size)
        self.pole = nn.Linear(original["pole"].shape[0], encoder_size)
        joined = 2 * encoder_size + original["last_action"].n
        hidden = model_config["fcnet_hiddens"][-1]
        self.policy_head = nn.Sequential(nn.Linear(joined, hidden), nn.Tanh(), nn.Linear(hidden, num_outputs))
        self.value_head = nn.Sequential(nn.Linear(joined, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self._value: torch.Tensor | None = None

    def forward(self, input_dict: dict, state: list, seq_lens: Any) -> tuple[torch.Tensor, list]:
        obs = input_dict["obs"]  # {"cart": [B, 2], "pole": [B, 2], "last_action": [B, 2] one-hot}
        features = torch.cat([torch.tanh(self.cart(obs["cart"])), torch.tanh(self.pole(obs["pole"])),
                              obs["last_action"]], dim=1)
        self._value = self.value_head(features).reshape(-1)
        return self.policy_head(features), state

    def value_function(self) -> torch.Tensor:
        assert self._value is not None, "call forward() first"
        return self._value


def config(workers: int, seed: int = 0) -> PPOConfig:
    """PPO on DictCartPole with DictObsModel, registered by name as RLlib's docs do it."""
    ModelCatalog.register_custom_model("dict_obs_model", DictObsModel)
    return (PPOConfig()
            .environment(DictCartPole)
            .env_runners(num_env_runners=workers)
            .resources(engine="ray" if workers else "local")
            .training(model={"custom_model": "dict_obs_model", "custom_model_config": {"encoder_size": 32}})
            .debugging(seed=seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=0, help="Ray workers; 0 samples in this process")
    parser.add_argument("--iters", type=int, default=60, help="most iterations (default: 60)")
    parser.add_argument("--stop-reward", type=float, default=475.0, help="stop at this mean return")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    algo = config(args.workers, args.seed).build()
    try:
        for _ in range(args.iters):
            r = algo.train()
            print(f"iteration {r['training_iteration']}: return {r['episode_reward_mean']:.1f}, "
                  f"{r['timesteps_total']} steps, {r['env_steps_per_s']:.0f} steps/s", flush=True)
            if r["episode_reward_mean"] >= args.stop_reward:
                break
        obs = {"cart": np.zeros(2, np.float32), "pole": np.array([0.1, 0.0], np.float32), "last_action": 0}
        print(f"pole leaning right: action {algo.compute_single_action(obs)} (1 pushes the cart right)")
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
