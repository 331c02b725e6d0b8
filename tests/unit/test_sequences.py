"""Sequences (issue 34): where workers cut their fragments, the states they store, the learner's
padded view, and the learner replaying exactly what the workers computed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from action_spaces import load_example
from custom_models import TorchRNNModel

from volley import PGConfig, PPOConfig, TorchCategorical, TRPOConfig
from volley.algorithm import Algorithm
from volley.catalog import build_policy
from volley.rollout.advantages import gae_columns
from volley.rollout.batch import Batch
from volley.rollout.sequences import Sequences, sequence_starts, stored_states, truncated
from volley.rollout.worker import RolloutWorker

# env 0: an episode ends at step 2, step 3 is its reset step; env 1: no end. Rows: env 0's 7 valid
# steps (0, 1, 2, 4, 5, 6, 7), then env 1's 8.
VALID = np.array([[1, 1, 1, 0, 1, 1, 1, 1], [1] * 8], bool)
ENDS = np.zeros((2, 8), bool)
ENDS[0, 2] = True


def test_a_sequence_starts_at_each_environments_first_row_each_episode_and_every_max_seq_len_rows():
    starts = sequence_starts(VALID, ENDS, max_seq_len=3)
    #             env 0: first, after the end, +3      env 1: first, +3, +3
    expected = [1, 0, 0, 1, 0, 0, 1] + [1, 0, 0, 1, 0, 0, 1, 0]
    np.testing.assert_array_equal(starts, np.array(expected, bool))


def test_each_sequence_keeps_the_state_its_first_step_acted_with():
    states = [[np.array([[10.0 * t], [10.0 * t + 1]], np.float32)] for t in range(8)]  # step t, env j: 10t + j
    columns = stored_states(VALID, ENDS, 3, states)
    np.testing.assert_array_equal(columns["seq_lens"], [3, 3, 1, 3, 3, 2])
    np.testing.assert_array_equal(columns["state_in_0"][:, 0], [0, 40, 70, 1, 31, 61])


def sequence_batch() -> Batch:
    return Batch({"obs": np.arange(10, dtype=np.float32)[:, None], "actions": np.arange(10) % 2,
                  "seq_lens": np.array([4, 1, 3, 2], np.int32), "state_in_0": np.arange(4, dtype=np.float32)[:, None]})


def test_the_view_pads_each_sequence_with_its_last_step_and_masks_the_padding():
    view = Sequences.of(sequence_batch())
    assert len(sequence_batch()) == 10 and view.steps == 10
    np.testing.assert_array_equal(view["obs"][:, 0], [0, 1, 2, 3, 4, 4, 4, 4, 5, 6, 7, 7, 8, 9, 9, 9])
    np.testing.assert_array_equal(view.mask, [1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(view.real(view["obs"])[:, 0], np.arange(10))
    assert view.mean(view["obs"][:, 0]) == pytest.approx(4.5)  # the steps' mean: padding weighs nothing
    np.testing.assert_allclose(view.standardized(view["obs"][:, 0])[view.mask > 0],
                               (np.arange(10) - 4.5) / np.arange(10).std(ddof=1), rtol=1e-6)
    assert view.inputs["state"][0][:, 0].tolist() == [0, 1, 2, 3] and view.inputs["seq_lens"].tolist() == [4, 1, 3, 2]


def test_minibatches_are_whole_sequences_about_size_steps_each():
    view = Sequences.of(sequence_batch())
    chunks = list(view.minibatches(4, np.random.default_rng(0)))
    assert len(chunks) == 3  # ceil(10 / 4): every size-4 stretch of the shuffled steps starts a sequence
    seen = sorted(float(s[0]) for chunk in chunks for s in chunk.state[0])
    assert seen == [0, 1, 2, 3] and sum(chunk.steps for chunk in chunks) == 10
    for chunk in chunks:  # each sequence's rows travel with its state
        rows = chunk["obs"].reshape(len(chunk.seq_lens), -1)
        starts = np.cumsum([0, 4, 1, 3])[chunk.state[0][:, 0].astype(int)]
        np.testing.assert_array_equal(rows[:, 0], starts)


def test_a_batch_cut_to_fewer_steps_keeps_whole_sequences_and_a_prefix_of_the_last():
    cut = truncated(sequence_batch(), 6)
    assert len(cut) == 6 and cut["seq_lens"].tolist() == [4, 1, 1] and cut["state_in_0"][:, 0].tolist() == [0, 1, 2]


# -- the learner replays the workers' computation ----------------------------------------------------


def with_env_and_ends(columns: dict, config: PPOConfig) -> dict:
    """PPO's postprocess, keeping each row's environment and whether it ended an episode."""
    out = gae_columns(columns, config)
    out["env"] = np.broadcast_to(np.arange(columns["values"].shape[1]), columns["values"].shape)
    out["ended"] = columns["terminated"] | columns["truncated"]
    return out


LSTM = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 6}


@pytest.mark.parametrize("model", [
    LSTM, {**LSTM, "vf_share_layers": True},
    {**LSTM, "lstm_use_prev_action": True, "lstm_use_prev_reward": True},
    {"custom_model": TorchRNNModel, "max_seq_len": 6},  # acts in torch
], ids=["lstm", "lstm-shared", "lstm-prev-action-reward", "custom-rnn"])
def test_replayed_log_probabilities_equal_the_workers_at_every_kind_of_sequence_start(model):
    config = (PPOConfig().environment("CartPole-v1").rollouts(num_envs_per_worker=3, rollout_fragment_length=40)
              .training(model=model).debugging(seed=1))
    worker = RolloutWorker(config, 0, with_env_and_ends, plan=config.plan(num_workers=1))
    torch.manual_seed(3)
    _, learner = build_policy(worker.observation_space, worker.action_space, config.model)
    weights = learner.get_flat_weights()
    kinds = []
    for fragment in range(2):  # the second starts in the middle of episodes
        batch = worker.sample(weights, None).batch
        view = Sequences.of(batch).map(torch.as_tensor)
        with torch.no_grad():
            dist, values = learner(**view.inputs)
        np.testing.assert_allclose(view.real(dist.log_prob(view["actions"])).numpy(), batch["logp"], atol=1e-6)
        np.testing.assert_allclose(view.real(values).numpy(), batch["values"], atol=1e-5, rtol=1e-6)
        first = np.cumsum(batch["seq_lens"]) - batch["seq_lens"]
        for row, state in zip(first, batch["state_in_0"], strict=True):  # what cut each sequence
            if row == 0 or batch["env"][row - 1] != batch["env"][row]:
                # the first fragment starts episodes; the second goes on with them (or starts one, where an
                # episode ended on the first fragment's last step)
                kind = "fragment start" if state.any() else "episode start"
                assert fragment == 1 or not state.any()
            elif batch["ended"][row - 1]:
                kind = "episode start"
                assert not state.any()
            else:
                kind = "max_seq_len"
                assert state.any() and batch["seq_lens"][list(first).index(row) - 1] == 6
            kinds.append(kind)
    assert set(kinds) == {"fragment start", "episode start", "max_seq_len"}


@pytest.mark.parametrize(("env", "env_config", "model"), [
    ("legal_moves", {"n": 6, "legal": 2}, LSTM),  # a Dict observation's action mask; the env raises on a leak
    ("repeat_after_me", {"space": "nested"}, {**LSTM, "lstm_use_prev_reward": True}),  # Tuple/Dict/Box parts
    ("StatelessCartPole-v1", {}, {**LSTM, "custom_action_dist": TorchCategorical}),  # its LSTM in torch
], ids=["masked", "composite", "custom-dist"])
def test_an_lstm_replays_masked_composite_and_custom_distribution_actions_as_its_worker_drew_them(
        env, env_config, model):
    """use_lstm with main's action distributions: the LSTM's logits masked, composite spaces and a
    custom action distribution, acting (in numpy, or the forward pass in torch for the custom
    distribution, whose draws are traced into numpy) and replayed."""
    load_example("action_masking"), load_example("multidiscrete_actions")  # register their environments
    config = (PPOConfig().environment(env, env_config=env_config)
              .rollouts(num_envs_per_worker=3, rollout_fragment_length=40).training(model=model).debugging(seed=1))
    worker = RolloutWorker(config, 0, gae_columns, plan=config.plan(num_workers=1))
    assert (worker.actor is None) == ("custom_action_dist" in model)
    torch.manual_seed(3)
    _, learner = build_policy(worker.observation_space, worker.action_space, config.model,
                              action_mask_key=config.action_mask_key)
    for _ in range(2):
        batch = worker.sample(learner.get_flat_weights(), None).batch
        assert len(batch["seq_lens"]) > len(batch) // 6  # cut into sequences of at most max_seq_len
        view = Sequences.of(batch).map(torch.as_tensor)
        with torch.no_grad():
            dist, values = learner(**view.inputs)
            logp = dist.log_prob(view["actions"])
        np.testing.assert_allclose(view.real(logp).numpy(), batch["logp"], atol=1e-5)
        np.testing.assert_allclose(view.real(values).numpy(), batch["values"], atol=1e-5, rtol=1e-6)
    if env == "legal_moves":  # the mask's columns come first: every action the worker took is allowed
        assert (batch["obs"][np.arange(len(batch)), batch["actions"]] == 1).all()
        forbidden = view["obs"][:, :6] == 0
        assert (dist.inputs[0][forbidden] == torch.finfo(torch.float32).min).all()  # the LSTM's logits masked


# -- padding changes no gradient ---------------------------------------------------------------------


@pytest.mark.parametrize("config_class", [PPOConfig, PGConfig, TRPOConfig])
def test_padding_changes_no_update(config_class, monkeypatch):
    """The same update whatever the padded steps hold: their rows filled with random values instead
    of copies of each sequence's last step, the weights after an update are the same."""
    model = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 9}
    config = (config_class().environment("StatelessCartPole-v1").resources(engine="local").debugging(seed=2)
              .rollouts(num_envs_per_worker=2, rollout_fragment_length=50).training(model=model))
    if config_class is PPOConfig:
        config.training(train_batch_size=100, minibatch_size=50, num_epochs=2)
    elif config_class is PGConfig:
        config.training(batch_episodes=2, lr=1e-2)
    else:
        config.training(train_batch_size=100, vf_minibatch_size=50, vf_epochs=2)
    original = Algorithm.sequences
    noise = np.random.default_rng(0)

    def noisy(self, batch, keys=None):
        view = original(self, batch, keys)
        padding = view.mask == 0
        assert padding.any()
        for key, column in view.columns.items():
            shape = column[padding].shape
            filler = noise.integers(0, 2, shape) if key == "actions" else noise.normal(size=shape) * 3
            column[padding] = torch.as_tensor(filler, dtype=column.dtype)
        return view

    weights = []
    for sequences in (original, noisy):
        monkeypatch.setattr(Algorithm, "sequences", sequences)
        with config.build() as algo:
            before = algo.policy.get_flat_weights()
            algo.train()
            weights.append(algo.policy.get_flat_weights())
    assert np.abs(weights[0] - before).max() > 1e-5  # it did learn
    np.testing.assert_array_equal(weights[0], weights[1])
