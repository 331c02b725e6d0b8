"""Action masking as RLlib's and sb3-contrib's examples write it, trained by volley's PPO or DQN.

"Legal moves": of ``n`` actions (default 20) only a few are legal each step, the target and
``legal - 1`` others drawn at random; the observation names the target (one-hot). The target
pays +1, another legal action 0, and an illegal action raises, as RLlib's ``ActionMaskEnv`` does
(``ValueError: Invalid action (7) sent to env!``): a masked action that leaked fails the run. An
episode is 20 steps, so 20 is the best return.

The mask reaches volley in either of two ways:

- RLlib's (the default): the observation is a Dict, ``{"action_mask": 0/1 per action,
  "observations": the observation}``; the key is ``action_mask_key`` (``"action_mask"``, RLlib's
  default). volley's network reads ``"observations"`` (a custom model gets both, as in RLlib).
- sb3-contrib's (``--sb3``): the environment has an ``action_masks()`` method, as MaskablePPO
  reads it, and a plain observation; volley calls it after every reset and step.

Masked actions get probability 0 (PPO, PG, TRPO: their logits are set to the float minimum) and
are never taken by DQN (ε draws among the legal actions, and its target is the max over the
next state's legal ones). Without the mask (``--no-masking``) the environment is the same and the
first illegal action ends the run.

    python examples/action_masking.py                  # PPO, RLlib's Dict observation
    python examples/action_masking.py --sb3            # the same task through action_masks()
    python examples/action_masking.py --algo dqn
    python examples/action_masking.py --workers 2      # on 2 Ray workers
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np

from volley import AlgorithmConfig, DQNConfig, PPOConfig, register_env


class LegalMoves(gym.Env):
    """RLlib's protocol: the mask in a Dict observation. ``env_config``: ``n`` actions, ``legal`` of them
    legal a step, ``on_illegal`` ``"raise"`` or ``"end"`` (the episode ends there, reward 0: for
    comparing runs without the mask)."""

    def __init__(self, env_config: dict | None = None) -> None:
        config = env_config or {}
        self.n, self.legal = config.get("n", 20), config.get("legal", 2)
        self.on_illegal = config.get("on_illegal", "raise")
        self.action_space = gym.spaces.Discrete(self.n)
        self.observation_space: gym.Space = gym.spaces.Dict(
            {"action_mask": gym.spaces.Box(0.0, 1.0, (self.n,), np.float32),
             "observations": gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)})

    def _next_target(self) -> np.ndarray:
        """A new target and legal actions; the target one-hot."""
        self.target = int(self.np_random.integers(self.n))
        others = self.np_random.choice(np.delete(np.arange(self.n), self.target), self.legal - 1, replace=False)
        self.mask = np.zeros(self.n, np.float32)
        self.mask[[self.target, *others]] = 1.0
        return np.eye(self.n, dtype=np.float32)[self.target]

    def _observe(self) -> Any:
        target = self._next_target()
        return {"action_mask": self.mask.copy(), "observations": target}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.steps = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if not self.mask[action]:
            if self.on_illegal == "raise":
                raise ValueError(f"Invalid action ({action}) sent to env! legal: {np.flatnonzero(self.mask).tolist()}")
            return self._observe(), 0.0, True, False, {}
        reward = float(action == self.target)
        self.steps += 1
        return self._observe(), reward, False, self.steps >= 20, {}


class MaskableLegalMoves(LegalMoves):
    """sb3-contrib's protocol: the observation is the target alone, the mask comes from ``action_masks()``."""

    def __init__(self, env_config: dict | None = None) -> None:
        super().__init__(env_config)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)

    def _observe(self) -> Any:
        return self._next_target()

    def action_masks(self) -> np.ndarray:
        """The legal actions of the latest observation, as booleans (what MaskablePPO calls)."""
        return self.mask.astype(bool)


register_env("legal_moves", LegalMoves)
register_env("maskable_legal_moves", MaskableLegalMoves)


def config(algo: str, env_config: dict | None = None, workers: int = 0, masking: bool = True,
           sb3: bool = False) -> AlgorithmConfig:
    """PPO or DQN on LegalMoves (MaskableLegalMoves with ``sb3``); without ``masking`` the mask is not
    volley's (its key is renamed), only a part of the observation."""
    base: AlgorithmConfig = (
        PPOConfig().training(lr=1e-3, train_batch_size=1000, minibatch_size=250, num_epochs=4)
        if algo == "ppo" else
        DQNConfig().training(lr=1e-3, learning_starts=500, target_update_freq=500, epsilon_decay_steps=5000))
    return (base.environment("maskable_legal_moves" if sb3 else "legal_moves", env_config=env_config or {},
                             action_mask_key="action_mask" if masking else "no_mask")
            .resources(engine="ray" if workers else "local")
            .rollouts(num_rollout_workers=workers, num_envs_per_worker=max(1, 8 // max(workers, 1)))
            .debugging(seed=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=["ppo", "dqn"], default="ppo")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--workers", type=int, default=0, help="Ray workers (0: in this process)")
    parser.add_argument("--sb3", action="store_true", help="the mask through action_masks(), as sb3-contrib's")
    parser.add_argument("--no-masking", action="store_true", help="leave the mask to the policy: illegal actions raise")
    args = parser.parse_args()
    with config(args.algo, {}, args.workers, not args.no_masking, args.sb3).build() as algo:
        for _ in range(args.iters):
            result = algo.train()
            print(f"iteration {result['training_iteration']}: {result['timesteps_total']} steps, mean return "
                  f"{result['episode_reward_mean']:.2f} of 20", flush=True)
        evaluation = algo.evaluate(num_episodes=10)
        print(f"greedy evaluation: mean return {evaluation['episode_reward_mean']:.2f} over 10 episodes; "
              f"{result['timesteps_total']} training steps, no illegal action taken")


if __name__ == "__main__":
    main()
