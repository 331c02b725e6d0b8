"""Using the trained policy outside training: RLlib's ``compute_single_action`` (one observation
in, the action the environment takes out, with a recurrent policy's state), and RLlib's policy
API for the one policy volley trains (``get_policy``, ``get_weights``, ``set_weights``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from volley.acting import zero_actions
from volley.envs import env_actions
from volley.errors import ConfigError, VolleyError
from volley.learner.base import EVAL_SEED_OFFSET, LearnerBase
from volley.rllib_results import DEFAULT_POLICY
from volley.rollout.streams import EnvStreams
from volley.spaces import action_layout
from volley.torch_networks.policy import Policy


class Inference(LearnerBase):
    """Actions for single observations, and the policy's weights by RLlib's names."""

    def compute_single_action(self, observation: Any = None, state: list | None = None, *,
                              prev_action: Any = None, prev_reward: float | None = None,
                              explore: bool = False, full_fetch: bool = False,
                              policy_id: str = DEFAULT_POLICY) -> Any:
        """The action for one observation (the most likely one unless ``explore``), as the
        environment receives it (``normalize_actions``, ``clip_actions``), as in RLlib; drawn as
        the workers draw theirs (:meth:`Policy.act`), with a custom model in eval mode.

        A recurrent policy (``use_lstm``, a recurrent custom model) needs its ``state``: start an
        episode from ``algo.get_policy().get_initial_state()`` and pass each call the state the
        last one returned (and with ``lstm_use_prev_action`` / ``_reward`` the previous action and
        the environment's reward: ``prev_action``, ``prev_reward``; none at an episode start).
        With a state, or ``full_fetch``, it returns RLlib's ``(action, state_out, extra)``:
        ``extra`` holds ``vf_preds``, ``action_dist_inputs``, ``action_logp`` and ``action_prob``."""
        problem = _structure_problem(self.observation_space, observation)
        if problem is not None:
            hint = (f" (an environment's action_masks() is observed as {{{self.config.action_mask_key!r}: "
                    "env.action_masks(), 'observations': obs}: pass that)"
                    if self.preprocess.mask is not None else "")
            raise VolleyError(f"compute_single_action: the observation {problem}, not the structure of the "
                              f"observation space {self.observation_space}{hint}")
        policy = self.get_policy(policy_id)
        state_in = _state_of_one(state, policy.initial_state())
        prev = None
        if policy.reads_prev:
            zeros = zero_actions(self.action_space, 1)  # the flat layout of actions in batches
            action = zeros if prev_action is None else np.asarray(prev_action, zeros.dtype).reshape(zeros.shape)
            prev = (action, np.array([prev_reward or 0.0], np.float32))
        processed = self.obs_filter(self.preprocess(_batch_of_one(observation), 1), update=False)
        mask = self.preprocess.mask
        if mask is not None:  # a mask of the caller's: checked as the workers check the environments'
            mask_problem = action_layout(self.action_space).mask_problem(processed[:, mask.mask], np.ones(1, bool))
            if mask_problem is not None:
                raise VolleyError(f"compute_single_action: the action mask {processed[0, mask.mask]} (observation "
                                  f"key {self.config.action_mask_key!r}): {mask_problem[1]}")
        streams = self.__dict__.setdefault("_single_streams", EnvStreams(self.config.seed, [EVAL_SEED_OFFSET - 1]))
        training = policy.training
        policy.eval()
        try:
            actions, dist_inputs, values, state_out = policy.act(processed, state_in, streams, explore, prev)
        finally:
            policy.train(training)
        cfg = self.config
        action = env_actions(actions, self.action_space, cfg.normalize_actions, cfg.clip_actions)[0]
        if not state and not full_fetch:
            return action
        logp = policy.log_prob(dist_inputs, actions)[0]
        extra = {"vf_preds": values[0], "action_dist_inputs": dist_inputs[0], "action_logp": logp,
                 "action_prob": np.exp(logp)}
        return action, [s[0] for s in state_out], extra

    # -- RLlib's policy API: one policy, "default_policy" ------------------------------------

    def get_policy(self, policy_id: str = DEFAULT_POLICY) -> Policy:
        """The network being trained, a torch module (RLlib's ``algo.get_policy()``): its
        ``get_weights()`` are numpy arrays by name and ``set_weights()`` loads them; the next
        ``train()`` sends them to the workers. volley trains one policy, ``"default_policy"``."""
        if policy_id != DEFAULT_POLICY:
            raise ConfigError(f"no policy {policy_id!r}: volley trains one policy, {DEFAULT_POLICY!r}")
        return self.policy

    def get_weights(self, policies: Iterable[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """``{"default_policy": weights}`` as RLlib returns them, to give to ``set_weights()`` of another
        algorithm with the same network (or to save with numpy)."""
        return {policy_id: self.get_policy(policy_id).get_weights() for policy_id in policies or [DEFAULT_POLICY]}

    def set_weights(self, weights: dict[str, dict[str, Any]]) -> None:
        """Load :meth:`get_weights` output (policy ids as keys, as in RLlib)."""
        for policy_id, policy_weights in weights.items():
            self.get_policy(policy_id).set_weights(policy_weights)


def _structure_problem(space: gym.Space, obs: Any) -> str | None:
    """How ``obs`` differs from the nesting of a Dict or Tuple ``space`` (None: it has it)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping) or set(obs) != set(space.spaces):
            keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            return f"has keys {keys}" if isinstance(obs, Mapping) else f"is a {keys}"
        return next((p for k, sub in space.spaces.items() if (p := _structure_problem(sub, obs[k])) is not None), None)
    if isinstance(space, gym.spaces.Tuple):
        if not isinstance(obs, tuple | list) or len(obs) != len(space.spaces):
            return f"has {len(obs)} parts" if isinstance(obs, tuple | list) else f"is a {type(obs).__name__}"
        return next((p for sub, o in zip(space.spaces, obs, strict=True)
                     if (p := _structure_problem(sub, o)) is not None), None)
    return None


def _state_of_one(state: list | None, initial: list[np.ndarray]) -> list[np.ndarray]:
    """``state`` as a batch of one, each part checked against the shape of the policy's initial
    state; a VolleyError naming the part that does not fit."""
    if initial and state is None:
        raise VolleyError(f"the policy is recurrent: compute_single_action needs its state, "
                          f"state=algo.get_policy().get_initial_state() at an episode start ({len(initial)} "
                          f"arrays of shapes {[tuple(s.shape) for s in initial]}), then the state_out it returned")
    given = list(state or [])
    if len(given) != len(initial):
        raise VolleyError(f"compute_single_action got a state of {len(given)} arrays; this policy's has "
                          f"{len(initial)} (get_policy().get_initial_state())")
    batched = []
    for k, (part, expected) in enumerate(zip(given, initial, strict=True)):
        array = np.asarray(part.detach().cpu() if hasattr(part, "detach") else part, np.float32)
        if array.shape != expected.shape:
            raise VolleyError(f"compute_single_action got state[{k}] of shape {array.shape}; this policy's "
                              f"state[{k}] has shape {expected.shape} (get_policy().get_initial_state())")
        batched.append(array[None])
    return batched


def _batch_of_one(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _batch_of_one(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_batch_of_one(v) for v in obs)
    return np.asarray(obs)[None]
