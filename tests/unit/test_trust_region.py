"""TRPO's numerics: conjugate gradient, Fisher-vector products, and one trust-region step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.distributions import Normal

from volley import TRPO, ConfigError, TRPOConfig
from volley.models import Categorical, DiagGaussian
from volley.rollout.batch import Batch
from volley.trust_region import conjugate_gradient, fisher_vector_product


def test_conjugate_gradient_solves_a_random_spd_system():
    generator = torch.Generator().manual_seed(0)
    m = torch.randn(20, 20, dtype=torch.float64, generator=generator)
    a = m @ m.T + 20 * torch.eye(20, dtype=torch.float64)  # well conditioned SPD
    b = torch.randn(20, dtype=torch.float64, generator=generator)
    x = conjugate_gradient(lambda v: a @ v, b, iters=20, residual_tol=1e-20)
    torch.testing.assert_close(x, torch.linalg.solve(a, b), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", ["categorical", "gaussian"])
def test_fisher_vector_product_is_the_hessian_of_the_mean_kl_times_v(kind):
    """The Hessian of the mean KL in the flat parameters, built whole by torch, is the
    independent computation; the product never builds it."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    log_std = torch.nn.Parameter(torch.tensor([-0.3, 0.2], dtype=torch.float64))
    obs = torch.randn(32, 3, dtype=torch.float64)
    names = [name for name, _ in net.named_parameters()] + (["log_std"] if kind == "gaussian" else [])
    params = list(net.parameters()) + ([log_std] if kind == "gaussian" else [])
    shapes = [p.shape for p in params]
    flat = torch.cat([p.detach().reshape(-1) for p in params])

    def distribution(tensors: dict[str, torch.Tensor]) -> Categorical | DiagGaussian:
        out = torch.func.functional_call(net, {k: v for k, v in tensors.items() if k != "log_std"}, (obs,))
        return Categorical(out) if kind == "categorical" else DiagGaussian(out, tensors["log_std"])

    with torch.no_grad():
        old = distribution(dict(zip(names, params, strict=True)))

    def mean_kl(vector: torch.Tensor) -> torch.Tensor:
        tensors, start = [], 0
        for shape in shapes:
            tensors.append(vector[start:start + shape.numel()].reshape(shape))
            start += shape.numel()
        return old.kl(distribution(dict(zip(names, tensors, strict=True)))).mean()

    hessian = torch.autograd.functional.hessian(mean_kl, flat)
    v = torch.randn_like(flat)
    for damping in (0.0, 0.1):
        dist = distribution(dict(zip(names, params, strict=True)))
        fvp = fisher_vector_product(dist.inputs, lambda inputs: old.kl(type(old)(*inputs)).mean(),
                                    params, damping=damping)
        torch.testing.assert_close(fvp(v), hessian @ v + damping * v, rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(fvp(2 * v), 2 * fvp(v), rtol=1e-8, atol=1e-10)  # reusable, linear
    assert (hessian @ v).abs().max() > 1e-3  # a real product, not zeros


@pytest.mark.parametrize("max_kl", [0.01, 0.05])
def test_a_trpo_step_stays_in_the_trust_region_and_improves_the_surrogate(max_kl):
    algo = (TRPOConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_envs_per_worker=4).training(train_batch_size=1000, max_kl=max_kl)
            .debugging(seed=0).build())
    try:
        before = algo.policy.get_flat_weights()
        batch = algo.sample()
        stats = algo.update_policy(batch)
    finally:
        algo.stop()
    assert stats["line_search_fraction"] > 0  # a step was accepted, so the weights moved
    assert (algo.policy.get_flat_weights() != before).any()
    assert 0 < stats["kl"] <= 1.5 * max_kl
    assert stats["surrogate_improvement"] > 0


