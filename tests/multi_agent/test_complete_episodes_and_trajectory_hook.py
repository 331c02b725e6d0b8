"""Multi-agent workers with ``batch_mode="complete_episodes"`` and ``on_postprocess_trajectory``, as
RLlib 2.9's ``centralized_critic_2.py`` uses both: batches of whole episodes only, counted as they
are; the hook once per agent and episode, with every agent of the episode in ``original_batches``;
its change to the observations reaching the learner's rows; and that example's config training."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from agent_envs import Staggered
from gymnasium.spaces import Dict, Discrete
from torch import nn

from volley import (
    DefaultCallbacks,
    FullyConnectedNetwork,
    IMPALAConfig,
    ModelCatalog,
    MultiAgentEnv,
    PolicySpec,
    PPOConfig,
    TorchModelV2,
    make_multi_agent,
)
from volley.catalog import build_policy
from volley.policies import PolicySetup
from volley.rollout.advantages import gae_columns, vtrace_columns
from volley.rollout.multi_agent import MultiAgentRolloutWorker, MultiAgentSample

MultiAgentCartPole = make_multi_agent("CartPole-v1")
CARTPOLE = gym.make("CartPole-v1")


class TwoStepGame(MultiAgentEnv):
    """RLlib's two-step cooperative matrix game (its ``examples/env/two_step_game.py``, rewritten):
    agent 0 picks the second state; in state 1 every pair of actions pays 7, in state 2 the pair (1, 1)
    pays 8, (0, 0) nothing, the others 1; each agent gets half, and both act on both steps."""

    def __init__(self, env_config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.observation_space, self.action_space = Discrete(6), Discrete(2)
        self._agent_ids = {0, 1}
        self.state = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.state = 0
        return self._obs(), {}

    def step(self, action_dict: dict[int, int]) -> tuple[dict, dict, dict, dict, dict]:
        if self.state == 0:
            self.state, reward, terminated = 1 + int(action_dict[0]), 0.0, False
        elif self.state == 1:
            reward, terminated = 7.0, True
        else:
            both = int(action_dict[0]) + int(action_dict[1])
            reward, terminated = [0.0, 1.0, 8.0][both], True
        return (self._obs(), {0: reward / 2, 1: reward / 2}, {"__all__": terminated}, {"__all__": False},
                {0: {}, 1: {}})

    def _obs(self) -> dict[int, int]:
        return {0: self.state, 1: self.state + 3}


OBSERVER_SPACE = Dict({"own_obs": Discrete(6), "opponent_obs": Discrete(6), "opponent_action": Discrete(2)})


def central_critic_observer(agent_obs: dict[int, int], **kwargs: Any) -> dict[int, dict[str, int]]:
    """centralized_critic_2.py's observation_fn: each agent also sees the other's observation, and a
    slot for the other's action that the hook fills in."""
    return {0: {"own_obs": agent_obs[0], "opponent_obs": agent_obs[1], "opponent_action": 0},
            1: {"own_obs": agent_obs[1], "opponent_obs": agent_obs[0], "opponent_action": 0}}


class FillInActions(DefaultCallbacks):
    """centralized_critic_2.py's hook: the opponent's actions, one-hot by the catalog's preprocessor,
    written in place into the last two entries of the agent's flat observations. Each call is recorded."""

    calls: list[dict[str, Any]] = []

    def on_postprocess_trajectory(self, *, worker: Any, episode: Any, agent_id: Any, policy_id: str, policies: Any,
                                  postprocessed_batch: Any, original_batches: Any, **kwargs: Any) -> None:
        one_hot = ModelCatalog.get_preprocessor_for_space(Discrete(2))
        _, opponent_batch = original_batches[1 - agent_id]
        postprocessed_batch["obs"][:, -2:] = [one_hot.transform(action) for action in opponent_batch["actions"]]
        self.calls.append({"episode": episode.episode_id, "agent": agent_id, "policy": policy_id,
                           "rows": len(postprocessed_batch),
                           "originals": {a: len(batch) for a, (_, batch) in original_batches.items()},
                           "ends": bool(original_batches[agent_id][1]["terminated"][-1]
                                        or original_batches[agent_id][1]["truncated"][-1])})


