"""DQN: config checks, ε schedules, ε-greedy acting, targets, target-network updates, transitions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import TimeLimit
from test_worker import Counter

from volley import ConfigError, DQNConfig
from volley.algorithms.dqn.learner import DQN, exploration_epsilon, q_targets
from volley.config import ModelConfig
from volley.heads import epsilon_greedy_head
from volley.models import EpsilonGreedy, QNetwork, trunk
from volley.rollout.streams import EnvStreams
from volley.rollout.worker import RolloutWorker


def small(**training) -> DQNConfig:
    """One MountainCar env, 4 steps an iteration: its episodes (200 steps) never end in a test."""
    return (DQNConfig().environment("MountainCar-v0").resources(engine="local")
            .rollouts(num_envs_per_worker=1, rollout_fragment_length=4)
            .training(learning_starts=0, train_intensity=1.0, minibatch_size=8,
                      model={"fcnet_hiddens": [16]}, **training).debugging(seed=3))


@pytest.mark.parametrize(("training", "message"), [
    ({"epsilon_start": 0.1, "epsilon_end": 0.5}, r"epsilon_end=0.5 is larger than epsilon_start=0.1"),
    ({"n_step": 0}, r"'n_step' must be > 0, got 0"),
    ({"epsilon_start": 1.5}, r"'epsilon_start' must be in \[0, 1\], got 1.5"),
    ({"tau": 1.5}, r"'tau' must be in \(0, 1\], got 1.5"),
    ({"learning_starts": 500, "replay_buffer_capacity": 100}, r"learning_starts=500 is larger than "
     r"replay_buffer_capacity=100"),
    ({"epsilon_schedule": "exponential", "epsilon_end": 0.0}, r"never reaches epsilon_end=0.0"),
    ({"prioritized_replay_alpha": -1.0}, r"'prioritized_replay_alpha' must be >= 0, got -1.0"),
])
def test_config_errors_name_the_value(training, message):
    with pytest.raises(ConfigError, match=message):
        DQNConfig().training(**training).validate()


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match=r"did you mean.*'target_update_freq'"):
        DQNConfig().training(target_update_frequency=10)
    assert DQNConfig().training(target_network_update_freq=500).target_update_freq == 500  # RLlib's


def test_epsilon_schedules():
    linear = DQNConfig().training(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=100)
    assert [exploration_epsilon(linear, t) for t in (0, 50, 100, 1000)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    exponential = linear.copy().training(epsilon_end=0.01, epsilon_schedule="exponential")
    # a constant factor per step: 0.01 ** (t / 100)
    assert [exploration_epsilon(exponential, t) for t in (0, 25, 50, 100, 1000)] == pytest.approx(
        [1.0, 0.1**0.5, 0.1, 0.01, 0.01])


def test_epsilon_greedy_acts_greedily_with_probability_one_minus_epsilon():
    q = torch.tensor([0.0, 2.0, 1.0]).expand(30_000, 3)
    actions = epsilon_greedy_head(0.3).draw(q.numpy(), EnvStreams(0, list(range(30_000))), True)
    # greedy 0.7 + 0.3/3, each other action 0.3/3
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 30_000, [0.1, 0.8, 0.1], atol=0.01)
    two = EpsilonGreedy(q[:2], 0.3)
    torch.testing.assert_close(two.log_prob(torch.tensor([1, 0])).exp(), torch.tensor([0.8, 0.1]))
    assert (EpsilonGreedy(q[:2], 1.0).mode() == 1).all()  # the mode stays greedy at ε = 1


def linear_q(weight: list[list[float]]) -> QNetwork:
    """A Q-network without hidden layers: Q(s) = W s."""
    model = ModelConfig(fcnet_hiddens=[])
    net = QNetwork(*trunk((2,), False, model), gym.spaces.Discrete(2), model, dueling=False)
    with torch.no_grad():
        net.q_head.weight.copy_(torch.tensor(weight))
        net.q_head.bias.zero_()
    return net


def test_double_q_target_on_a_hand_example():
    online, target = linear_q([[1, 0], [0, 1]]), linear_q([[0, 1], [1, 0]])
    next_obs = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
    returns, discounts = torch.tensor([0.5, 1.0]), torch.tensor([0.9, 0.0])
    # online Q(s') = [1, 2], [3, 1]: it picks actions 1 and 0; target Q(s') = [2, 1], [1, 3]
    double = q_targets(online, target, returns, next_obs, discounts, double_q=True)
    torch.testing.assert_close(double, torch.tensor([0.5 + 0.9 * 1, 1.0 + 0.0 * 1]))
    vanilla = q_targets(online, target, returns, next_obs, discounts, double_q=False)
    torch.testing.assert_close(vanilla, torch.tensor([0.5 + 0.9 * 2, 1.0]))


def test_dueling_q_values_average_to_the_state_value():
    model = ModelConfig(fcnet_hiddens=[8])
    net = QNetwork(*trunk((3,), False, model), gym.spaces.Discrete(4), model, dueling=True)
    obs = torch.randn(5, 3)
    assert net.value_head is not None
    torch.testing.assert_close(net.q_values(obs).mean(-1), net.value_head(net.body(obs)).squeeze(-1))


def test_target_network_hard_update_happens_exactly_every_target_update_freq():
    algo = small(target_update_freq=12).build()
    try:
        synced_at, previous = [], algo.target.get_flat_weights()
        for _ in range(10):
            result = algo.train()
            online, target = algo.policy.q_parameters(), algo.target.q_parameters()
            if all(torch.equal(a, b) for a, b in zip(online, target, strict=True)):
                synced_at.append(result["timesteps_total"])
            else:  # between updates the target stays where it was
                np.testing.assert_array_equal(algo.target.get_flat_weights(), previous)
            assert result["num_updates"] == 4  # train_intensity 1: one update per sampled step
            previous = algo.target.get_flat_weights()
        assert synced_at == [12, 24, 36]
    finally:
        algo.stop()


def q_weights(net: QNetwork) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(net.q_parameters()).detach().clone()


def test_polyak_update_moves_the_target_a_fraction_tau():
    algo = small(tau=0.25, target_update_freq=1000).build()
    try:
        algo.train()
        before, online = q_weights(algo.target), q_weights(algo.policy)
        assert not torch.equal(before, online)
        algo.update_target()
        torch.testing.assert_close(q_weights(algo.target), 0.75 * before + 0.25 * online)
    finally:
        algo.stop()


def test_epsilon_travels_to_the_workers_with_the_weights():
    algo = small(epsilon_start=1.0, epsilon_end=0.0, epsilon_decay_steps=8).build()
    try:
        worker = algo.workers.workers[0]
        assert [algo.train()["epsilon"] for _ in range(3)] == [1.0, 0.5, 0.0]
        assert worker.policy.epsilon.item() == 0.0  # the last sample ran with ε = 0
    finally:
        algo.stop()


class TerminateAt(gym.Wrapper):
    """Ends test_worker's Counter with a termination (not a truncation) when it reaches ``end``."""

    def __init__(self, env: gym.Env, end: int) -> None:
        super().__init__(env)
        self.end = end

    def step(self, action):
        obs, reward, _, truncated, info = self.env.step(action)
        return obs, reward, bool(obs[0] >= self.end), truncated, info


