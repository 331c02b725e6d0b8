"""Recurrent policies (issue 34): the LSTM network and its numpy twin, RLlib's keys and calls, the
stateless CartPole, and bad input in one line naming the value."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from action_spaces import load_example
from custom_models import TorchRNNModel

from volley import ApexDQNConfig, DQNConfig, PGConfig, PPOConfig, TRPOConfig, VolleyError
from volley.acting import NumpyActor
from volley.algorithms.impala import APPOConfig, IMPALAConfig
from volley.catalog import build_policy
from volley.config import ModelConfig
from volley.errors import ConfigError
from volley.recurrent import LSTMActorCritic


@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))], ids=["discrete", "box"])
@pytest.mark.parametrize("model", [
    {}, {"vf_share_layers": True}, {"lstm_use_prev_action": True, "lstm_use_prev_reward": True},
    {"fcnet_hiddens": [], "vf_share_layers": True, "lstm_use_prev_reward": True},
], ids=["towers", "shared", "prev", "no-mlp"])
def test_the_numpy_lstm_acts_as_the_torch_network(space, model):
    config = ModelConfig(**{"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], **model})
    _, policy = build_policy(gym.spaces.Box(-1, 1, (5,)), space, config)
    assert isinstance(policy, LSTMActorCritic)
    actor = NumpyActor(5, space, config)
    actor.load(policy.get_flat_weights())
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(4, 5)).astype(np.float32)
    state = [rng.normal(size=(4, *s.shape)).astype(np.float32) for s in policy.initial_state()]
    assert [s.shape for s in actor.initial_state()] == [s.shape for s in policy.initial_state()]
    actions = rng.integers(0, 3, 4) if isinstance(space, gym.spaces.Discrete) else rng.normal(size=(4, 2)).astype(
        np.float32)
    prev = (actions, rng.normal(size=4).astype(np.float32)) if policy.reads_prev else None
    _, inputs, values, state_out = actor.act(obs, state, None, False, prev)  # type: ignore[arg-type]
    with torch.no_grad():
        torch_inputs, torch_values, torch_state = policy.outputs(
            torch.as_tensor(obs), [torch.as_tensor(s) for s in state], torch.ones(4, dtype=torch.int32),
            None if prev is None else (torch.as_tensor(prev[0]), torch.as_tensor(prev[1])))
    np.testing.assert_allclose(inputs, torch_inputs.numpy(), atol=1e-6)
    np.testing.assert_allclose(values, torch_values.numpy(), atol=1e-6)
    for mine, theirs in zip(state_out, torch_state, strict=True):
        np.testing.assert_allclose(mine, theirs.numpy(), atol=1e-6)


def test_rllib_keys_build_the_lstm_rllib_s_older_key_included():
    config = PPOConfig().training(model={"use_lstm": True, "lstm_cell_size": 32, "max_seq_len": 10,
                                         "lstm_use_prev_action_reward": True})
    model = config.model
    assert (model.use_lstm, model.lstm_cell_size, model.max_seq_len) == (True, 32, 10)
    assert model.lstm_use_prev_action and model.lstm_use_prev_reward
    with config.environment("StatelessCartPole-v1").resources(engine="local").build() as algo:
        assert [s.shape for s in algo.get_policy().get_initial_state()] == [(2, 32)] * 2  # the towers' h, c
        assert algo.workers.workers[0].actor is not None  # acts in numpy: the worker never builds torch's


def test_stateless_cartpole_observes_positions_only():
    env = gym.make("StatelessCartPole-v1")
    obs, _ = env.reset(seed=0)
    full, _ = gym.make("CartPole-v1").reset(seed=0)
    np.testing.assert_array_equal(obs, full[[0, 2]])
    masked, _ = gym.make("CartPoleNoVel-v1").reset(seed=0)  # rl-zoo's: velocities zeroed
    np.testing.assert_array_equal(masked, full * np.array([1, 0, 1, 0], np.float32))
    assert env.spec.max_episode_steps == 500 and env.spec.reward_threshold == 475


def test_compute_single_action_takes_and_returns_the_state_as_rllib_does():
    config = (PPOConfig().environment("StatelessCartPole-v1").resources(engine="local")
              .training(model={"use_lstm": True, "lstm_cell_size": 8, "lstm_use_prev_action": True}))
    with config.build() as algo:
        state = algo.get_policy().get_initial_state()
        action, state_out, extra = algo.compute_single_action(np.zeros(2, np.float32), state, prev_action=1)
        assert action in (0, 1) and [s.shape for s in state_out] == [(2, 8)] * 2 and any(s.any() for s in state_out)
        assert extra["action_prob"] == pytest.approx(np.exp(extra["action_logp"]))
        again = algo.compute_single_action(np.zeros(2, np.float32), state, prev_action=1)[1]
        for a, b in zip(state_out, again, strict=True):  # a function of its inputs: the state was not kept
            np.testing.assert_array_equal(a, b)
    with PPOConfig().environment("CartPole-v1").resources(engine="local").build() as algo:
        assert algo.compute_single_action(np.zeros(4, np.float32)) in (0, 1)  # feed-forward: the action alone
        action, state_out, extra = algo.compute_single_action(np.zeros(4, np.float32), full_fetch=True)
        assert state_out == [] and "vf_preds" in extra


@pytest.mark.parametrize(("build", "message"), [
    (lambda: DQNConfig().training(model={"use_lstm": True}).validate(),
     "model.use_lstm=True is not supported by dqn: it trains feed-forward Q-networks"),
    (lambda: ApexDQNConfig().training(model={"use_lstm": True}).validate(),
     "model.use_lstm=True is not supported by apex_dqn"),
    (lambda: PPOConfig().training(model={"use_lstm": True, "max_seq_len": 0}).validate(),
     "config key 'model.max_seq_len' must be > 0, got 0"),
    (lambda: PGConfig().training(model={"use_lstm": True, "lstm_cell_size": -4}).validate(),
     "config key 'model.lstm_cell_size' must be > 0, got -4"),
    (lambda: TRPOConfig().training(model={"use_lstm": True, "custom_model": "my_model"}).validate(),
     "model.use_lstm=True with custom_model='my_model': volley does not wrap a custom model in an LSTM"),
    (lambda: PPOConfig().environment("StatelessCartPole-v1").resources(engine="local").training(
        minibatch_size=16, model={"use_lstm": True, "max_seq_len": 32}).build(),
     "minibatch_size=16 is smaller than model.max_seq_len=32: a recurrent policy's minibatches are whole sequences"),
    # IMPALA's and APPO's learners train on fragments step by step: no sequences replayed from stored states
    (lambda: IMPALAConfig().training(model={"use_lstm": True}).validate(),
     "model.use_lstm=True is not supported by impala: its learner trains on fragments step by step, without "
     "replaying sequences from stored states"),
    (lambda: APPOConfig().training(model={"use_lstm": True}).validate(), "model.use_lstm=True is not supported by appo"),
    (lambda: IMPALAConfig().environment("CartPole-v1").resources(engine="local").training(
        model={"custom_model": TorchRNNModel}).build(),
     "custom model 'custom_models:TorchRNNModel' is recurrent (get_initial_state() is not empty): impala's learner "
     "trains on fragments step by step"),
    # the previous action of a composite space: refused (a Discrete one-hot, a float Box's values)
    (lambda: load_example("multidiscrete_actions").config("multidiscrete", 0).training(
        model={"use_lstm": True, "lstm_use_prev_action": True}).build(),
     "model.lstm_use_prev_action=True with action space MultiDiscrete([5 5 5 5]): volley's LSTM reads the previous "
     "action of a Discrete (one-hot) or float Box action space only"),
])
def test_bad_recurrent_settings_are_one_line_naming_the_value(build, message):
    with pytest.raises(ConfigError) as error:
        build()
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_state_that_does_not_fit_is_one_line_naming_it():
    config = (PPOConfig().environment("StatelessCartPole-v1").resources(engine="local")
              .training(model={"use_lstm": True, "lstm_cell_size": 8, "vf_share_layers": True}))
    obs = np.zeros(2, np.float32)
    with config.build() as algo:
        cases = [(None, "the policy is recurrent: compute_single_action needs its state, "
                        "state=algo.get_policy().get_initial_state() at an episode start (2 arrays of shapes "
                        "[(8,), (8,)])"),
                 ([np.zeros(8)], "compute_single_action got a state of 1 arrays; this policy's has 2"),
                 ([np.zeros(8), np.zeros((1, 8))], "compute_single_action got state[1] of shape (1, 8); this "
                                                   "policy's state[1] has shape (8,)")]
        for state, message in cases:
            with pytest.raises(VolleyError) as error:
                algo.compute_single_action(obs, state)
            assert message in str(error.value) and "\n" not in str(error.value)
