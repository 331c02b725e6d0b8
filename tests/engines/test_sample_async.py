"""PPO's sample_async: Ray workers sample the next batch while the learner updates on this one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from volley import ConfigError, PPOConfig


def logp_under(algo, weights: np.ndarray, batch) -> np.ndarray:
    algo.policy.set_flat_weights(weights)
    with torch.no_grad():
        dist, _ = algo.policy(torch.as_tensor(batch["obs"]))
        return dist.log_prob(torch.as_tensor(batch["actions"])).numpy()


def test_the_next_batch_is_sampled_with_the_weights_from_before_the_update(ray_session):
    algo = (PPOConfig().environment("CartPole-v1").resources(engine="ray")
            .rollouts(num_workers=2, num_envs_per_worker=2, sample_async=True)
            .training(train_batch_size=400, minibatch_size=100).debugging(seed=0).build())
    try:
        before = algo.policy.get_flat_weights()
        algo.update(algo.sample_ahead())  # the first batch: sampled with `before`, and so is the next
        after = algo.policy.get_flat_weights()
        assert not np.allclose(before, after)
        lagged = algo.sample_ahead()  # started before the update
        np.testing.assert_allclose(lagged["logp"], logp_under(algo, before, lagged), atol=1e-5)
        assert not np.allclose(lagged["logp"], logp_under(algo, after, lagged), atol=1e-3)
        algo.policy.set_flat_weights(after)
        result = algo.train()  # trains on the batch started after the first update
        assert result["timesteps_this_iter"] > 0 and result["sample_time_s"] >= 0
    finally:
        algo.stop()


def test_sample_async_learns_cartpole_on_two_ray_workers(ray_session):
    algo = (PPOConfig().environment("CartPole-v1").resources(engine="ray")
            .rollouts(num_workers=2, num_envs_per_worker=8, sample_async=True).debugging(seed=0).build())
    result: dict = {}
    try:
        while not result or (result["timesteps_total"] < 250_000 and result["episode_reward_mean"] < 475):
            result = algo.train()
    finally:
        algo.stop()
    assert result["episode_reward_mean"] >= 475, result


@pytest.mark.parametrize("keys", [{"engine": "local"}, {"engine": "ray", "num_workers": 0},
                                  {"engine": "mpi"}])
def test_sample_async_needs_ray_workers(keys):
    with pytest.raises(ConfigError, match="sample_async=True needs Ray workers"):
        PPOConfig().rollouts(sample_async=True).update(**keys).validate()
