"""MultiDiscrete (and nested Tuple / Dict) actions, trained by volley's PPO.

"Repeat after me", RLlib's nested action space example: each step the environment shows a sample
of its space and pays for acting the same sample back: +1 per discrete part matched exactly
(a MultiDiscrete's all of its elements), minus the distance for each Box part; an episode is 20
steps, and discounting does not matter (``gamma=0``, as RLlib's example sets it).

- ``--space multidiscrete`` (the default): four dials of five positions, ``MultiDiscrete([5, 5,
  5, 5])``, a part each: at most 4 a step, 80 an episode. PPO's policy is a product of four
  categoricals; the batch holds each action as 4 integer columns.
- ``--space nested``: RLlib's ``Dict(a=Tuple([Dict(d=Box(-10, 10, ()), e=Discrete(3))]),
  b=Box(-10, 10, (2,)), c=MultiDiscrete([3, 3]), d=Discrete(2))``: categoricals and Gaussians in
  one distribution, its log-probability, entropy and KL the sums of the parts'.

The environment checks every action against its space and raises on one outside it.

    python examples/multidiscrete_actions.py                     # in this process
    python examples/multidiscrete_actions.py --workers 2         # on 2 Ray workers
    python examples/multidiscrete_actions.py --space nested --iters 60
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple

from volley import PPOConfig, register_env

SPACES: dict[str, gym.Space] = {
    "multidiscrete": MultiDiscrete([5, 5, 5, 5]),
    "nested": Dict({"a": Tuple([Dict({"d": Box(-10.0, 10.0, ()), "e": Discrete(3)})]),
                    "b": Box(-10.0, 10.0, (2,)), "c": MultiDiscrete([3, 3]), "d": Discrete(2)}),
}


def leaves(space: gym.Space, value: Any) -> list[tuple[gym.Space, Any]]:
    """The space's parts that are not a Tuple or Dict, each with its part of ``value``."""
    if isinstance(space, Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in leaves(sub, value[key])]
    if isinstance(space, Tuple):
        return [leaf for sub, part in zip(space.spaces, value, strict=True) for leaf in leaves(sub, part)]
    if isinstance(space, MultiDiscrete):
        return [(Discrete(int(n)), v) for n, v in zip(space.nvec, value, strict=True)]
    return [(space, value)]


class RepeatAfterMe(gym.Env):
    """Observe a sample of a space (``env_config["space"]``, a name of ``SPACES``); act it back."""

    def __init__(self, env_config: dict | None = None) -> None:
        config = env_config or {}
        self.observation_space = self.action_space = SPACES[config.get("space", "multidiscrete")]
        self.episode_len = config.get("episode_len", 20)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.steps = 0
        self.shown = self.observation_space.sample()
        return self.shown, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        reward = 0.0
        for (space, acted), (_, shown) in zip(leaves(self.action_space, action),
                                              leaves(self.observation_space, self.shown), strict=True):
            reward += -float(np.abs(acted - shown).sum()) if isinstance(space, Box) else float(acted == shown)
        self.steps += 1
        self.shown = self.observation_space.sample()
        return self.shown, reward, False, self.steps >= self.episode_len, {}


register_env("repeat_after_me", RepeatAfterMe)


def config(space: str, workers: int) -> PPOConfig:
    return (PPOConfig()
            .environment("repeat_after_me", env_config={"space": space})
            .resources(engine="ray" if workers else "local")
            .rollouts(num_rollout_workers=workers, num_envs_per_worker=max(1, 16 // max(workers, 1)))
            .training(gamma=0.0, lr=1e-3, train_batch_size=1600, minibatch_size=400, num_epochs=4,
                      entropy_coeff=0.0, vf_loss_coeff=0.01)
            .debugging(seed=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--space", choices=sorted(SPACES), default="multidiscrete")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--workers", type=int, default=0, help="Ray workers (0: in this process)")
    args = parser.parse_args()
    with config(args.space, args.workers).build() as algo:
        for _ in range(args.iters):
            result = algo.train()
            print(f"iteration {result['training_iteration']}: {result['timesteps_total']} steps, mean return "
                  f"{result['episode_reward_mean']:.2f}, entropy {result['entropy']:.3f}", flush=True)
        env = RepeatAfterMe({"space": args.space})
        shown, _ = env.reset(seed=1)
        action = algo.compute_single_action(shown)
        print(f"shown {shown}\nacted {action}\nreward {env.step(action)[1]:.2f}")


if __name__ == "__main__":
    main()