def test_max_kl_bounds_the_kl_of_the_whole_gaussian_not_its_mean_per_dimension():
    """The paper's and modular_rl's trust region: the KL of the joint action distribution (for a
    diagonal Gaussian, summed over dimensions). sb3-contrib's target_kl bounds the mean over
    dimensions, Hopper's 3 times wider (docs/algorithms/trpo.md); torch's own Normal KL is the
    independent computation here."""
    algo = (TRPOConfig().environment("Hopper-v5").resources(engine="local")
            .rollouts(num_envs_per_worker=2).training(train_batch_size=1000, max_kl=0.01)
            .debugging(seed=0).build())
    try:
        batch = algo.sample()
        obs = torch.as_tensor(batch["obs"])
        with torch.no_grad():
            old, _ = algo.policy(obs)
            old_mean, old_std = old.mean.clone(), old.log_std.exp().clone()
        stats = algo.update_policy(batch)
        with torch.no_grad():
            new, _ = algo.policy(obs)
            per_dim = torch.distributions.kl_divergence(Normal(old_mean, old_std),
                                                        Normal(new.mean, new.log_std.exp()))
    finally:
        algo.stop()
    assert per_dim.shape[-1] == 3 and stats["line_search_fraction"] > 0
    joint = per_dim.sum(-1).mean().item()
    assert stats["kl"] == pytest.approx(joint, rel=1e-4)
    assert joint <= 1.5 * 0.01  # a per-dimension bound would let it reach about 3 x 0.01


def test_sub_sampling_factor_steps_on_every_kth_row():
    """sb3-contrib's sub_sampling_factor: a step with k = 3 is the step k = 1 takes on a batch of
    every third row, cut by hand; the same seed gives both algorithms the same weights."""
    def trpo(factor: int) -> TRPO:
        return (TRPOConfig().environment("CartPole-v1").resources(engine="local")
                .rollouts(num_envs_per_worker=2).training(train_batch_size=600, sub_sampling_factor=factor)
                .debugging(seed=0).build())

    subsampled, by_hand, every_row = trpo(3), trpo(1), trpo(1)
    try:
        batch = subsampled.sample()
        assert len(batch) >= 600
        stats = subsampled.update_policy(batch)
        by_hand.update_policy(Batch({key: column[::3] for key, column in batch.items()}))
        every_row.update_policy(batch)
    finally:
        for algo in (subsampled, by_hand, every_row):
            algo.stop()
    assert stats["line_search_fraction"] > 0
    torch.testing.assert_close(torch.as_tensor(subsampled.policy.get_flat_weights()),
                               torch.as_tensor(by_hand.policy.get_flat_weights()), rtol=1e-5, atol=1e-6)
    assert not np.allclose(subsampled.policy.get_flat_weights(), every_row.policy.get_flat_weights())


def test_train_reports_the_value_fit_and_the_trust_region():
    algo = (TRPOConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_envs_per_worker=4).training(train_batch_size=1000).debugging(seed=0).build())
    try:
        result = algo.train()
    finally:
        algo.stop()
    for key in ("kl", "surrogate_improvement", "entropy", "ev_before", "ev_after", "vf_loss"):
        assert key in result, key
    assert result["ev_after"] > result["ev_before"]  # the value fit explains more of the returns
    assert result["timesteps_this_iter"] >= 1000  # whole episodes, at least train_batch_size steps


@pytest.mark.parametrize("key, value, words", [
    ("max_kl", 0.0, "'max_kl' must be > 0, got 0.0"),
    ("cg_damping", -1.0, "'cg_damping' must be >= 0, got -1.0"),
    ("gae_lambda", 1.5, "'gae_lambda' must be in [0, 1], got 1.5"),
    ("cg_iters", 0, "'cg_iters' must be > 0, got 0"),
    ("sub_sampling_factor", 0, "'sub_sampling_factor' must be > 0, got 0"),
    ("sub_sampling_factor", 4000, "sub_sampling_factor=4000 must be below train_batch_size=4000"),
])
def test_bad_trpo_keys_are_named(key, value, words):
    with pytest.raises(ConfigError) as error:
        TRPOConfig().environment("CartPole-v1").training(**{key: value}).build()
    assert words in str(error.value)


def test_shared_value_layers_are_refused():
    with pytest.raises(ConfigError, match="vf_share_layers"):
        TRPOConfig().environment("CartPole-v1").training(model={"vf_share_layers": True}).build()