class CentralizedCriticModel(TorchModelV2, nn.Module):
    """centralized_critic_2.py's YetAnotherTorchCentralizedCriticModel: actions from the agent's own
    observation, the value from the whole flat observation (the opponent's included)."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, num_outputs: int, model_config: dict,
                 name: str) -> None:
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.action_model = FullyConnectedNetwork(gym.spaces.Box(0, 1, (6,)), action_space, num_outputs,
                                                  model_config, name + "_action")
        self.value_model = FullyConnectedNetwork(obs_space, action_space, 1, model_config, name + "_vf")
        self._model_in: list[Any] = []

    def forward(self, input_dict: dict[str, Any], state: list, seq_lens: Any) -> tuple[torch.Tensor, list]:
        self._model_in = [input_dict["obs_flat"], state, seq_lens]
        return self.action_model({"obs": input_dict["obs"]["own_obs"]}, state, seq_lens)

    def value_function(self) -> torch.Tensor:
        value_out, _ = self.value_model({"obs": self._model_in[0]}, self._model_in[1], self._model_in[2])
        return torch.reshape(value_out, [-1])


def centralized_critic_2(**rollouts: Any) -> PPOConfig:
    """centralized_critic_2.py's config (its two policies, mapping, observation_fn, callbacks and model),
    on the local engine and small batches."""
    return (PPOConfig().environment(TwoStepGame).resources(engine="local")
            .rollouts(batch_mode="complete_episodes", num_rollout_workers=0, enable_connectors=False, **rollouts)
            .callbacks(FillInActions)
            .training(model={"custom_model": CentralizedCriticModel, "fcnet_hiddens": [16]}, train_batch_size=100,
                      sgd_minibatch_size=50, num_sgd_iter=2)
            .multi_agent(policies={"pol1": (None, OBSERVER_SPACE, Discrete(2), {}),
                                   "pol2": (None, OBSERVER_SPACE, Discrete(2), {})},
                         policy_mapping_fn=lambda agent_id, episode, worker, **kwargs: "pol1" if agent_id == 0
                         else "pol2",
                         observation_fn=central_critic_observer)
            .debugging(seed=0))


def sampling_worker(config: Any, postprocess: Any = gae_columns) -> tuple[MultiAgentRolloutWorker, dict[str, np.ndarray]]:
    """A worker of ``config`` (its fragments postprocessed by ``postprocess``) and fresh weights for each
    of its policies."""
    setup = PolicySetup.of(config)
    worker = MultiAgentRolloutWorker(config, 0, postprocess, plan=config.plan(num_workers=1), setup=setup)
    torch.manual_seed(0)
    weights = {policy_id: build_policy(*worker.spaces()[policy_id], policy_config.model)[1].get_flat_weights()
               for policy_id, policy_config in setup.configs.items()}
    return worker, weights


@pytest.mark.parametrize("count_steps_by, episodes", [("env_steps", 4), ("agent_steps", 2)])
def test_a_complete_episodes_sample_holds_whole_episodes_counted_as_they_are(count_steps_by: str, episodes: int):
    # Staggered's episodes are 7 steps in which its four agents act 7, 4, 3 and 2 times: a fragment of
    # 2 envs x 10 steps ends with the second episodes (28 env steps), or of 10 x 2 agent steps with the first
    config = (PPOConfig().environment(Staggered).rollouts(num_envs_per_worker=2, rollout_fragment_length=10,
                                                            batch_mode="complete_episodes")
              .multi_agent(count_steps_by=count_steps_by).debugging(seed=0))
    worker, weights = sampling_worker(config)
    for _ in range(2):  # the second sample starts every environment afresh
        sample = worker.sample(weights, None)
        assert (sample.env_steps, sample.agent_steps) == (7 * episodes, 16 * episodes)
        assert sample.episode_lengths.tolist() == [7] * episodes
        assert sample.episode_returns.tolist() == [16.0] * episodes  # 1 per agent step
        result = sample.policies["default_policy"]
        assert len(result.batch) == result.env_steps == 16 * episodes
    worker.stop()


def cartpole_pair(batch_mode: str) -> PPOConfig:
    """Two CartPoles, one policy each: their episodes end at different steps, mostly beyond a fragment."""
    return (PPOConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
            .rollouts(num_envs_per_worker=2, rollout_fragment_length=15, batch_mode=batch_mode)
            .callbacks(TrajectoryLog).debugging(seed=1)
            .multi_agent(policies={"p0": PolicySpec(), "p1": PolicySpec()},
                         policy_mapping_fn=lambda agent_id, *args, **kwargs: f"p{agent_id}"))


class TrajectoryLog(DefaultCallbacks):
    """Records each trajectory the hook gets: its agent, episode, rows and how its own steps end."""

    calls: list[dict[str, Any]] = []

    def on_postprocess_trajectory(self, *, episode: Any, agent_id: Any, postprocessed_batch: Any,
                                  original_batches: Any, **kwargs: Any) -> None:
        own = original_batches[agent_id][1]
        self.calls.append({"episode": episode.episode_id, "agent": agent_id, "rows": len(postprocessed_batch),
                           "steps": len(own), "agents": sorted(original_batches),
                           "ends": bool(own["terminated"][-1] or own["truncated"][-1]),
                           "terminated": bool(own["terminated"][-1]),
                           "bootstrap": postprocessed_batch.get("bootstrap", np.zeros(0, bool)).tolist()})


def test_only_episodes_that_ended_reach_the_batch_and_the_hook_sees_each_agent_once():
    TrajectoryLog.calls = []
    worker, weights = sampling_worker(cartpole_pair("complete_episodes"))
    samples = [worker.sample(weights, None) for _ in range(3)]
    worker.stop()
    calls = TrajectoryLog.calls
    assert all(call["ends"] for call in calls)  # no trajectory cut before its agent's end
    assert all(call["rows"] == call["steps"] for call in calls)
    assert len({(call["episode"], call["agent"]) for call in calls}) == len(calls)  # once per agent and episode
    assert all(call["agents"] == [0, 1] for call in calls)
    assert len(calls) == 2 * sum(len(sample.episode_returns) for sample in samples)
    for sample in samples:
        rows = sum(len(result.batch) for result in sample.policies.values())
        assert sample.env_steps >= 2 * 15 and sample.env_steps == sample.episode_lengths.sum()
        assert rows == sample.agent_steps == sample.episode_returns.sum()  # CartPole pays 1 per agent step
        assert rows == sum(result.episode_lengths.sum() for result in sample.policies.values())


def test_fragments_cut_running_episodes_and_the_hook_gets_their_pieces():
    """truncate_episodes, for contrast: the batch also holds the steps of episodes still running, which
    the hook gets as pieces that do not end; each trajectory once per fragment."""
    TrajectoryLog.calls = []
    worker, weights = sampling_worker(cartpole_pair("truncate_episodes"))
    sample = worker.sample(weights, None)
    worker.stop()
    calls = TrajectoryLog.calls
    rows = sum(len(result.batch) for result in sample.policies.values())
    assert sample.env_steps == 30 and rows == sample.agent_steps > sample.episode_lengths.sum()
    assert sum(call["rows"] for call in calls) == rows
    assert any(not call["ends"] for call in calls)
    assert len({(call["episode"], call["agent"]) for call in calls}) == len(calls)


def test_with_v_trace_the_hook_gets_each_trajectorys_bootstrap_row_as_its_last():
    TrajectoryLog.calls = []
    config = (IMPALAConfig().environment(MultiAgentCartPole, env_config={"num_agents": 2})
              .rollouts(num_envs_per_worker=2, rollout_fragment_length=40).callbacks(TrajectoryLog).debugging(seed=3))
    worker, weights = sampling_worker(config, vtrace_columns)
    batch = worker.sample(weights, None).policies["default_policy"].batch
    worker.stop()
    calls = TrajectoryLog.calls
    assert {call["terminated"] for call in calls} == {True, False}  # poles that fell, and ones cut standing
    for call in calls:
        cut = not call["terminated"]
        assert call["rows"] == call["steps"] + cut and call["bootstrap"] == [False] * call["steps"] + [True] * cut
    assert sum(call["rows"] for call in calls) == len(batch)


def test_the_hooks_change_to_the_observations_reaches_the_learners_rows():
    FillInActions.calls = []
    worker, weights = sampling_worker(centralized_critic_2(num_envs_per_worker=1, rollout_fragment_length=10))
    sample: MultiAgentSample = worker.sample(weights, None)
    worker.stop()
    pol1, pol2 = sample.policies["pol1"].batch, sample.policies["pol2"].batch
    episodes = len(sample.episode_returns)
    assert episodes == 5 and sample.env_steps == 10 and len(pol1) == len(pol2) == 10
    # both agents act on both steps of every episode, so row t of one policy is row t of the other's episode
    np.testing.assert_array_equal(pol1["obs"][:, -2:], np.eye(2)[pol2["actions"]])
    np.testing.assert_array_equal(pol2["obs"][:, -2:], np.eye(2)[pol1["actions"]])
    assert pol1["obs"].shape == (10, 14)  # opponent_action (2), opponent_obs (6), own_obs (6): the Dict's order
    calls = FillInActions.calls
    assert sorted((call["agent"], call["policy"]) for call in calls) == [(0, "pol1")] * 5 + [(1, "pol2")] * 5
    assert all(call["rows"] == 2 and call["originals"] == {0: 2, 1: 2} and call["ends"] for call in calls)


def test_centralized_critic_2s_config_trains():
    FillInActions.calls = []
    with centralized_critic_2().build() as algo:
        for _ in range(2):
            result = algo.train()
    assert result["episode_len_mean"] == 2.0
    assert set(result["info"]["learner"]) == {"pol1", "pol2"}
    assert result["timesteps_total"] == 2 * result["episodes_total"] >= 200
    assert set(result["policy_reward_mean"]) == {"pol1", "pol2"}
    assert len(FillInActions.calls) == 2 * result["episodes_total"]
