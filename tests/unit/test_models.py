"""Observation preprocessing, action distributions and the spaces the model refuses."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from volley import ModelConfig, VolleyError
from volley.acting import NumpyActor
from volley.catalog import build_policy
from volley.heads import categorical_head, gaussian_head
from volley.models import DiagGaussian
from volley.observations import ObsPreprocessor
from volley.rollout.streams import EnvStreams


def test_discrete_observations_are_one_hot():
    pre = ObsPreprocessor(gym.spaces.Discrete(4))
    np.testing.assert_array_equal(pre(np.array([2, 0]), 2), [[0, 0, 1, 0], [1, 0, 0, 0]])


def test_dict_and_tuple_observations_are_flattened_in_key_order():
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "room": gym.spaces.Discrete(3)})
    pre = ObsPreprocessor(space)
    obs = {"pos": np.array([[0.5, -0.5]]), "room": np.array([1])}
    np.testing.assert_array_equal(pre(obs, 1), [[0.5, -0.5, 0, 1, 0]])
    tup = ObsPreprocessor(gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (1,)))))
    np.testing.assert_array_equal(tup((np.array([1]), np.array([[0.25]])), 1), [[0, 1, 0.25]])


def test_unsupported_spaces_are_named():
    with pytest.raises(VolleyError, match=r"^in Tuple\(.*\), the part \[1\]\['b'\]: action space Text\(1, 5, "
                                          r"charset=\w+\) is not supported: volley's policies take Discrete, "
                                          r"MultiDiscrete, MultiBinary, Box, and Tuple or Dict of these$"):
        build_policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Tuple(
            (gym.spaces.Discrete(2), gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Text(5)}))),
            ModelConfig())
    with pytest.raises(VolleyError, match=r"action space MultiDiscrete\(\[2 3\]\) is not supported by Q-learning"):
        build_policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiDiscrete([2, 3]), ModelConfig(), "q")
    with pytest.raises(VolleyError, match=r"observation space Text\(.*\) is not supported"):
        build_policy(gym.spaces.Text(5), gym.spaces.Discrete(2), ModelConfig())


def test_image_observations_go_to_the_cnn():
    _, net = build_policy(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6),
                          ModelConfig())
    dist, value = net(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert dist.logits.shape == (3, 6) and value.shape == (3,)
    _, rgb = build_policy(gym.spaces.Box(0, 255, (64, 48, 3), np.uint8), gym.spaces.Discrete(2),
                          ModelConfig())
    assert rgb(torch.zeros(2, 64, 48, 3, dtype=torch.uint8))[1].shape == (2,)


def test_categorical_sampling_frequencies_match_probabilities():
    probs = np.array([0.1, 0.6, 0.3])
    n = 20_000
    samples = categorical_head().draw(np.log(probs)[None].repeat(n, 0), EnvStreams(0, list(range(n))), True)
    freq = np.bincount(samples, minlength=3) / n
    np.testing.assert_allclose(freq, probs, atol=0.015)


def test_gaussian_draws_from_a_custom_models_means_and_log_stds():
    """RLlib's DiagGaussian inputs (means, then log-stds): draws and log-probabilities in numpy."""
    inputs = np.array([[0.5, -1.0, 0.2, -0.4]] * 20_000, np.float32)  # means (0.5, -1), log-stds (0.2, -0.4)
    draws = gaussian_head(None).draw(inputs, EnvStreams(0, list(range(20_000))), True)
    np.testing.assert_allclose(draws.mean(0), [0.5, -1.0], atol=0.03)
    np.testing.assert_allclose(draws.std(0), np.exp([0.2, -0.4]), rtol=0.03)
    ref = torch.distributions.Normal(torch.tensor([0.5, -1.0]), torch.tensor([0.2, -0.4]).exp())
    np.testing.assert_allclose(gaussian_head(None).log_prob(inputs[:3], draws[:3]),
                               ref.log_prob(torch.as_tensor(draws[:3])).sum(-1).numpy(), rtol=1e-5)
    assert (gaussian_head(None).draw(inputs[:2], EnvStreams(0, [0, 1]), False) == inputs[:2, :2]).all()


