"""Action distributions in torch, for learning: one per kind of action space, a product of parts for
composite spaces, the action mask applied where logits become a distribution, and RLlib's custom
action distribution protocol.

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

A custom action distribution is RLlib's ``ActionDistribution`` / ``TorchDistributionWrapper``
(``logp``, ``sample``, ``deterministic_sample``, ``entropy``, ``kl``,
``required_model_output_shape``), built as ``cls(inputs, model)`` on the model's outputs, as in
RLlib; :class:`CustomDistribution` puts it behind volley's interface. It acts with its own
``sample()``, traced into numpy where it traces (:mod:`volley.traced_dists`), else in torch,
drawing from a torch generator each worker keeps (:func:`custom_head`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.errors import ConfigError
from volley.heads import Head, RandomStreams
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


# -- RLlib's custom action distributions -------------------------------------------------------


class ActionDistribution:
    """RLlib's action distribution protocol (old API stack): built as ``cls(inputs, model)`` on the
    model's outputs ``[B, required_model_output_shape]`` (``model``: the custom model, whose layers an
    autoregressive distribution calls). Subclass it, or :class:`TorchDistributionWrapper`."""

    def __init__(self, inputs: Any, model: Any) -> None:
        self.inputs = inputs
        self.model = model

    def sample(self) -> Any:
        """Actions ``[B, ...]`` drawn from it (a tensor in the flat layout, or a tuple / dict of the
        space's parts): what a worker acts with when exploring."""
        raise NotImplementedError

    def deterministic_sample(self) -> Any:
        """The most likely actions: what a worker acts with when not exploring."""
        raise NotImplementedError

    def sampled_action_logp(self) -> torch.Tensor:
        raise NotImplementedError

    def logp(self, x: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``[B]`` of a batch's actions (the flat layout of :mod:`volley.spaces`)."""
        raise NotImplementedError

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    def multi_kl(self, other: ActionDistribution) -> torch.Tensor:
        return self.kl(other)

    def multi_entropy(self) -> torch.Tensor:
        return self.entropy()

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Mapping[str, Any]) -> int | np.ndarray:
        """The width of the model's outputs this distribution is built on (the model's ``num_outputs``)."""
        raise NotImplementedError


class TorchDistributionWrapper(ActionDistribution):
    """RLlib's base for a custom distribution around a ``torch.distributions`` object ``self.dist``
    (set in the subclass's constructor): ``logp``, ``entropy``, ``kl`` and ``sample`` come from it."""

    def __init__(self, inputs: Any, model: Any) -> None:
        if not isinstance(inputs, torch.Tensor):
            inputs = torch.as_tensor(np.asarray(inputs))
            if isinstance(model, nn.Module):
                inputs = inputs.to(next(model.parameters()).device)
        super().__init__(inputs, model)
        self.last_sample: torch.Tensor | None = None
        self.dist: torch.distributions.Distribution

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self.dist.log_prob(actions)

    def entropy(self) -> torch.Tensor:
        return self.dist.entropy()

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        assert isinstance(other, TorchDistributionWrapper)
        return torch.distributions.kl.kl_divergence(self.dist, other.dist)

    def sample(self) -> torch.Tensor:
        self.last_sample = self.dist.sample()
        return self.last_sample

    def sampled_action_logp(self) -> torch.Tensor:
        assert self.last_sample is not None, "sample() first"
        return self.logp(self.last_sample)


class TorchCategorical(TorchDistributionWrapper):
    """RLlib's categorical over logits ``[B, n]`` (``temperature`` divides them)."""

    def __init__(self, inputs: Any, model: Any = None, temperature: float = 1.0) -> None:
        if temperature <= 0:
            raise ConfigError(f"TorchCategorical temperature must be > 0, got {temperature!r}")
        super().__init__(inputs, model)
        if temperature != 1.0:
            self.inputs = self.inputs / temperature
        self.dist = torch.distributions.Categorical(logits=self.inputs)

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = self.inputs.argmax(dim=1)  # the most likely choice
        return self.last_sample

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Mapping[str, Any]) -> int:
        return int(action_space.n)  # type: ignore[attr-defined]


class TorchDiagGaussian(TorchDistributionWrapper):
    """RLlib's diagonal Gaussian over inputs ``[B, 2d]``: the means, then the log-stds."""

    def __init__(self, inputs: Any, model: Any = None, *, action_space: gym.Space | None = None) -> None:
        super().__init__(inputs, model)
        mean, log_std = torch.chunk(self.inputs, 2, dim=1)
        self.log_std = log_std
        self.dist = torch.distributions.Normal(mean, log_std.exp())
        self.zero_action_dim = action_space is not None and action_space.shape == ()

    def sample(self) -> torch.Tensor:
        sample = super().sample()
        return sample.squeeze(-1) if self.zero_action_dim else sample

    def deterministic_sample(self) -> torch.Tensor:
        self.last_sample = self.dist.mean
        return self.last_sample

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return super().logp(actions).sum(-1)

    def entropy(self) -> torch.Tensor:
        return super().entropy().sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        return super().kl(other).sum(-1)

    @staticmethod
    def required_model_output_shape(action_space: gym.Space, model_config: Mapping[str, Any]) -> int:
        return 2 * int(np.prod(action_space.shape or ()))


