"""A self-play league on a turn-based game (issue 46), as RLlib's ``self_play_with_open_spiel``
runs one: a mapping function that reads the episode's id, a hand-written opponent whose returns
are reported beside the learner's, frozen snapshots added and removed while games run, a
checkpoint that restores them, and what multi-agent training refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3

from volley import Algorithm, PettingZooEnv, Policy, PolicySpec, PPOConfig, register_env
from volley.errors import ConfigError

register_env("league_connect_four", lambda env_config: PettingZooEnv(connect_four_v3.env()))


class RandomLegalMoves(Policy):
    """A uniformly random legal column (connect four asserts on an illegal one)."""

    def __init__(self, observation_space: Any, action_space: Any, config: dict | None = None) -> None:
        super().__init__(observation_space, action_space, config)
        self.rng = np.random.default_rng(0)

    def compute_actions(self, obs_batch: Any, state_batches: Any = None, *args: Any,
                        **kwargs: Any) -> tuple[np.ndarray, list, dict]:
        return np.array([self.rng.choice(np.flatnonzero(obs["action_mask"])) for obs in obs_batch]), [], {}


def against_random(agent_id: str, episode: Any, worker: Any, **kwargs: Any) -> str:
    """RLlib's example's mapping: it reads ``episode.episode_id``, so it must never be asked without one."""
    return "main" if episode.episode_id % 2 == int(agent_id[-1]) else "random"


def against_snapshot(agent_id: str, episode: Any, worker: Any, **kwargs: Any) -> str:
    return "main" if episode.episode_id % 2 == int(agent_id[-1]) else "main_v1"


def league() -> PPOConfig:
    return (PPOConfig()
            .environment("league_connect_four")
            .rollouts(num_rollout_workers=0, num_envs_per_worker=4)
            .training(train_batch_size=256, sgd_minibatch_size=64, num_sgd_iter=2, lr=1e-3)
            .multi_agent(policies={"main": PolicySpec(), "random": PolicySpec(policy_class=RandomLegalMoves)},
                         policy_mapping_fn=against_random, policies_to_train=["main"])
            .debugging(seed=0))


def add_snapshot(algo: Algorithm) -> np.ndarray:
    """``main_v1``, a frozen copy of ``main``, now main's only opponent; its flat weights."""
    algo.add_policy("main_v1", policy_state={"weights": algo.get_policy("main").get_weights()},
                    policy_mapping_fn=against_snapshot, policies_to_train=["main"])
    return algo.get_policy("main_v1").get_flat_weights()


def test_the_learner_and_its_hand_written_opponent_report_the_same_games():
    algo = league().build()
    try:
        for _ in range(3):
            result = algo.train()
    finally:
        algo.stop()
    main = np.array(result["hist_stats"]["policy_main_reward"])
    random = np.array(result["hist_stats"]["policy_random_reward"])
    # every game is main against random and zero-sum: both lists hold the same games, in one order,
    # over the same window of recent episodes (RLlib's example pairs them so)
    assert len(main) > result["episodes_this_iter"] > 0
    assert np.array_equal(main, -random) and set(main) <= {-1.0, 0.0, 1.0}
    assert result["policy_reward_mean"]["random"] == pytest.approx(-result["policy_reward_mean"]["main"])


def test_a_snapshot_plays_frozen_and_is_removed_while_its_games_run():
    algo = league().build()
    try:
        algo.train()
        snapshot = add_snapshot(algo)
        assert np.array_equal(snapshot, algo.get_policy("main").get_flat_weights())
        result = algo.train()
        assert len(result["hist_stats"]["policy_main_v1_reward"]) > 0
        assert np.array_equal(algo.get_policy("main_v1").get_flat_weights(), snapshot)  # never trained
        assert not np.array_equal(algo.get_policy("main").get_flat_weights(), snapshot)
        worker = algo.workers.workers[0]
        assert any(agent.policy_id == "main_v1" for agents in worker._agents for agent in agents.values())
        algo.remove_policy("main_v1", policy_mapping_fn=against_random)  # its seats mapped anew
        result = algo.train()
    finally:
        algo.stop()
    assert "main_v1" not in result["policy_reward_mean"] and result["learner"].keys() == {"main"}


def test_a_checkpoint_restores_the_snapshots_frozen(tmp_path):
    algo = league().build()
    try:
        algo.train()
        snapshot = add_snapshot(algo)
        algo.train()
        algo.save(tmp_path)
        main = algo.get_policy("main").get_flat_weights()
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(tmp_path)
    try:
        assert np.array_equal(restored.get_policy("main").get_flat_weights(), main)
        assert np.array_equal(restored.get_policy("main_v1").get_flat_weights(), snapshot)
        restored.train()
        assert np.array_equal(restored.get_policy("main_v1").get_flat_weights(), snapshot)
        assert not np.array_equal(restored.get_policy("main").get_flat_weights(), main)
    finally:
        restored.stop()


def test_mpi_allreduce_is_refused_for_several_policies():
    with pytest.raises(ConfigError, match=r"mpi_mode='allreduce' is not supported yet: .*use mpi_mode='gather'"):
        league().update_from_dict({"engine": "mpi", "mpi_mode": "allreduce"}).build()
