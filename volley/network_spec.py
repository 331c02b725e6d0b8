"""What a policy's network is, resolved once: :class:`NetworkSpec`.

The spaces, the model config, the network kind (and a Q-network's head layers), the classes a
config names by string (a custom model, a custom action distribution) and the observation layout
(where an action mask sits among the columns) are one value. The driver resolves the config's
part (:meth:`NetworkSpec.of`: the classes are looked up here and nowhere else) and ships it to
the workers in their recipe; whoever holds an environment binds its spaces
(:meth:`NetworkSpec.with_spaces`), as RLlib's ``PolicySpec`` leaves spaces to be inferred from the
environment. Filters, networks (:func:`volley.catalog.build_network`, the numpy twin) and workers
read it; nobody assembles the bundle again.

A run holds one spec per learned policy: single-agent training has one; multi-agent training
(:mod:`volley.policies`) one per policy id, each from that policy's own config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import gymnasium as gym

from volley.config import AlgorithmConfig, ModelConfig, NetworkKind
from volley.named import CUSTOM_ACTION_DISTS, CUSTOM_MODELS
from volley.observations import ObsPreprocessor, find_action_mask


@dataclass(frozen=True)
class NetworkSpec:
    """One policy's network and observation layout; picklable (it travels in a worker's recipe)."""

    model: ModelConfig
    network: NetworkKind = "actor_critic"
    head_hiddens: tuple[int, ...] = ()  # a Q-network's layers between its body and its Q-values
    action_mask_key: str = "action_mask"  # a Dict observation's key holding the action mask
    # the classes model.custom_model and model.custom_action_dist name (None: none set, or not found
    # where the spec was resolved; the network's builder then says which name is missing)
    model_class: type | None = None
    action_dist_class: type | None = None
    observation_space: gym.Space | None = None  # None until bound to an environment's spaces
    action_space: gym.Space | None = None

    @classmethod
    def of(cls, config: AlgorithmConfig) -> NetworkSpec:
        """The spec ``config`` describes, its classes found in this process (the driver's)."""
        return cls.for_model(config.model, config.network, config.head_hiddens, config.action_mask_key)

    @classmethod
    def for_model(cls, model: ModelConfig, network: NetworkKind = "actor_critic", head_hiddens: Sequence[int] = (),
                  action_mask_key: str = "action_mask") -> NetworkSpec:
        """The spec of ``model`` and a network kind, its classes found in this process."""
        custom, dist = model.custom_model, model.custom_action_dist
        return cls(model, network, tuple(head_hiddens), action_mask_key,
                   CUSTOM_MODELS.find(custom) if custom is not None else None,
                   CUSTOM_ACTION_DISTS.find(dist) if dist is not None else None)

    def with_spaces(self, observation_space: gym.Space, action_space: gym.Space) -> NetworkSpec:
        """This spec bound to one environment's spaces."""
        return replace(self, observation_space=observation_space, action_space=action_space)

    @property
    def spaces(self) -> tuple[gym.Space, gym.Space]:
        """The observation and action spaces (bound: :meth:`with_spaces`)."""
        assert self.observation_space is not None and self.action_space is not None, \
            "NetworkSpec.with_spaces() binds the spaces before a network or a layout is made"
        return self.observation_space, self.action_space

    @cached_property
    def observation(self) -> ObsPreprocessor:
        """The observation layout: how raw observations become the columns a network reads, and
        where the action mask sits among them (``observation.mask``; a ConfigError if the key
        holds something that cannot mask the action space)."""
        observation_space, action_space = self.spaces
        return ObsPreprocessor(observation_space, find_action_mask(observation_space, action_space,
                                                                   self.action_mask_key))

    @property
    def acts_in_numpy(self) -> bool:
        """Whether volley's own numpy twin acts for this network (an MLP, with or without an LSTM):
        not for images (the CNN), a custom model, a custom action distribution or R2D2's LSTM Q-network."""
        return (not self.observation.is_image and self.model.custom_model is None and self.network != "recurrent_q"
                and self.model.custom_action_dist is None)
