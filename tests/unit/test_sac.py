"""SAC: the squashed Gaussian's log-probability, the critic target, the losses' gradients, target
updates, the update schedule, config keys (RLlib's and SB3's) and bad input, each against an
independent computation."""

from __future__ import annotations

import math
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import PendulumEnv
from torch import distributions as td

from volley import ConfigError, DefaultCallbacks, SACConfig, register_env
from volley.algorithms.sac.loss import critic_targets, sac_losses
from volley.config import ModelConfig
from volley.distributions import SquashedGaussian
from volley.heads import squashed_gaussian_logp
from volley.models import SquashedGaussianActor, StackedQ
from volley.replay import n_step_columns
from volley.schedules import value_at


def small(**training) -> SACConfig:
    """One Pendulum env, 8 steps a round, small networks, learning from the first step."""
    return (SACConfig().environment("Pendulum-v1").resources(engine="local")
            .rollouts(rollout_fragment_length=8)
            .training(**{"learning_starts": 0, "train_batch_size": 16, "model": {"fcnet_hiddens": [16]},
                         "q_model_config": {"fcnet_hiddens": [16]}, **training})
            .reporting(min_sample_timesteps_per_iteration=0, min_time_s_per_iteration=0).debugging(seed=3))


# -- the squashed Gaussian -------------------------------------------------------------------


