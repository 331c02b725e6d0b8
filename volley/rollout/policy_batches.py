"""Each policy's part of a multi-agent worker's sample: its agents' trajectories laid end to end
(:func:`~volley.rollout.agents.policy_columns`), postprocessed by the algorithm (GAE per agent)
into the batch its learner reads, with the callbacks' ``on_postprocess_trajectory`` called on
each trajectory's rows of it, as RLlib's sampler calls it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from volley.callbacks import Hooks
from volley.policies import PolicySetup
from volley.rollout.agents import AgentEpisode, AgentTrajectory, EpisodeAgents, policy_columns
from volley.rollout.batch import STATE_IN, Batch
from volley.rollout.filters import FilterStats
from volley.rollout.policy_actors import PolicyActor
from volley.rollout.sequences import PREVIOUS, stored_states
from volley.rollout.worker import Postprocess, SampleResult, env_major

# one agent's closed steps of one episode in a sample: the episode, the agent's id, its trajectory
Part = tuple[AgentEpisode, Any, AgentTrajectory]
# RLlib's original_batches of one episode: each agent's policy and steps as collected, by agent id
Originals = dict[Any, tuple[PolicyActor, Batch]]


class PolicyHost(Protocol):
    """What is read of a multi-agent worker (a :class:`~volley.rollout.multi_agent.MultiAgentRolloutWorker`,
    which the hook gets as ``worker``)."""

    actors: dict[str, PolicyActor]
    setup: PolicySetup
    postprocess: Postprocess
    hooks: Hooks


def policy_results(worker: PolicyHost, ended: list[EpisodeAgents], running: list[EpisodeAgents]
                   ) -> dict[str, SampleResult]:
    """Each policy's :class:`SampleResult`: a trained policy's batch of its agents' closed steps in the
    ``ended`` and ``running`` episodes (a running agent's last closed step must know the observation
    it led to), and every policy's returns of its agents whose episodes ended.

    ``on_postprocess_trajectory`` is called once per trajectory of a trained policy, policy by policy,
    with its rows of the batch after postprocessing (V-trace's bootstrap row after a trajectory cut
    without a terminal included, as its last): a change the hook makes to them reaches the learner.
    ``original_batches`` holds the steps of every agent of that episode with a learned policy, as
    collected; a hand-written policy keeps no steps, so its agents are not in it. A learned policy
    that is not trained gets no call (RLlib calls the hook for it too): volley does not postprocess
    its steps, which no learner reads.
    """
    hooked = worker.hooks.uses("on_postprocess_trajectory")
    trains = worker.setup.policy_map.trains
    parts: list[Part] = [(episode, agent_id, trajectory) for episode, agents in ended + running
                         for agent_id, trajectory in agents.items()
                         if trajectory.closed and (hooked or trains(trajectory.policy_id))]
    columns = policy_columns([trajectory for _, _, trajectory in parts],
                             lambda policy_id, steps: worker.actors[policy_id].values(steps))
    originals = original_batches(worker.actors, parts, columns) if hooked else {}
    results = {}
    for policy_id, actor in worker.actors.items():
        batch = Batch()
        steps = 0
        if policy_id in columns and trains(policy_id):
            assert actor.config is not None
            kept = {key: columns[policy_id].pop(key) for key in list(columns[policy_id])
                    if key in PREVIOUS or key.startswith(STATE_IN)}  # what the network read
            cuts = columns[policy_id]["cuts"]
            steps = len(cuts)  # the batch may hold more rows (V-trace's bootstrap rows)
            processed = {**worker.postprocess(columns[policy_id], actor.config),
                         **{key: value for key, value in kept.items() if key in PREVIOUS}}
            valid = processed.pop("valid").T
            batch = Batch({key: env_major(value, valid) for key, value in processed.items()})
            if hooked:
                mine = [part for part in parts if part[2].policy_id == policy_id]
                trajectories_postprocessed(worker, batch, mine, originals, "bootstrap" in processed)
            tensors = [kept[f"{STATE_IN}{k}"] for k in range(len(actor.initial_state()))]  # each [R, 1, ...]
            if tensors:  # the sequences the learner replays: cut at each trajectory's end
                per_step = [[tensor[t] for tensor in tensors] for t in range(len(cuts))]
                batch.update(stored_states(valid, cuts.T, actor.config.model.max_seq_len, per_step))
        ended_agents = [agent for _, agents in ended for agent in agents.values() if agent.policy_id == policy_id]
        delta = actor.obs_filter.pop_delta() if actor.by_hand is None else None
        results[policy_id] = SampleResult(
            batch, np.array([agent.episode_return for agent in ended_agents], np.float32),
            np.array([len(agent.closed) for agent in ended_agents], np.int64),
            None if delta is None else FilterStats(delta, None), steps)
    return results


def original_batches(actors: dict[str, PolicyActor], parts: list[Part], columns: dict[str, dict[str, np.ndarray]]
                     ) -> dict[int, Originals]:
    """Each episode's ``original_batches`` by episode id: every agent's rows of its policy's
    ``columns`` (views, before postprocessing; without the columns that only cut them)."""
    found: dict[int, Originals] = {}
    taken: dict[str, int] = {}  # each policy's rows given so far
    for episode, agent_id, trajectory in parts:
        policy_id = trajectory.policy_id
        first = taken.get(policy_id, 0)
        last = taken[policy_id] = first + len(trajectory.closed)
        rows = Batch({key: column[first:last, 0] for key, column in columns[policy_id].items()
                      if key not in ("cuts", "valid")})
        found.setdefault(episode.episode_id, {})[agent_id] = (actors[policy_id], rows)
    return found


def trajectories_postprocessed(worker: PolicyHost, batch: Batch, parts: list[Part], originals: dict[int, Originals],
                               bootstrap_rows: bool) -> None:
    """``on_postprocess_trajectory`` for each of one policy's ``parts``, on its rows of the policy's
    postprocessed ``batch`` (with ``bootstrap_rows``, a row follows each one cut without a terminal)."""
    first = 0
    for episode, agent_id, trajectory in parts:
        last = first + len(trajectory.closed) + (bootstrap_rows and not trajectory.closed[-1].terminated)
        with batch.rows_to_edit(first, last) as rows:
            worker.hooks("on_postprocess_trajectory", worker=worker, episode=episode, agent_id=agent_id,
                         policy_id=trajectory.policy_id, policies=worker.actors, postprocessed_batch=rows,
                         original_batches=originals[episode.episode_id])
        first = last
