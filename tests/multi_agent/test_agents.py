"""What a multi-agent worker makes of its agents (issue 46): GAE per agent against a hand
computation, each policy's batch holding exactly its agents' steps, a hand-written policy's actions
and recurrent state reaching each agent unchanged, and a turn-based game that only ever gets the
mover's legal move; on the local and the Ray engine."""

from __future__ import annotations

from collections import Counter as Tally
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from agent_envs import Counter, agent_steps, read_records, train

from volley import PolicySpec, PPOConfig, make_multi_agent, register_env
from volley.rollout.advantages import gae_columns
from volley.rollout.agents import AgentTrajectory, Transition, policy_columns
from volley.rollout.multi_agent import MultiAgentRolloutWorker

GAMMA, LAMBDA = 0.9, 0.8
ENGINES = ["local", "ray"]


def step(value: float, reward: float, obs: float = 0.0, **flags: Any) -> Transition:
    return Transition(np.array([obs, 0.0], np.float32), np.array(0), 0.0, value, reward,
                      next_obs=np.array([obs + 1, 0.0], np.float32), **flags)


def hand_gae(rewards: list[float], values: list[float], last_next_value: float) -> list[float]:
    """GAE over one agent's trajectory, written out: the TD errors, then the backward sum."""
    next_values = values[1:] + [last_next_value]
    advantages, following = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + GAMMA * next_values[t] - values[t]
        following = delta + GAMMA * LAMBDA * following
        advantages[t] = following
    return advantages


def test_gae_per_agent_equals_a_hand_computation():
    # agent "a": three steps, the fragment ends after them (bootstrapped from its last observation);
    # agent "b": two steps and a terminal; agent "c", of another policy: one step cut by a time limit
    a = AgentTrajectory("shared", [step(0.5, 1.0), step(0.25, 0.0), step(-0.5, 2.0, obs=7.0)])
    b = AgentTrajectory("shared", [step(1.5, -1.0), step(2.0, 3.0, terminated=True)])
    c = AgentTrajectory("other", [step(0.75, 0.5, obs=3.0, truncated=True)])
    asked: list[tuple[str, np.ndarray]] = []

    def value_of(policy_id: str, steps: list[Transition]) -> np.ndarray:
        obs = np.stack([t.next_obs for t in steps])
        asked.append((policy_id, obs))
        return 10.0 * obs[:, 0]  # the value of an observation [x, 0] is 10x

    columns = policy_columns([a, AgentTrajectory("shared"), b, c], value_of)

    # one call per policy, with the observations the cut trajectories led to
    assert [(p, o.tolist()) for p, o in asked] == [("shared", [[8.0, 0.0]]), ("other", [[4.0, 0.0]])]
    shared = columns["shared"]
    assert shared["cuts"][:, 0].tolist() == [False, False, True, False, True]
    assert shared["next_values"][:, 0].tolist() == [0.25, -0.5, 80.0, 2.0, 0.0]
    config = PPOConfig().training(gamma=GAMMA, gae_lambda=LAMBDA)
    expected = hand_gae([1.0, 0.0, 2.0], [0.5, 0.25, -0.5], 80.0) + hand_gae([-1.0, 3.0], [1.5, 2.0], 0.0)
    advantages = gae_columns(shared, config)["advantages"][:, 0]
    np.testing.assert_allclose(advantages, expected, rtol=1e-6, atol=1e-6)  # float32 sums
    other = gae_columns(columns["other"], config)
    np.testing.assert_allclose(other["advantages"][:, 0], hand_gae([0.5], [0.75], 40.0), rtol=1e-6)
    np.testing.assert_allclose(other["value_targets"][:, 0], [0.5 + GAMMA * 40.0], rtol=1e-6)


def staggered(engine: str, policies: Any = None, mapping: Any = None, **env_config: Any) -> PPOConfig:
    """PPO on :class:`Staggered` (periods 1, 2, 3, 4; episodes of 7 steps): 2 workers x 2
    environments x 30 steps an iteration."""
    config = (PPOConfig().environment("staggered", env_config=env_config).resources(engine=engine)
              .rollouts(num_workers=2, num_envs_per_worker=2).training(train_batch_size=120, minibatch_size=60,
                                                                       num_epochs=1)
              .debugging(seed=0))
    return config.multi_agent(policies=policies, policy_mapping_fn=mapping) if policies else config


