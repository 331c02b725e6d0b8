"""A custom model's acting forward pass, traced once into a program of numpy calls.

A user's model acts in torch, where each operation costs several microseconds of dispatch
beyond its arithmetic: a 64x64 MLP's forward pass costs about 120 µs a step where the same
layers in numpy cost about 15 (benchmarks/RESULTS.md, "Extension points"). Most custom models
are graphs of standard layers, so volley traces the whole of a policy's ``outputs`` (the
model's ``forward``, its ``value_function``, an action mask) once, with torch's own tracer
(``make_fx`` on fake tensors: the graph of ATen operations it runs, Python control flow
resolved, data-dependent branches refused), and writes each operation as its numpy
equivalent (:data:`NUMPY_OPS`): Linear layers, activations, concatenation, reshapes, Conv2d,
one-layer LSTMs. Whatever depends on the weights alone (a transposed weight) is computed
once per set of weights (:meth:`NumpyProgram.load`, at every weight sync); the rest runs per
step as straight-line generated Python. A model with an operation the table lacks, or whose
numpy outputs differ from torch's on its first batch, acts in torch (:class:`TracedActing`
falls back by itself), and the process says once which path each model acts on.
"""

from __future__ import annotations

import operator
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

from volley.heads import Head, RandomStreams
from volley.networks.numpy_layers import ActFn, Acting, Previous, State, Twin

aten = torch.ops.aten
DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64,
          torch.int32: np.int32, torch.uint8: np.uint8, torch.bool: np.bool_, None: np.float32}


class NotTraceable(Exception):
    """Why a model acts in torch (one line, for the log)."""


# -- the numpy equivalents of ATen operations --------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * np.tanh(0.5 * x) + 0.5  # σ(x) = (1 + tanh(x/2)) / 2: no overflow of exp(-x)


def _softmax(x: np.ndarray, dim: int, half: bool = False) -> np.ndarray:
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


def _log_softmax(x: np.ndarray, dim: int, half: bool = False) -> np.ndarray:
    shifted = x - x.max(dim, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(dim, keepdims=True))


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):  # log(0) is -inf without a word, as in torch (a mask's log)
        return np.log(x)


def _expand(x: np.ndarray, shape: Sequence[int], implicit: bool = False) -> np.ndarray:
    lead = len(shape) - x.ndim
    return np.broadcast_to(x, [x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)])


def _slice(x: np.ndarray, dim: int = 0, start: int | None = None, end: int | None = None,
           step: int = 1) -> np.ndarray:
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


def _select(x: np.ndarray, dim: int, i: int) -> np.ndarray:
    return np.take(x, i, axis=dim)


def _split(x: np.ndarray, size: int | Sequence[int], dim: int = 0) -> list[np.ndarray]:
    sizes = [size] * -(-x.shape[dim] // size) if isinstance(size, int) else list(size)
    return np.split(x, np.cumsum(sizes)[:-1].tolist(), axis=dim)


def _to_copy(x: np.ndarray, dtype: torch.dtype | None = None, **_: Any) -> np.ndarray:
    return x.astype(DTYPES[dtype]) if dtype is not None else x.copy()


def _full(shape: Sequence[int], value: float, dtype: torch.dtype | None = None, **_: Any) -> np.ndarray:
    return np.full(shape, value, DTYPES[dtype])


def _convolution(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                 output_padding: Sequence[int], groups: int) -> np.ndarray:
    """Conv2d as one product over the input's windows (``[B, C, H, W]``, no groups, not transposed)."""
    if transposed or groups != 1 or x.ndim != 4:
        raise NotTraceable("a transposed, grouped or non-2-D convolution")
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    kh, kw = weight.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]  # [B, C, H', W', kh, kw]
    out = np.tensordot(windows, weight, axes=([1, 4, 5], [1, 2, 3]))  # [B, H', W', O]
    out = out + bias if bias is not None else out
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def _lstm_layer(x: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray,
                h: np.ndarray, c: np.ndarray, reverse: bool, batch_sizes: Sequence[int], mode: int,
                hidden_size: int, num_layers: int, has_biases: bool, bidirectional: bool,
                batch_first: bool, train: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, None]:
    """torch's one-layer LSTM kernel (``x`` ``[T, B, in]``, ``h``, ``c`` ``[1, B, H]``), gates i, f, g, o."""
    if reverse or bidirectional or batch_first or batch_sizes or mode != 2 or not has_biases:
        raise NotTraceable("an LSTM that is reversed, bidirectional, packed or batch-first in its kernel")
    h, c, size = h[0], c[0], hidden_size
    inputs = x @ w_ih.T + (b_ih + b_hh)  # [T, B, 4H]: every step's input product at once
    outputs = []
    for step in inputs:
        gates = step + h @ w_hh.T
        sig = _sigmoid(gates)  # of all four gates at once; g's own is unused
        c = sig[:, size:2 * size] * c + sig[:, :size] * np.tanh(gates[:, 2 * size:3 * size])
        h = sig[:, 3 * size:] * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs), h[None], c[None], None