def test_squashed_gaussian_log_prob_is_the_change_of_variables():
    """log π(a) = log N(u; μ, σ) − Σ log(1 − tanh²(u)) for a = tanh(u): against torch.distributions'
    Normal + TanhTransform and against the formula in float64, for the reparameterised draw,
    the log-probability of given actions, and the workers' numpy version."""
    torch.manual_seed(0)
    mean, log_std = torch.randn(64, 3), torch.rand(64, 3) - 1.5
    dist = SquashedGaussian(mean, log_std)
    torch.manual_seed(1)
    actions, log_prob = dist.rsample()
    torch.manual_seed(1)
    u = mean + log_std.exp() * torch.randn(64, 3)  # the same noise
    torch.testing.assert_close(actions, torch.tanh(u))
    reference = td.TransformedDistribution(td.Normal(mean.double(), log_std.double().exp()), [td.TanhTransform()])
    by_hand = (td.Normal(mean.double(), log_std.double().exp()).log_prob(u.double())
               - torch.log(1 - torch.tanh(u.double()) ** 2)).sum(-1)
    torch.testing.assert_close(log_prob.double(), by_hand, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(log_prob.double(), reference.log_prob(torch.tanh(u.double())).sum(-1),
                               rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(dist.log_prob(actions).double(), by_hand, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(squashed_gaussian_logp(mean.numpy(), log_std.numpy(), actions.numpy()),
                               by_hand.numpy(), rtol=1e-4, atol=1e-3)


def test_squashed_log_prob_stays_finite_where_tanh_saturates():
    mean, log_std = torch.tensor([[30.0, -30.0]]), torch.tensor([[-3.0, -3.0]])
    torch.manual_seed(2)
    actions, log_prob = SquashedGaussian(mean, log_std).rsample()
    assert actions.abs().tolist() == [[1.0, 1.0]] and torch.isfinite(log_prob).all()
    torch.manual_seed(2)
    u = (mean + log_std.exp() * torch.randn(1, 2)).double()
    # 1 − tanh²(u) = 1 / cosh²(u), finite in float64 at |u| = 30 where tanh rounds to 1
    by_hand = (td.Normal(mean.double(), log_std.double().exp()).log_prob(u) + 2 * torch.log(torch.cosh(u))).sum(-1)
    torch.testing.assert_close(log_prob.double(), by_hand, rtol=1e-5, atol=1e-3)


# -- networks: the stacked critics, the actor ------------------------------------------------


def test_stacked_critics_equal_independent_mlps():
    torch.manual_seed(0)
    critics = StackedQ(5, [8, 4], "relu", k=2)
    obs, actions = torch.randn(7, 3), torch.randn(7, 2)
    q = critics(obs, actions)
    assert q.shape == (2, 7)
    x = torch.cat([obs, actions], -1)
    for i in range(2):
        h = x
        for layer, (weight, bias) in enumerate(zip(critics.weights, critics.biases, strict=True)):
            h = h @ weight[i] + bias[i, 0]
            h = torch.relu(h) if layer < 2 else h
        torch.testing.assert_close(q[i], h.squeeze(-1))
    torch.testing.assert_close(critics(obs, actions, frozen=True), q)


def test_the_actor_loss_reaches_the_actions_but_never_the_critics():
    config = small()
    algo = config.build()
    try:
        batch = {k: torch.as_tensor(v) for k, v in algo_batch(algo).items()}
        losses = sac_losses(algo.policy, algo.critics, algo.target_critics, algo.log_alpha, -1.0, batch)
        losses.actor.backward()
        assert all(p.grad is None for p in algo.critics.parameters())
        assert all(p.grad is not None for p in algo.policy.actor_parameters())
        assert algo.log_alpha.grad is None
    finally:
        algo.stop()


def algo_batch(algo) -> dict[str, np.ndarray]:
    """A replayed minibatch of the algorithm's own transitions."""
    algo.replay.add(algo.sample())
    algo.replay.add(algo.sample())
    return dict(algo.replay.sample(16))


# -- the critic target, by hand ----------------------------------------------------------------


def linear_sac(alpha: float) -> tuple[SquashedGaussianActor, StackedQ]:
    """A linear actor (mean = s·w, log-std = −1) and two linear target critics, on 2-d states and
    1-d actions, whose numbers a hand computation can follow."""
    actor = SquashedGaussianActor(2, gym.spaces.Box(-1.0, 1.0, (1,)), ModelConfig(fcnet_hiddens=[]))
    critics = StackedQ(3, [], "relu", k=2)
    with torch.no_grad():
        actor.head.weight.copy_(torch.tensor([[0.5, -0.25], [0.0, 0.0]]))
        actor.head.bias.copy_(torch.tensor([0.1, -1.0]))
        critics.weights[0].copy_(torch.tensor([[[1.0], [2.0], [3.0]], [[2.0], [1.0], [-1.0]]]))
        critics.biases[0].copy_(torch.tensor([[[0.5]], [[-0.5]]]))
    return actor, critics


def test_critic_target_by_hand_twin_minimum_entropy_term_done_masking_and_n_step():
    gamma, alpha = 0.9, 0.2
    # a fragment of one environment, 4 steps, terminated at step 2; 3-step returns
    rewards = np.array([[1.0], [2.0], [4.0], [8.0]], np.float32)
    terminated = np.array([[False], [False], [True], [False]])
    cuts = terminated.copy()
    cuts[-1] = True
    obs = np.arange(8, dtype=np.float32).reshape(4, 1, 2) / 10
    next_obs = obs + 0.05
    columns = {"obs": obs, "actions": np.zeros((4, 1, 1), np.float32), "rewards": rewards, "terminated": terminated,
               "cuts": cuts, "next_obs": next_obs, "valid": np.ones((4, 1), bool)}
    transitions = n_step_columns(columns, SACConfig().training(gamma=gamma, n_step=3))
    returns, discounts = transitions["returns"][:, 0], transitions["discounts"][:, 0]
    # step 0 sums three rewards and bootstraps from s'_2 ... which terminated: discount 0
    np.testing.assert_allclose(returns, [1 + 0.9 * 2 + 0.81 * 4, 2 + 0.9 * 4, 4, 8], rtol=1e-6)
    np.testing.assert_allclose(discounts, [0.0, 0.0, 0.0, 0.9], rtol=1e-6)  # step 3: one reward, cut by the fragment
    np.testing.assert_allclose(transitions["next_obs"][:, 0], next_obs[[2, 2, 2, 3], 0])

    actor, target_critics = linear_sac(alpha)
    # one more transition that bootstraps after three rewards, so each term shows
    returns = torch.tensor([*returns, 1.5])
    discounts = torch.tensor([*discounts, gamma**3])
    s_next = torch.tensor(np.concatenate([transitions["next_obs"][:, 0], [[1.0, -2.0]]]), dtype=torch.float32)
    torch.manual_seed(7)
    y = critic_targets(actor, target_critics, torch.tensor(alpha), returns, s_next, discounts)
    torch.manual_seed(7)
    noise = torch.randn(5, 1)
    expected = []
    for b in range(5):
        s1, s2 = s_next[b].tolist()
        u = 0.5 * s1 - 0.25 * s2 + 0.1 + math.exp(-1.0) * noise[b, 0].item()
        a = math.tanh(u)
        log_pi = (-0.5 * noise[b, 0].item() ** 2 + 1.0 - 0.5 * math.log(2 * math.pi)) - math.log(1 - a * a)
        q1 = 1.0 * s1 + 2.0 * s2 + 3.0 * a + 0.5
        q2 = 2.0 * s1 + 1.0 * s2 - 1.0 * a - 0.5
        expected.append(returns[b].item() + discounts[b].item() * (min(q1, q2) - alpha * log_pi))
    torch.testing.assert_close(y, torch.tensor(expected), rtol=1e-5, atol=1e-5)
    assert expected[:3] == pytest.approx(returns[:3].tolist())  # terminated: the reward alone


def test_the_temperature_gradient_moves_the_entropy_towards_its_target():
    """dL_α/dlog α = −mean(log π + H̄): negative (so gradient descent raises α and with it the
    entropy bonus) while the entropy −log π is below the target H̄, positive above it."""
    algo = small().build()
    try:
        batch = {k: torch.as_tensor(v) for k, v in algo_batch(algo).items()}
        for target_entropy in (-50.0, 50.0):
            algo.log_alpha.grad = None
            losses = sac_losses(algo.policy, algo.critics, algo.target_critics, algo.log_alpha, target_entropy, batch)
            losses.alpha.backward()
            gradient = algo.log_alpha.grad.item()
            assert gradient == pytest.approx(-(losses.log_prob + target_entropy).mean().item(), rel=1e-5)
            entropy = -losses.log_prob.mean().item()
            assert np.sign(gradient) == (1 if entropy > target_entropy else -1)
        algo.alpha_optimizer.param_groups[0]["lr"] = 0.1
        before = algo.log_alpha.item()
        algo.alpha_optimizer.step()  # last gradient: target 50 far above the entropy
        assert algo.log_alpha.item() > before
    finally:
        algo.stop()


# -- the training loop ---------------------------------------------------------------------------


def test_targets_move_a_fraction_tau_after_every_gradient_step():
    algo = small(tau=0.25).build()
    try:
        targets = [p.detach().clone() for p in algo.target_critics.parameters()]
        torch.testing.assert_close(targets, [p.detach() for p in algo.critics.parameters()])  # start equal
        minibatch = algo.replay.sample(16) if len(algo.replay) else None
        assert minibatch is None
        algo.replay.add(algo.sample())
        algo.update(algo.replay.sample(16))
        algo.update_target()
        for target, before, online in zip(algo.target_critics.parameters(), targets, algo.critics.parameters(),
                                          strict=True):
            torch.testing.assert_close(target, before + 0.25 * (online.detach() - before))
    finally:
        algo.stop()


@pytest.mark.parametrize(("training", "updates"), [
    ({}, 8),  # one gradient step per environment step
    ({"training_intensity": 4.0}, 2),  # RLlib's: 4 replayed per sampled, 16 a step: 8·4/16
    ({"gradient_steps": 3}, 3),  # SB3's: per round of 8 steps
    ({"gradient_steps": -1}, 8),
    ({"learning_starts": 17}, 0),  # 16 steps sampled: none yet
])
def test_gradient_steps_per_round_follow_the_replay_ratio(training, updates):
    algo = small(**training).build()
    try:
        algo.train()
        result = algo.train()
        assert result["num_updates"] == updates
        assert result["timesteps_total"] == 16
    finally:
        algo.stop()


def test_random_warmup_until_learning_starts():
    algo = small(learning_starts=16).build()
    try:
        assert algo.policy.random_actions.item() == 1.0
        first = algo.sample()
        # uniform in (-1, 1): no tanh of the small initial policy's outputs
        assert first["actions"].min() < -0.5 and first["actions"].max() > 0.5
        algo.train()
        assert algo.policy.random_actions.item() == 1.0
        algo.train()  # 16 steps sampled: learning starts, and acting with the policy
        assert algo.policy.random_actions.item() == 0.0
    finally:
        algo.stop()


def test_same_seed_same_weights_however_the_steps_are_split_into_iterations():
    """A run is a function of its seed and the steps sampled: through the random warm-up and the
    updates after it, two builds with one seed reach the same weights bit for bit, one in four
    iterations of 16 steps, the other in one of 64 (the default time floor of 1 s,
    RLlib's, only moves where an iteration ends); another seed does not."""
    def weights(seed: int, steps_per_iteration: int, iterations: int) -> np.ndarray:
        algo = (small(learning_starts=24).reporting(min_sample_timesteps_per_iteration=steps_per_iteration)
                .debugging(seed=seed).build())
        try:
            for _ in range(iterations):
                result = algo.train()
            assert result["timesteps_total"] == 64
            return algo.policy.get_flat_weights()
        finally:
            algo.stop()

    split = weights(3, 16, 4)
    np.testing.assert_array_equal(split, weights(3, 64, 1))
    np.testing.assert_array_equal(split, weights(3, 16, 4))
    assert not np.array_equal(split, weights(4, 16, 4))


def test_same_seed_runs_trained_in_turn_in_one_process_reach_the_same_weights():
    """The losses draw from the learner's own generator: two runs with one seed, trained in turn
    in one process, each drawing between the other's updates, still reach the same weights (from
    torch's global generator they did not)."""
    first, second = small(learning_starts=8).build(), small(learning_starts=8).build()
    try:
        for _ in range(3):
            first.train()
            second.train()
        assert first.learner_updates == second.learner_updates == 24
        np.testing.assert_array_equal(first.policy.get_flat_weights(), second.policy.get_flat_weights())
        torch.testing.assert_close(first.log_alpha, second.log_alpha, rtol=0, atol=0)
    finally:
        first.stop()
        second.stop()


# -- config keys: RLlib's, SB3's ---------------------------------------------------------------


def test_rllib_tuned_pendulum_sac_keys_are_accepted():
    """RLlib 2.9's tuned_examples/sac/pendulum-sac.yaml (its config section)."""
    config = SACConfig().update(**{
        "framework": "torch",
        "q_model_config": {"fcnet_activation": "relu", "fcnet_hiddens": [256, 256]},
        "policy_model_config": {"fcnet_activation": "relu", "fcnet_hiddens": [256, 256]},
        "tau": 0.005, "target_entropy": "auto", "n_step": 1, "rollout_fragment_length": 1,
        "train_batch_size": 256, "target_network_update_freq": 1, "min_sample_timesteps_per_iteration": 1000,
        "replay_buffer_config": {"type": "MultiAgentPrioritizedReplayBuffer"},
        "num_steps_sampled_before_learning_starts": 256,
        "optimization": {"actor_learning_rate": 0.0003, "critic_learning_rate": 0.0003,
                         "entropy_learning_rate": 0.0003},
        "num_workers": 0, "num_gpus": 0, "metrics_num_episodes_for_smoothing": 5})
    config.validate()
    assert config.learning_starts == 256 and config.prioritized_replay
    assert config.learning_rates(config.lr) == (3e-4, 3e-4, 3e-4)
    assert config.model.fcnet_hiddens == [256, 256] and config.q_model_config.fcnet_activation == "relu"
    assert config["store_buffer_in_checkpoints"] is False


def test_sb3_names():
    config = SACConfig().training(batch_size=64, buffer_size=5000, learning_starts=10, train_freq=4,
                                  gradient_steps=2, learning_rate=1e-3, ent_coef="auto_0.1")
    assert (config.train_batch_size, config.replay_buffer_capacity, config.rollout_fragment_length) == (64, 5000, 4)
    assert config.learning_rates(config.lr) == (1e-3, 1e-3, 1e-3) and config.initial_alpha == 0.1
    fixed = SACConfig().training(ent_coef=0.05)
    assert fixed.initial_alpha == 0.05 and fixed.alpha_lr == 0.0
    with pytest.raises(ConfigError, match=r"ent_coef='auto0.1'"):
        SACConfig().training(ent_coef="auto0.1")


# -- bad input: one line naming the value --------------------------------------------------------


@pytest.mark.parametrize(("training", "message"), [
    ({"tau": 0.0}, r"^config key 'tau' must be in \(0, 1\], got 0.0$"),
    ({"tau": 1.5}, r"^config key 'tau' must be in \(0, 1\], got 1.5$"),
    ({"training_intensity": 0}, r"^config key 'training_intensity' must be > 0 \(or None\), got 0.0$"),
    ({"training_intensity": -2.0}, r"'training_intensity' must be > 0 \(or None\), got -2.0"),
    ({"replay_buffer_capacity": 100, "learning_starts": 0},
     r"^replay_buffer_capacity=100 is smaller than train_batch_size=256, "),
    ({"gradient_steps": 2, "training_intensity": 8.0}, r"training_intensity=8.0 and gradient_steps=2 both set"),
    ({"normalize_actions": False}, r"SAC takes normalize_actions=True, got False"),
    ({"n_step": 3}, r"rollout_fragment_length=1 is smaller than n_step=3: n-step returns stop at a fragment's end"),
])
def test_config_errors_name_the_value(training, message):
    with pytest.raises(ConfigError, match=message):
        SACConfig().update(**training).validate()


@pytest.mark.parametrize(("env", "message"), [
    ("CartPole-v1", r"^action space Discrete\(2\) is not supported by SAC: it takes a one-dimensional float Box"),
    ("infinite-box", r"^action space Box\(-inf, inf, \(2,\), float32\) has infinite bounds: SAC squashes"),
])
def test_action_spaces_sac_does_not_take_are_named_at_build(env, message):
    class InfiniteBox(PendulumEnv):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    register_env("infinite-box", lambda config: InfiniteBox())
    with pytest.raises(ConfigError, match=message):
        SACConfig().environment(env).resources(engine="local").build()


class OtherActions(PendulumEnv):
    """Pendulum with another action space: only building SAC on it is tested."""

    def __init__(self, action_space: gym.Space) -> None:
        super().__init__()
        self.action_space = action_space


@pytest.mark.parametrize("space", [
    gym.spaces.Box(-2.0, 2.0, (2, 2), np.float32),  # not one-dimensional
    gym.spaces.Box(-2, 2, (1,), np.int64),  # integer values: categoricals
    gym.spaces.MultiDiscrete([3, 3]),
    gym.spaces.Tuple((gym.spaces.Box(-2.0, 2.0, (1,), np.float32), gym.spaces.Discrete(2))),
])
def test_composite_and_other_action_spaces_are_refused_in_one_line(space):
    name = f"sac-actions-{type(space).__name__}-{space.shape}-{space.dtype}"
    register_env(name, lambda config: OtherActions(space))
    message = rf"^action space {re.escape(str(space))} is not supported by SAC: it takes a one-dimensional float Box"
    with pytest.raises(ConfigError, match=message) as error:
        SACConfig().environment(name).resources(engine="local").build()
    assert "\n" not in str(error.value)


class DictPendulum(gym.ObservationWrapper):
    """Pendulum observed as a Dict: its observations, and a 0/1 entry under ``key``."""

    def __init__(self, key: str) -> None:
        super().__init__(gym.make("Pendulum-v1"))
        self.key = key
        self.observation_space = gym.spaces.Dict({"observations": self.env.observation_space,
                                                  key: gym.spaces.Box(0.0, 1.0, (1,), np.float32)})

    def observation(self, observation: np.ndarray) -> dict[str, np.ndarray]:
        return {"observations": observation, self.key: np.ones(1, np.float32)}


register_env("sac-dict-pendulum", lambda config: DictPendulum(config.get("key", "action_mask")))


def test_an_action_mask_is_refused_and_other_dict_observations_are_flattened():
    with pytest.raises(ConfigError, match=r"^an action mask needs discrete actions .*, but the action space is "
                                          r"Box\(-2.0, 2.0, \(1,\), float32\)$"):
        small().environment("sac-dict-pendulum").build()
    algo = small().environment("sac-dict-pendulum", env_config={"key": "extra"}).build()
    try:
        assert algo.train()["num_updates"] == 8  # the network reads the 4 flat columns
        assert algo.policy.body[0].in_features == 4
    finally:
        algo.stop()


@pytest.mark.parametrize(("key", "custom"), [("model", "custom_model"), ("q_model_config", "custom_model"),
                                             ("model", "custom_action_dist")])
def test_custom_models_and_action_distributions_are_refused_in_one_line(key, custom):
    message = rf"^{key}\['{custom}'\]='mine' is not supported by SAC: its actor and critics are volley's MLPs"
    with pytest.raises(ConfigError, match=message):
        SACConfig().training(**{key: {custom: "mine"}}).validate()


class EpisodeLengths(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["length"] = episode.length


def test_callbacks_run_on_the_sampling_worker():
    algo = small().callbacks(EpisodeLengths).reporting(min_sample_timesteps_per_iteration=400).build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["episodes_total"] >= 2 and result["custom_metrics"]["length_mean"] == 200  # Pendulum's


def test_lr_schedule_sets_the_rates_left_unset_after_each_update():
    points = [[0, 1e-3], [400, 1e-4]]
    algo = small(lr=points, critic_lr=5e-4).reporting(min_sample_timesteps_per_iteration=200).build()
    try:
        assert algo.actor_optimizer.param_groups[0]["lr"] == 1e-3
        for _ in range(3):
            steps = algo.train()["timesteps_total"]
            expected = value_at(points, steps)
            assert algo.actor_optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9)
            assert algo.alpha_optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9)
            assert algo.critic_optimizer.param_groups[0]["lr"] == 5e-4  # its own
        assert steps > 400 and expected == 1e-4
    finally:
        algo.stop()


# -- checkpoints and acting -----------------------------------------------------------------------


def test_checkpoint_round_trip_with_replay_contents(tmp_path):
    from volley import Algorithm
    from volley.checkpoint import read_checkpoint

    algo = small(checkpoint_replay=True, learning_starts=8).build()
    try:
        for _ in range(3):
            algo.train()
        path = algo.save(tmp_path / "sac")
        saved = {"policy": algo.policy.get_flat_weights(), "log_alpha": algo.log_alpha.item(),
                 "critics": [p.detach().clone() for p in algo.critics.parameters()],
                 "targets": [p.detach().clone() for p in algo.target_critics.parameters()],
                 "adam": algo.critic_optimizer.state_dict()["state"][0]["exp_avg"].clone(),
                 "replay": algo.replay.state(), "counters": (algo.learner_updates, algo.timesteps_total)}
        after = algo.train()
    finally:
        algo.stop()
    tensors, manifest = read_checkpoint(path)
    assert {"critics.weights.0", "target_critics.weights.0", "log_alpha", "rng.noise", "replay.0.obs"} <= set(tensors)
    restored = Algorithm.from_checkpoint(path)
    try:
        np.testing.assert_array_equal(restored.policy.get_flat_weights(), saved["policy"])
        assert restored.log_alpha.item() == saved["log_alpha"] != math.log(1.0)  # α learned, and restored
        torch.testing.assert_close([p.detach() for p in restored.critics.parameters()], saved["critics"])
        torch.testing.assert_close([p.detach() for p in restored.target_critics.parameters()], saved["targets"])
        assert not all(torch.equal(a, b) for a, b in zip(saved["critics"], saved["targets"], strict=True))
        torch.testing.assert_close(restored.critic_optimizer.state_dict()["state"][0]["exp_avg"], saved["adam"])
        for column, values in restored.replay.state().items():
            np.testing.assert_array_equal(values, saved["replay"][column], err_msg=column)
        assert (restored.learner_updates, restored.timesteps_total) == saved["counters"]
        again = restored.train()  # on from where it was (its environments start fresh episodes)
        assert (again["timesteps_total"], again["learner_updates"]) == (after["timesteps_total"],
                                                                        after["learner_updates"])
        assert again["replay_size"] == after["replay_size"]
    finally:
        restored.stop()


def test_compute_single_action_is_the_squashed_mean_in_the_action_bounds():
    config = small().rollouts(create_env_on_driver=True)
    algo = config.build()
    try:
        obs, _ = algo.env.reset(seed=0)
        action = algo.compute_single_action(obs)
        with torch.no_grad():
            mean = algo.policy.distribution(torch.as_tensor(obs[None], dtype=torch.float32)).mean
        np.testing.assert_allclose(action, 2.0 * np.tanh(mean.numpy()[0]), rtol=1e-5)  # Pendulum: [-2, 2]
        sampled = [algo.compute_single_action(obs, explore=True) for _ in range(20)]
        assert all(-2.0 <= a[0] <= 2.0 for a in sampled) and len({float(a[0]) for a in sampled}) > 1
        assert algo.evaluate(num_episodes=1)["episodes_this_iter"] == 1
    finally:
        algo.stop()
