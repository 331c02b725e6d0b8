"""Each algorithm's loss as a pure function of tensors, against numbers worked out by hand (the
working in the comments); the algorithms' updates call these same functions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from volley.algorithms.dqn.loss import bootstrapped_targets, dqn_loss
from volley.algorithms.impala.loss import appo_surrogate, vtrace_policy_loss, vtrace_value_loss
from volley.algorithms.pg.loss import reinforce_loss
from volley.algorithms.ppo.loss import ppo_loss, ppo_value_loss
from volley.algorithms.sac.loss import actor_loss, critic_loss, soft_targets, temperature_loss
from volley.algorithms.trpo.loss import trpo_surrogate
from volley.rollout.advantages import vtrace


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


# PPO's minibatch: ratios r = 1.5, 0.5, 1, 1.1 (clip 0.2: clamped to 1.2, 0.8, 1, 1.1)
RATIOS = np.array([1.5, 0.5, 1.0, 1.1])
OLD_LOGP = t(-1.0, -0.5, -2.0, -0.3)
ADVANTAGES = t(2.0, -1.0, 3.0, -2.0)
VALUES, OLD_VALUES, TARGETS = t(1.0, 2.0, 0.0, 3.0), t(0.5, 2.5, 0.0, 1.0), t(2.0, 2.0, 1.0, 0.0)
ENTROPY = t(0.5, 0.7, 0.6, 0.2)


def ppo(kl_coeff: float | None = None, clip_range_vf: float | None = 0.4):
    logp = (OLD_LOGP + torch.as_tensor(np.log(RATIOS), dtype=torch.float32)).requires_grad_()
    loss = ppo_loss(logp, OLD_LOGP, ADVANTAGES, VALUES, OLD_VALUES, TARGETS, ENTROPY, clip_param=0.2,
                    vf_clip_param=None, clip_range_vf=clip_range_vf, vf_loss_coeff=0.5, entropy_coeff=0.01,
                    kl_coeff=kl_coeff)
    return logp, loss


def test_ppo_clipped_surrogate_value_loss_entropy_and_kl():
    logp, loss = ppo()
    # -A r = [-3, 0.5, -3, 2.2]; -A clamp(r) = [-2.4, 0.8, -3, 2.2]; the larger: [-2.4, 0.8, -3, 2.2]
    assert loss.policy.item() == pytest.approx((-2.4 + 0.8 - 3 + 2.2) / 4)
    # (V - t)² = [1, 0, 1, 9]; V_clip = old + clamp(V - old, ±0.4) = [0.9, 2.1, 0, 1.4], (V_clip - t)² =
    # [1.21, 0.01, 1, 1.96]; the larger: [1.21, 0.01, 1, 9], half their mean
    assert loss.value.item() == pytest.approx(0.5 * (1.21 + 0.01 + 1 + 9) / 4)
    assert loss.entropy.item() == pytest.approx(0.5)
    kl = np.mean((RATIOS - 1) - np.log(RATIOS))
    assert loss.kl.item() == pytest.approx(kl, abs=1e-6)
    assert loss.clip_fraction.item() == 0.5  # 1.5 and 0.5 lie outside [0.8, 1.2]
    assert loss.total.item() == pytest.approx(-0.6 + 0.5 * 1.4025 - 0.01 * 0.5)
    loss.total.backward()
    # a clamped ratio passes no gradient; inside, d(-A r)/d log π = -A r, over 4 steps
    np.testing.assert_allclose(logp.grad.numpy(), [0.0, 0.0, -3.0 / 4, 2.2 / 4], rtol=1e-6)


def test_ppo_kl_penalty_and_unclipped_value_loss():
    _, loss = ppo(kl_coeff=0.3, clip_range_vf=None)
    assert loss.value.item() == pytest.approx(0.5 * (1 + 0 + 1 + 9) / 4)
    kl = np.mean((RATIOS - 1) - np.log(RATIOS))
    assert loss.total.item() == pytest.approx(-0.6 + 0.5 * 1.375 - 0.01 * 0.5 + 0.3 * kl, abs=1e-6)


def test_rllibs_vf_clip_param_caps_each_squared_error_and_stops_its_gradient():
    """RLlib's meaning: clamp((V - t)², 0, vf_clip_param), not SB3's clip of the value's change."""
    values = VALUES.clone().requires_grad_()
    loss = ppo_value_loss(values, OLD_VALUES, TARGETS, vf_clip_param=2.0)
    # (V - t)² = [1, 0, 1, 9], capped at 2: [1, 0, 1, 2]; half their mean
    assert loss.item() == pytest.approx(0.5 * (1 + 0 + 1 + 2) / 4)
    loss.backward()
    # d/dV ½ mean((V - t)²) = (V - t) / 4 below the cap; nothing from the capped last step
    np.testing.assert_allclose(values.grad.numpy(), [-1 / 4, 0.0, -1 / 4, 0.0], rtol=1e-6)
    # SB3's clip of the change would have kept the last step's gradient: V moved 2 from its old 1
    sb3 = ppo_value_loss(VALUES, OLD_VALUES, TARGETS, clip_range_vf=2.0)
    assert sb3.item() == pytest.approx(0.5 * (1 + 0 + 1 + 9) / 4)