def _stacked(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two weights ``[in, out]`` (or biases ``[out]``) as ``[2, in, width]`` (``[2, 1, width]``), the
    narrower padded with zero columns."""
    width = max(a.shape[-1], b.shape[-1])
    out = np.zeros((2, *a.shape[:-1], width) if a.ndim == 2 else (2, 1, width), a.dtype)
    out[0, ..., :a.shape[-1]], out[1, ..., :b.shape[-1]] = a, b
    return out


def _stacked_linear(bias: np.ndarray, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return x @ weight + bias


def _index(x: np.ndarray, indices: Sequence[np.ndarray | None]) -> np.ndarray:
    return x[tuple(slice(None) if i is None else i for i in indices)]


def _same(x: np.ndarray, *_: Any, **__: Any) -> np.ndarray:
    return x


NUMPY_OPS: dict[Any, Callable[..., Any]] = {
    aten.addmm.default: lambda bias, a, b: a @ b + bias, aten.mm.default: operator.matmul,
    aten.bmm.default: operator.matmul, aten.t.default: np.transpose,
    aten.tanh.default: np.tanh, aten.relu.default: lambda x: np.maximum(x, 0),
    aten.sigmoid.default: _sigmoid, aten.silu.default: lambda x: x * _sigmoid(x),
    aten.elu.default: lambda x, alpha=1.0, scale=1.0, input_scale=1.0: np.where(
        x > 0, x * scale, alpha * scale * np.expm1(np.minimum(x, 0) * input_scale)).astype(x.dtype),
    aten.leaky_relu.default: lambda x, slope=0.01: np.where(x > 0, x, x * slope),
    aten.exp.default: np.exp, aten.log.default: _log, aten.neg.default: np.negative,
    aten.abs.default: np.abs, aten.sqrt.default: np.sqrt, aten.square.default: np.square,
    aten.softplus.default: lambda x, beta=1.0, threshold=20.0: np.where(
        x * beta > threshold, x, np.log1p(np.exp(np.minimum(x * beta, threshold))) / beta).astype(x.dtype),
    aten._softmax.default: _softmax, aten._log_softmax.default: _log_softmax,
    aten.clamp.default: lambda x, lo=None, hi=None: np.clip(x, lo, hi),
    aten.clamp_min.default: np.maximum, aten.clamp_max.default: np.minimum,
    aten.add.Tensor: lambda a, b, alpha=1: a + b * alpha if alpha != 1 else a + b,
    aten.sub.Tensor: lambda a, b, alpha=1: a - b * alpha if alpha != 1 else a - b,
    aten.mul.Tensor: operator.mul, aten.div.Tensor: operator.truediv,
    aten.pow.Tensor_Scalar: np.power, aten.where.self: np.where,
    aten.gt.Scalar: np.greater, aten.lt.Scalar: np.less, aten.ge.Scalar: np.greater_equal,
    aten.le.Scalar: np.less_equal, aten.eq.Scalar: np.equal, aten.ne.Scalar: np.not_equal,
    aten.gt.Tensor: np.greater, aten.lt.Tensor: np.less, aten.eq.Tensor: np.equal, aten.ne.Tensor: np.not_equal,
    aten.cat.default: lambda xs, dim=0: np.concatenate(xs, axis=dim),
    aten.stack.default: lambda xs, dim=0: np.stack(xs, axis=dim),
    aten.view.default: np.reshape, aten._unsafe_view.default: np.reshape, aten.reshape.default: np.reshape,
    aten.squeeze.dim: lambda x, dim: np.squeeze(x, dim) if x.shape[dim] == 1 else x,
    aten.squeeze.dims: lambda x, dims: np.squeeze(x, tuple(d for d in dims if x.shape[d] == 1)),
    aten.unsqueeze.default: np.expand_dims, aten.expand.default: _expand,
    aten.permute.default: np.transpose, aten.transpose.int: np.swapaxes,
    aten.slice.Tensor: _slice, aten.select.int: _select, aten.index.Tensor: _index,
    aten.split.Tensor: _split, aten.split_with_sizes.default: _split,
    aten.unbind.int: lambda x, dim=0: list(np.moveaxis(x, dim, 0)),
    aten.sum.dim_IntList: lambda x, dims, keepdim=False, dtype=None: x.sum(tuple(dims), keepdims=keepdim),
    aten.mean.dim: lambda x, dims, keepdim=False, dtype=None: x.mean(tuple(dims), keepdims=keepdim),
    aten.amax.default: lambda x, dims, keepdim=False: x.max(tuple(dims), keepdims=keepdim),
    aten.argmax.default: lambda x, dim=None, keepdim=False: np.argmax(x, dim, keepdims=keepdim),
    aten.logsumexp.default: lambda x, dims, keepdim=False: np.logaddexp.reduce(x, tuple(dims), keepdims=keepdim),
    aten.gather.default: lambda x, dim, index: np.take_along_axis(x, index, dim),
    aten._to_copy.default: _to_copy, aten.clone.default: _same, aten.alias.default: _same,
    aten.detach.default: _same, aten.lift_fresh_copy.default: _same,
    aten.full.default: _full, aten.ones.default: lambda shape, **kw: _full(shape, 1, **kw),
    aten.zeros.default: lambda shape, **kw: _full(shape, 0, **kw),
    aten.scalar_tensor.default: lambda value, **kw: _full((), value, **kw),
    aten.convolution.default: _convolution, aten.mkldnn_rnn_layer.default: _lstm_layer,
    operator.getitem: operator.getitem, _stacked: _stacked, _stacked_linear: _stacked_linear,
}


RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.squeeze.dim,
            aten.squeeze.dims, aten.unsqueeze.default}
# the commonest operations written out in the generated source (their arguments in order)
INLINE = {aten.addmm.default: "{1} @ {2} + {0}", _stacked_linear: "{1} @ {2} + {0}", aten.mm.default: "{0} @ {1}",
          aten.t.default: "{0}.T",
          aten.add.Tensor: "{0} + {1}", aten.sub.Tensor: "{0} - {1}", aten.mul.Tensor: "{0} * {1}",
          aten.div.Tensor: "{0} / {1}", operator.getitem: "{0}[{1}]"}


def _no_op(node: fx.Node) -> bool:
    """Whether ``node`` gives its input back unchanged: a reshape or squeeze to the same shape, a copy
    of the same dtype (the programs never write into an array, so copies need not be made)."""
    if node.target in (aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default):
        return True
    source = node.args[0] if node.args else None
    if not isinstance(source, fx.Node) or "val" not in node.meta or "val" not in source.meta:
        return False
    out, given = node.meta["val"], source.meta["val"]
    same = isinstance(out, torch.Tensor) and isinstance(given, torch.Tensor) and out.shape == given.shape \
        and out.dtype == given.dtype
    return same and node.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default,
                                    aten.squeeze.dim, aten.squeeze.dims, aten.expand.default,
                                    aten._to_copy.default)


# -- two towers as one ----------------------------------------------------------------------------


ELEMENTWISE = {aten.tanh.default, aten.relu.default, aten.sigmoid.default, aten.silu.default, aten.elu.default,
               aten.leaky_relu.default}


def _width(node: Any) -> int:
    return int(node.meta["val"].shape[-1])


def stack_twins(graph: fx.Graph, fixed: set[fx.Node]) -> None:
    """Two towers of Linear and activation layers on the same input (a policy's and a value
    function's) as one: each pair of layers one batched product of stacked weights ``[2, in, out]``,
    as :meth:`volley.networks.numpy_layers.NumpyMLP.stacked` does for volley's own MLP, so a step makes half the
    numpy calls. The towers stay apart where they stop being alike (the narrower of two last
    layers is padded with zero columns, and the chain ends there)."""
    first = next((n for n in graph.nodes if n.op == "call_function" and n not in fixed), None)
    if first is None:
        return
    for node in [n for n in graph.nodes if n in fixed and n.op == "call_function"]:
        first.prepend(node)  # the weights' own nodes first, so that stacked weights can follow them
    by_input: dict[fx.Node, list[fx.Node]] = {}
    for node in graph.nodes:
        if node.target == aten.addmm.default and node not in fixed and not node.kwargs \
                and node.args[0] in fixed and node.args[2] in fixed:
            by_input.setdefault(node.args[1], []).append(node)
    for p, q in (pair for pair in by_input.values() if len(pair) == 2):
        _stack_chain(graph, fixed, first, p, q)


def _stack_chain(graph: fx.Graph, fixed: set[fx.Node], first: fx.Node, p: fx.Node, q: fx.Node) -> None:
    """``p`` and ``q`` (Linear layers on one input) and the alike layers after them, stacked."""
    def stack(a: Any, b: Any) -> fx.Node:
        with graph.inserting_before(first):
            node = graph.call_function(_stacked, (a, b))
        fixed.add(node)
        return node

    def linear(source: Any, u: fx.Node, v: fx.Node) -> fx.Node:
        with graph.inserting_before(min(u, v, key=order.index)):
            return graph.call_function(_stacked_linear, (stack(u.args[0], v.args[0]), source,
                                                         stack(u.args[2], v.args[2])))
    order = list(graph.nodes)
    stacked, widths = linear(p.args[1], p, q), (_width(p), _width(q))
    while widths[0] == widths[1] and len(p.users) == 1 and len(q.users) == 1:
        (u,), (v,) = p.users, q.users
        if u.target != v.target or u.kwargs or v.kwargs:
            break
        if u.target in ELEMENTWISE and u.args[0] is p and v.args[0] is q and u.args[1:] == v.args[1:]:
            with graph.inserting_before(min(u, v, key=order.index)):
                stacked = graph.call_function(u.target, (stacked, *u.args[1:]))
        elif u.target == aten.addmm.default and u.args[1] is p and v.args[1] is q \
                and u.args[0] in fixed and u.args[2] in fixed and v.args[0] in fixed and v.args[2] in fixed:
            stacked, widths = linear(stacked, u, v), (_width(u), _width(v))
        else:
            break
        p, q = u, v
    for tower, node in enumerate((p, q)):
        with graph.inserting_after(stacked):
            index: Any = (tower, Ellipsis, slice(None, widths[tower])) if widths[0] != widths[1] else tower
            node.replace_all_uses_with(graph.call_function(operator.getitem, (stacked, index)))
    graph.eliminate_dead_code()


# -- a traced graph as numpy -------------------------------------------------------------------


class NumpyProgram:
    """A traced graph as numpy: :meth:`load` takes the weights and gives the function of the
    inputs. Nodes that depend on the weights alone are computed in ``load``; the others form a
    function of straight-line numpy calls, generated once."""

    def __init__(self, graph: fx.Graph, weight_names: Sequence[str], constants: dict[str, np.ndarray]) -> None:
        placeholders = [node for node in graph.nodes if node.op == "placeholder"]
        self.weight_names = list(weight_names)
        fixed = set(placeholders[:len(self.weight_names)])  # nodes of the weights alone
        for node in graph.nodes:
            if node.op == "call_function" and node.target not in NUMPY_OPS:
                raise NotTraceable(f"no numpy equivalent of {node.target}")
            if node.op == "get_attr" or node.op == "call_function" and all(a in fixed for a in node.all_input_nodes):
                fixed.add(node)
        stack_twins(graph, fixed)
        names: dict[fx.Node, str] = {}
        self.namespace: dict[str, Any] = {}
        fold, run, inputs = ["def fold(weights):"], list[str](), list[str]()
        for i, node in enumerate(placeholders):
            if node in fixed:
                names[node] = f"w{i}"
                fold.append(f"    w{i} = weights[{i}]")
            else:
                names[node] = f"x{len(inputs)}"
                inputs.append(names[node])
        for node in graph.nodes:
            if node.op == "get_attr":
                names[node] = f"k_{len(self.namespace)}"
                self.namespace[names[node]] = constants[str(node.target)]
            elif node.op == "call_function":
                if _no_op(node):  # a reshape to the shape it has, a copy: the input itself
                    names[node] = names[node.args[0]]
                    continue
                names[node] = f"v{len(names)}"
                line = f"{names[node]} = {self._expression(node, names)}"
                (fold if node in fixed else run).append(f"    {line}")
        outputs = list(cast(Sequence[Any], graph.output_node().args[0]))
        kept = sorted({names[n] for n in fixed if any(user not in fixed for user in n.users)
                       or n in outputs} - {k for k in self.namespace if k.startswith("k_")})
        fold.append(f"    return {{{', '.join(f'{k!r}: {k}' for k in kept)}}}")
        run = [f"def run({', '.join(inputs)}):", *run,
               f"    return [{', '.join(names[n] if isinstance(n, fx.Node) else repr(n) for n in outputs)}]"]
        self.source = "\n".join(fold + [""] + run)
        code = compile(self.source, "<traced model>", "exec")
        scope: dict[str, Any] = dict(self.namespace)
        exec(code, scope)  # noqa: S102 (our own generated source: the graph's ops, one line each)
        self._fold, self._run = scope["fold"], scope["run"]
        self.size = len(run) - 2  # numpy calls per step

    def _expression(self, node: fx.Node, names: dict[fx.Node, str]) -> str:
        """Python for ``node``: an operator where it has one (one call fewer a step), else its function."""
        def text(arg: Any) -> str:
            if isinstance(arg, fx.Node):
                return names[arg]
            if isinstance(arg, list):
                return f"[{', '.join(text(a) for a in arg)}]"
            if isinstance(arg, tuple) and any(isinstance(a, fx.Node) for a in arg):
                return f"({''.join(text(a) + ', ' for a in arg)})"
            key = f"a_{len(self.namespace)}"  # a literal (a dtype, a shape): a name in the namespace
            self.namespace[key] = arg
            return key
        shape = node.meta["val"].shape if isinstance(node.meta.get("val"), torch.Tensor) else None
        if node.target in RESHAPES and shape is not None:  # the program's shapes are fixed: one reshape
            return f"{text(node.args[0])}.reshape({tuple(shape)})"
        args = [text(arg) for arg in node.args]
        template = INLINE.get(node.target)
        if template is not None and not node.kwargs and len(args) == template.count("{"):
            return template.format(*args)
        self.namespace[f"op_{names[node]}"] = NUMPY_OPS[node.target]
        args += [f"{k}={text(v)}" for k, v in node.kwargs.items() if k not in ("device", "pin_memory", "layout")]
        return f"op_{names[node]}({', '.join(args)})"

    def load(self, weights: Sequence[np.ndarray]) -> Callable[..., list[np.ndarray]]:
        """The function of the inputs (as given to the trace) with these weights (in the traced order)."""
        scope = dict(self.namespace)
        scope.update(self._fold(list(weights)))
        return types.FunctionType(self._run.__code__, scope)


class _Outputs(torch.nn.Module):
    """Holds the policy, so that ``functional_call`` puts the traced weights in its place."""

    def __init__(self, policy: torch.nn.Module, fn: Callable[..., list[torch.Tensor]]) -> None:
        super().__init__()
        self.policy, self.fn = policy, fn

    def forward(self, *args: torch.Tensor) -> list[torch.Tensor]:
        return self.fn(*args)


def trace(fn: Callable[..., list[torch.Tensor]], module: torch.nn.Module,
          inputs: Sequence[torch.Tensor]) -> NumpyProgram:
    """``fn(*inputs)`` (which calls ``module``) as a :class:`NumpyProgram` of ``module``'s weights
    (:func:`weights_of`), then the inputs; NotTraceable says why not."""
    holder = _Outputs(module, fn)
    names = list(weights_of(module))

    def with_weights(values: list[torch.Tensor], *args: torch.Tensor) -> list[torch.Tensor]:
        weights = {f"policy.{name}": value for name, value in zip(names, values, strict=True)}
        return torch.func.functional_call(holder, weights, args, strict=True)

    try:
        with torch.inference_mode():
            graph_module = make_fx(with_weights, tracing_mode="fake")(list(weights_of(module).values()), *inputs)
    except Exception as exc:  # whatever the user's forward does that torch's tracer cannot follow
        raise NotTraceable(f"torch's tracer stopped: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}") \
            from exc
    graph_module.graph.eliminate_dead_code()
    constants = {name: getattr(graph_module, name).detach().numpy() for name in dir(graph_module)
                 if name.startswith("_tensor_constant")}
    return NumpyProgram(graph_module.graph, names, constants)


def checked_trace(fn: Callable[..., list[torch.Tensor]], module: torch.nn.Module,
                  arrays: Sequence[np.ndarray]) -> NumpyProgram:
    """``fn`` traced on ``arrays`` (:func:`trace`), its program checked against ``fn`` in torch on
    them: integers equal, floats to float32 rounding; NotTraceable where they differ."""
    tensors = [torch.as_tensor(a) for a in arrays]
    program = trace(fn, module, tensors)
    with torch.inference_mode():
        expected = [t.numpy() for t in fn(*tensors)]
    try:
        got = program.load([w.detach().cpu().numpy() for w in weights_of(module).values()])(*arrays)
    except Exception as exc:  # an operation whose arguments its numpy equivalent does not take
        raise NotTraceable(f"its numpy program failed: {type(exc).__name__}: {exc}") from exc
    for want, have in zip(expected, map(np.asarray, got), strict=True):
        same = np.allclose(want, have, rtol=1e-4, atol=1e-5) if want.dtype.kind == "f" else np.array_equal(want, have)
        if want.shape != have.shape or want.dtype != have.dtype or not same:
            raise NotTraceable("its numpy program's outputs differ from torch's on the first batch")
    return program


def weights_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What a traced program takes at every weight sync: the parameters, then the buffers."""
    return dict(module.named_parameters()) | dict(module.named_buffers())


# -- acting through a traced program -------------------------------------------------------------

_SAID: set[str] = set()


def say_once(line: str) -> None:
    """``line`` on stderr, the first time this process says it (each worker says its path once)."""
    if line not in _SAID:
        _SAID.add(line)
        print(f"volley: {line}", file=sys.stderr, flush=True)


Key = tuple[Any, ...]  # the shapes and dtypes of a step's inputs: a program is traced for each


class TracedActing:
    """A policy's acting through numpy programs traced from its ``outputs``, one per shape of the
    inputs (a worker's are always the same), or through torch where the trace fails."""

    def __init__(self, policy: torch.nn.Module, name: str) -> None:
        """``policy``: a :class:`volley.models.Policy`; ``name``: the model's, for the log."""
        self.policy, self.name = policy, name
        self.programs: dict[Key, NumpyProgram | None] = {}  # None: acts in torch

    def outputs(self, obs: torch.Tensor, *rest: torch.Tensor, state_count: int) -> list[torch.Tensor]:
        """The policy's outputs as acting calls them (sequences of one step), flat: the distribution's
        inputs, the values, the state after the step."""
        state, prev = list(rest[:state_count]), tuple(rest[state_count:])
        seq_lens = torch.ones(len(obs), dtype=torch.int32) if state else None
        dist_inputs, values, state_out = self.policy.outputs(obs, state, seq_lens, prev or None)  # type: ignore
        return [dist_inputs, values, *state_out]

    def program(self, arrays: Sequence[np.ndarray], state_count: int) -> NumpyProgram | None:
        """The program for inputs like ``arrays`` (obs, state, prev), traced and checked against torch
        on them the first time: None (and one line in the log) where it acts in torch."""
        key = (self.policy.training, *((a.shape, a.dtype) for a in arrays))
        if key not in self.programs:
            def outputs(*args: torch.Tensor) -> list[torch.Tensor]:
                return self.outputs(*args, state_count=state_count)
            try:
                self.programs[key] = program = checked_trace(outputs, self.policy, arrays)
                say_once(f"custom model {self.name} acts in numpy (traced once: {program.size} numpy "
                         "calls a step)")
            except NotTraceable as exc:
                self.programs[key] = None
                say_once(f"custom model {self.name} acts in torch ({exc})")
        return self.programs[key]

    def twin(self, head: Head, torch_twin: Callable[[], Twin]) -> Twin:
        """Acting with the policy's current weights: through its program for these inputs, drawing
        from ``head``; or through ``torch_twin()`` where there is none."""
        weights = [w.detach().cpu().numpy() for w in weights_of(self.policy).values()]
        runs: dict[Key, Callable[..., list[np.ndarray]] | None] = {}  # the programs with these weights
        in_torch: list[ActFn] = []
        draw = head.draw

        def act(obs: np.ndarray, state: State, streams: RandomStreams, explore: bool,
                prev: Previous = None) -> Acting:
            key = (obs.shape, len(state), self.policy.training)
            if key not in runs:
                arrays = [obs, *state, *(prev or ())]
                program = self.program(arrays, len(state))
                runs[key] = None if program is None else program.load(weights)
            run = runs[key]
            if run is None:
                if not in_torch:
                    in_torch.append(torch_twin().act)
                return in_torch[0](obs, state, streams, explore, prev)
            out = run(obs, *state, *(prev or ()))
            return draw(out[0], streams, explore), out[0], out[1], out[2:]
        return Twin(act, head.log_prob)
