"""Recurrent policies on the Ray engine (issue 34): workers carry and reset each environment's state
as the local reference does, evaluation workers act with it, and evaluation, compute_single_action
and checkpoints carry the state through an episode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley import PPOConfig, TorchModelV2
from volley.algorithms.ppo import PPO
from volley.learner.base import EVAL_SEED_OFFSET


def lstm(engine: str, **evaluation) -> PPOConfig:
    return (PPOConfig().environment("StatelessCartPole-v1").resources(engine=engine)
            .rollouts(num_workers=1, num_envs_per_worker=4, rollout_fragment_length=60)
            .training(train_batch_size=240, minibatch_size=60, num_epochs=2,
                      model={"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 9,
                             "lstm_use_prev_action": True})
            .evaluation(**evaluation).debugging(seed=4))


def test_ray_workers_cut_and_store_sequences_as_the_local_reference(ray_session):
    local, remote = lstm("local").build(), lstm("ray", evaluation_num_workers=1, evaluation_duration=2).build()
    try:
        for _ in range(2):  # the second batch goes on with the episodes (and states) the first left running
            a, b = local.sample(), remote.sample()
            assert {"seq_lens", "state_in_0", "state_in_1", "prev_actions", "prev_rewards"} <= set(a)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            local.update(a)
            remote.update(b)
        np.testing.assert_array_equal(local.policy.get_flat_weights(), remote.policy.get_flat_weights())
        stats = remote.evaluate()  # on the evaluation worker (a Ray actor), with the LSTM
        assert stats["episodes_this_iter"] == 2 and stats["episode_reward_mean"] > 0
    finally:
        local.stop()
        remote.stop()


class Alternator(TorchModelV2, nn.Module):
    """A recurrent model that pushes left on even steps of an episode and right on odd ones: what it
    does depends on nothing but the state it is given."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.scale = nn.Parameter(torch.tensor(10.0))
        self.value = nn.Linear(int(np.prod(obs_space.shape)), 1)

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]

    def forward(self, input_dict, state, seq_lens):
        steps = len(input_dict["obs_flat"]) // len(seq_lens)
        count = state[0] + torch.arange(steps, dtype=torch.float32)  # [S, T]: each row's step in its episode
        odd = torch.remainder(count.reshape(-1, 1), 2)
        self._obs = input_dict["obs_flat"]
        return self.scale * torch.cat([1 - odd, odd], dim=1), [state[0] + steps]

    def value_function(self):
        return self.value(self._obs).squeeze(1)


def test_evaluation_compute_single_action_and_checkpoints_carry_the_state(tmp_path):
    config = (PPOConfig().environment("CartPole-v1").resources(engine="local").debugging(seed=6)
              .training(model={"custom_model": Alternator}, train_batch_size=128, minibatch_size=64))
    with config.build() as algo:
        length = algo.evaluate(num_episodes=1)["episode_len_mean"]
        algo.train()
        path = algo.save(tmp_path / "checkpoint")
    with PPO.from_checkpoint(path) as restored:
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=6 + EVAL_SEED_OFFSET)  # the driver's environment's first episode
        state, actions, done = restored.get_policy().get_initial_state(), [], False
        while not done:
            action, state, extra = restored.compute_single_action(obs, state=state)
            actions.append(int(action))
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
        assert actions[:6] == [0, 1, 0, 1, 0, 1] and state[0].tolist() == [len(actions)]
        assert set(extra) == {"vf_preds", "action_dist_inputs", "action_logp", "action_prob"}
    assert len(actions) == length > 20  # as evaluate() played it; always pushing one way ends in ~10 steps
