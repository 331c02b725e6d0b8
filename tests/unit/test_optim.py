"""volley's Adam and RMSprop step like torch.optim's, share its state dicts, and never import dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from volley.optim import Adam, RMSprop


def twin_networks() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    first = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    second = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    second.load_state_dict(first.state_dict())
    return first, second


def train(net: torch.nn.Module, optimizer, steps: int, lr_at=None) -> None:
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        x = torch.randn(16, 5, generator=generator)
        loss = (net(x) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        if lr_at is not None:
            optimizer.param_groups[0]["lr"] = lr_at(step)
        optimizer.step()


@pytest.mark.parametrize(("ours", "theirs"), [
    (lambda p: Adam(p, lr=3e-3, eps=1e-5), lambda p: torch.optim.Adam(p, lr=3e-3, eps=1e-5)),
    (lambda p: Adam(p, lr=1e-2, betas=(0.8, 0.9)), lambda p: torch.optim.Adam(p, lr=1e-2, betas=(0.8, 0.9))),
    (lambda p: RMSprop(p, lr=1e-3, alpha=0.9), lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.9)),
])
def test_steps_equal_torch_optim_and_state_dicts_load_both_ways(ours, theirs):
    mine, reference = twin_networks()
    optimizer, torch_optimizer = ours(list(mine.parameters())), theirs(list(reference.parameters()))
    schedule = lambda step: 1e-3 * (1 + step)  # noqa: E731 (lr changed between steps, as schedules do)
    train(mine, optimizer, 20, schedule)
    train(reference, torch_optimizer, 20, schedule)
    for a, b in zip(mine.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # a checkpoint of either continues in the other, step for step
    torch_optimizer.load_state_dict(optimizer.state_dict())
    optimizer.load_state_dict(torch_optimizer.state_dict())
    train(mine, optimizer, 5)
    train(reference, torch_optimizer, 5)
    for a, b in zip(mine.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_state_for_another_network_is_refused():
    first, _ = twin_networks()
    optimizer = Adam(first.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="for 2 parameters, this optimizer has 4"):
        optimizer.load_state_dict(Adam(list(first.parameters())[:2], lr=1e-3).state_dict())


def test_training_never_imports_torch_dynamo():
    """torch.optim's optimizers import torch._dynamo (seconds) on first use; volley's learners must not."""
    script = ("import sys\n"
              "from volley import PPOConfig, PGConfig, DQNConfig, TRPOConfig\n"
              "for config in (PPOConfig(), PGConfig().training(batch_episodes=2), DQNConfig(), TRPOConfig().training(train_batch_size=500)):\n"
              "    algo = config.environment('CartPole-v1').resources(engine='local').build()\n"
              "    algo.train(); algo.train(); algo.stop()\n"
              "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