def test_gaussian_matches_torch_distributions():
    mean = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    log_std = torch.tensor([0.1, -0.3])
    ours = DiagGaussian(mean, log_std)
    ref = torch.distributions.Normal(mean, log_std.exp())
    actions = torch.tensor([[0.0, 1.0], [1.5, -0.2]])
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions).sum(-1))
    torch.testing.assert_close(ours.entropy(), ref.entropy().sum(-1))
    other = DiagGaussian(mean + 0.3, log_std * 0.5)
    ref_other = torch.distributions.Normal(mean + 0.3, (log_std * 0.5).exp())
    torch.testing.assert_close(ours.kl(other), torch.distributions.kl_divergence(ref, ref_other).sum(-1))


def test_flat_weights_round_trip():
    _, a = build_policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), ModelConfig())
    _, b = build_policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), ModelConfig())
    b.set_flat_weights(a.get_flat_weights())
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.parametrize(("action_space", "model", "network"), [
    (gym.spaces.Discrete(5), ModelConfig(), "actor_critic"),
    (gym.spaces.Discrete(5), ModelConfig(vf_share_layers=True, fcnet_activation="relu"), "actor_critic"),
    (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), ModelConfig(log_std_init=-0.7), "actor_critic"),
    (gym.spaces.Discrete(4), ModelConfig(fcnet_activation="relu"), "q"),
    (gym.spaces.Discrete(4), ModelConfig(), "dueling_q"),
    (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), ModelConfig(fcnet_hiddens=[32, 16, 8]), "actor_critic"),
    # RLlib's tuned CartPole: no activation between the layers
    (gym.spaces.Discrete(2), ModelConfig(fcnet_activation="linear", vf_share_layers=True), "actor_critic"),
    (gym.spaces.Discrete(3), ModelConfig(fcnet_activation="linear"), "q"),
    (gym.spaces.Box(-2.0, 2.0, (3,), np.float32), ModelConfig(fcnet_hiddens=[16, 8], fcnet_activation="relu"),
     "squashed_gaussian"),
    (gym.spaces.Box(-2.0, 2.0, (3,), np.float32), ModelConfig(), "squashed_gaussian_warmup"),
])
def test_acting_in_numpy_matches_the_torch_network(action_space, model, network):
    """Workers act through a numpy copy of an MLP's weights; it must be the torch network."""
    obs_space = gym.spaces.Box(-5.0, 5.0, (7,), np.float32)
    torch.manual_seed(0)
    warmup = network == "squashed_gaussian_warmup"  # SAC's uniformly random actions before it learns
    network = network.removesuffix("_warmup")
    _, policy = build_policy(obs_space, action_space, model, network)
    if network in ("q", "dueling_q"):
        policy.set_epsilon(0.3)
    if network == "squashed_gaussian":
        policy.set_random_actions(warmup)
    policy.set_flat_weights(policy.get_flat_weights() + 0.1)  # weights a worker was sent
    obs = np.random.default_rng(0).normal(size=(6, 7)).astype(np.float32)
    twin = policy.numpy_twin()
    assert twin is not None
    actions, dist_inputs, values, state = twin.act(obs, [], EnvStreams(0, list(range(6))), True)
    torch_actions, torch_inputs, torch_values, torch_state = policy._torch_twin().act(
        obs, [], EnvStreams(0, list(range(6))), True)
    assert state == torch_state == []  # feed-forward: no recurrent state
    np.testing.assert_allclose(actions, torch_actions, rtol=1e-5, atol=1e-6)  # the same draws
    np.testing.assert_allclose(dist_inputs, torch_inputs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, torch_values, rtol=1e-5, atol=1e-6)
    # log-probabilities of a fragment [T, B] at once, against torch's distribution step by step
    fragment_inputs, fragment_actions = np.stack([dist_inputs, dist_inputs + 0.5]), np.stack([actions] * 2)
    logp = twin.log_prob(fragment_inputs, fragment_actions)
    with torch.no_grad():
        want = [policy.distribution_of(torch.as_tensor(x)).log_prob(torch.as_tensor(a)).numpy()
                for x, a in zip(fragment_inputs, fragment_actions, strict=True)]
    np.testing.assert_allclose(logp, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(policy._torch_twin().log_prob(fragment_inputs, fragment_actions), want,
                               rtol=1e-5, atol=1e-5)
    mode = twin.act(obs, [], EnvStreams(0, list(range(6))), False)[0]
    np.testing.assert_allclose(mode, policy._torch_twin().act(obs, [], EnvStreams(0, [0]), False)[0],
                               rtol=1e-5, atol=1e-6)
    # a rollout worker acts from the flat weights alone, with no torch network to read them from
    actor = NumpyActor(7, action_space, model, network)
    actor.load(policy.get_flat_weights())
    for got, want in zip(actor.act(obs, [], EnvStreams(0, list(range(6))), True)[:3],
                         (actions, dist_inputs, values), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(actor.log_prob(fragment_inputs, fragment_actions), logp)
    with pytest.raises(VolleyError, match=r"weights of shape \(3,\) given to a network of \d+ weights"):
        actor.load(np.zeros(3, np.float32))


@pytest.mark.parametrize("model", [ModelConfig(fcnet_hiddens=[20]), ModelConfig(fcnet_hiddens=[20], vf_share_layers=True)])
def test_a_wide_input_of_mostly_zeros_acts_as_the_dense_product(model):
    """The first layer multiplies only the nonzero columns of a wide, sparse input (a Pong frame
    difference); a batch, a dense input and a narrow one go the ordinary way. All equal torch."""
    torch.manual_seed(0)
    _, policy = build_policy(gym.spaces.Box(-1.0, 1.0, (2048,), np.float32), gym.spaces.Discrete(2), model)
    rng = np.random.default_rng(0)
    sparse = np.zeros((3, 2048), np.float32)
    sparse[rng.integers(0, 3, 40), rng.integers(0, 2048, 40)] = rng.choice([-1.0, 1.0], 40)
    dense = rng.normal(size=(2, 2048)).astype(np.float32)
    twin = policy.numpy_twin()
    assert twin is not None
    for obs in (sparse, sparse[:1], dense):
        _, logits, values, _ = twin.act(obs, [], EnvStreams(0, list(range(len(obs)))), False)
        with torch.no_grad():
            want_logits, want_values, _ = policy.outputs(torch.as_tensor(obs))
        np.testing.assert_allclose(logits, want_logits.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(values, want_values.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", [ModelConfig(), ModelConfig(vf_share_layers=True)])
@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)])
def test_the_policy_alone_and_the_values_alone_equal_the_full_forward(model, action_space):
    """TRPO's and PG's policy steps read only the distribution, value fits only the values."""
    _, policy = build_policy(gym.spaces.Box(-5.0, 5.0, (4,), np.float32), action_space, model)
    obs = torch.as_tensor(np.random.default_rng(1).normal(size=(5, 4)), dtype=torch.float32)
    dist, values = policy(obs)
    actions = torch.tensor([0, 1, 2, 0, 1]) if isinstance(action_space, gym.spaces.Discrete) else obs[:, :2]
    torch.testing.assert_close(policy.distribution(obs).log_prob(actions), dist.log_prob(actions))
    torch.testing.assert_close(policy.value(obs), values)


def test_the_numpy_twin_follows_every_change_of_the_weights():
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    _, policy = build_policy(obs_space, gym.spaces.Discrete(2), ModelConfig())
    obs = np.ones((1, 3), np.float32)
    streams = EnvStreams(0, [0])
    before = policy.act(obs, [], streams, False)[2]
    policy.set_flat_weights(policy.get_flat_weights() * 2)  # sent new weights
    assert policy.act(obs, [], streams, False)[2] != before
    with torch.no_grad():  # stepped in place, as an optimizer does
        policy.vf_head.bias.add_(1.0)
    np.testing.assert_allclose(policy.act(obs, [], streams, False)[2],
                               policy(torch.as_tensor(obs))[1].detach().numpy(), atol=1e-6)


def test_the_seed_alone_fixes_the_initial_weights_whatever_torchs_threads():
    """The orthogonal init's QR rounds differently on 2 threads than on 1; an algorithm builds its
    network on one, so a process's first run (torch's default threads) equals its later ones."""
    from volley import PPOConfig

    config = PPOConfig().environment("Pendulum-v1").resources(engine="local").debugging(seed=3)
    weights = []
    for threads in (2, 1):
        torch.set_num_threads(threads)
        algo = config.build()
        weights.append(algo.policy.get_flat_weights())
        algo.stop()
    np.testing.assert_array_equal(weights[0], weights[1])
