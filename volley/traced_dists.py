"""A custom action distribution's acting, traced once into numpy programs (:mod:`volley.traced`).

RLlib's custom distributions (``TorchDistributionWrapper`` subclasses) sample in torch: objects
and dispatches per step beside the model's forward pass. Most build ``torch.distributions``'
``Categorical`` or ``Normal`` on the model's outputs (RLlib's autoregressive example calls its
model between two categorical draws), so a draw is arithmetic on noise: a categorical draw is the
argmax of its log-probabilities plus Gumbel noise (the Gumbel-max trick), a Gaussian's the mean
plus the standard deviation times standard-normal noise. While tracing, those ``sample`` methods
take their noise as the program's inputs (:func:`noise_as_inputs`), so ``sample()``,
``deterministic_sample()`` and ``logp`` trace as a model's forward pass does, and the worker draws
the noise in numpy from each environment's own random stream.

What is exact: given the same noise, the program's actions equal the distribution's own code's in
torch (checked on the first batch of each program, as for models), its deterministic actions
equal ``deterministic_sample()``'s and its log-probabilities ``logp``'s to float32 rounding.
torch's ``Categorical.sample`` draws by ``multinomial`` from torch's generator, so the draws are
not torch's: they come from the same distribution through another random stream (chi-square and
KS tests in tests/unit/test_traced_distributions.py). A distribution that draws otherwise
(``torch.randn``, a ``Bernoulli``, ``multinomial``) or does not trace samples in torch from the
worker's torch generator (:func:`volley.distributions.custom_head`), said once in the log.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from volley.distributions import custom_head, flat_actions
from volley.heads import Head, RandomStreams
from volley.spaces import ActionLayout
from volley.traced import NumpyProgram, checked_trace, say_once, weights_of
from volley.traced_ops import NotTraceable

NO_SHAPE = torch.Size()  # sample()'s default: one draw per row
Asked = list[tuple[str, tuple[int, ...]]]  # the noise a sample() takes: kind ("gumbel", "normal"), shape


class Noise:
    """The noise a ``sample()`` takes, in order: the tensors given, and zeros after them (while
    recording what it asks for)."""

    def __init__(self, given: Sequence[torch.Tensor] = ()) -> None:
        self.given, self.asked = list(given), Asked()

    def take(self, kind: str, like: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        self.asked.append((kind, tuple(shape)))
        if len(self.asked) > len(self.given):
            return torch.zeros(tuple(shape), dtype=like.dtype)
        return self.given[len(self.asked) - 1]


@contextlib.contextmanager
def noise_as_inputs(noise: Noise) -> Iterator[None]:
    """``Categorical``'s and ``Normal``'s draws (in this thread) as functions of ``noise``: the
    Gumbel-max trick and the reparameterised Gaussian; argument checks off (they branch on values)."""
    categorical, normal, base = torch.distributions.Categorical, torch.distributions.Normal, \
        torch.distributions.Distribution
    saved = categorical.sample, normal.sample, normal.rsample, base._validate_args
    thread = threading.get_ident()

    def gumbel_max(self: Any, sample_shape: torch.Size) -> torch.Tensor:
        logits = self.logits.expand(*self._extended_shape(sample_shape), self._num_events)
        return (logits + noise.take("gumbel", logits, logits.shape)).argmax(-1)

    def reparameterised(self: Any, sample_shape: torch.Size) -> torch.Tensor:
        return self.loc + noise.take("normal", self.loc, self._extended_shape(sample_shape)) * self.scale

    def here(original: Callable[..., torch.Tensor], draw: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """``draw`` in this thread, ``original`` in any other (a worker acting beside the trace)."""
        def method(self: Any, sample_shape: torch.Size = NO_SHAPE) -> torch.Tensor:
            return draw(self, sample_shape) if threading.get_ident() == thread else original(self, sample_shape)
        return method

    setattr(categorical, "sample", here(saved[0], gumbel_max))  # noqa: B010 (a class's method, for a while)
    setattr(normal, "sample", here(saved[1], reparameterised))  # noqa: B010
    setattr(normal, "rsample", here(saved[2], reparameterised))  # noqa: B010
    base.set_default_validate_args(False)
    try:
        yield
    finally:
        setattr(categorical, "sample", saved[0])  # noqa: B010
        setattr(normal, "sample", saved[1])  # noqa: B010
        setattr(normal, "rsample", saved[2])  # noqa: B010
        base.set_default_validate_args(saved[3])


def numpy_noise(asked: Asked, draw: Callable[[str, int], np.ndarray], dtype: np.dtype) -> list[np.ndarray]:
    """The noise ``asked`` for, each ``[B, ...]`` from ``draw(kind, width)`` ``[B, width]``."""
    return [draw(kind, math.prod(shape[1:])).reshape(shape).astype(dtype, copy=False) for kind, shape in asked]


def stream_draw(streams: RandomStreams) -> Callable[[str, int], np.ndarray]:
    """Noise from each environment's own stream: a row per environment."""
    return lambda kind, width: streams.gumbel(width) if kind == "gumbel" else streams.normal(width)


def fixed_draw(rows: int) -> Callable[[str, int], np.ndarray]:
    """Noise from a fixed generator, for the check of a new program (it takes nothing from the streams)."""
    rng = np.random.default_rng(0)
    return lambda kind, width: rng.gumbel(size=(rows, width)) if kind == "gumbel" else \
        rng.standard_normal((rows, width))


