"""The numerical pieces of TRPO (Schulman et al., 2015), as in John Schulman's modular_rl.

A natural-gradient step solves ``F s = g`` for the Fisher matrix ``F`` of the policy.
``F`` has as many rows as the policy has parameters, so it is never built: conjugate
gradient needs only products ``F v``, and those are Hessian-vector products of the
mean KL divergence (its Hessian at the old policy is ``F``). A backtracking line
search then shrinks the step until it both improves the surrogate and keeps the KL
inside the trust region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def flat_grad(output: Tensor, params: Sequence[Tensor], create_graph: bool = False,
              retain_graph: bool | None = None) -> Tensor:
    """The gradient of a scalar as one flat vector, the shape the linear algebra works in."""
    grads = torch.autograd.grad(output, params, create_graph=create_graph, retain_graph=retain_graph)
    return torch.cat([grad.reshape(-1) for grad in grads])


def conjugate_gradient(matvec: Callable[[Tensor], Tensor], b: Tensor, iters: int = 10,
                       residual_tol: float = 1e-10) -> Tensor:
    """Approximately solve ``A x = b`` for symmetric positive-definite ``A`` given only ``v ↦ A v``.

    A few iterations suffice: the step is rescaled to the trust region afterwards, so only
    its direction has to be good.
    """
    x = torch.zeros_like(b)
    residual = b.clone()  # b - A x with x = 0
    direction = b.clone()
    residual_sq = residual @ residual
    for _ in range(iters):
        if residual_sq < residual_tol:
            break
        a_direction = matvec(direction)
        alpha = residual_sq / (direction @ a_direction)
        x += alpha * direction
        residual -= alpha * a_direction
        new_residual_sq = residual @ residual
        direction = residual + (new_residual_sq / residual_sq) * direction
        residual_sq = new_residual_sq
    return x


def fisher_vector_product(kl: Tensor, params: Sequence[Tensor], damping: float
                          ) -> Callable[[Tensor], Tensor]:
    """``v ↦ ∇(∇KL · v) + damping · v``: the Fisher matrix times ``v``, never forming the matrix.

    ``kl`` is the mean KL(old ‖ new) evaluated at new = old. Its gradient is taken once,
    with a graph, so each product costs one more backward pass. Damping keeps the
    system well conditioned where the sampled Fisher matrix is nearly singular.
    """
    kl_grad = flat_grad(kl, params, create_graph=True)

    def product(vector: Tensor) -> Tensor:
        return flat_grad(kl_grad @ vector, params, retain_graph=True) + damping * vector

    return product


def backtracking_line_search(params: Sequence[Tensor], full_step: Tensor,
                             surrogate_and_kl: Callable[[], tuple[float, float]],
                             surrogate_before: float, expected_improvement: float, max_kl: float,
                             max_backtracks: int = 10, accept_ratio: float = 0.1
                             ) -> tuple[bool, float]:
    """Try ``params + 0.5**k · full_step`` for ``k < max_backtracks``; keep the first that works.

    The quadratic model behind the full step can be wrong far from the old policy, so a
    step is accepted only if the surrogate (``surrogate_and_kl()`` at the parameters as
    set) really improves, by at least ``accept_ratio`` of the first-order prediction
    ``expected_improvement · fraction``, and the mean KL stays within ``max_kl``.
    Returns ``(accepted, fraction)``; on rejection the old parameters are restored and
    the fraction is 0.
    """
    old_params = parameters_to_vector(params).detach()
    for k in range(max_backtracks):
        fraction = 0.5**k
        vector_to_parameters(old_params + fraction * full_step, params)
        surrogate, kl = surrogate_and_kl()
        improvement = surrogate - surrogate_before
        if (improvement > 0 and improvement / (expected_improvement * fraction) > accept_ratio
                and kl <= max_kl):
            return True, fraction
    vector_to_parameters(old_params, params)
    return False, 0.0
