"""Adam and RMSprop over torch's own kernels, without ``torch.optim``'s wrappers.

``torch.optim``'s optimizers route their construction and every ``step()`` through
helpers that import ``torch._dynamo`` (so that ``torch.compile`` does not trace into
them): about 2 s on a small machine, more than importing torch itself, and most of a
short run's start-up. volley never compiles its learners, so they step with the same
kernels ``torch.optim`` calls (``torch._fused_adam_``, the ``_foreach`` ops) directly.

The state dicts have ``torch.optim``'s layout (per-parameter ``step``, ``exp_avg``,
``exp_avg_sq`` / ``square_avg``; one parameter group with ``lr`` and the other
hyperparameters), so checkpoints written with either load into the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class Optimizer:
    """One parameter group (``param_groups[0]["lr"]`` can be changed between steps), state per
    parameter, ``zero_grad``, ``step`` and ``torch.optim``'s state-dict format."""

    # what torch.optim's step reads from a loaded group: the features these optimizers leave off
    TORCH_GROUP_KEYS: dict[str, Any] = {"weight_decay": 0.0, "maximize": False, "foreach": None,
                                        "capturable": False, "differentiable": False}

    def __init__(self, params: Iterable[torch.Tensor], **defaults: Any) -> None:
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), **defaults}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    def step(self) -> None:
        raise NotImplementedError

    def _with_grads(self, *buffers: str
                    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[dict[str, torch.Tensor]]]:
        """The parameters that have a gradient, their gradients, and their state (created on
        first use)."""
        params = [p for p in self.params if p.grad is not None]
        for param in params:
            if param not in self.state:
                self.state[param] = {"step": torch.zeros((), dtype=torch.float32, device=param.device),
                                     **{name: torch.zeros_like(param) for name in buffers}}
        return params, [p.grad for p in params if p.grad is not None], [self.state[p] for p in params]

    def state_dict(self) -> dict[str, Any]:
        index = {id(p): i for i, p in enumerate(self.params)}
        group = {**self.TORCH_GROUP_KEYS,
                 **{key: value for key, value in self.param_groups[0].items() if key != "params"}}
        return {"state": {index[id(p)]: dict(state) for p, state in self.state.items()},
                "param_groups": [{**group, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` output, or from a ``torch.optim`` optimizer's."""
        (group,) = state_dict["param_groups"]
        if len(group["params"]) != len(self.params):
            raise ValueError(f"the state is for {len(group['params'])} parameters, this optimizer has "
                             f"{len(self.params)}")
        for key, default in self.defaults.items():
            value = group.get(key, default)
            self.param_groups[0][key] = tuple(value) if isinstance(default, tuple) else value
        self.state = {}
        for index, entries in state_dict["state"].items():
            param = self.params[int(index)]
            self.state[param] = {key: value.to(param.device, torch.float32 if key == "step" else param.dtype,
                                               copy=True)
                                 for key, value in entries.items() if isinstance(value, torch.Tensor)}


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015) with torch's fused kernel, as ``torch.optim.Adam(fused=True)``."""

    TORCH_GROUP_KEYS = {**Optimizer.TORCH_GROUP_KEYS, "amsgrad": False, "fused": True,
                        "decoupled_weight_decay": False}

    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps)

    @torch.no_grad()
    def step(self) -> None:
        params, grads, states = self._with_grads("exp_avg", "exp_avg_sq")
        if not params:
            return
        group = self.param_groups[0]
        steps = [state["step"] for state in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adam_(params, grads, [s["exp_avg"] for s in states],
                           [s["exp_avg_sq"] for s in states], [], steps, lr=group["lr"], beta1=beta1,
                           beta2=beta2, weight_decay=0.0, eps=group["eps"], amsgrad=False, maximize=False)


class RMSprop(Optimizer):
    """RMSprop (Hinton's lecture 6e) as ``torch.optim.RMSprop`` without momentum or centering:
    ``v ← α·v + (1 − α)·g²``, ``θ ← θ − lr · g / (√v + eps)``."""

    TORCH_GROUP_KEYS = {**Optimizer.TORCH_GROUP_KEYS, "momentum": 0.0, "centered": False}

    def __init__(self, params: Iterable[torch.Tensor], lr: float, alpha: float = 0.99,
                 eps: float = 1e-8) -> None:
        super().__init__(params, lr=lr, alpha=alpha, eps=eps)

    @torch.no_grad()
    def step(self) -> None:
        params, grads, states = self._with_grads("square_avg")
        if not params:
            return
        group = self.param_groups[0]
        torch._foreach_add_([state["step"] for state in states], 1)
        square_avgs = [state["square_avg"] for state in states]
        torch._foreach_mul_(square_avgs, group["alpha"])
        torch._foreach_addcmul_(square_avgs, grads, grads, 1 - group["alpha"])
        denominators = torch._foreach_sqrt(square_avgs)
        torch._foreach_add_(denominators, group["eps"])
        torch._foreach_addcdiv_(params, grads, denominators, -group["lr"])