Key = tuple[Any, ...]  # the program's kind, and the shapes and dtypes of its inputs


class TracedDistribution:
    """A custom distribution's draws and log-probabilities through numpy programs traced from its
    ``sample()``, ``deterministic_sample()`` and ``logp``, one per kind and shape of the inputs; in
    torch (:func:`volley.distributions.custom_head`) where a program does not trace."""

    def __init__(self, dist_class: type, model: Any, module: torch.nn.Module, layout: ActionLayout) -> None:
        """``model``: what the distribution is built with; ``module``: what holds every weight it reads."""
        self.dist_class, self.model, self.module, self.layout = dist_class, model, module, layout
        self.programs: dict[Key, tuple[NumpyProgram, Asked] | None] = {}  # None: in torch

    def _function(self, kind: str) -> Callable[..., list[torch.Tensor]]:
        def sample(inputs: torch.Tensor, *noise: torch.Tensor) -> list[torch.Tensor]:
            with noise_as_inputs(Noise(noise)):
                return [flat_actions(self.dist_class(inputs, self.model).sample(), self.layout)]

        def deterministic(inputs: torch.Tensor) -> list[torch.Tensor]:
            with noise_as_inputs(Noise()):  # without argument checks (they branch on values), as traced
                return [flat_actions(self.dist_class(inputs, self.model).deterministic_sample(), self.layout)]

        def logp(inputs: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
            with noise_as_inputs(Noise()):
                return [self.dist_class(inputs, self.model).logp(actions)]
        functions: dict[str, Callable[..., list[torch.Tensor]]] = {
            "sample": sample, "deterministic_sample": deterministic, "logp": logp}
        return functions[kind]

    def program(self, kind: str, arrays: Sequence[np.ndarray]) -> tuple[NumpyProgram, Asked] | None:
        """The program of ``kind`` for inputs like ``arrays`` (with the noise it takes), traced and
        checked against torch the first time; None (and one line in the log) where it acts in torch."""
        key = (kind, *((a.shape, a.dtype) for a in arrays))
        if key not in self.programs:
            fn, name = self._function(kind), self.dist_class.__name__
            try:
                asked = self.noise_asked(arrays[0]) if kind == "sample" else Asked()
                arrays = [*arrays, *numpy_noise(asked, fixed_draw(len(arrays[0])), arrays[0].dtype)]
                self.programs[key] = (checked_trace(fn, self.module, arrays), asked)
                say_once(f"custom action dist {name}'s {kind} acts in numpy (traced once)")
            except NotTraceable as exc:
                self.programs[key] = None
                say_once(f"custom action dist {name}'s {kind} acts in torch ({exc})")
        return self.programs[key]

    def noise_asked(self, inputs: np.ndarray) -> Asked:
        """The noise ``sample()`` takes on ``inputs``, found by sampling once on zero noise."""
        noise = Noise()  # torch's generator as it was after (a sample() that draws from it itself)
        with torch.inference_mode(), torch.random.fork_rng(devices=[]), noise_as_inputs(noise):
            try:
                self.dist_class(torch.as_tensor(inputs), self.model).sample()
            except Exception as exc:  # the user's code, as it runs with noise of its own
                raise NotTraceable(f"its sample() failed on noise as inputs: {type(exc).__name__}: {exc}") from exc
        for kind, shape in noise.asked:
            if not shape or shape[0] != len(inputs):
                raise NotTraceable(f"its sample() draws {kind} noise of shape {shape}, not a row per environment")
        return noise.asked

    def head(self, device: torch.device) -> Head:
        """The distribution with the module's current weights (a new head at every weight sync)."""
        weights = [w.detach().cpu().numpy() for w in weights_of(self.module).values()]
        in_torch = custom_head(self.dist_class, self.model, self.layout, device)
        runs: dict[Key, tuple[Callable[..., list[np.ndarray]], Asked] | None] = {}

        def run(kind: str, *arrays: np.ndarray) -> tuple[Callable[..., list[np.ndarray]], Asked] | None:
            key = (kind, *((a.shape, a.dtype) for a in arrays))
            if key not in runs:
                traced = self.program(kind, arrays)
                runs[key] = None if traced is None else (traced[0].load(weights), traced[1])
            return runs[key]

        def draw(inputs: np.ndarray, streams: RandomStreams, explore: bool) -> np.ndarray:
            traced = run("sample" if explore else "deterministic_sample", inputs)
            if traced is None:
                return in_torch.draw(inputs, streams, explore)
            program, asked = traced
            return program(inputs, *numpy_noise(asked, stream_draw(streams), inputs.dtype))[0]

        def log_prob(inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
            lead = inputs.shape[:-1]
            rows = int(np.prod(lead))
            # the rows, then repeats of the first up to a power of two: a program for each power, not
            # for each length of a fragment
            take = np.arange(1 << max(rows - 1, 0).bit_length())
            take[rows:] = 0
            flat_inputs = inputs.reshape(rows, -1)[take]
            flat = actions.reshape(rows, *actions.shape[len(lead):])[take]
            traced = run("logp", flat_inputs, flat)
            if traced is None:
                return in_torch.log_prob(inputs, actions)
            return traced[0](flat_inputs, flat)[0][:rows].astype(np.float32, copy=False).reshape(lead)
        return Head(draw, log_prob)