def required_outputs(dist_class: Any, action_space: gym.Space, model_config: Mapping[str, Any]) -> int:
    """``dist_class.required_model_output_shape(action_space, model_config)`` as one positive int (the
    width of the outputs ``[B, n]`` every volley network has); a ConfigError naming what it returned."""
    name = getattr(dist_class, "__name__", repr(dist_class))
    try:
        shape = dist_class.required_model_output_shape(action_space, dict(model_config))
    except Exception as exc:
        raise ConfigError(f"custom action dist {name}.required_model_output_shape({action_space}) failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    size = np.asarray(shape)
    if size.size != 1 or size.dtype.kind not in "iu" or int(size.reshape(())) <= 0:
        raise ConfigError(f"custom action dist {name}.required_model_output_shape() returned {shape!r}: the "
                          "model's outputs are [B, n], so it must be one positive int n")
    return int(size.reshape(()))


def flat_actions(sample: Any, layout: ActionLayout) -> torch.Tensor:
    """A custom distribution's sample in the flat layout of :mod:`volley.spaces` (``[B]`` for
    ``Discrete``, else ``[B, W]``): a tensor as it is, reshaped; a tuple, list or dict of the space's
    parts (RLlib's autoregressive example returns ``(a1, a2)``) flattened leaf by leaf."""
    parts = [sample] if isinstance(sample, torch.Tensor) else list(_flat_parts(sample, layout.space))
    rows = len(parts[0])
    flat = torch.cat([torch.as_tensor(part).reshape(rows, -1) for part in parts], 1)
    flat = flat.to(torch.float32 if layout.dims else torch.int64)
    return flat.reshape(rows) if layout.kind == "discrete" and flat.shape[1] == 1 else flat


def _flat_parts(sample: Any, space: gym.Space) -> Iterator[Any]:
    if isinstance(space, gym.spaces.Dict) and isinstance(sample, Mapping):
        for key, subspace in space.spaces.items():
            yield from _flat_parts(sample[key], subspace)
    elif isinstance(space, gym.spaces.Tuple) and isinstance(sample, Sequence):
        for part, subspace in zip(sample, space.spaces, strict=True):
            yield from _flat_parts(part, subspace)
    else:
        yield sample


class CustomDistribution(Distribution):
    """A user's :class:`ActionDistribution` class behind volley's interface: ``log_prob`` is its
    ``logp`` of the batch's flat actions, ``mode`` its ``deterministic_sample()`` flattened."""

    def __init__(self, dist_class: type, inputs: torch.Tensor, model: Any, layout: ActionLayout) -> None:
        self.dist_class, self.model, self.layout = dist_class, model, layout
        self.inputs = (inputs,)
        self.wrapped = dist_class(inputs, model)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.wrapped.logp(actions)

    def entropy(self) -> torch.Tensor:
        return self.wrapped.entropy()

    def kl(self, other: CustomDistribution) -> torch.Tensor:
        return self.wrapped.kl(other.wrapped)

    def mode(self) -> torch.Tensor:
        return flat_actions(self.wrapped.deterministic_sample(), self.layout)

    def with_inputs(self, *inputs: torch.Tensor) -> Distribution:
        return CustomDistribution(self.dist_class, inputs[0], self.model, self.layout)


@contextlib.contextmanager
def worker_generator(streams: RandomStreams) -> Iterator[None]:
    """Torch's global generator set to the one these streams keep for a custom distribution's
    ``sample()`` (seeded from the run's seed and the worker's first environment index, then carried
    from draw to draw), and restored after: a worker's draws are a function of the seed on every
    engine, whatever else in its process draws from torch."""
    outside = torch.get_rng_state()
    state = streams.torch_state
    torch.set_rng_state(state if state is not None else torch.Generator().manual_seed(streams.torch_seed).get_state())
    try:
        yield
    finally:
        streams.torch_state = torch.get_rng_state()
        torch.set_rng_state(outside)


def custom_head(dist_class: type, model: Any, layout: ActionLayout, device: torch.device) -> Head:
    """Acting through a custom distribution: its ``sample()`` (or ``deterministic_sample()``) under
    the worker's own generator, the actions flattened to numpy; a fragment's log-probabilities by its
    ``logp``. In torch: the distribution is the user's code (:mod:`volley.traced_dists` acts through
this head where it does not trace)."""
    dtype = np.float32 if layout.dims else np.int64

    def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
        with torch.no_grad(), worker_generator(streams):
            dist = dist_class(torch.as_tensor(inputs, device=device), model)
            sample = dist.sample() if explore else dist.deterministic_sample()
            return flat_actions(sample, layout).cpu().numpy().astype(dtype)

    def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        lead = inputs.shape[:-1]
        rows = int(np.prod(lead))
        with torch.no_grad():
            dist = dist_class(torch.as_tensor(inputs.reshape(rows, -1), device=device), model)
            logp = dist.logp(torch.as_tensor(actions.reshape(rows, *actions.shape[len(lead):]), device=device))
        return logp.cpu().numpy().astype(np.float32).reshape(lead)
    return Head(draw, log_prob)