def test_appo_clips_the_ratio_against_its_target_network():
    # μ/π_target = [2, 0.5, 1], clipped at 1.5: w = [1.5, 0.5, 1]; π/μ = [0.6, 3, 0.5]: r = w·π/μ = [0.9, 1.5, 0.5]
    behaviour = t(-1.0, -1.0, -1.0)
    target = behaviour - torch.as_tensor(np.log([2.0, 0.5, 1.0]), dtype=torch.float32)
    logp = (behaviour + torch.as_tensor(np.log([0.6, 3.0, 0.5]), dtype=torch.float32)).requires_grad_()
    loss, clip_fraction = appo_surrogate(logp, behaviour, target, t(1.0, 2.0, -1.0), clip_param=0.2,
                                         target_worker_clipping=1.5)
    # -A r = [-0.9, -3, 0.5]; -A clamp(r, 0.8, 1.2) = [-0.9, -2.4, 0.8]; the larger: [-0.9, -2.4, 0.8]
    assert loss.item() == pytest.approx((-0.9 - 2.4 + 0.8) / 3)
    assert clip_fraction.item() == pytest.approx(2 / 3)  # 1.5 and 0.5 lie outside [0.8, 1.2]
    loss.backward()
    # only the first step's ratio is inside: d(-A r)/d log π = -A r, over 3 steps
    np.testing.assert_allclose(logp.grad.numpy(), [-0.9 / 3, 0.0, 0.0], rtol=1e-6)


def test_ppo_value_loss_reads_only_the_steps_its_mean_counts():
    """A recurrent minibatch is padded: the masked mean leaves the padding (here the last step) out."""
    mask = torch.tensor([True, True, True, False])
    loss = ppo_value_loss(VALUES, OLD_VALUES, TARGETS, clip_range_vf=0.4, mean=lambda x: x[mask].mean())
    assert loss.item() == pytest.approx(0.5 * (1.21 + 0.01 + 1) / 3)


def test_reinforce_loss_standardises_the_returns():
    logp = t(-0.5, -1.0, -2.0).requires_grad_()
    # A = (G - 2) / 1 = [-1, 0, 1]: -Σ A log π = -(0.5 + 0 - 2) = 1.5
    loss = reinforce_loss(logp, t(1.0, 2.0, 3.0), mean=2.0, scale=1.0)
    assert loss.item() == pytest.approx(1.5)
    loss.backward()
    np.testing.assert_array_equal(logp.grad.numpy(), [1.0, 0.0, -1.0])  # -A: a sum, not a mean
    assert reinforce_loss(logp, t(1.0, 2.0, 3.0), mean=0.0, scale=2.0).item() == pytest.approx(
        -(0.5 * -0.5 + 1.0 * -1.0 + 1.5 * -2.0))


def test_trpo_surrogate_is_the_mean_ratio_weighted_advantage():
    old = t(-1.0, -2.0)
    logp = old + torch.as_tensor(np.log([1.5, 0.5]), dtype=torch.float32)
    # r = [1.5, 0.5], A = [2, -1]: mean([3, -0.5]) = 1.25
    assert trpo_surrogate(logp, old, t(2.0, -1.0)).item() == pytest.approx(1.25)


MIN = torch.finfo(torch.float32).min  # an action the mask forbids


@pytest.mark.parametrize(("double_q", "expected"), [
    # the online network picks a* = [0, 1]: Q̂ = [1, 2] -> [1 + 0.9·1, 0.5 + 0·2, 2 + nothing]
    (True, [1.9, 0.5, 2.0]),
    # Q̂ picks its own largest, [5, 4] -> [1 + 0.9·5, 0.5, 2]
    (False, [5.5, 0.5, 2.0]),
])
def test_dqn_targets_double_or_not_and_a_next_state_allowing_no_action(double_q, expected):
    next_q = torch.tensor([[1.0, 5.0], [4.0, 2.0], [MIN, MIN]])
    online = torch.tensor([[3.0, 0.0], [1.0, 2.0], [MIN, MIN]])
    targets = bootstrapped_targets(t(1.0, 0.5, 2.0), t(0.9, 0.0, 0.99), next_q, online if double_q else None)
    np.testing.assert_allclose(targets.numpy(), expected, rtol=1e-6)


