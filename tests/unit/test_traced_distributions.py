"""Custom action distributions traced into numpy (volley.traced_dists): given the same noise, the
program's actions are those the distribution's own code draws in torch; its deterministic actions
and log-probabilities are torch's; its draws, from the worker's streams, follow the distribution
(chi-square and KS tests at a fixed seed); a distribution that does not trace samples and trains
in torch, and the run says so once."""

from __future__ import annotations

import action_spaces
import gymnasium as gym
import numpy as np
import pytest
import torch
from scipy import stats

from volley import PPOConfig
from volley import traced as traced_module
from volley.catalog import build_policy
from volley.distributions import TorchCategorical, TorchDiagGaussian, custom_head, flat_actions
from volley.rollout.streams import EnvStreams
from volley.traced_dists import Noise, noise_as_inputs, numpy_noise, stream_draw

N = 6  # environments acting at once


class DrawnByMultinomial(TorchCategorical):
    """A categorical that draws with ``torch.multinomial`` itself: no numpy equivalent."""

    def sample(self):
        return torch.multinomial(self.dist.probs, 1).squeeze(1)


CASES = {  # name: observation space, action space, model keys
    "RLlib's autoregressive example (its model between the draws)": (
        gym.spaces.Discrete(2), gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(2)]),
        {"custom_model": "autoregressive_model", "custom_action_dist": "binary_autoreg_dist"}),
    "TorchCategorical on volley's network": (
        gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(3), {"custom_action_dist": TorchCategorical}),
    "TorchDiagGaussian on volley's network": (
        gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        {"custom_action_dist": TorchDiagGaussian}),
}


def policy_and_obs(name: str, rows: int = N, seed: int = 0):
    obs_space, action_space, keys = CASES[name]
    torch.manual_seed(seed)  # the initial weights
    pre, policy = build_policy(obs_space, action_space, PPOConfig().training(model=keys).model)
    policy.eval()
    obs_space.seed(seed)
    obs = pre(np.stack([obs_space.sample() for _ in range(rows)]), rows)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # weights away from their initial ones (heads near zero), the draws still varied
        for p in policy.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))
    return policy, obs


def dist_class_and_model(policy):
    return policy.traced_dist.dist_class, policy.traced_dist.model


