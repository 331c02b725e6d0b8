"""The one interface of every network workers act with and learners train: :class:`Policy`, and
:class:`ActorCriticPolicy`, a policy with a value function beside it.

volley's own networks (:mod:`volley.torch_networks`) and a user's custom model
(:mod:`volley.torch_networks.custom_model`) are each a :class:`Policy`. Their weights travel between
processes as one flat float32 vector. Workers act on a few rows at a time, where torch's
per-operation overhead (several microseconds an op) is most of the cost of a small MLP, so a
network acts through its numpy twin where it has one (:meth:`Policy.numpy_twin`), else in torch
with the draw in numpy (:meth:`Policy._torch_twin`); all learning is torch's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from volley.action_dists import Distribution
from volley.errors import VolleyError
from volley.heads import Head, RandomStreams
from volley.networks.numpy_layers import Acting, Previous, State, Twin

# a batch's previous actions and rewards, for a recurrent network that reads them (acting.Previous)
TorchPrevious = tuple[torch.Tensor, torch.Tensor] | None


class Policy(nn.Module):
    """The one interface of every network workers act with and learners train: built-in or custom,
    feed-forward or recurrent (:mod:`volley.catalog` builds them).

    - :meth:`outputs` ``(obs, state, seq_lens) -> (dist_inputs, values, state_out)``: the
      inputs of the action distribution (logits, a Gaussian's parameters, Q-values), the
      values ``[B]`` and the recurrent state after these observations;
    - :meth:`initial_state`: one environment's state at an episode start, a list of arrays
      without the batch dimension; ``[]`` for a feed-forward network, which ignores ``state``;
    - :meth:`act` does the same for acting, numpy in and out: an MLP through its numpy twin
      (:mod:`volley.acting`), anything else in torch, one forward pass for a worker's batch of
      environments. A worker holds each environment's state and passes it in (see
      ``RolloutWorker``);
    - its weights travel between processes as one flat float32 vector.
    """

    reads_prev = False  # whether its outputs read each row's previous action and reward (``prev``)

    def get_flat_weights(self) -> np.ndarray:
        """All parameters as one float32 vector (what workers receive)."""
        return nn.utils.parameters_to_vector(self.parameters()).detach().cpu().numpy()

    def set_flat_weights(self, flat: np.ndarray) -> None:
        device = next(self.parameters()).device
        # a copy: arrays from Ray's object store are read-only
        nn.utils.vector_to_parameters(torch.tensor(flat, dtype=torch.float32, device=device),
                                      self.parameters())
        self._twin: tuple[list[int], Twin] | None = None

    def initial_state(self) -> State:
        """One environment's recurrent state at the start of an episode: arrays without the batch
        dimension (RLlib's ``get_initial_state()``); ``[]`` for a feed-forward network."""
        return []

    def act(self, obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
            prev: Previous = None) -> Acting:
        """Actions for a batch of (filtered) observations ``[B, *obs_shape]`` and the environments'
        ``state`` (each array ``[B, ...]``; ``prev``: their previous actions and rewards, for a
        network that reads them): sampled with each environment's own stream when ``explore``,
        else the most likely; with the inputs of their distribution (see :meth:`log_prob`), the
        values and the state after this step. An MLP acts through its numpy twin, rebuilt
        whenever the weights changed (set here, or changed in place: loaded, or stepped by an
        optimizer)."""
        return self._current_twin().act(obs, state, streams, explore, prev)

    def log_prob(self, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of ``actions`` ``[...]`` under the distributions whose inputs
        :meth:`act` returned (``[..., n]``): a worker's whole fragment at once."""
        return self._current_twin().log_prob(dist_inputs, actions)

    def _current_twin(self) -> Twin:
        params = self.__dict__.get("_params") or self.__dict__.setdefault("_params", list(self.parameters()))
        versions = [p._version for p in params]  # in-place changes count them
        twin = getattr(self, "_twin", None)
        if twin is None or twin[0] != versions:
            twin = (versions, self.numpy_twin() or self._torch_twin())
            self._twin = twin
        return twin[1]

    def numpy_twin(self) -> Twin | None:
        """Acting like :meth:`act` with numpy copies of the weights (None: act in torch)."""
        return None

    def numpy_head(self) -> Head:
        """The action distribution, in numpy, that acting draws from (its parameters, a fixed
        log-std or ε, as they are now)."""
        raise NotImplementedError

    def _torch_twin(self) -> Twin:
        """Acting with a forward pass in torch (a CNN, a custom model that does not trace), then the
        draw in numpy: the forward pass is the only torch work of a step. Around it, only what
        cannot be made once: ``inference_mode`` (no autograd bookkeeping, cheaper than ``no_grad``),
        the arrays shared with torch (no copy on the CPU), a recurrent network's sequence lengths
        made once per batch size."""
        head = self.numpy_head()
        device = next(self.parameters()).device
        ones: dict[int, torch.Tensor] = {}  # RLlib's acting: sequences of one step each when recurrent

        def act(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
                prev: Previous = None) -> Acting:
            with torch.inference_mode():
                seq_lens = ones.get(len(obs)) if state else None
                if state and seq_lens is None:
                    seq_lens = ones[len(obs)] = torch.ones(len(obs), dtype=torch.int32, device=device)
                dist_inputs, values, state_out = self.outputs(
                    torch.as_tensor(obs, device=device), [torch.as_tensor(s, device=device) for s in state],
                    seq_lens, None if prev is None else (torch.as_tensor(prev[0], device=device),
                                                         torch.as_tensor(prev[1], device=device)))
                inputs = dist_inputs.cpu().numpy()
                return (head.draw(inputs, streams, explore), inputs, values.cpu().numpy(),
                        [s.cpu().numpy() for s in state_out])
        return Twin(act, head.log_prob)

    def outputs(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The distribution's inputs, the values ``[B]`` and the state after these observations
        ``[B, *obs_shape]``. A recurrent network reads them as ``len(seq_lens)`` sequences of ``T``
        rows each, padded (``B = len(seq_lens) · T``, RLlib's layout; acting: ``T = 1``), each
        starting from its row of ``state`` (each tensor ``[len(seq_lens), ...]``), and with
        ``prev`` each row's previous action and reward where it reads them; a feed-forward
        network ignores all three."""
        raise NotImplementedError

    def distribution_of(self, dist_inputs: torch.Tensor) -> Distribution:
        """The action distribution with these inputs (what :meth:`outputs` gives)."""
        raise NotImplementedError

    def forward(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> tuple[Distribution, torch.Tensor]:
        """Action distribution and values ``[B]`` for observations ``[B, *obs_shape]`` (the other
        arguments as :meth:`outputs`)."""
        dist_inputs, values, _ = self.outputs(obs, state, seq_lens, prev)
        return self.distribution_of(dist_inputs), values

    def get_initial_state(self) -> State:
        """RLlib's name of :meth:`initial_state` (``algo.get_policy().get_initial_state()``)."""
        return self.initial_state()

    def get_weights(self) -> dict[str, np.ndarray]:
        """Every tensor of the network by name, as numpy copies (RLlib's ``policy.get_weights()``)."""
        return {name: tensor.detach().cpu().numpy().copy() for name, tensor in self.state_dict().items()}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Load :meth:`get_weights` output (arrays or tensors); a VolleyError names the first tensor
        that is missing, unknown or of another shape, and nothing is changed then."""
        current = self.state_dict()
        for name in [*current, *weights]:
            if name not in weights or name not in current:
                where = "missing from" if name not in weights else "unknown to this network, in"
                raise VolleyError(f"weight {name!r} is {where} the weights given to set_weights()")
            shape = tuple(np.shape(weights[name]))
            if shape != tuple(current[name].shape):
                raise VolleyError(f"weight {name!r} has shape {shape}, this network's has "
                                  f"{tuple(current[name].shape)}")
        self.load_state_dict({name: torch.tensor(np.asarray(value)) for name, value in weights.items()})


class ActorCriticPolicy(Policy):
    """A policy with a value function beside it: what PPO, PG and TRPO train. PG and TRPO step the
    policy and fit the value function apart, so it also gives each alone and their parameters."""

    def distribution(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
                     seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> Distribution:
        """The action distribution alone: what a policy step reads (TRPO's, PG's)."""
        raise NotImplementedError

    def value(self, obs: torch.Tensor, state: Sequence[torch.Tensor] = (),
              seq_lens: torch.Tensor | None = None, prev: TorchPrevious = None) -> torch.Tensor:
        """The values ``[B]`` alone: what a value-function fit reads."""
        raise NotImplementedError

    def policy_parameters(self) -> list[nn.Parameter]:
        """Parameters the action distribution depends on (a shared body included)."""
        raise NotImplementedError

    def value_parameters(self) -> list[nn.Parameter]:
        """Parameters only the value function uses (just the head when the body is shared)."""
        raise NotImplementedError
