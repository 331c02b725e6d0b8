"""Multi-agent training (issue 46) on the local and the Ray engine: policies that must not learn
(mapped to no agent, or left out of ``policies_to_train``) never change, not across a checkpoint
and a resumed run either, which keeps its counters; a self-play mapping that reads the episode, as
RLlib's examples write it; a run is the same whatever order a set of policy ids comes in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from agent_envs import read_records

from volley import Algorithm, Policy, PolicySpec, PPOConfig, make_multi_agent, register_env
from volley.run import latest_checkpoint, save_run_checkpoint

ENGINES = ["local", "ray"]
register_env("two_cartpoles", lambda config: make_multi_agent("CartPole-v1")({"num_agents": 2, **config}))


def learn_or_frozen(agent_id: int, episode: Any, worker: Any, **kwargs: Any) -> str:
    return "learn" if agent_id == 0 else "frozen"


def only_learn(policy_id: str, batch: Any = None) -> bool:
    return policy_id == "learn"


def three_policies(engine: str, to_train: Any = ("learn",)) -> PPOConfig:
    """Two CartPoles: agent 0 acts with "learn", agent 1 with "frozen"; "unmapped" acts for no one."""
    return (PPOConfig().environment("two_cartpoles").resources(engine=engine)
            .rollouts(num_workers=2, num_envs_per_worker=2).training(train_batch_size=200, minibatch_size=50,
                                                                     num_epochs=2)
            .multi_agent(policies={"learn", "frozen", "unmapped"}, policy_mapping_fn=learn_or_frozen,
                         policies_to_train=list(to_train) if isinstance(to_train, tuple) else to_train)
            .debugging(seed=0))


def weights(algo: Algorithm) -> dict[str, np.ndarray]:
    return {policy_id: algo.get_policy(policy_id).get_flat_weights().copy() for policy_id in algo.learners}


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
@pytest.mark.parametrize("to_train", [("learn",), only_learn], ids=["list", "function"])
def test_a_policy_mapped_to_no_agent_or_not_trained_never_changes(engine: str, to_train: Any):
    with three_policies(engine, to_train).build() as algo:
        before = weights(algo)
        for _ in range(2):
            result = algo.train()
        after = weights(algo)
    assert not np.array_equal(after["learn"], before["learn"])
    np.testing.assert_array_equal(after["frozen"], before["frozen"])
    np.testing.assert_array_equal(after["unmapped"], before["unmapped"])
    assert sorted(result["info"]["learner"]) == ["learn"]  # only the trained policy reports an update
    assert sorted(result["policy_reward_mean"]) == ["frozen", "learn"]  # the frozen one still plays
    assert result["timesteps_total"] == 400 and result["agent_timesteps_total"] > 400


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_a_frozen_policy_stays_frozen_across_a_checkpoint_and_a_resumed_run(engine: str, tmp_path: Path):
    with three_policies(engine).build() as algo:
        start = weights(algo)
        for _ in range(2):
            saved_result = algo.train()
        saved = weights(algo)
        save_run_checkpoint(algo, tmp_path)  # what `volley train` writes, and `--resume` reads

    with Algorithm.from_checkpoint(latest_checkpoint(tmp_path)) as resumed:
        assert type(resumed).__name__ == "PPO" and sorted(resumed.learners) == ["frozen", "learn", "unmapped"]
        assert (resumed.iteration, resumed.timesteps_total, resumed.agent_timesteps_total) == (
            2, saved_result["timesteps_total"], saved_result["agent_timesteps_total"])
        for policy_id, array in weights(resumed).items():
            np.testing.assert_array_equal(array, saved[policy_id], err_msg=policy_id)
        result = resumed.train()
        after = weights(resumed)
    assert result["training_iteration"] == 3
    assert result["timesteps_total"] == saved_result["timesteps_total"] + 200
    agent_steps = result["agent_timesteps_total"] - saved_result["agent_timesteps_total"]
    assert 200 < agent_steps <= 400  # both agents act until each falls
    assert not np.array_equal(after["learn"], saved["learn"])
    np.testing.assert_array_equal(after["frozen"], start["frozen"])
    np.testing.assert_array_equal(after["unmapped"], start["unmapped"])


def snapshot_for_agent_1(agent_id: int, episode: Any, worker: Any, **kwargs: Any) -> str:
    return "learn" if agent_id == 0 else "snapshot"


def test_add_policy_s_mapping_and_set_to_train_go_into_the_config_and_survive_a_resumed_run(tmp_path: Path):
    """``policies_to_train`` not given: every learned policy of the config trains; a policy added
    without a set to train is not in it. A resumed run rebuilds from the saved config: agent 1 still
    acts with the snapshot, which still does not learn."""
    with three_policies("local", to_train=None).build() as algo:
        algo.train()
        algo.add_policy("snapshot", policy_state={"weights": algo.get_policy("learn").get_weights()},
                        policy_mapping_fn=snapshot_for_agent_1)
        assert algo.config.policy_mapping_fn == "test_training:snapshot_for_agent_1"
        assert algo.config.policies_to_train == ["frozen", "learn", "unmapped"]
        assert sorted(algo.config.policies) == ["frozen", "learn", "snapshot", "unmapped"]
        snapshot = algo.get_policy("snapshot").get_flat_weights().copy()
        algo.train()
        save_run_checkpoint(algo, tmp_path)

    with Algorithm.from_checkpoint(latest_checkpoint(tmp_path)) as resumed:
        assert resumed.setup_.policy_map.mapping_fn is snapshot_for_agent_1
        resumed.train()
        acting = {agent.policy_id for worker in resumed.workers.workers for agents in worker._agents
                  for agent in agents.values()}
        np.testing.assert_array_equal(resumed.get_policy("snapshot").get_flat_weights(), snapshot)
    assert acting == {"learn", "snapshot"}


def test_restore_into_a_built_run_brings_back_every_policy(tmp_path: Path):
    with three_policies("local").build() as algo:
        algo.train()
        path = algo.save(tmp_path / "checkpoint")
        saved = weights(algo)
    with three_policies("local").debugging(seed=5).build() as fresh:
        fresh.restore(path)
        for policy_id, array in weights(fresh).items():
            np.testing.assert_array_equal(array, saved[policy_id], err_msg=policy_id)
        assert (fresh.iteration, fresh.timesteps_total) == (1, 200)


class RandomLegal(Policy):
    """A hand-written opponent: a legal column of connect four, drawn at random."""

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any] | None = None) -> None:
        super().__init__(observation_space, action_space, config)
        self.rng = np.random.default_rng(0)

    def compute_actions(self, obs_batch: Any, state_batches: list[Any] | None = None, prev_action_batch: Any = None,
                        prev_reward_batch: Any = None, info_batch: Any = None, episodes: Any = None,
                        **kwargs: Any) -> tuple[Any, list[Any], dict[str, Any]]:
        return [int(self.rng.choice(np.flatnonzero(obs["action_mask"]))) for obs in obs_batch], [], {}


def self_play(agent_id: str, episode: Any, worker: Any, **kwargs: Any) -> str:
    """RLlib's self-play rule (its open_spiel examples): "main" moves first in every other episode."""
    return "main" if episode.episode_id % 2 == int(agent_id[-1]) else "random"


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_self_play_mapping_by_episode_against_a_hand_written_opponent(engine: str, tmp_path: Path):
    config = (PPOConfig().environment("recorded_connect_four", env_config={"record_dir": str(tmp_path)})
              .resources(engine=engine).rollouts(num_workers=2, num_envs_per_worker=2)
              .training(train_batch_size=400, minibatch_size=100, num_epochs=2)
              .multi_agent(policies={"main": PolicySpec(), "random": PolicySpec(RandomLegal)},
                           policy_mapping_fn=self_play, policies_to_train=["main"])
              .debugging(seed=0))
    with config.build() as algo:
        before = algo.get_policy("main").get_flat_weights().copy()
        result = algo.train()
        moved = not np.array_equal(algo.get_policy("main").get_flat_weights(), before)
    assert moved
    rewards = result["hist_stats"]
    assert len(rewards["policy_main_reward"]) == len(rewards["policy_random_reward"]) > 10
    np.testing.assert_array_equal(rewards["policy_main_reward"], -np.array(rewards["policy_random_reward"]))
    moves = [r for r in read_records(tmp_path) if r["level"] == "game"]
    assert len(moves) == 400 and all(m["legal"] for m in moves)
    assert {m["agent"] for m in moves} == {"player_0", "player_1"}


RUN = """
import sys
sys.path.insert(0, {tests!r})
import test_training
print(list({{"learn", "frozen", "unmapped"}}))
with test_training.three_policies("local").build() as algo:
    algo.train()
    print({{p: float(w.sum()) for p, w in sorted(test_training.weights(algo).items())}})
"""


def test_a_run_is_the_same_whatever_order_its_set_of_policy_ids_comes_in():
    """``policies={"learn", "frozen", "unmapped"}`` is a set: its order changes with each process's
    hash seed; the run (each policy's first weights, its random draws) must not."""
    program = RUN.format(tests=str(Path(__file__).parent))
    orders, runs = [], []
    for hash_seed in ("0", "2"):  # ['frozen', 'learn', 'unmapped'] and ['unmapped', 'frozen', 'learn']
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        order, run = out.stdout.strip().splitlines()[-2:]
        orders.append(order)
        runs.append(run)
    assert orders[0] != orders[1]  # the test sees two orders
    assert runs[0] == runs[1]
