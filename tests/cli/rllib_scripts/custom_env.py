"""RLlib's custom-environment quick start with only the import changed: an environment class as
``env``, then a checkpoint saved (``save DIR``) and restored in a new process (``restore DIR``)."""

import sys

import gymnasium as gym
import numpy as np

from volley import Algorithm, PPOConfig  # was: ray.rllib.algorithms.algorithm / .ppo


class ParrotEnv(gym.Env):
    """Environment in which the agent learns to repeat the seen observations."""

    def __init__(self, config=None):
        config = config or {}
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = self.observation_space
        self.max_len = config.get("max_len", 10)
        self._cur_obs = None
        self._episode_len = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._episode_len = 0
        self._cur_obs = self.observation_space.sample()
        return self._cur_obs, {}

    def step(self, action):
        self._episode_len += 1
        terminated = truncated = self._episode_len >= self.max_len
        reward = -sum(abs(self._cur_obs - action))
        self._cur_obs = self.observation_space.sample()
        return self._cur_obs, reward, terminated, truncated, {}


if sys.argv[1] == "save":
    config = (
        PPOConfig()
        .environment(ParrotEnv, env_config={"max_len": 5})
        .env_runners(num_env_runners=1)
        .training(train_batch_size=1000)
    )
    algo = config.build_algo()
    result = algo.train()
    print(f"trained on {config.env}: {result['episodes_this_iter']} episodes of "
          f"{result['episode_len_mean']:.0f} steps; saved {algo.save(sys.argv[2])}")
    algo.stop()
else:
    algo = Algorithm.from_checkpoint(sys.argv[2])
    action = algo.compute_single_action(np.array([0.5], np.float32))
    print(f"restored {algo.config.env} at iteration {algo.iteration}; action {float(action[0]):.3f}")
    algo.stop()
