"""Policy gradient: both ways of sharing work give the same update; Karpathy's return reset."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from volley import ConfigError, ModelConfig, PGConfig
from volley.algorithms.pg import PG
from volley.catalog import build_policy
from volley.envs import KarpathyPong, make_vector_env
from volley.rollout.batch import Batch


def pg(mode: str, **training) -> PG:
    return (PGConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_workers=2, num_envs_per_worker=2)
            .training(mode=mode, lr=1e-2, batch_episodes=6, **training).debugging(seed=5).build())


@pytest.mark.parametrize("standardize", [{"standardize_returns": True}, {"standardize_returns": False},
                                         {"standardize_over": "episode"}])
def test_samples_and_gradients_modes_make_the_same_update(standardize):
    a, b = pg("samples", **standardize), pg("gradients", **standardize)
    try:
        start = a.policy.get_flat_weights()
        np.testing.assert_array_equal(start, b.policy.get_flat_weights())
        ra, rb = a.train(), b.train()
        assert ra["episodes_this_iter"] == rb["episodes_this_iter"] >= 6
        assert ra["timesteps_this_iter"] == rb["timesteps_this_iter"]
        grads_a = torch.cat([p.grad.reshape(-1) for p in a.policy.policy_parameters()])
        grads_b = torch.cat([p.grad.reshape(-1) for p in b.policy.policy_parameters()])
        assert grads_a.abs().max() > 1e-4  # a real gradient, not zeros
        torch.testing.assert_close(grads_a, grads_b, rtol=1e-4, atol=1e-6)
        # a sum over ~1,000 steps of float32 products whose advantages sum to 0: rounding at 1e-6
        np.testing.assert_allclose(ra["policy_loss"], rb["policy_loss"], rtol=1e-4, atol=1e-5)
        after_a, after_b = a.policy.get_flat_weights(), b.policy.get_flat_weights()
        assert not np.array_equal(after_a, start)
        # RMSProp divides by sqrt(g²): float32 noise in tiny gradients shows up at 1e-6
        np.testing.assert_allclose(after_a, after_b, rtol=1e-5, atol=1e-5)
    finally:
        a.stop()
        b.stop()


def test_returns_reset_at_each_point_when_asked():
    rewards = np.array([0.0, 0.0, 1.0, 0.0, -1.0], np.float32)
    cuts = np.array([False, False, False, False, True])
    columns = {"rewards": rewards, "cuts": cuts, "obs": np.zeros((5, 1)), "actions": np.zeros(5),
               "valid": np.ones(5, bool)}
    config = PGConfig().training(gamma=0.5)
    plain = PG.postprocess(columns, config)["returns"]
    # without reset: G4=-1, G3=-0.5, G2=1-0.25=0.75, G1=0.375, G0=0.1875
    np.testing.assert_allclose(plain, [0.1875, 0.375, 0.75, -0.5, -1.0])
    reset = PG.postprocess(columns, config.copy().training(reset_return_on_reward=True))["returns"]
    # a point at step 2 ends the sum there: G2 = 1, G1 = 0.5, G0 = 0.25; G3 = -0.5, G4 = -1
    np.testing.assert_allclose(reset, [0.25, 0.5, 1.0, -0.5, -1.0])


def test_returns_are_standardised_per_episode_when_asked():
    rewards = np.array([0.0, 0.0, 1.0, 0.0, -1.0, 0.0], np.float32)
    cuts = np.array([False, False, True, False, True, True])  # episodes 0-2 and 3-4; 5 is a tail
    columns = {"rewards": rewards, "cuts": cuts, "obs": np.zeros((6, 1)), "actions": np.zeros(6),
               "valid": np.ones(6, bool)}
    config = PGConfig().training(gamma=0.5, standardize_over="episode")
    returns = PG.postprocess(columns, config)["returns"]
    # episode 1: returns 0.25, 0.5, 1 (mean 7/12, std sqrt(((-1/3)² + (-1/12)² + (5/12)²) / 3) = 0.3118);
    # episode 2: -0.5, -1 (mean -0.75, std 0.25); the lone tail step: 0 / (0 + 1e-8) = 0
    std = np.sqrt(((1 / 3) ** 2 + (1 / 12) ** 2 + (5 / 12) ** 2) / 3)
    np.testing.assert_allclose(returns, [(0.25 - 7 / 12) / std, (0.5 - 7 / 12) / std, (1 - 7 / 12) / std,
                                         1.0, -1.0, 0.0], rtol=1e-5, atol=1e-6)
    # time-major [T, N]: each column on its own
    both = PG.postprocess({k: np.stack([v, v], 1) for k, v in columns.items()}, config)["returns"]
    np.testing.assert_allclose(both, np.stack([returns, returns], 1))


def test_one_update_is_the_summed_gradient_and_karpathys_rmsprop_step():
    """The gradient of -Σ A·log π, summed over the batch, and RMSProp's first step
    θ ← θ - lr·g / (√(0.01·g²) + 1e-5), against backpropagation written out in numpy."""
    algo = (PGConfig().environment("CartPole-v1").resources(engine="local").rollouts(num_workers=0)
            .training(lr=0.01, standardize_returns=False, model={"fcnet_hiddens": [3]}).debugging(seed=3)
            .build())
    try:
        w = {k: v.astype(np.float64) for k, v in algo.policy.get_weights().items()}
        obs = np.array([[0.1, -0.2, 0.3, 0.5], [-1.0, 0.4, 0.2, -0.3], [0.7, 0.1, -0.5, 0.2]], np.float32)
        actions, returns = np.array([0, 1, 1]), np.array([1.0, -2.0, 0.5], np.float32)
        algo.optimizer.zero_grad()
        algo.loss(Batch(obs=obs, actions=actions, returns=returns)).backward()
        algo.optimizer.step()
        # by hand: h = relu(x W1ᵀ + b1), z = h W2ᵀ + b2, dL/dz = -A (onehot(a) - softmax(z))
        pre = obs @ w["pi_body.0.weight"].T + w["pi_body.0.bias"]
        h = np.maximum(pre, 0)
        z = h @ w["pi_head.weight"].T + w["pi_head.bias"]
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        dz = -returns[:, None] * (np.eye(2)[actions] - p)
        dh = (dz @ w["pi_head.weight"]) * (pre > 0)
        grads = {"pi_head.weight": dz.T @ h, "pi_head.bias": dz.sum(0),
                 "pi_body.0.weight": dh.T @ obs, "pi_body.0.bias": dh.sum(0)}
        after = algo.policy.get_weights()
        for name, g in grads.items():
            expected = w[name] - 0.01 * g / (np.sqrt(0.01 * g * g) + 1e-5)
            np.testing.assert_allclose(after[name], expected, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(grads["pi_body.0.weight"]).max() > 1e-3  # a real gradient
    finally:
        algo.stop()


def test_normal_init_is_karpathys_and_orthogonal_keeps_a_small_policy_head():
    space, actions = gym.spaces.Box(-1, 1, (6400,)), gym.spaces.Discrete(2)
    torch.manual_seed(0)
    _, normal = build_policy(space, actions, ModelConfig(fcnet_hiddens=[200], fcnet_init="normal"))
    w1, w2 = normal.pi_body[0].weight.detach().numpy(), normal.pi_head.weight.detach().numpy()
    assert abs(w1.std() / (1 / 80) - 1) < 0.01 and abs(w1.mean()) < 1e-4  # N(0, 1/6400): 1.28M draws
    assert abs(w2.std() / (1 / np.sqrt(200)) - 1) < 0.1  # N(0, 1/200): 400 draws
    assert not normal.pi_body[0].bias.detach().numpy().any()
    _, orthogonal = build_policy(space, actions, ModelConfig(fcnet_hiddens=[200]))
    np.testing.assert_allclose(np.linalg.norm(orthogonal.pi_head.weight.detach().numpy(), axis=1), 0.01,
                               rtol=1e-5)


def test_pg_config_checks_its_keys():
    with pytest.raises(ConfigError, match=r"'decay_rate' must be in \(0, 1\), got 1.5"):
        PGConfig().training(decay_rate=1.5).validate()
    with pytest.raises(ConfigError, match=r"'mode' must be 'samples' or 'gradients', got 'grads'"):
        PGConfig().training(mode="grads")


def test_karpathy_preprocessing_of_a_frame():
    frame = np.full((210, 160, 3), 144, np.uint8)  # background everywhere
    frame[35 + 2 * 10, 2 * 7, 0] = 236  # one paddle pixel at (10, 7) of the 80x80 field
    frame[100, 50, 0] = 109  # the other background colour: erased
    out = KarpathyPong.preprocess(frame)
    assert out.shape == (6400,) and out.dtype == np.float32
    assert out.sum() == 1 and out[10 * 80 + 7] == 1


def test_karpathy_pong_env_observes_frame_differences():
    vec = make_vector_env("ALE/Pong-v5", 1, atari_preprocessing="karpathy")
    assert vec.single_observation_space.shape == (6400,)
    assert vec.single_action_space == gym.spaces.Discrete(2)
    obs, _ = vec.reset(seed=0)
    assert not obs.any()  # no previous frame yet
    values = set()
    for _ in range(60):
        obs, *_ = vec.step(np.array([0]))
        values |= set(np.unique(obs).tolist())
    assert values <= {-1.0, 0.0, 1.0} and {-1.0, 1.0} <= values  # moving objects show up
    vec.close()