def by_parity(agent_id: str, episode: Any, worker: Any, **kwargs: Any) -> str:
    return f"p{int(agent_id[1:]) % 2}"


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
@pytest.mark.parametrize("sharing", [True, False], ids=["4-agents-1-policy", "4-agents-2-policies"])
def test_each_policy_s_batch_holds_exactly_its_agents_steps(engine: str, sharing: bool):
    config = staggered(engine) if sharing else staggered(engine, {"p0", "p1"}, by_parity, wide=True)
    groups = {"default_policy": [0, 1, 2, 3]} if sharing else {"p0": [0, 2], "p1": [1, 3]}
    with config.build() as algo:
        assert sorted(algo.learners) == sorted(groups)
        shapes = {p: {k: tuple(v.shape) for k, v in algo.get_policy(p).state_dict().items()} for p in groups}
        weights = {p: learner.policy.get_flat_weights() for p, learner in algo.learners.items()}
        filters = {p: learner.filter_stats for p, learner in algo.learners.items()}
        for first in (0, 30):  # two fragments: the second goes on from where the first stopped
            acted, closed = agent_steps([1, 2, 3, 4], 7, first, first + 30)  # each agent's, in each environment
            samples = algo.workers.call("sample", weights, filters, None)
            assert len(samples) == 2
            for sample in samples:
                assert sample.env_steps == 2 * 30 and sample.agent_steps == 2 * sum(acted)
                assert sorted(sample.policies) == sorted(groups)
                for policy_id, agents in groups.items():
                    result = sample.policies[policy_id]
                    assert result.env_steps == len(result.batch) == 2 * sum(closed[i] for i in agents)
                    # its rows are its agents' own observations [i, k], as many of each agent as it closed
                    seen = Tally(result.batch["obs"][:, 0].astype(int).tolist())
                    assert seen == {i: 2 * closed[i] for i in agents}
    if sharing:  # one network, on the agents' shared spaces: Box(2) in, Discrete(100) out
        assert shapes["default_policy"]["pi_body.0.weight"] == (64, 2)
        assert shapes["default_policy"]["pi_head.weight"] == (100, 64)
    else:  # each policy on its own agents' spaces
        assert (shapes["p0"]["pi_body.0.weight"], shapes["p0"]["pi_head.weight"]) == ((64, 2), (100, 64))
        assert (shapes["p1"]["pi_body.0.weight"], shapes["p1"]["pi_head.weight"]) == ((64, 3), (50, 64))
        assert shapes["p0"]["vf_body.0.weight"] == (64, 2) and shapes["p1"]["vf_body.0.weight"] == (64, 3)


def counter_for_even_agents(agent_id: str, episode: Any, worker: Any, **kwargs: Any) -> str:
    return "learned" if agent_id == "a1" else "counter"


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_a_hand_written_policy_s_actions_and_states_reach_each_agent_unchanged(engine: str, tmp_path: Path):
    """a0, a2 and a3 act with :class:`Counter` (each acts on different steps, so their counts part
    ways), a1 with a learned policy; every action the environment gets is checked."""
    config = staggered(engine, {"counter": PolicySpec(Counter), "learned": PolicySpec()}, counter_for_even_agents,
                       record_dir=str(tmp_path))
    result = train(config, 2)
    records = read_records(tmp_path)
    assert not [r for r in records if r["unasked"]]  # no action for an agent that did not observe
    by_hand = [r for r in records if r["agent"] != "a1"]
    wrong = [r for r in by_hand if r["action"] != 10 * int(r["agent"][1:]) + r["k"]]
    assert not wrong, wrong[:5]
    # 2 iterations x 2 workers x 2 environments x 30 steps: 8 episodes and a part of each environment
    acted, _ = agent_steps([1, 2, 3, 4], 7, 0, 60)
    assert Tally(r["agent"] for r in records) == {f"a{i}": 4 * n for i, n in enumerate(acted)}
    assert max(r["episode"] for r in records) == 8 and max(r["k"] for r in by_hand) == 6  # counts start again
    assert sorted(result["policy_reward_mean"]) == ["counter", "learned"]
    assert result["policy_reward_mean"]["learned"] == 4.0  # a1 acts on steps 0, 2, 4 and 6, 1 each


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_connect_four_only_ever_gets_the_mover_s_legal_move(engine: str, tmp_path: Path):
    config = (PPOConfig().environment("recorded_connect_four", env_config={"record_dir": str(tmp_path)})
              .resources(engine=engine).rollouts(num_workers=2, num_envs_per_worker=2)
              .training(train_batch_size=400, minibatch_size=100, num_epochs=2)
              .multi_agent(policies={"first", "second"}, policy_mapping_fn=first_or_second).debugging(seed=0))
    result = train(config, 2)
    records = read_records(tmp_path)
    sent = [r for r in records if r["level"] == "env"]
    moves = [r for r in records if r["level"] == "game"]
    assert len(sent) == result["timesteps_total"] == 800
    assert all(r["sent"] == [r["mover"]] for r in sent), [r for r in sent if r["sent"] != [r["mover"]]][:5]
    assert len(moves) == len(sent) and all(m["legal"] for m in moves), [m for m in moves if not m["legal"]][:5]
    assert [m["agent"] for m in moves] == [r["mover"] for r in sent]
    # zero-sum, and each reward reaches the player it is for after the other player's move
    rewards = result["policy_reward_mean"]
    assert rewards["first"] == -rewards["second"] and result["episode_reward_mean"] == 0.0
    assert result["agent_timesteps_total"] == 800  # one agent acts per step


