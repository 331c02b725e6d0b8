"""One policy on a multi-agent worker: :class:`PolicyActor` acts for every agent mapped to the
policy in one batched call (a learned network's numpy twin, torch where it has none, or a
hand-written policy's ``compute_actions``), from a random stream of its own (:class:`RowStreams`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from volley.acting import NumpyActor, load_flat_weights
from volley.network_spec import NetworkSpec
from volley.networks.numpy_layers import Previous, State
from volley.policies import PolicySetup
from volley.rollout.agents import Transition
from volley.rollout.filters import FilterStats, make_filter

if TYPE_CHECKING:
    from volley.rllib_policies import Policy
    from volley.torch_networks.policy import Policy as TorchPolicy


# spaces whose observations are single arrays: a batch of them is their stack, in the space's dtype
ARRAY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def batched(space: gym.Space, raw: list[Any]) -> Any:
    """Raw observations of ``space`` as one batch ``[B, ...]`` (a ``Dict`` or ``Tuple`` space's: the
    same structure of batches), as gymnasium's ``concatenate`` makes it. An array space's is one
    ``np.stack``: ``concatenate`` would first build an empty batch, then stack into it, every step."""
    if isinstance(space, ARRAY_SPACES):
        return np.stack(raw, dtype=space.dtype)
    empty = gym.vector.utils.create_empty_array(space, len(raw))
    return gym.vector.utils.concatenate(space, raw, empty)  # type: ignore[arg-type]


class RowStreams:
    """The random stream one policy acts from on one worker: ``rows`` draws a step, one per agent
    acting with it (a :class:`volley.heads.RandomStreams` over agents instead of environments)."""

    def __init__(self, seed: int, key: list[int]) -> None:
        self.generator = np.random.default_rng([seed, *key])
        self.rows = 0
        self.torch_seed = int(np.random.SeedSequence([seed, *key, 1]).generate_state(1)[0])
        self.torch_state: Any = None

    def gumbel(self, n: int) -> np.ndarray:
        return self.generator.gumbel(size=(self.rows, n))

    def normal(self, dim: int) -> np.ndarray:
        return self.generator.standard_normal((self.rows, dim)).astype(np.float32)


class PolicyActor:
    """One policy on a worker: a learned network (its numpy twin, or the torch network where it has
    none) with its observation filter, or a hand-written :class:`~volley.rllib_policies.Policy`."""

    def __init__(self, policy_id: str, setup: PolicySetup, spaces: tuple[gym.Space, gym.Space],
                 streams: RowStreams) -> None:
        self.policy_id = policy_id
        entry = setup.policy_map.entries[policy_id]
        self.observation_space, self.action_space = spaces
        self.config = setup.configs.get(policy_id)
        self.streams = streams
        self.by_hand: Policy | None = None
        self._torch: TorchPolicy | None = None
        self._weights: np.ndarray | None = None
        if entry.policy_class is not None:
            self.by_hand = entry.policy_class(*spaces, entry.overrides)
            return
        self.spec: NetworkSpec = setup.networks[policy_id].with_spaces(*spaces)
        self.preprocess = self.spec.observation
        self.actor = NumpyActor.of(self.spec)
        assert self.config is not None
        self.obs_filter = make_filter(self.config.observation_filter, self.preprocess)

    @property
    def network(self) -> NumpyActor | TorchPolicy:
        """What acts: the numpy twin, or the torch network built on first use where there is none."""
        if self.actor is not None:
            return self.actor
        if self._torch is None:
            from volley.catalog import build_network

            self._torch = build_network(self.spec)
            self._torch.eval()
            if self._weights is not None:
                self._torch.set_flat_weights(self._weights)
        return self._torch

    def load(self, weights: np.ndarray | None, filters: FilterStats | None) -> None:
        """Take the learner's weights and merged filter statistics (none for a hand-written policy)."""
        if self.by_hand is not None or weights is None:
            return
        self._weights = load_flat_weights(weights, self._weights, self._torch, self.actor)
        if filters is not None and filters.obs is not None:
            self.obs_filter.set_stats(filters.obs)

    def observe(self, raw: list[Any], update: bool) -> np.ndarray:
        """The filtered network inputs ``[B, ...]`` of raw observations (``update``: the filter learns them)."""
        return self.obs_filter(self.preprocess(batched(self.observation_space, raw), len(raw)), update=update)

    def act(self, obs: np.ndarray, explore: bool, state: State, prev: Previous
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, State]:
        """Actions, log-probabilities and values ``[B]`` for filtered observations ``obs`` (and a
        recurrent network's state and previous actions and rewards), and the next state."""
        self.streams.rows = len(obs)
        actions, dist_inputs, values, state_out = self.network.act(obs, state, self.streams, explore, prev)
        return actions, self.network.log_prob(dist_inputs, actions), values, state_out

    def values(self, steps: list[Transition]) -> np.ndarray:
        """The values ``[B]`` of the observations ``steps`` led to, from the state after each (the mode
        is taken: no random draw)."""
        obs = np.stack([t.next_obs for t in steps])  # type: ignore[misc]
        state = [np.stack(tensors) for tensors in zip(*[t.state_out for t in steps], strict=True)]
        prev = None
        if self.network.reads_prev:
            prev = np.stack([t.action for t in steps]), np.array([t.reward for t in steps], np.float32)
        self.streams.rows = len(obs)
        return self.network.act(obs, state, self.streams, False, prev)[2]

    def initial_state(self) -> list[np.ndarray]:
        """One agent's state at an episode start (``[]``: feed-forward)."""
        return [np.asarray(s) for s in self.network.initial_state()] if self.by_hand is None else []

    def act_by_hand(self, raw: list[Any], states: list[list[Any]]) -> tuple[list[Any], list[list[Any]]]:
        """A hand-written policy's actions for raw observations, and each agent's next state."""
        assert self.by_hand is not None
        batches = [np.asarray(column) for column in zip(*states, strict=True)] if states and states[0] else []
        obs = np.stack([np.asarray(o) for o in raw]) if not isinstance(self.observation_space, gym.spaces.Dict) else raw
        actions, state_out, _ = self.by_hand.compute_actions(obs, batches)
        state_rows = [list(row) for row in zip(*state_out, strict=True)] if state_out else [[] for _ in raw]
        return list(actions), state_rows
