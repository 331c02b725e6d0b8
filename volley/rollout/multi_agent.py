"""MultiAgentRolloutWorker: multi-agent environments and a copy of every policy, producing one batch
per policy.

Each step the worker gathers the observation of every agent that must act, in every one of its
environments, groups them by the policy each agent is mapped to, and makes **one** forward pass
per policy over its group (a learned policy in numpy where its network has a numpy twin, a
hand-written one through its ``compute_actions``). Agents are mapped once per episode by the
config's ``policy_mapping_fn``. Their trajectories (:mod:`volley.rollout.agents`) are cut per
agent, and each policy's are postprocessed by the algorithm's own ``postprocess`` (GAE per agent)
into the :class:`SampleResult` the policy's learner reads, as a single-agent worker's would be
(:mod:`volley.rollout.policy_batches`, which also calls ``on_postprocess_trajectory``).

Environment ``j`` of the worker in slot ``s`` has global index ``s·N + j`` and is seeded
``seed + index`` on its first reset; each policy draws its actions from a stream of its own, seeded
from (seed, slot, policy), so a run is a function of its config and seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import gymnasium as gym
import numpy as np

from volley.acting import zero_actions
from volley.callbacks import DefaultCallbacks, EnvContext, Hooks
from volley.config import AlgorithmConfig, RolloutPlan
from volley.envs import EnvCreator, env_actions
from volley.episode import EpisodeRecord
from volley.errors import ConfigError, EnvError, shown
from volley.multi_agent_env import (
    agent_spaces,
    checked_output,
    make_multi_agent_env,
    possible_agent_ids,
)
from volley.networks.numpy_layers import Previous
from volley.policies import PolicySetup
from volley.rollout.agents import AgentEpisode, AgentTrajectory, EpisodeAgents, Transition
from volley.rollout.filters import FilterStats
from volley.rollout.policy_actors import PolicyActor, RowStreams
from volley.rollout.policy_batches import policy_results
from volley.rollout.worker import Postprocess, SampleResult


@dataclass
class MultiAgentSample:
    """What one multi-agent worker returns per iteration: a :class:`SampleResult` per policy that
    had agents acting (its agents' episode returns as ``episode_returns``, its agent steps as
    ``env_steps``), and the environments' own episodes (returns summed over agents)."""

    policies: dict[str, SampleResult]
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    env_steps: int
    agent_steps: int
    env_errors: int = 0
    episode_metrics: list[EpisodeRecord] = field(default_factory=list)