@pytest.mark.parametrize("name", list(CASES))
def test_the_traced_distribution_acts_as_its_torch_code_does(name):
    policy, obs = policy_and_obs(name)
    actions, inputs = policy.act(obs, [], EnvStreams(3, range(N)), True)[:2]
    assert None not in policy.traced_dist.programs.values(), f"{name} sampled in torch"
    dist_class, model = dist_class_and_model(policy)
    # the same noise from the same streams, given to the distribution's own sample() in torch
    (program, asked), = [p for k, p in policy.traced_dist.programs.items() if k[0] == "sample"]
    noise = numpy_noise(asked, stream_draw(EnvStreams(3, range(N))), inputs.dtype)
    with torch.no_grad(), noise_as_inputs(Noise([torch.as_tensor(n) for n in noise])):
        want = flat_actions(dist_class(torch.as_tensor(inputs), model).sample(), policy.layout).numpy()
    assert actions.dtype == want.dtype
    if actions.dtype.kind == "f":
        np.testing.assert_allclose(actions, want, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(actions, want)
        assert len(np.unique(actions, axis=0)) > 1  # the noise decides: not one action for every row

    in_torch = custom_head(dist_class, model, policy.layout, torch.device("cpu"))
    mode = policy.act(obs, [], EnvStreams(3, range(N)), False)[0]
    np.testing.assert_array_equal(mode, in_torch.draw(inputs, EnvStreams(3, range(N)), False))
    fragment = np.stack([actions, mode])  # [T, B, ...] as a fragment's log-probabilities are read
    np.testing.assert_allclose(policy.log_prob(np.stack([inputs, inputs]), fragment),
                               in_torch.log_prob(np.stack([inputs, inputs]), fragment), rtol=1e-5, atol=1e-6)
    assert {k[0] for k, p in policy.traced_dist.programs.items() if p is not None} == \
        {"sample", "deterministic_sample", "logp"}


def test_the_autoregressive_draws_follow_the_joint_distribution():
    """4000 rows of one observation, each drawn from its own stream: the counts of the four joint
    actions against P(a1) P(a2 | a1) from the distribution's logp (chi-square), and against torch's
    own sample() of the same rows (a two-sample chi-square)."""
    rows = 4000
    policy, obs = policy_and_obs("RLlib's autoregressive example (its model between the draws)", rows=1)
    obs = np.repeat(obs, rows, 0)
    actions, inputs = policy.act(obs, [], EnvStreams(5, range(rows)), True)[:2]
    joint = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    dist_class, model = dist_class_and_model(policy)
    with torch.no_grad():
        probs = dist_class(torch.as_tensor(inputs[:4]), model).logp(torch.as_tensor(joint)).exp().numpy()
        torch.manual_seed(5)
        theirs = flat_actions(dist_class(torch.as_tensor(inputs), model).sample(), policy.layout).numpy()
    assert probs.sum() == pytest.approx(1.0, rel=1e-5) and probs.min() > 0.05  # four likely outcomes
    counts = [(actions == a).all(1).sum() for a in joint]
    expected = probs.astype(np.float64) / probs.astype(np.float64).sum() * rows
    assert stats.chisquare(counts, expected).pvalue > 0.001, (counts, expected)
    torch_counts = [(theirs == a).all(1).sum() for a in joint]
    assert stats.chi2_contingency([counts, torch_counts]).pvalue > 0.001, (counts, torch_counts)


def test_the_gaussian_draws_are_normal_about_the_mean():
    """Each dimension's draws, standardised by the distribution's mean and standard deviation, are
    standard normal (KS test)."""
    rows = 4000
    policy, obs = policy_and_obs("TorchDiagGaussian on volley's network", rows=1)
    actions, inputs = policy.act(np.repeat(obs, rows, 0), [], EnvStreams(5, range(rows)), True)[:2]
    mean, log_std = np.split(inputs, 2, axis=1)
    z = (actions - mean) / np.exp(log_std)
    for column in z.T:
        assert stats.kstest(column, "norm").pvalue > 0.001


def train_twice(model: dict, env: str, monkeypatch, capfd) -> tuple[dict, list[str]]:
    """Two PPO iterations with ``model``: the last result, and the log's lines on custom action dists."""
    monkeypatch.setattr(traced_module, "_SAID", set())
    config = (PPOConfig().environment(env).resources(engine="local")
              .rollouts(num_envs_per_worker=2, rollout_fragment_length=64)
              .training(train_batch_size=256, minibatch_size=64, model=model))
    with config.build() as algo:
        before = algo.policy.get_flat_weights()
        algo.train()
        result = algo.train()
        assert np.abs(algo.policy.get_flat_weights() - before).max() > 0  # it learned
    return result, [line for line in capfd.readouterr().err.splitlines() if "custom action dist" in line]


def test_a_distribution_that_does_not_trace_trains_in_torch_and_says_so_once(monkeypatch, capfd):
    result, lines = train_twice({"custom_action_dist": DrawnByMultinomial}, "CartPole-v1", monkeypatch, capfd)
    assert result["training_iteration"] == 2 and np.isfinite(result["policy_loss"])
    assert "volley: custom action dist DrawnByMultinomial's sample acts in torch (no numpy equivalent of " \
           "aten.multinomial.default)" in lines
    assert len(lines) == len(set(lines)) == 3, lines  # sample in torch; deterministic and logp in numpy


def test_the_autoregressive_distribution_trains_in_numpy(monkeypatch, capfd):
    assert action_spaces  # registers the environment, the model and the distribution
    result, lines = train_twice({"custom_model": "autoregressive_model", "custom_action_dist": "binary_autoreg_dist"},
                                "correlated_actions", monkeypatch, capfd)
    assert result["training_iteration"] == 2 and np.isfinite(result["policy_loss"])
    assert "volley: custom action dist BinaryAutoregressiveDist's sample acts in numpy (traced once)" in lines
    assert not [line for line in lines if "acts in torch" in line], lines


def test_fragments_of_any_length_share_a_log_prob_program():
    """Fragments of 5 and of 7 rows are scored by one program (rows padded to 8), as torch scores them."""
    policy, obs = policy_and_obs("RLlib's autoregressive example (its model between the draws)", rows=7)
    actions, inputs = policy.act(obs, [], EnvStreams(3, range(7)), True)[:2]
    in_torch = custom_head(*dist_class_and_model(policy), policy.layout, torch.device("cpu"))
    for rows in (5, 7):
        np.testing.assert_allclose(policy.log_prob(inputs[:rows], actions[:rows]),
                                   in_torch.log_prob(inputs[:rows], actions[:rows]), rtol=1e-5, atol=1e-6)
    assert [k[1][0] for k in policy.traced_dist.programs if k[0] == "logp"] == [(8, 16)]


def test_a_distribution_that_does_not_trace_draws_from_the_workers_torch_generator():
    """Its sample() in torch, from the generator the streams keep: a function of the seed, carried
    from step to step, torch's global generator left as it was."""
    obs_space, action_space, _ = CASES["TorchCategorical on volley's network"]
    _, policy = build_policy(obs_space, action_space,
                             PPOConfig().training(model={"custom_action_dist": DrawnByMultinomial}).model)
    obs = np.random.default_rng(0).uniform(-1, 1, (50, 4)).astype(np.float32)

    def draws(seed: int) -> np.ndarray:
        streams = EnvStreams(seed, list(range(50)))
        return np.stack([policy.act(obs, [], streams, True)[0] for _ in range(3)])

    outside = torch.get_rng_state()
    first = draws(0)
    assert torch.equal(torch.get_rng_state(), outside)
    assert [k[0] for k, p in policy.traced_dist.programs.items() if p is None] == ["sample"]
    np.testing.assert_array_equal(draws(0), first)
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(draws(1), first)