def test_dqn_loss_is_the_importance_weighted_huber_loss():
    q = t(0.0, 1.0, 4.0).requires_grad_()
    # |δ| = 0.5, 2, 0: Huber ½δ² = 0.125, |δ| - ½ = 1.5, 0; weighted by [1, 2, 0.5]: mean of [0.125, 3, 0]
    loss = dqn_loss(q, t(0.5, 3.0, 4.0), t(1.0, 2.0, 0.5))
    assert loss.item() == pytest.approx((0.125 + 3.0) / 3)
    loss.backward()
    np.testing.assert_allclose(q.grad.numpy(), [-0.5 / 3, -2.0 / 3, 0.0], rtol=1e-6)  # w·clip(δ, ±1) / B


def test_sac_targets_and_critic_loss():
    # min over the twins [1, 0]; α = 0.5, log π' = [-1, 2]: soft values [1.5, -1]; R + γ^m·soft
    targets = soft_targets(t(0.0, 1.0), t(0.9, 0.0), torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor(0.5),
                           t(-1.0, 2.0))
    np.testing.assert_allclose(targets.numpy(), [1.35, 1.0], rtol=1e-6)
    # (Q - y)² = [[0, 1], [1, 4]], weighted by [1, 0.5]: [[0, 0.5], [1, 2]]; means [0.25, 1.5]; ½ of their sum
    q = torch.tensor([[1.0, 2.0], [0.0, 3.0]])
    assert critic_loss(q, t(1.0, 1.0), t(1.0, 0.5)).item() == pytest.approx(0.875)


def test_sac_actor_and_temperature_losses():
    log_prob = t(-1.0, 1.0).requires_grad_()
    # α log π - min_i Q_i = [-0.2 - 2, 0.2 - 0]: mean -1
    assert actor_loss(torch.tensor(0.2), log_prob, torch.tensor([[2.0, 1.0], [3.0, 0.0]])).item() == pytest.approx(-1.0)
    log_alpha = torch.tensor(0.5, requires_grad=True)
    # log π + H̄ = [-2, 0] with H̄ = -1: -mean(0.5·[-2, 0]) = 0.5; d/d log α = -mean([-2, 0]) = 1
    loss = temperature_loss(log_alpha, log_prob, target_entropy=-1.0)
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(1.0) and log_prob.grad is None  # no gradient to the policy


def test_vtrace_by_hand_with_clipped_ratios():
    # one sequence of 3 steps, γ = 0.5, π/μ = [2, 0.5, 1]: ρ = c = [1, 0.5, 1] (ρ̄ = c̄ = 1)
    # δ = ρ (r + γ V' - V) = [1·(1 + 0.5 - 0), 0.5·(0 + 1 - 1), 1·(2 + 2 - 2)] = [1.5, 0, 2]
    # v - V backwards: [2] ; 0 + 0.5·0.5·2 = 0.5 ; 1.5 + 0.5·1·0.5 = 1.75  ->  v = [1.75, 1.5, 4]
    # A = min(1, π/μ)(r + γ v_{s+1} - V) = [1·(1 + 0.75 - 0), 0.5·(0 + 2 - 1), 1·(2 + 2 - 2)]
    vs, advantages = vtrace(np.log([2.0, 0.5, 1.0]), np.array([1.0, 0.0, 2.0]), np.array([0.0, 1.0, 2.0]),
                            np.array([1.0, 2.0, 4.0]), np.array([False, False, True]), gamma=0.5)
    np.testing.assert_allclose(vs, [1.75, 1.5, 4.0], rtol=1e-6)
    np.testing.assert_allclose(advantages, [1.75, 0.5, 2.0], rtol=1e-6)


def test_impala_policy_and_value_losses():
    assert vtrace_policy_loss(t(-1.0, -2.0), t(1.0, 0.5)).item() == pytest.approx(1.0)  # -mean([-1, -1])
    assert vtrace_value_loss(t(1.0, 2.0), t(0.0, 4.0)).item() == pytest.approx(0.5 * (1 + 4) / 2)
