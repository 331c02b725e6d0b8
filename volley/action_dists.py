"""volley's own action distributions in torch, for learning: one per kind of action space, a product
of parts for composite spaces, and the action mask applied where logits become a distribution.

Acting draws in numpy (:mod:`volley.heads`, each environment's own random stream); the
distributions here score those actions for the learner: ``log_prob``, ``entropy``, ``kl`` and
``mode``, each equal to the numpy head's and to ``torch.distributions``' on every part
(tests/unit/test_distributions.py). A composite action space (:mod:`volley.spaces`) is a product
of parts: every categorical at once on a padded view of the logits, the float Boxes as one
diagonal Gaussian; log-probability, entropy and KL are sums over the parts.

An action mask forbids choices by setting their logits to the dtype's minimum (:func:`masked`),
not to -inf: their probability is exactly 0 and entropies and KLs stay finite (``0 · min`` is
0, ``0 · -inf`` is NaN). Networks apply it once, on their outputs, so every algorithm and both
acting paths see the same masked inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from volley.spaces import ActionLayout


def masked(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``logits`` with the entries ``mask`` forbids (0) at the dtype's minimum: probability 0."""
    return torch.where(mask != 0, logits, torch.finfo(logits.dtype).min)


class Distribution:
    """volley's interface of an action distribution for learning. ``inputs`` are what it was built
    from: ``with_inputs(*inputs)`` is the same distribution (TRPO differentiates through them)."""

    inputs: tuple[torch.Tensor, ...]

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def kl(self, other: Any) -> torch.Tensor:
        """KL(self ‖ other), ``[B]``; ``other`` a distribution of the same kind."""
        raise NotImplementedError

    def mode(self) -> torch.Tensor:
        raise NotImplementedError

    def with_inputs(self, *inputs: torch.Tensor) -> Distribution:
        return type(self)(*inputs)


class Categorical(Distribution):
    """Distribution over ``Discrete`` actions from logits ``[B, n]``."""

    def __init__(self, logits: torch.Tensor) -> None:
        # what it was built from (the log-probabilities are not): Categorical(*inputs) is this one
        self.inputs = (logits,)
        self.logits = logits.log_softmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def kl(self, other: Categorical) -> torch.Tensor:
        return (self.logits.exp() * (self.logits - other.logits)).sum(-1)


class EpsilonGreedy(Categorical):
    """A Q-network's behaviour policy: a uniformly random action with probability ε, else
    the greedy one.

    It is the categorical distribution with probabilities ``ε/n + (1 - ε)·[a = argmax Q]``,
    (workers draw from it in numpy: ``volley.heads.epsilon_greedy_head``); its mode is the
    greedy action at every ε. Masked Q-values (the dtype's minimum) get probability 0 and the
    allowed actions share ε.
    """

    def __init__(self, q_values: torch.Tensor, epsilon: float) -> None:
        self.greedy = q_values.argmax(-1)
        n = q_values.shape[-1]
        greedy = (1 - epsilon) * nn.functional.one_hot(self.greedy, n).to(q_values.dtype)
        tiny = torch.finfo(q_values.dtype).tiny  # finite at ε = 0
        allowed = q_values > torch.finfo(q_values.dtype).min
        if bool(allowed.all()):
            super().__init__((epsilon / n + greedy).clamp_min(tiny).log())
            return
        share = epsilon / allowed.sum(-1, keepdim=True).clamp_min(1)
        probs = torch.where(allowed, share, 0.0) + greedy
        super().__init__(masked(probs.clamp_min(tiny).log(), allowed))

    def mode(self) -> torch.Tensor:
        return self.greedy

    def with_inputs(self, *inputs: torch.Tensor) -> Distribution:
        return Categorical(*inputs)


