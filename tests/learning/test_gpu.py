"""The learner on a GPU (num_gpus=1): it trains there, the workers act on the CPU. Runs only
where torch sees CUDA (the development machine has none; a GPU machine runs these)."""

from __future__ import annotations

import pytest
import torch

from volley import DQNConfig, PPOConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def train_to(algo, reward: float, max_steps: int) -> dict:
    result: dict = {}
    try:
        while not result or (result["timesteps_total"] < max_steps and not result["episode_reward_mean"] >= reward):
            result = algo.train()
        assert all(p.device.type == "cuda" for p in algo.policy.parameters())
        for state in algo.optimizer.state.values():  # the optimizer's moments live there too
            assert all(v.device.type == "cuda" for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
        worker = algo.workers.workers[0]  # the local engine: the worker's copy stays on the CPU
        assert all(p.device.type == "cpu" for p in worker.policy.parameters())
    finally:
        algo.stop()
    return result


def test_ppo_learns_cartpole_with_the_learner_on_the_gpu():
    algo = PPOConfig().environment("CartPole-v1").resources(engine="local", num_gpus=1).debugging(seed=0).build()
    assert train_to(algo, 475, 300_000)["episode_reward_mean"] >= 475


def test_dqn_learns_cartpole_with_the_learner_on_the_gpu():
    algo = (DQNConfig().environment("CartPole-v1").resources(engine="local", num_gpus=1)
            .training(n_step=3).debugging(seed=0).build())
    assert train_to(algo, 475, 150_000)["episode_reward_mean"] >= 475
