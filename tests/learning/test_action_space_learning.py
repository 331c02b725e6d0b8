"""Composite actions, masks and a custom action distribution learn within a fixed budget of steps."""

from __future__ import annotations

from action_spaces import load_example

from volley import PPOConfig


def train_until(algo, reward: float, max_steps: int) -> dict:
    result: dict = {}
    with algo:
        while not result or (result["timesteps_total"] < max_steps and not result["episode_reward_mean"] >= reward):
            result = algo.train()
    return result


def test_multidiscrete_dials_are_set_right():
    """examples/multidiscrete_actions.py: four dials of five positions to repeat, 20 steps an episode:
    a random policy matches one dial in five (16 of 80 an episode); four categoricals learnt together
    reach 60."""
    result = train_until(load_example("multidiscrete_actions").config("multidiscrete", 0).build(), 60, 25_000)
    assert result["episode_reward_mean"] >= 60, result


def test_masking_is_what_makes_legal_moves_solvable_in_the_budget():
    """examples/action_masking.py with 50 actions, 2 of them legal a step, and an illegal action
    ending the episode (reward 0) instead of raising. Masked, PPO only ever chooses between the
    target and one other legal move and learns to pick the target; the same PPO reading the same
    mask as a plain part of its observation starts by ending nearly every episode on its first
    step (49 in 50), and within the same 20,000 steps stays far from it (0.9 of 20 with seed 0,
    where the masked run had 18.4)."""
    example = load_example("action_masking")
    legal_moves = {"on_illegal": "end", "n": 50}
    masked = train_until(example.config("ppo", legal_moves).build(), 20, 20_000)
    assert masked["episode_reward_mean"] >= 17, masked
    unmasked = train_until(example.config("ppo", legal_moves, masking=False).build(), 20, 20_000)
    assert unmasked["episode_reward_mean"] < 5, unmasked


def test_rllibs_autoregressive_action_distribution_reaches_its_stop_reward():
    """RLlib's autoregressive_action_dist example (stop reward 200 of at most 210): its custom model
    and distribution, written as in RLlib, acting through the distribution's own sample() (traced
    into numpy, volley.traced_dists)."""
    config = (PPOConfig().environment("correlated_actions").resources(engine="local")
              .training(gamma=0.5, train_batch_size=1000, minibatch_size=250,
                        model={"custom_model": "autoregressive_model", "custom_action_dist": "binary_autoreg_dist"})
              .debugging(seed=0))
    result = train_until(config.build(), 200, 30_000)
    assert result["episode_reward_mean"] >= 200, result
