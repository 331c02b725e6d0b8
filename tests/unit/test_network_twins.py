"""Each network kind's numpy twin (what a rollout worker acts with) against its torch network (what
the learner trains), both made from one :class:`NetworkSpec`: on random observations, states and
weights, the twin's distribution inputs, values, recurrent state and log-probabilities are the
torch network's. The kinds without a twin (the CNN, a custom model) say so through the spec."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from volley import ModelConfig
from volley.acting import NumpyActor
from volley.catalog import build_network
from volley.config import NetworkKind
from volley.modelv2 import FullyConnectedNetwork
from volley.network_spec import NetworkSpec
from volley.networks.registry import TWIN_KINDS, twin_kind
from volley.rollout.streams import EnvStreams

Box, Discrete, Dict = gym.spaces.Box, gym.spaces.Discrete, gym.spaces.Dict
VECTOR = Box(-5.0, 5.0, (6,), np.float32)
MASKED = Dict({"action_mask": Box(0.0, 1.0, (5,)), "observations": VECTOR})  # the mask comes first

KINDS: dict[str, tuple[gym.Space, gym.Space, ModelConfig, NetworkKind, tuple[int, ...]]] = {
    "mlp actor-critic, discrete": (VECTOR, Discrete(4), ModelConfig(fcnet_hiddens=[16, 8]), "actor_critic", ()),
    "mlp actor-critic, box, shared layers": (VECTOR, Box(-1.0, 1.0, (2,), np.float32),
                                             ModelConfig(vf_share_layers=True, log_std_init=-0.5), "actor_critic", ()),
    "mlp actor-critic, masked": (MASKED, Discrete(5), ModelConfig(fcnet_activation="relu"), "actor_critic", ()),
    "q network": (VECTOR, Discrete(3), ModelConfig(fcnet_hiddens=[16]), "q", ()),
    "dueling q network, head layers": (VECTOR, Discrete(3), ModelConfig(fcnet_hiddens=[16]), "dueling_q", (8,)),
    "q network, masked": (MASKED, Discrete(5), ModelConfig(fcnet_hiddens=[16]), "q", ()),
    "squashed gaussian": (VECTOR, Box(-2.0, 2.0, (3,), np.float32), ModelConfig(fcnet_hiddens=[16, 16]),
                          "squashed_gaussian", ()),
    "lstm actor-critic": (VECTOR, Discrete(3), ModelConfig(use_lstm=True, lstm_cell_size=8, fcnet_hiddens=[16]),
                          "actor_critic", ()),
    "lstm actor-critic, shared, previous action and reward": (
        VECTOR, Box(-1.0, 1.0, (2,), np.float32),
        ModelConfig(use_lstm=True, lstm_cell_size=8, fcnet_hiddens=[16], vf_share_layers=True,
                    lstm_use_prev_action=True, lstm_use_prev_reward=True), "actor_critic", ()),
}


def test_every_registered_kind_is_held_to_its_torch_network():
    """A kind added to the registry without a case here fails this test."""
    covered = {id(twin_kind(network, model)) for _, _, model, network, _ in KINDS.values()}
    assert covered == {id(kind) for kind in TWIN_KINDS.values()}


def random_observations(spec: NetworkSpec, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Filtered observations as a worker feeds them: normal columns, and 0/1 action-mask columns
    (at least one action allowed per row) where the layout has a mask."""
    obs = rng.normal(size=(rows, *spec.observation.shape)).astype(np.float32)
    mask = spec.observation.mask
    if mask is not None:
        allowed = rng.integers(0, 2, size=(rows, mask.mask.stop - mask.mask.start))
        allowed[np.arange(rows), rng.integers(0, allowed.shape[1], rows)] = 1
        obs[:, mask.mask] = allowed
    return obs


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_numpy_twin_is_its_torch_network(kind, seed):
    obs_space, action_space, model, network, head_hiddens = KINDS[kind]
    spec = NetworkSpec.for_model(model, network, head_hiddens).with_spaces(obs_space, action_space)
    assert spec.acts_in_numpy
    torch.manual_seed(seed)
    policy = build_network(spec)
    rng = np.random.default_rng(seed)
    with torch.no_grad():  # random weights, not the initialisation's zeros and small heads
        for p in policy.parameters():
            p.add_(torch.as_tensor(rng.normal(scale=0.3, size=tuple(p.shape)), dtype=p.dtype))
        if network in ("q", "dueling_q"):
            policy.set_epsilon(0.25)
    actor = NumpyActor.of(spec)
    assert actor is not None
    actor.load(policy.get_flat_weights())  # as a worker is sent them: the flat vector alone
    rows = 5
    obs = random_observations(spec, rows, rng)
    state = [rng.normal(size=(rows, *np.shape(s))).astype(np.float32) for s in actor.initial_state()]
    assert [np.shape(s) for s in actor.initial_state()] == [tuple(s.shape) for s in policy.initial_state()]
    prev = None
    if actor.reads_prev:
        prev = (rng.normal(size=(rows, 2)).astype(np.float32), rng.normal(size=rows).astype(np.float32))
    actions, inputs, values, state_out = actor.act(obs, state, EnvStreams(seed, list(range(rows))), True, prev)
    with torch.no_grad():
        want_inputs, want_values, want_state = policy.outputs(
            torch.as_tensor(obs), [torch.as_tensor(s) for s in state],
            torch.ones(rows, dtype=torch.int32) if state else None,
            None if prev is None else (torch.as_tensor(prev[0]), torch.as_tensor(prev[1])))
        want_logp = policy.distribution_of(want_inputs).log_prob(torch.as_tensor(actions)).numpy()
    np.testing.assert_allclose(inputs, want_inputs.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, want_values.numpy(), rtol=1e-5, atol=1e-5)
    assert len(state_out) == len(want_state)
    for got, want in zip(state_out, want_state, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(actor.log_prob(inputs, actions), want_logp, rtol=1e-4, atol=1e-4)


def test_the_networks_without_a_twin_say_so_through_the_spec():
    """The Nature CNN and a custom model act in torch (a custom model in numpy only where it traces,
    through its own twin): the spec gives them no numpy actor."""
    images = NetworkSpec(ModelConfig()).with_spaces(Box(0, 255, (4, 84, 84), np.uint8), Discrete(3))
    custom = dataclasses.replace(NetworkSpec(ModelConfig(custom_model="fcnet")), model_class=FullyConnectedNetwork)
    custom = custom.with_spaces(VECTOR, Discrete(3))
    for spec in (images, custom):
        assert not spec.acts_in_numpy
        assert NumpyActor.of(spec) is None
    torch.manual_seed(0)
    policy = build_network(custom)
    twin = policy.numpy_twin()  # RLlib's MLP, traced into numpy
    assert twin is not None
    obs = random_observations(custom, 4, np.random.default_rng(0))
    _, inputs, values, _ = twin.act(obs, [], EnvStreams(0, list(range(4))), False)
    with torch.no_grad():
        want_inputs, want_values, _ = policy.outputs(torch.as_tensor(obs))
    np.testing.assert_allclose(inputs, want_inputs.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, want_values.numpy(), rtol=1e-5, atol=1e-5)
