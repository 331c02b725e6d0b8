"""The numerical pieces of TRPO (Schulman et al., 2015), as in John Schulman's modular_rl.

A natural-gradient step solves ``F s = g`` for the Fisher matrix ``F`` of the policy.
``F`` has as many rows as the policy has parameters, so it is never built: conjugate
gradient needs only products ``F v`` (``F`` is the Hessian of the mean KL divergence at
the old policy). A backtracking line search then shrinks the step until it both improves
the surrogate and keeps the KL inside the trust region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch.nn.utils import parameters_to_vector, vector_to_parameters


def flat_grad(output: Tensor, params: Sequence[Tensor], create_graph: bool = False,
              retain_graph: bool | None = None) -> Tensor:
    """The gradient of a scalar as one flat vector, the shape the linear algebra works in."""
    return flat_grad_of([output], params, None, create_graph=create_graph, retain_graph=retain_graph)


def flat_grad_of(outputs: Sequence[Tensor], params: Sequence[Tensor], weights: Sequence[Tensor] | None,
                 create_graph: bool = False, retain_graph: bool | None = None) -> Tensor:
    """``Σ weights · ∂outputs/∂params`` as one flat vector (a scalar's gradient when ``weights`` is None)."""
    grads = torch.autograd.grad(outputs, params, grad_outputs=weights, create_graph=create_graph,
                                retain_graph=retain_graph)
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


def fisher_vector_product(inputs: Sequence[Tensor], mean_kl: Callable[[Sequence[Tensor]], Tensor],
                          params: Sequence[Tensor], damping: float) -> Callable[[Tensor], Tensor]:
    """``v ↦ F v + damping · v`` for the policy whose action distribution on the batch has
    ``inputs`` (logits, or mean and log-std, with their graph to ``params``), never forming ``F``.

    ``mean_kl(z)`` is the mean KL(old ‖ new) from the distribution at ``inputs`` to the one
    at ``z``. ``F`` is its Hessian in ``θ`` at new = old: ``Jᵀ M J`` with ``J = ∂z/∂θ`` and
    ``M`` the KL's Hessian in ``z`` (the chain rule's other term holds the KL's gradient,
    zero at new = old). So a product is ``J v`` (a backward pass through the graph of
    ``Jᵀ u``, linear in a probe ``u``), ``M`` on the batch's few outputs, and ``Jᵀ`` (one
    more backward pass): about a third less work than differentiating the KL's gradient
    again, as modular_rl does, for the same product to rounding. Damping keeps the system
    well conditioned where the sampled Fisher matrix is nearly singular.
    """
    at_old = [z.detach().requires_grad_() for z in inputs]
    kl_grad = torch.autograd.grad(mean_kl(at_old), at_old, create_graph=True)
    probes = [torch.zeros_like(z, requires_grad=True) for z in inputs]
    transposed = flat_grad_of(inputs, params, probes, create_graph=True)  # Jᵀ u

    def product(vector: Tensor) -> Tensor:
        jv = torch.autograd.grad(transposed @ vector, probes, retain_graph=True)
        mjv = torch.autograd.grad(kl_grad, at_old, grad_outputs=jv, retain_graph=True)
        return flat_grad_of(inputs, params, mjv, retain_graph=True) + damping * vector

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
