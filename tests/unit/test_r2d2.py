"""R2D2: its loss against hand computations, its replay rows, its keys, and RLlib's names."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from volley.algorithms.r2d2.learner import r2d2_columns, sequence_rows
from volley.algorithms.r2d2.loss import (
    h,
    h_inverse,
    r2d2_loss,
    sequence_priorities,
    sequence_targets,
)
from volley.errors import ConfigError
from volley.rollout.batch import Batch


def hand_h(x: float, eps: float) -> float:
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + eps * x


def test_h_by_hand_and_its_inverse():
    x = torch.tensor([-50.0, -1.5, 0.0, 0.3, 7.0, 400.0], dtype=torch.float64)
    assert h(x, 1e-3).tolist() == pytest.approx([hand_h(v, 1e-3) for v in x.tolist()])
    assert h_inverse(h(x, 1e-3), 1e-3).tolist() == pytest.approx(x.tolist(), rel=1e-9, abs=1e-9)


def test_sequence_targets_and_masked_loss_by_hand():
    """One sequence of three steps, the last padding: double Q picks the online argmax, the
    terminated step bootstraps nothing, and the padded step counts in neither the loss nor the priority."""
    rewards = torch.tensor([[1.0, 0.5, 9.0]])
    terminated = torch.tensor([[0.0, 1.0, 0.0]])
    next_target = torch.tensor([[[2.0, 4.0], [3.0, 1.0], [100.0, 100.0]]])
    next_online = torch.tensor([[[5.0, 0.0], [0.0, 5.0], [0.0, 0.0]]])  # picks action 0, then 1
    plain = sequence_targets(rewards, terminated, next_target, next_online, 0.9, None)
    assert plain[0, :2].tolist() == pytest.approx([1.0 + 0.9 * 2.0, 0.5])
    assert sequence_targets(rewards, terminated, next_target, None, 0.9, None)[0, 0].item() == pytest.approx(
        1.0 + 0.9 * 4.0)  # without double Q: the target network's own max
    eps = 1e-3
    rescaled = sequence_targets(rewards, terminated, next_target, next_online, 0.9, eps)
    inverse_2 = h_inverse(torch.tensor(2.0, dtype=torch.float64), eps).item()
    assert rescaled[0, 0].item() == pytest.approx(hand_h(1.0 + 0.9 * inverse_2, eps), rel=1e-5)
    assert rescaled[0, 1].item() == pytest.approx(hand_h(0.5, eps), rel=1e-5)

    q = torch.tensor([[2.0, 1.0, -40.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss = r2d2_loss(q, plain, mask, torch.tensor([0.5]))
    huber = [0.5 * 0.8**2, 0.5 * 0.5**2]  # |δ| = 0.8 and 0.5, both under 1
    assert loss.item() == pytest.approx(0.5 * sum(huber) / 2)
    priority = sequence_priorities(q - plain, mask)
    assert priority.item() == pytest.approx(0.9 * 0.8 + 0.1 * (0.8 + 0.5) / 2)


def test_replay_rows_carry_the_burn_in_and_the_bootstrap_observation():
    """A worker's fragment of one environment, 5 steps, an episode ending at step 1: sequences of
    at most 2 steps (rows 0-1, 2-3, 4); with burn-in 2 the third reads rows 2-3 first, the second
    none (its episode starts there)."""
    steps = 5
    cuts = np.array([[False], [True], [False], [False], [False]])
    columns = {"obs": np.arange(steps, dtype=np.float32).reshape(steps, 1, 1),
               "next_obs": 10 + np.arange(steps, dtype=np.float32).reshape(steps, 1, 1),
               "actions": np.arange(steps).reshape(steps, 1), "rewards": np.ones((steps, 1), np.float32),
               "terminated": cuts.copy(), "truncated": np.zeros_like(cuts), "cuts": cuts,
               "valid": np.ones((steps, 1), bool)}
    out = r2d2_columns(columns, config=None)  # type: ignore[arg-type]
    assert out["since_start"][:, 0].tolist() == [0, 1, 0, 1, 2]
    batch = Batch({key: value[:, 0] for key, value in out.items() if key != "valid"})
    batch["seq_lens"] = np.array([2, 2, 1], np.int32)
    batch["state_in_0"] = batch["state_in_1"] = np.full((3, 4), 7.0, np.float32)
    rows = sequence_rows(batch, burn_in=2, zero_init_states=True, cell_size=4)
    assert rows["obs"][:, :, 0].tolist() == [[0, 1, 11], [2, 3, 13], [4, 14, 14]]
    assert rows["mask"].tolist() == [[1, 1], [1, 1], [1, 0]]
    assert rows["burn_len"].tolist() == [0, 0, 2]
    assert rows["burn_obs"][2, :, 0].tolist() == [2, 3]
    assert rows["terminated"].tolist() == [[0, 1], [0, 0], [0, 0]]
    assert not rows["h"].any()
    stored = sequence_rows(batch, burn_in=0, zero_init_states=False, cell_size=4)
    assert (stored["c"] == 7.0).all() and stored["burn_obs"].shape == (3, 0, 1)


def test_rllib_names_and_keys():
    from volley import R2D2Config
    from volley.algorithms import get_trainable_cls

    assert get_trainable_cls("R2D2").__name__ == "R2D2"
    config = R2D2Config().training(model={"use_lstm": True, "lstm_cell_size": 16, "max_seq_len": 5},
                                   replay_burn_in=3, use_h_function=False)
    assert (config.model.lstm_cell_size, config.replay_burn_in, config.use_h_function) == (16, 3, False)
    with pytest.raises(ConfigError, match="model.use_lstm=True, got False"):
        R2D2Config().training(model={"use_lstm": False}).validate()
    with pytest.raises(ConfigError, match="replay_burn_in=4"):
        R2D2Config(zero_init_states=False, replay_burn_in=4).validate()


def test_a_burned_in_update_trains_the_lstm_only_through_the_sequence():
    """Replayed sequences with burn-in on CartPole: Q is the LSTM's from the burned-in state, the
    gradient is the one through the sequence from that state held fixed (not the one that also runs
    through the burn-in), and the burn-in observations change Q (the state is warmed)."""
    from volley import R2D2Config

    algo = (R2D2Config(learning_starts=40, replay_burn_in=4, minibatch_size=4)
            .environment("CartPole-v1").training(model={"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4,
                                                        "fcnet_hiddens": [8]})
            .rollouts(num_rollout_workers=0).debugging(seed=3).build())
    try:
        algo.train()
        minibatch = algo.replay.sample(4)
        minibatch["burn_len"] = np.full(4, 4)
        mb = {k: torch.as_tensor(v) for k, v in minibatch.items()}
        q, targets, mask = algo.q_and_targets(mb)
        assert not targets.requires_grad and q.requires_grad
        state = algo.policy.burn_in(mb["burn_obs"].flatten(0, 1), [mb["h"], mb["c"]], mb["burn_len"])

        def taken_q(start: list[torch.Tensor]) -> torch.Tensor:
            all_q = algo.policy.sequence_q(mb["obs"].flatten(0, 1), start)[0].reshape(4, 5, -1)
            return all_q[:, :-1].gather(-1, mb["actions"].long().unsqueeze(-1)).squeeze(-1)

        expected, through_burn_in = taken_q([s.detach() for s in state]), taken_q(state)
        assert torch.allclose(q, expected, atol=1e-6)
        weight = algo.policy.lstm.weight_ih_l0
        grad, = torch.autograd.grad(q.sum(), weight, retain_graph=True)
        assert torch.allclose(grad, torch.autograd.grad(expected.sum(), weight)[0], atol=1e-6)
        assert not torch.allclose(grad, torch.autograd.grad(through_burn_in.sum(), weight)[0], atol=1e-6)
        mb["burn_obs"] = mb["burn_obs"] + 1.0
        assert not torch.allclose(algo.q_and_targets(mb)[0], q)
    finally:
        algo.stop()


def test_rllibs_replay_buffer_config_of_sequences():
    """replay_buffer_api.py's buffer, as RLlib's script writes it (RLlib's own StorageUnit enum): R2D2
    takes it, DQN (whose buffer holds steps) still refuses sequences naming the value."""
    from ray.rllib.utils.replay_buffers.replay_buffer import StorageUnit

    from volley import DQNConfig, R2D2Config

    buffer = {"type": "MultiAgentPrioritizedReplayBuffer", "prioritized_replay_alpha": 0.5,
              "storage_unit": StorageUnit.SEQUENCES, "replay_burn_in": 20, "zero_init_states": True}
    config = R2D2Config().training(replay_buffer_config=buffer)
    assert (config.prioritized_replay, config.prioritized_replay_alpha, config.replay_burn_in,
            config.zero_init_states) == (True, 0.5, 20, True)
    with pytest.raises(ConfigError, match="storage_unit.*sequences"):
        DQNConfig().training(replay_buffer_config=buffer)