class DiagGaussian(Distribution):
    """Independent normal per action dimension; mean ``[B, d]`` and log-std ``[d]`` (or ``[B, d]``)."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)
        self.inputs = (mean, log_std)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.log_std.exp()
        return (-0.5 * z**2 - self.log_std - 0.5 * np.log(2 * np.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * np.log(2 * np.pi * np.e)).sum(-1)

    def mode(self) -> torch.Tensor:
        return self.mean

    def kl(self, other: DiagGaussian) -> torch.Tensor:
        var, other_var = (2 * self.log_std).exp(), (2 * other.log_std).exp()
        return (other.log_std - self.log_std
                + (var + (self.mean - other.mean) ** 2) / (2 * other_var) - 0.5).sum(-1)


class SquashedGaussian(Distribution):
    """``a = tanh(u)``, ``u ~ N(mean, std)`` per action dimension: SAC's policy (Haarnoja et al.,
    2018), its actions in (-1, 1), which ``normalize_actions`` rescales to the space's bounds.
    With ``uniform`` (SAC's warm-up before learning starts) its density is uniform instead, as the
    workers draw then (``volley.heads.squashed_gaussian_head``). SAC's losses read
    :meth:`rsample`; it has no closed-form entropy or KL."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, uniform: bool = False) -> None:
        self.mean, self.log_std, self.uniform = mean, log_std, uniform
        self.inputs = (mean, log_std)

    def rsample(self, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised draw ``a = tanh(mean + std·ε)`` ``[B, d]`` and its log-probability ``[B]``,
        differentiable in the mean and log-std: the Gaussian's log-density of ``u`` less tanh's
        log-determinant ``Σ log(1 − tanh²(u))``, written ``2·(log 2 − u − softplus(−2u))``, which
        stays finite where ``tanh(u)`` rounds to ±1 (the paper's appendix C). ``ε`` comes from
        ``generator`` (None: torch's global one)."""
        noise = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype, device=self.mean.device)
        u = self.mean + self.log_std.exp() * noise
        gaussian = -0.5 * noise.square() - self.log_std - 0.5 * math.log(2 * math.pi)
        log_det = 2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))
        return torch.tanh(u), (gaussian - log_det).sum(-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``[B]`` of squashed actions (taken 1e-6 inside ±1, where atanh is infinite)."""
        if self.uniform:
            return torch.full(actions.shape[:-1], -actions.shape[-1] * math.log(2.0))
        a = actions.clamp(-1 + 1e-6, 1 - 1e-6)
        z = (torch.atanh(a) - self.mean) / self.log_std.exp()
        gaussian = -0.5 * z.square() - self.log_std - 0.5 * math.log(2 * math.pi)
        return (gaussian - torch.log1p(-a.square())).sum(-1)

    def mode(self) -> torch.Tensor:
        return torch.tanh(self.mean)


class MultiCategorical(Distribution):
    """``K`` independent categoricals from padded logits ``[B, K, widest]`` (padding at the dtype's
    minimum): each part's log-probability, entropy and KL, summed over the parts."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.inputs = (logits,)
        self.logits = logits.log_softmax(dim=-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:  # actions [B, K]
        return self.logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1).sum(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum((-2, -1))

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def kl(self, other: MultiCategorical) -> torch.Tensor:
        return (self.logits.exp() * (self.logits - other.logits)).sum((-2, -1))


class Composite(Distribution):
    """The product of a composite action space's parts (:class:`volley.spaces.ActionLayout`):
    inputs ``[B, width]`` in the layout's order, and ``log_std`` ``[D]`` beside them for volley's own
    network (None: the inputs hold each float Box's log-stds, a custom model's). Actions are the
    flat ``[B, W]`` of :mod:`volley.spaces`."""

    def __init__(self, layout: ActionLayout, inputs: torch.Tensor, log_std: torch.Tensor | None = None) -> None:
        self.layout = layout
        self.inputs = (inputs,) if log_std is None else (inputs, log_std)
        where = layout.inputs(log_stds=log_std is None)
        device = inputs.device
        self.categorical = self.gaussian = None
        self._columns = (torch.as_tensor(layout.categorical_columns, device=device),
                         torch.as_tensor(layout.gaussian_columns, device=device))
        if layout.categories:
            logits = inputs[..., torch.as_tensor(where.logits, device=device)]
            padding = torch.full((*logits.shape[:-1], 1), torch.finfo(logits.dtype).min, dtype=logits.dtype,
                                 device=device)
            padded = torch.cat([logits, padding], -1)[..., torch.as_tensor(layout.padded, device=device)]
            self.categorical = MultiCategorical(padded)
        if layout.dims:
            mean = inputs[..., torch.as_tensor(where.means, device=device)]
            if where.log_stds is not None:
                log_std = inputs[..., torch.as_tensor(where.log_stds, device=device)]
            assert log_std is not None
            self.gaussian = DiagGaussian(mean, log_std)

    def _parts(self) -> Iterator[tuple[Distribution, torch.Tensor]]:
        for part, columns in zip((self.categorical, self.gaussian), self._columns, strict=True):
            if part is not None:
                yield part, columns

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return sum(part.log_prob(actions[..., columns]) for part, columns in self._parts())  # type: ignore[return-value]

    def entropy(self) -> torch.Tensor:
        return sum(part.entropy() for part, _ in self._parts())  # type: ignore[return-value]

    def kl(self, other: Composite) -> torch.Tensor:
        return sum(part.kl(theirs) for (part, _), (theirs, _) in zip(self._parts(), other._parts(), strict=True))  # type: ignore[return-value]

    def mode(self) -> torch.Tensor:
        first = self.inputs[0]
        actions = torch.empty((*first.shape[:-1], self.layout.width), device=first.device,
                              dtype=torch.float32 if self.layout.dims else torch.int64)
        for part, columns in self._parts():
            actions[..., columns] = part.mode().to(actions.dtype)
        return actions

    def with_inputs(self, *inputs: torch.Tensor) -> Distribution:
        return Composite(self.layout, *inputs)


def action_distribution(layout: ActionLayout, inputs: torch.Tensor, log_std: torch.Tensor | None) -> Distribution:
    """The distribution over ``layout``'s space with these inputs: categorical (``Discrete``), diagonal
    Gaussian (a one-dimensional float ``Box``; ``log_std`` volley's network's, or None where the inputs
    hold means then log-stds), else the product of the parts."""
    if layout.kind == "discrete":
        return Categorical(inputs)
    if layout.kind == "box":
        return DiagGaussian(inputs, log_std) if log_std is not None else DiagGaussian(*inputs.chunk(2, dim=-1))
    return Composite(layout, inputs, log_std)
