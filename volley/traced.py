"""A custom model's acting forward pass, traced once into a program of numpy calls.

A user's model acts in torch, where each operation costs several microseconds of dispatch
beyond its arithmetic: a 64x64 MLP's forward pass costs about 120 µs a step where the same
layers in numpy cost about 15 (benchmarks/RESULTS.md, "Extension points"). Most custom models
are graphs of standard layers, so volley traces the whole of a policy's ``outputs`` (the
model's ``forward``, its ``value_function``, an action mask) once, with torch's own tracer
(``make_fx`` on fake tensors: the graph of ATen operations it runs, Python control flow
resolved, data-dependent branches refused), and writes each operation as its numpy
equivalent (:mod:`volley.traced_ops`): Linear layers, activations, concatenation, reshapes,
Conv2d, one-layer LSTMs. Whatever depends on the weights alone (a transposed weight) is computed
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
from volley.traced_ops import (
    INLINE,
    NUMPY_OPS,
    RESHAPES,
    NotTraceable,
    aten,
    is_no_op,
    stacked_linear,
    stacked_pair,
)

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
            node = graph.call_function(stacked_pair, (a, b))
        fixed.add(node)
        return node

    def linear(source: Any, u: fx.Node, v: fx.Node) -> fx.Node:
        with graph.inserting_before(min(u, v, key=order.index)):
            return graph.call_function(stacked_linear, (stack(u.args[0], v.args[0]), source,
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
                if is_no_op(node):  # a reshape to the shape it has, a copy: the input itself
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
        """``policy``: a :class:`volley.torch_networks.policy.Policy`; ``name``: the model's, for the log."""
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
