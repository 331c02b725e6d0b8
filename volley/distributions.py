"""Action distributions in torch: RLlib's custom action distribution protocol, and volley's own.

A custom action distribution is RLlib's ``ActionDistribution`` / ``TorchDistributionWrapper``
(``logp``, ``sample``, ``deterministic_sample``, ``entropy``, ``kl``,
``required_model_output_shape``), built as ``cls(inputs, model)`` on the model's outputs, as in
RLlib; :class:`CustomDistribution` puts it behind volley's interface. It acts with its own
``sample()``, traced into numpy where it traces (:mod:`volley.traced_dists`), else in torch,
drawing from a torch generator each worker keeps (:func:`custom_head`).

volley's own distributions (a categorical, a diagonal Gaussian, products of parts, the action
mask) live in :mod:`volley.action_dists`; the ones scripts and tests import from here still are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley.action_dists import Categorical as Categorical  # volley's own, named here too
from volley.action_dists import Distribution
from volley.action_dists import EpsilonGreedy as EpsilonGreedy
from volley.action_dists import SquashedGaussian as SquashedGaussian
from volley.action_dists import action_distribution as action_distribution
from volley.action_dists import masked as masked
from volley.errors import ConfigError
from volley.heads import Head, RandomStreams
from volley.spaces import ActionLayout


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