def first_or_second(agent_id: str, episode: Any, worker: Any, **kwargs: Any) -> str:
    return "first" if agent_id == "player_0" else "second"


def short_cartpoles(config: dict[str, Any]) -> Any:
    """Three CartPoles cut by a time limit of 5 steps (none falls so soon): every agent is truncated
    on the same step, which ends the episode (``"__all__"`` terminated, as RLlib's ``make_multi_agent`` says)."""
    return make_multi_agent(lambda _: gym.make("CartPole-v1", max_episode_steps=5))({"num_agents": 3})


register_env("short_cartpoles", short_cartpoles)


def test_agents_cut_by_a_time_limit_are_bootstrapped_from_their_last_observation():
    config = (PPOConfig().environment("short_cartpoles").resources(engine="local").rollouts(num_envs_per_worker=1)
              .training(train_batch_size=12, minibatch_size=12).debugging(seed=0))
    with config.build() as algo:
        weights = algo.get_policy().get_flat_weights()
        seen: list[dict[str, np.ndarray]] = []

        def postprocess(columns: dict[str, np.ndarray], config: Any) -> dict[str, np.ndarray]:
            seen.append(columns)
            return gae_columns(columns, config)

        worker = MultiAgentRolloutWorker(algo.config, 1, postprocess, plan=algo.workers.plan, setup=algo.setup_)
        sample = worker.sample({"default_policy": weights}, {"default_policy": None})
        worker.stop()
        finals = torch.as_tensor(seen[0]["next_obs"][:, 0][seen[0]["cuts"][:, 0]])
        with torch.no_grad():
            final_values = algo.get_policy()(obs=finals)[1].numpy()
    assert sample.env_steps == 12 and sample.agent_steps == 36
    (columns,) = seen
    ends = columns["cuts"][:, 0]  # two whole episodes of 3 agents, then 2 steps of each agent
    assert ends.tolist() == ([False] * 4 + [True]) * 6 + [False, True] * 3
    truncated, terminated = columns["truncated"][:, 0], columns["terminated"][:, 0]
    assert not terminated.any()
    assert truncated.tolist() == ([False] * 4 + [True]) * 6 + [False, False] * 3
    # the value of each cut step's next state is its final observation's (by the learner's network), not 0
    np.testing.assert_allclose(columns["next_values"][:, 0][ends], final_values, rtol=1e-5)
    assert (np.abs(final_values) > 0).all()


@pytest.mark.parametrize("prev", [False, True])
def test_recurrent_sequences_replay_each_agent_step_as_it_was_acted(prev):
    """Each policy's batch of a recurrent network is cut into sequences that start from the state
    stored with them: replayed through the torch network, every step's log-probability equals the
    one its agent acted with (the numpy twin's), which fails if a sequence crossed from one agent
    to another, started from another state, or read another previous action or reward."""
    model = {"use_lstm": True, "max_seq_len": 7, "lstm_cell_size": 16, "fcnet_hiddens": [16],
             "lstm_use_prev_action": prev, "lstm_use_prev_reward": prev}
    config = (PPOConfig().environment(make_multi_agent("CartPole-v1"), env_config={"num_agents": 3})
              .rollouts(num_rollout_workers=0, num_envs_per_worker=2, rollout_fragment_length=40)
              .training(model=model, train_batch_size=80, sgd_minibatch_size=40)
              .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda agent_id, *_, **__: f"p{agent_id % 2}")
              .resources(engine="local").debugging(seed=3))
    with config.build() as algo:
        weights = {policy_id: learner.policy.get_flat_weights() for policy_id, learner in algo.learners.items()}
        worker = algo.workers.workers[0]
        for _ in range(2):  # the second fragment starts from states carried over the first's end
            sample = worker.sample(weights, {policy_id: None for policy_id in weights})
        for policy_id, result in sample.policies.items():
            batch = result.batch
            assert batch["seq_lens"].sum() == len(batch) and batch["seq_lens"].max() <= 7
            learner = algo.learners[policy_id]
            view = learner.sequences(batch)
            with torch.no_grad():
                dist, _ = learner.policy(**view.inputs)
                replayed = view.real(dist.log_prob(view["actions"])).numpy()
            np.testing.assert_allclose(replayed, batch["logp"], atol=1e-4)
