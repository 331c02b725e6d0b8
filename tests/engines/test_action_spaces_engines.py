"""Composite action spaces and action masks on every engine: the environment of
examples/action_masking.py raises on a masked action, so a mask that leaks anywhere (a worker's
numpy draw, its torch draw, ε-greedy, Ape-X's acting workers) fails the test; composite actions and a
custom distribution's draws on Ray equal the local reference. (MPI gather: tests/mpi/test_mpi.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from action_spaces import load_example
from reference import assert_samples_and_updates_equal

from volley import (
    ApexDQNConfig,
    APPOConfig,
    DQNConfig,
    IMPALAConfig,
    PPOConfig,
    TRPOConfig,
    VolleyError,
)
from volley.algorithms.pg import PGConfig

masking = load_example("action_masking")
multidiscrete = load_example("multidiscrete_actions")


def allowed(batch) -> bool:
    """Every action of a batch is one the mask gathered with it allows (the mask's columns first)."""
    return bool((batch["obs"][np.arange(len(batch["obs"])), batch["actions"]] == 1).all())


def masked_config(algo: str, sb3: bool, engine: str):
    env = "maskable_legal_moves" if sb3 else "legal_moves"
    config = {"ppo": PPOConfig().training(train_batch_size=200, minibatch_size=50, num_epochs=2),
              "pg": PGConfig().training(batch_episodes=4), "trpo": TRPOConfig().training(train_batch_size=200),
              "dqn": DQNConfig().training(learning_starts=100),
              "impala": IMPALAConfig().training(train_batch_size=100), "appo": APPOConfig().training(train_batch_size=100),
              # RLlib's action-masking model, acting in torch: it masks, and volley masks again
              "custom": PPOConfig().training(train_batch_size=200, minibatch_size=50,
                                             model={"custom_model": "action_mask_model"})}[algo]
    workers = 0 if engine == "local" else 1 if algo == "custom" else 2  # a custom model's workers import torch
    return (config.environment(env).resources(engine=engine)
            .rollouts(num_workers=workers, num_envs_per_worker=2).debugging(seed=0))


@pytest.mark.parametrize(("algo", "sb3", "engine"), [
    ("ppo", False, "ray"), ("dqn", True, "ray"), ("custom", False, "ray"),
    ("ppo", True, "local"), ("pg", True, "local"), ("trpo", False, "local"), ("dqn", False, "local"),
    ("impala", False, "ray"), ("appo", True, "local")])
def test_no_masked_action_reaches_the_environment(ray_session, algo, sb3, engine):
    streaming = algo in ("impala", "appo")  # their workers stream fragments to the learner instead
    with masked_config(algo, sb3, engine).build() as algo:
        assert streaming or allowed(algo.sample())  # and the mask came with the batch
        for _ in range(2):
            algo.train()  # the environment raises on a masked action: an error here is a leak


def test_compute_single_action_names_an_observation_without_the_mask():
    """With sb3-contrib's action_masks(), the policy observes {mask, observations}: a bare observation
    is one line saying what to pass, not an error from deep inside the preprocessor."""
    with masked_config("ppo", True, "local").build() as algo:
        env = masking.MaskableLegalMoves({})
        obs, _ = env.reset(seed=0)
        with pytest.raises(VolleyError, match=r"compute_single_action: the observation is a ndarray, not the "
                           r"structure of the observation space Dict\(.+\{'action_mask': env.action_masks\(\), "
                           r"'observations': obs\}: pass that\)$"):
            algo.compute_single_action(obs)
        action = algo.compute_single_action({"action_mask": env.action_masks(), "observations": obs})
        assert env.action_masks()[action] == 1


def test_ape_x_acting_workers_never_take_a_masked_action(ray_session):
    config = (ApexDQNConfig().environment("legal_moves", action_mask_key="action_mask")
              .rollouts(num_workers=1, num_envs_per_worker=2, rollout_fragment_length=16)
              .training(learning_starts=64, minibatch_size=16, weight_sync_interval=64, epsilon_start=1.0,
                        epsilon_end=0.5, epsilon_decay_steps=500, model={"fcnet_hiddens": [32]})
              .reporting(min_sample_timesteps_per_iteration=128).debugging(seed=5))
    with config.build() as algo:
        results = [algo.train() for _ in range(2)]
    assert results[-1]["timesteps_total"] > 200 and results[-1]["learner_updates"] > 0


def test_composite_actions_on_ray_workers_equal_the_local_reference(ray_session):
    """RLlib's nested space: MultiDiscrete, Discrete and Box parts in Tuples and Dicts."""
    def build(engine: str):
        return (multidiscrete.config("nested", 0).resources(engine=engine)
                .rollouts(num_workers=2, num_envs_per_worker=2).training(train_batch_size=160, minibatch_size=40)
                .build())

    def check(batch: dict) -> None:
        assert batch["actions"].shape == (len(batch["obs"]), 7) and batch["actions"].dtype == np.float32

    assert_samples_and_updates_equal(build("local"), build("ray"), check)


def test_a_custom_distributions_draws_on_ray_equal_the_local_reference(ray_session):
    """Each worker draws a custom distribution's samples from its environments' own streams (traced
    into numpy, as this one is; else from a torch generator of its own, seeded from the run's seed
    and its first environment): the same draws wherever it runs."""
    def build(engine: str):
        return (PPOConfig().environment("correlated_actions").resources(engine=engine)
                .rollouts(num_workers=2, num_envs_per_worker=2)
                .training(gamma=0.5, train_batch_size=160, minibatch_size=40,
                          model={"custom_model": "autoregressive_model", "custom_action_dist": "binary_autoreg_dist"})
                .debugging(seed=1).build())

    local, remote = build("local"), build("ray")
    try:
        a, b = local.sample(), remote.sample()
        assert a["actions"].shape == (len(a), 2) and len(np.unique(a["actions"], axis=0)) == 4  # drawn, all pairs
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    finally:
        local.stop()
        remote.stop()


def test_dqn_on_ray_learns_nothing_from_a_masked_next_action(ray_session):
    """The n-step rows DQN's workers send carry the next observation's mask with them."""
    config = (DQNConfig().environment("legal_moves").resources(engine="ray").rollouts(num_workers=1)
              .training(learning_starts=50).debugging(seed=2))
    with config.build() as algo:
        batch = algo.sample()
    assert allowed(batch)
    assert batch["next_obs"][:, :20].sum(1).min() >= 1  # every next state's mask travelled with it
