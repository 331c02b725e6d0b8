"""The numpy equivalent of each ATen operation a traced forward pass may hold (:data:`NUMPY_OPS`).

:mod:`volley.traced` writes a custom model's traced graph as calls of these functions, or as the
Python operators of :data:`INLINE` where an operation has one. An operation missing from the
table, or called with arguments its equivalent does not take, makes the model act in torch
(:class:`NotTraceable`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import fx

aten = torch.ops.aten
DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.int64: np.int64,
          torch.int32: np.int32, torch.uint8: np.uint8, torch.bool: np.bool_, None: np.float32}


class NotTraceable(Exception):
    """Why a model acts in torch (one line, for the log)."""


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


def stacked_pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two weights ``[in, out]`` (or biases ``[out]``) as ``[2, in, width]`` (``[2, 1, width]``), the
    narrower padded with zero columns."""
    width = max(a.shape[-1], b.shape[-1])
    out = np.zeros((2, *a.shape[:-1], width) if a.ndim == 2 else (2, 1, width), a.dtype)
    out[0, ..., :a.shape[-1]], out[1, ..., :b.shape[-1]] = a, b
    return out


def stacked_linear(bias: np.ndarray, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
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
    operator.getitem: operator.getitem, stacked_pair: stacked_pair, stacked_linear: stacked_linear,
}


RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.squeeze.dim,
            aten.squeeze.dims, aten.unsqueeze.default}


# the commonest operations written out in the generated source (their arguments in order)
INLINE = {aten.addmm.default: "{1} @ {2} + {0}", stacked_linear: "{1} @ {2} + {0}", aten.mm.default: "{0} @ {1}",
          aten.t.default: "{0}.T",
          aten.add.Tensor: "{0} + {1}", aten.sub.Tensor: "{0} - {1}", aten.mul.Tensor: "{0} * {1}",
          aten.div.Tensor: "{0} / {1}", operator.getitem: "{0}[{1}]"}


def is_no_op(node: fx.Node) -> bool:
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
