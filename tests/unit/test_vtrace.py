"""V-trace against a direct implementation of the paper's sums, n-step returns on-policy, and the
bootstrap rows a worker ships for the learner."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

from volley import IMPALAConfig
from volley.rollout.advantages import discounted_returns, vtrace, vtrace_columns, vtrace_targets
from volley.rollout.worker import RolloutWorker


def paper_vtrace(log_rhos, rewards, values, next_values, cuts, gamma, clip_rho, clip_c, clip_pg_rho):
    """Equations 1 and 2 of Espeholt et al. (2018) written out for one sequence ``[T]``, term by term:
    v_s = V(x_s) + sum_{t=s}^{e} gamma^(t-s) (prod_{i=s}^{t-1} c_i) rho_t delta_t, where e is the
    first cut at or after s (the n of the n-step target), and the advantage
    rho_pg_s (r_s + gamma v_{s+1} - V(x_s))."""
    T = len(rewards)
    ratios = np.exp(log_rhos.astype(np.float64))
    vs = np.zeros(T)
    for s in range(T):
        total, weight, t = 0.0, 1.0, s
        while True:
            rho = min(clip_rho, ratios[t])
            total += gamma ** (t - s) * weight * rho * (rewards[t] + gamma * next_values[t] - values[t])
            if cuts[t]:
                break
            weight *= min(clip_c, ratios[t])
            t += 1
        vs[s] = values[s] + total
    advantages = np.zeros(T)
    for s in range(T):
        v_next = next_values[s] if cuts[s] else vs[s + 1]
        advantages[s] = min(clip_pg_rho, ratios[s]) * (rewards[s] + gamma * v_next - values[s])
    return vs, advantages


def random_sequences(seed: int, ends_inside: bool, shape=(40, 3)):
    rng = np.random.default_rng(seed)
    T, N = shape
    values = rng.normal(size=shape).astype(np.float32)
    rewards = rng.normal(size=shape).astype(np.float32)
    log_rhos = rng.normal(scale=0.8, size=shape).astype(np.float32)  # ratios from about 0.1 to 10
    cuts = (rng.random(shape) < 0.15) if ends_inside else np.zeros(shape, bool)
    cuts[-1] = True
    terminal = cuts & (rng.random(shape) < 0.5)
    # the next state's value: the next step's inside a sequence, a bootstrap value at a cut, 0 after a terminal
    next_values = np.where(cuts, rng.normal(size=shape), np.roll(values, -1, 0)).astype(np.float32)
    next_values[terminal] = 0.0
    return log_rhos, rewards, values, next_values, cuts


@pytest.mark.parametrize("ends_inside", [False, True])
@pytest.mark.parametrize(("clip_rho", "clip_c", "clip_pg_rho"), [(1.0, 1.0, 1.0), (0.7, 0.9, 1.3), (2.0, 1.0, 0.5)])
def test_vtrace_equals_the_papers_sums(ends_inside, clip_rho, clip_c, clip_pg_rho):
    log_rhos, rewards, values, next_values, cuts = random_sequences(3, ends_inside)
    ratios = np.exp(log_rhos)
    assert (ratios > max(clip_rho, clip_c, clip_pg_rho)).mean() > 0.05  # the clipping is active
    vs, advantages = vtrace(log_rhos, rewards, values, next_values, cuts, 0.95, clip_rho, clip_c, clip_pg_rho)
    assert vs.shape == advantages.shape == rewards.shape
    for n in range(rewards.shape[1]):
        want_vs, want_adv = paper_vtrace(log_rhos[:, n], rewards[:, n], values[:, n], next_values[:, n],
                                         cuts[:, n], 0.95, clip_rho, clip_c, clip_pg_rho)
        np.testing.assert_allclose(vs[:, n], want_vs, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(advantages[:, n], want_adv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ends_inside", [False, True])
def test_on_policy_targets_are_n_step_returns(ends_inside):
    _, rewards, values, next_values, cuts = random_sequences(4, ends_inside)
    vs, advantages = vtrace(np.zeros_like(rewards), rewards, values, next_values, cuts, 0.9)
    returns = discounted_returns(rewards, next_values, cuts, 0.9)
    np.testing.assert_allclose(vs, returns, rtol=1e-4, atol=1e-4)
    # the n-step return written out: rewards to the next cut, then its bootstrap value
    T = len(rewards)
    for s in (0, 7, T - 1):
        e = s + int(np.argmax(cuts[s:, 0]))
        want = sum(0.9 ** (t - s) * rewards[t, 0] for t in range(s, e + 1)) + 0.9 ** (e - s + 1) * next_values[e, 0]
        assert vs[s, 0] == pytest.approx(want, rel=1e-4, abs=1e-4)
    following = np.where(cuts, next_values, np.concatenate([returns[1:], returns[-1:]]))
    np.testing.assert_allclose(advantages, rewards + 0.9 * following - values, rtol=1e-4, atol=1e-4)


class Numbered(gym.Env):
    """Every observation is a number never seen before: the next state of a step is its observation
    plus one. Episodes terminate when that number is a multiple of 7 (a TimeLimit truncates others)."""

    observation_space = gym.spaces.Box(0, 1e6, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, start: float) -> None:
        self.k = start

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.k += 1
        return np.array([self.k], np.float32), {}

    def step(self, action):
        self.k += 1
        return np.array([self.k], np.float32), float(action) - 0.5, self.k % 7 == 0, False, {}


def test_a_workers_rows_give_the_learner_every_next_state():
    """The worker's fragment, flattened as it travels (bootstrap rows included), gives the same targets
    as V-trace over each environment's steps with the true next states."""
    starts = iter([0.0, 1000.0, 2000.0])
    config = (IMPALAConfig().environment("numbered")
              .rollouts(num_envs_per_worker=3, rollout_fragment_length=23)
              .training(gamma=0.9, vtrace_clip_rho_threshold=0.8, vtrace_clip_pg_rho_threshold=1.5))

    def postprocess(columns, cfg):  # vtrace_columns, with the truncations kept for the reference below
        out = vtrace_columns(columns, cfg)
        out["truncated"] = np.concatenate([columns["truncated"], np.zeros_like(columns["truncated"][:1])])
        return out

    worker = RolloutWorker(config, 0, postprocess, lambda cfg: TimeLimit(Numbered(next(starts)), 5),
                           plan=config.plan())
    batch = worker.sample(worker.policy.get_flat_weights(), None).batch
    obs = batch["obs"][:, 0].astype(np.float64)
    bootstrap = batch["bootstrap"]
    steps = ~bootstrap
    assert batch["terminated"][steps].any() and batch["truncated"][steps].any()  # both kinds of end inside

    def value(k):
        return np.sin(k)

    log_rhos = np.random.default_rng(0).normal(scale=0.7, size=len(obs)).astype(np.float32)
    vs, advantages = vtrace_targets(log_rhos, batch["rewards"], value(obs).astype(np.float32),
                                    batch["terminated"], bootstrap, config)

    # the reference: each step's next state is its observation + 1 (0 after a terminal), and a
    # sequence ends at an episode end or at the environment's last step in the fragment
    terminated, truncated = batch["terminated"][steps], batch["truncated"][steps]
    step_obs = obs[steps]
    env_of = (step_obs // 1000).astype(int)
    last_of_env = np.append(env_of[1:] != env_of[:-1], True)
    cuts = terminated | truncated | last_of_env
    next_values = np.where(terminated, 0.0, value(step_obs + 1)).astype(np.float32)
    want_vs, want_adv = vtrace(log_rhos[steps], batch["rewards"][steps], value(step_obs).astype(np.float32),
                               next_values, cuts, 0.9, 0.8, 1.0, 1.5)
    np.testing.assert_allclose(vs, want_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages, want_adv, rtol=1e-5, atol=1e-5)
    # every truncation inside the fragment and every environment's end left a bootstrap row
    # holding the next state (one per env at the fragment's end, unless it ended on a terminal)
    np.testing.assert_array_equal(obs[np.flatnonzero(steps & batch["truncated"]) + 1],
                                  obs[steps & batch["truncated"]] + 1)
    assert bootstrap.sum() == truncated.sum() + (last_of_env & ~terminated & ~truncated).sum()


def test_without_vtrace_the_targets_are_n_step_returns_whatever_the_ratios():
    config = IMPALAConfig().training(vtrace=False, gamma=0.9)
    rewards = np.array([1.0, 2.0, 3.0, 0.0], np.float32)
    values = np.array([0.5, 0.1, 0.2, 9.0], np.float32)  # the last row is a bootstrap row: V = 9
    terminated = np.zeros(4, bool)
    bootstrap = np.array([False, False, False, True])
    vs, _ = vtrace_targets(np.array([3.0, -3.0, 1.0, 0.0], np.float32), rewards, values, terminated, bootstrap,
                           config)
    np.testing.assert_allclose(vs, [1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 9, 2 + 0.9 * 3 + 0.81 * 9, 3 + 0.9 * 9],
                               rtol=1e-6)