class MultiAgentRolloutWorker:
    """Owns ``num_envs_per_worker`` multi-agent environments and samples them with every policy."""

    _known: set[Any] | None  # the agents whose spaces the environment declares (None: every PolicySpec gives them)

    def __init__(self, config: AlgorithmConfig, worker_index: int, postprocess: Postprocess,
                 env_creator: EnvCreator | None = None, num_envs: int | None = None, seed_offset: int = 0,
                 render_mode: str | None = None, *, plan: RolloutPlan, setup: PolicySetup,
                 slot: int | None = None, callbacks_class: type[DefaultCallbacks] | None = None) -> None:
        self.config = config
        self.worker_index = worker_index
        self.num_workers = plan.num_workers
        kind = "rollout" if seed_offset == 0 else "evaluation"
        self.hooks = Hooks.of(config.callbacks_class, f" in {kind} worker {worker_index}", callbacks_class)
        unsupported = [name for name in ("on_episode_created", "on_sub_environment_created") if self.hooks.uses(name)]
        if unsupported:
            raise ConfigError(f"callbacks {config.callbacks_class} override {unsupported[0]}, which volley's multi-agent "
                              "workers do not call yet (on_episode_start/_step/_end, on_postprocess_trajectory and on_sample_end "
                              "they do)")
        self.postprocess = postprocess
        self.setup = setup
        self.num_envs = num_envs or plan.num_envs_per_worker
        self.fragment_length = plan.fragment_length
        first = seed_offset + (worker_index if slot is None else slot) * self.num_envs
        self.env_indices = list(range(first, first + self.num_envs))
        self.envs = [make_multi_agent_env(config.env, EnvContext(config.env_config, worker_index, j, self.num_workers),
                                          env_creator, render_mode) for j in range(self.num_envs)]
        self._slot = first
        self._rng = np.random.default_rng([config.seed, first, 2])  # episode ids
        spaces, self._known = self.policy_spaces(setup)
        self.actors = {policy_id: PolicyActor(policy_id, setup, policy_spaces, RowStreams(config.seed, [first, k]))
                       for k, (policy_id, policy_spaces) in enumerate(spaces.items())}
        # set_policies' change, until the weights of every learned policy of it arrive
        self._changed: tuple[PolicySetup, dict[str, PolicyActor], set[Any] | None] | None = None
        self._obs: list[dict[Any, Any]] | None = None  # each environment's observations of agents to act
        self._episodes: list[AgentEpisode] = []
        self._agents: list[dict[Any, AgentTrajectory]] = []  # each environment's agents this episode
        self._states: list[dict[Any, list[Any]]] = []  # hand-written policies' per-agent states
        self._done: list[set[Any]] = []
        self._records: list[EpisodeRecord] = []  # the custom metrics of the episodes ended since the last sample

    # -- policies and their spaces ---------------------------------------------------------

    def policy_spaces(self, setup: PolicySetup) -> tuple[dict[str, tuple[gym.Space, gym.Space]], set[Any] | None]:
        """Each policy's observation and action space: its PolicySpec's, else the one space every
        agent shares, else those of the first agent mapped to it. Only where agents' spaces differ
        is the mapping function asked, with no episode, as RLlib does (mapping functions that read
        ``episode.episode_id``, as RLlib's self-play examples do, work wherever the spaces agree). A
        policy shared by agents whose spaces differ is refused, naming both. Also the agents whose
        spaces the environment declares (None where every PolicySpec gives its spaces: then an
        agent's are its policy's, and the environment need declare none, as RLlib's
        hierarchical_training declares none)."""
        env = self.envs[0]
        agents = possible_agent_ids(env)
        every = {agent_id: agent_spaces(env, agent_id) for agent_id in agents}
        first = next(iter(every.values()), None)
        shared = first if all(spaces == first for spaces in every.values()) else None
        found: dict[str, tuple[gym.Space, gym.Space]] = {}
        for agent_id, spaces in ({} if shared else every).items():
            policy_id = setup.policy_map.policy_of(agent_id, None, self)
            if policy_id in found and found[policy_id] != spaces:
                raise EnvError(f"policy {policy_id!r} acts for agents with different spaces: agent {agent_id!r} has "
                               f"{spaces[0]} / {spaces[1]}, another {found[policy_id][0]} / {found[policy_id][1]}; "
                               "map them to policies of their own, or give the policy's spaces in its PolicySpec")
            found.setdefault(policy_id, spaces)
        result = {}
        for policy_id, entry in setup.policy_map.entries.items():
            inferred = found.get(policy_id) or shared
            obs_space = entry.observation_space or (inferred[0] if inferred else None)
            act_space = entry.action_space or (inferred[1] if inferred else None)
            if obs_space is None or act_space is None:
                raise EnvError(f"policy {policy_id!r}: no agent of {type(env).__name__} is mapped to it and its "
                               "PolicySpec gives no observation_space/action_space; give them there")
            result[policy_id] = (obs_space, act_space)
        every_spec_gives_spaces = all(e.observation_space is not None and e.action_space is not None
                                      for e in setup.policy_map.entries.values())
        return result, None if every_spec_gives_spaces else set(agents)

    def spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        actors = self.actors if self._changed is None else self._changed[1]
        return {policy_id: (actor.observation_space, actor.action_space) for policy_id, actor in actors.items()}

    def set_policies(self, setup: PolicySetup) -> None:
        """Take a changed set of policies (RLlib's ``add_policy``/``remove_policy``): new actors for new
        ids, the others kept with their weights. The change takes effect when the weights of every
        learned policy of it arrive (at once in a synchronous run; a stream's worker may sample
        again with the weights it has before the run publishes the new policy's). Running episodes
        keep their agents' policies until their next reset, except an agent of a removed policy: its
        steps with that policy are dropped, and it is mapped anew when it next appears."""
        spaces, known = self.policy_spaces(setup)
        actors = {policy_id: self.actors.get(policy_id) or PolicyActor(
            policy_id, setup, spaces[policy_id], RowStreams(self.config.seed, [self._slot, 1000 + k]))
            for k, policy_id in enumerate(setup.policy_map.entries)}
        self._changed = setup, actors, known

    def _take_change(self, weights: dict[str, np.ndarray]) -> None:
        """The policies of :meth:`set_policies` from now on, if ``weights`` hold each learned one's."""
        if self._changed is None or any(policy_id not in weights for policy_id in self._changed[0].configs):
            return
        (self.setup, self.actors, self._known), self._changed = self._changed, None
        for agents in self._agents:
            for agent_id in [a for a, trajectory in agents.items() if trajectory.policy_id not in self.actors]:
                del agents[agent_id]

    # -- sampling ----------------------------------------------------------------------------

    def _load(self, weights: dict[str, np.ndarray], filters: dict[str, FilterStats | None] | None) -> None:
        """Every policy's weights, and its filter statistics where given (a stream of fragments sends
        them only with new weights)."""
        self._take_change(weights)
        for policy_id, actor in self.actors.items():
            actor.load(weights.get(policy_id), (filters or {}).get(policy_id))

    def _reset(self, j: int) -> None:
        """Start environment ``j``'s next episode (seeded by its global index on its first)."""
        seed = self.config.seed + self.env_indices[j] if len(self._episodes) < self.num_envs else None
        obs, _ = checked_output(self.envs[j], "reset", self.envs[j].reset(seed=seed), self._known)
        episode = AgentEpisode(int(self._rng.integers(2**62)), j, self)
        if j < len(self._episodes):
            self._episodes[j], self._agents[j], self._states[j], self._done[j] = episode, {}, {}, set()
        else:
            self._episodes.append(episode)
            self._agents.append({})
            self._states.append({})
            self._done.append(set())
        assert self._obs is not None
        obs = self._observed(obs, j, episode)
        self._obs[j] = obs
        episode.last_obs.update(obs)
        self.hooks("on_episode_start", worker=self, base_env=self.envs[j], policies=self.actors, episode=episode,
                   env_index=j)

    def _observed(self, obs: dict[Any, Any], j: int, episode: AgentEpisode) -> dict[Any, Any]:
        """Environment ``j``'s observations as the policies see them: as the environment gave them, or as
        the config's ``observation_fn`` rewrites them (RLlib's call, whose dict may drop agents, which
        then do not act, or add some)."""
        observation_fn = self.setup.observation_fn
        if observation_fn is None:
            return obs
        rewritten = observation_fn(agent_obs=obs, worker=self, base_env=self.envs[j], policies=self.actors,
                                   episode=episode)
        if not isinstance(rewritten, dict):
            raise ConfigError(f"observation_fn {self.config.observation_fn} returned {shown(rewritten)}: it must return "
                              "a dict of the agents' observations")
        return rewritten

    def _agent(self, j: int, agent_id: Any) -> AgentTrajectory:
        """Agent ``agent_id`` of environment ``j`` this episode, mapped to its policy on first sight."""
        agent = self._agents[j].get(agent_id)
        if agent is None:
            policy_id = self.setup.policy_map.policy_of(agent_id, self._episodes[j], self)
            agent = self._agents[j][agent_id] = AgentTrajectory(policy_id, state=self.actors[policy_id].initial_state())
            self._episodes[j].policies[agent_id] = policy_id
            by_hand = self.actors[policy_id].by_hand
            if by_hand is not None:
                self._states[j][agent_id] = by_hand.get_initial_state()
        return agent

    def _step_all(self, explore: bool, training: bool, finished: list[EpisodeAgents]) -> tuple[int, int]:
        """One forward pass per policy over the agents that act, then one step of every environment
        (the episodes that end are added to ``finished``); returns the environment and agent steps taken."""
        assert self._obs is not None
        groups: dict[str, list[tuple[int, Any, Any]]] = {}
        for j, observations in enumerate(self._obs):
            self._episodes[j].total_agent_steps += len(observations)
            for agent_id, raw in observations.items():
                groups.setdefault(self._agent(j, agent_id).policy_id, []).append((j, agent_id, raw))
        actions: list[dict[Any, Any]] = [{} for _ in self.envs]
        agent_steps = 0
        for policy_id, group in groups.items():
            actor = self.actors[policy_id]
            raw = [r for _, _, r in group]
            agent_steps += len(group)
            if actor.by_hand is not None:
                chosen, states = actor.act_by_hand(raw, [self._states[j][a] for j, a, _ in group])
                for (j, agent_id, _), action, state in zip(group, chosen, states, strict=True):
                    actions[j][agent_id], self._states[j][agent_id] = action, state
                continue
            obs = actor.observe(raw, update=training)
            agents = [self._agents[j][agent_id] for j, agent_id, _ in group]
            state = [np.stack(tensors) for tensors in zip(*[agent.state for agent in agents], strict=True)]
            prev = self._previous(actor, agents)
            sampled, logp, values, state_out = actor.act(obs, explore, state, prev)
            cfg = self.config
            for k, agent in enumerate(agents):
                if agent.closed and agent.closed[-1].next_obs is None:  # the observation its last step led to
                    agent.closed[-1].next_obs = obs[k]
                agent.open = Transition(obs[k], sampled[k], float(logp[k]), float(values[k]), state_in=agent.state,
                                        state_out=[s[k] for s in state_out],
                                        prev=None if prev is None else (prev[0][k], float(prev[1][k])))
                agent.state = agent.open.state_out
            for k, action in enumerate(env_actions(sampled, actor.action_space, cfg.normalize_actions,
                                                   cfg.clip_actions)):
                j, agent_id, _ = group[k]
                actions[j][agent_id] = action
        for j, env in enumerate(self.envs):
            self._step_env(j, env, actions[j], finished)
        return len(self.envs), agent_steps

    @staticmethod
    def _previous(actor: PolicyActor, agents: list[AgentTrajectory]) -> Previous:
        """The previous action and reward of each agent (zeros at an episode start), for a network that
        reads them; else None."""
        if not actor.network.reads_prev:
            return None
        zero = zero_actions(actor.action_space, 1)[0]
        actions = np.stack([zero if agent.last is None else agent.last[0] for agent in agents])
        return actions, np.array([0.0 if agent.last is None else agent.last[1] for agent in agents], np.float32)

    def _step_env(self, j: int, env: Any, actions: dict[Any, Any], finished: list[EpisodeAgents]) -> None:
        """Step environment ``j`` with its agents' ``actions``: rewards to each agent's open step, which
        closes when the agent observes again or is done; the episode ends with ``"__all__"``."""
        assert self._obs is not None
        obs, rewards, terminateds, truncateds, infos = checked_output(env, "step", env.step(actions), self._known)
        episode = self._episodes[j]
        episode.length += 1
        episode.last_infos.update(infos)
        episode.last_rewards = {agent_id: float(reward) for agent_id, reward in rewards.items()}
        for agent_id, reward in rewards.items():
            reward = float(reward)
            if not math.isfinite(reward):
                raise EnvError(f"environment '{self.config.env}' gave agent {agent_id!r} the reward {reward}")
            agent = self._agent(j, agent_id)
            agent.episode_return += reward
            episode.total_reward += reward
            key = (agent_id, agent.policy_id)
            episode.agent_rewards[key] = episode.agent_rewards.get(key, 0.0) + reward
            if agent.open is not None:
                agent.open.reward += reward
        obs = self._observed(obs, j, episode)  # with the step counted, as RLlib calls it
        episode.last_obs.update(obs)
        all_terminated, all_truncated = bool(terminateds["__all__"]), bool(truncateds.get("__all__", False))
        ended = all_terminated or all_truncated
        done = self._done[j]
        # every agent that observes or has flags (and, as the episode ends, every agent in it), not done yet: an
        # agent met twice is met again harmlessly (its step closed, or it is done), so no set is built per step
        for agent_id in chain(obs, terminateds, truncateds, self._agents[j] if ended else ()):
            if agent_id == "__all__" or agent_id in done:
                continue
            agent = self._agent(j, agent_id)
            # an agent's own flags say whether it is bootstrapped ("__all__" is terminated when every agent
            # was truncated, as RLlib's make_multi_agent sets it); "__all__"'s hold for an agent without any
            terminated = bool(terminateds.get(agent_id, False))
            truncated = bool(truncateds.get(agent_id, False)) and not terminated
            if ended and not (terminated or truncated):
                terminated, truncated = not all_truncated, all_truncated
            if agent.open is not None and (agent_id in obs or terminated or truncated):
                agent.close(None, terminated, truncated)
            if not (terminated or truncated):
                continue
            done.add(agent_id)
            if agent.closed and agent.closed[-1].next_obs is None:  # its final observation (or, without one, its last)
                last, final, actor = agent.closed[-1], obs.get(agent_id), self.actors[agent.policy_id]
                last.next_obs = last.obs if final is None else actor.observe([final], update=False)[0]
        self.hooks("on_episode_step", worker=self, base_env=env, policies=self.actors, episode=episode, env_index=j)
        if ended:
            finished.append((episode, self._agents[j]))
            self.hooks("on_episode_end", worker=self, base_env=env, policies=self.actors, episode=episode,
                       env_index=j)
            self._records.append(episode.record())
            self._reset(j)
        else:
            self._obs[j] = {agent_id: o for agent_id, o in obs.items() if agent_id not in done}

    def sample(self, weights: dict[str, np.ndarray], filters: dict[str, FilterStats | None] | None,
               num_episodes: int | None = None) -> MultiAgentSample:
        """Load every policy's weights and filters, then sample one fragment (``rollout_fragment_length``
        environment or agent steps per environment, as ``count_steps_by`` says) or, with
        ``num_episodes``, until that many episodes have ended.

        With ``batch_mode="complete_episodes"`` only the steps of episodes that ended count and are
        kept, as in RLlib: no trajectory is cut before its end. The episodes still running are dropped
        and every environment starts a new one at the next sample, as a single-agent worker does
        (RLlib finishes them in its next sample, with the weights it has then)."""
        self._load(weights, filters)
        complete = self.config.batch_mode == "complete_episodes"
        if self._obs is None or complete:
            self._reset_all()
        finished: list[EpisodeAgents] = []
        env_steps = agent_steps = 0
        target = self.fragment_length * self.num_envs
        by_agents = self.config.count_steps_by == "agent_steps"
        while (len(finished) < num_episodes if num_episodes is not None
               else (agent_steps if by_agents else env_steps) < target):
            before = len(finished)
            env, agents = self._step_all(self.config.explore, True, finished)
            if complete:  # only the steps of the episodes that ended count
                env = sum(episode.length for episode, _ in finished[before:])
                agents = sum(episode.total_agent_steps for episode, _ in finished[before:])
            env_steps, agent_steps = env_steps + env, agent_steps + agents
        running = [] if complete else self._cut_running()
        sample = MultiAgentSample(policy_results(self, finished, running),
                                  np.array([episode.total_reward for episode, _ in finished], np.float32),
                                  np.array([episode.length for episode, _ in finished], np.int64),
                                  env_steps, agent_steps, 0, self._records)
        for _, trajectories in running:  # their closed steps were taken; their open ones carry on
            for trajectory in trajectories.values():
                trajectory.closed = []
        self._records = []
        self.hooks("on_sample_end", worker=self, samples=sample)
        return sample

    def _reset_all(self) -> None:
        """Start a new episode in every environment (the running ones are dropped)."""
        self._obs = [{} for _ in self.envs]
        for j in range(self.num_envs):
            self._reset(j)

    def _cut_running(self) -> list[EpisodeAgents]:
        """The running episodes, cut at the fragment's end: each agent's last closed step that it has
        not acted after yet is given the observation it led to."""
        assert self._obs is not None
        for j, agents in enumerate(self._agents):
            for agent_id, agent in agents.items():
                if agent.closed and agent.closed[-1].next_obs is None:
                    agent.closed[-1].next_obs = self.actors[agent.policy_id].observe([self._obs[j][agent_id]], False)[0]
        return list(zip(self._episodes, self._agents, strict=True))

    def evaluate(self, weights: dict[str, np.ndarray], filters: dict[str, FilterStats | None],
                 num_episodes: int | None = None, num_steps: int | None = None,
                 before_step: Callable[[], None] | None = None) -> tuple[np.ndarray, np.ndarray, list[EpisodeRecord]]:
        """Play whole episodes (``num_episodes``, or until ``num_steps`` environment steps) with the
        policies' most likely actions unless ``config.explore``; returns their returns (summed over
        agents) and lengths. ``before_step`` is called before every step (environment 0's, on the
        driver's worker of one environment), so a video gets one frame per episode step."""
        self._load(weights, filters)
        self._reset_all()
        finished: list[EpisodeAgents] = []
        steps = 0
        while (len(finished) < (num_episodes or 1)) if num_steps is None else (steps < num_steps or not finished):
            if before_step is not None:
                before_step()
            steps += self._step_all(self.config.explore, False, finished)[0]
        self._obs = None
        records, self._records = self._records, []
        n = len(finished) if num_steps is not None else num_episodes or 1  # several may end on the last step
        return (np.asarray([episode.total_reward for episode, _ in finished[:n]]),
                np.asarray([episode.length for episode, _ in finished[:n]]), records[:n])

    def stop(self) -> None:
        for env in self.envs:
            env.close()

