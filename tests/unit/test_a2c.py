"""A2C: its loss against a hand computation, one step per batch whatever the microbatches, its
update against the loss computed by hand from the batch, and RLlib's keys."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from volley import ConfigError
from volley.algorithms.a2c import A2C, A2CConfig
from volley.algorithms.a2c.loss import a2c_loss


def test_a2c_loss_by_hand():
    logp, advantages = torch.tensor([-0.5, -2.0]), torch.tensor([2.0, 1.0])
    values, targets, entropy = torch.tensor([1.0, 0.5]), torch.tensor([2.0, 0.0]), torch.tensor([0.6, 0.4])
    loss = a2c_loss(logp, advantages, values, targets, entropy, vf_loss_coeff=0.5, entropy_coeff=0.01)
    # policy: -mean(2·-0.5, 1·-2) = 1.5; value: mean(1², 0.5²) = 0.625; entropy: 0.5
    assert loss.policy.item() == pytest.approx(1.5)
    assert loss.value.item() == pytest.approx(0.625)
    assert loss.entropy.item() == pytest.approx(0.5)
    assert loss.total.item() == pytest.approx(1.5 + 0.5 * 0.625 - 0.01 * 0.5)


def test_a2c_loss_masked_mean_skips_padding():
    """A recurrent batch's padded steps (mask 0) weigh nothing: only the first step counts here."""
    mask = torch.tensor([1.0, 0.0])
    loss = a2c_loss(torch.tensor([-0.5, -9.0]), torch.tensor([2.0, 5.0]), torch.tensor([1.0, 0.0]),
                    torch.tensor([2.0, 7.0]), torch.tensor([0.6, 9.0]), vf_loss_coeff=0.5, entropy_coeff=0.1,
                    mean=lambda x: (x * mask).sum() / mask.sum())
    assert loss.total.item() == pytest.approx(1.0 + 0.5 * 1.0 - 0.1 * 0.6)


def a2c(**training) -> A2C:
    return (A2CConfig().environment("CartPole-v1").resources(engine="local").rollouts(num_workers=0)
            .training(**training).debugging(seed=3).build())


def test_microbatches_take_the_whole_batch_s_step():
    """RLlib's microbatch_size accumulates the gradient: the one step equals the whole batch's."""
    whole, micro = a2c(), a2c(microbatch_size=10)
    try:
        np.testing.assert_array_equal(whole.policy.get_flat_weights(), micro.policy.get_flat_weights())
        start = whole.policy.get_flat_weights()
        rw, rm = whole.train(), micro.train()
        assert rw["timesteps_this_iter"] == rm["timesteps_this_iter"] == 40
        assert not np.array_equal(whole.policy.get_flat_weights(), start)
        np.testing.assert_allclose(whole.policy.get_flat_weights(), micro.policy.get_flat_weights(),
                                   rtol=1e-5, atol=1e-6)
        assert rw["vf_loss"] == pytest.approx(rm["vf_loss"], rel=1e-5)
    finally:
        whole.stop()
        micro.stop()


def test_the_update_descends_the_hand_computed_loss():
    """The gradient the step takes is the loss's, recomputed here from the batch it sampled."""
    algo = a2c(grad_clip=None)
    try:
        batch = algo.sample()
        params = list(algo.policy.parameters())
        obs = torch.as_tensor(batch["obs"])
        dist, values = algo.policy(obs=obs)
        adv, targets = torch.as_tensor(batch["advantages"]), torch.as_tensor(batch["value_targets"])
        by_hand = (-(adv * dist.log_prob(torch.as_tensor(batch["actions"]))).mean()
                   + 0.5 * ((targets - values) ** 2).mean())
        expected = torch.autograd.grad(by_hand, params)
        algo.update(batch)
        for param, grad in zip(params, expected, strict=True):
            torch.testing.assert_close(param.grad, grad, rtol=1e-5, atol=1e-7)
    finally:
        algo.stop()


def test_rllib_keys_and_refusals():
    config = A2CConfig().training(lambda_=0.95, microbatch_size=20, use_critic=True)
    assert (config.gae_lambda, config.microbatch_size) == (0.95, 20)
    with pytest.raises(ConfigError, match="'use_critic' must be True"):
        A2CConfig().training(use_critic=False).validate()
    with pytest.raises(ConfigError, match=r"'microbatch_size' must be in \[1, train_batch_size=40\], got 80"):
        A2CConfig().training(microbatch_size=80).validate()