@pytest.mark.parametrize(("end", "discounts"), [(3, [0.25, 0.0, 0.0]), (100, [0.25, 0.25, 0.5])])
def test_workers_return_n_step_transitions(end, discounts):
    """Episodes of 3 steps, terminated (no bootstrap) or truncated (bootstrap from the final
    observation, 3); 2-step returns with gamma 0.5."""
    config = (DQNConfig().environment("counter").rollouts(num_envs_per_worker=1, rollout_fragment_length=8)
              .training(n_step=2, gamma=0.5))
    worker = RolloutWorker(config, 0, DQN.postprocess, plan=config.plan(),
                           env_creator=lambda cfg: TimeLimit(TerminateAt(Counter(), end), 3))
    batch = worker.sample(worker.policy.get_flat_weights(), None).batch
    # steps 0-2 and 4-6 are two episodes (3 and 7 are reset steps, dropped); the fragment ends at 7
    np.testing.assert_array_equal(batch["obs"][:, 0], [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(batch["next_obs"][:, 0], [2, 3, 3, 2, 3, 3])
    np.testing.assert_allclose(batch["returns"], [1.5, 1.5, 1.0] * 2)
    np.testing.assert_allclose(batch["discounts"], discounts * 2)


def test_checkpoint_restores_the_q_network_and_restarts_the_target_from_it(tmp_path):
    algo = small().build()
    try:
        for _ in range(3):
            algo.train()
        path = algo.save(tmp_path / "dqn")
        weights = algo.policy.get_flat_weights()
    finally:
        algo.stop()
    restored = DQN.from_checkpoint(path)
    try:
        np.testing.assert_array_equal(restored.policy.get_flat_weights(), weights)
        np.testing.assert_array_equal(restored.target.get_flat_weights(), weights)
        assert restored.timesteps_total == 12 and len(restored.replay) == 0
    finally:
        restored.stop()


def test_prioritized_replay_trains_and_updates_priorities():
    algo = small(prioritized_replay=True).build()
    try:
        for _ in range(3):
            result = algo.train()
        assert np.isfinite(result["loss"]) and result["num_updates"] == 4
        priorities = algo.replay.tree.get(np.arange(len(algo.replay)))
        assert len(set(priorities.round(8).tolist())) > 1  # TD errors replaced the initial priority
    finally:
        algo.stop()
