"""Custom models traced into numpy (volley.traced): each kind the fast path takes acts as its torch
forward pass does (actions, log-probabilities, values, state), with the weights of every sync; a
model it cannot take acts and trains in torch, and the process says once which path it acts on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from custom_models import (
    ParametricActionsModel,
    TorchCustomModel,
    TorchRNNModel,
    load_example,
    parametric_spaces,
)
from torch import nn

from volley import PPOConfig, TorchModelV2
from volley import traced as traced_module
from volley.catalog import build_policy
from volley.rollout.worker import EnvStreams

N = 6  # environments acting at once


class ConvModel(TorchModelV2, nn.Module):
    """Two convolutions (one strided and padded), a layer, and the policy and value heads on it."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.convs = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(),
                                   nn.Flatten())
        self.hidden = nn.Linear(4 * 4 * 4, 16)  # 12x12 -> 6x6 -> 4x4
        self.logits, self.value = nn.Linear(16, num_outputs), nn.Linear(16, 1)

    def forward(self, input_dict, state, seq_lens):
        images = input_dict["obs"].float().permute(0, 3, 1, 2) / 255.0  # [B, C, H, W]
        self._features = nn.functional.silu(self.hidden(self.convs(images)))
        return self.logits(self._features), state

    def value_function(self):
        return self.value(self._features).reshape(-1)


class MaskedModel(TorchModelV2, nn.Module):
    """RLlib's parametric-actions pattern: a Dict of the action mask and the observation; the model
    reads the observation (volley masks its logits by ``action_mask``)."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.body = nn.Sequential(nn.Linear(5, 32), nn.ELU(), nn.Linear(32, 32), nn.LeakyReLU())
        self.logits, self.value = nn.Linear(32, num_outputs), nn.Linear(32, 1)

    def forward(self, input_dict, state, seq_lens):
        self._features = self.body(input_dict["obs"]["observations"])
        return torch.log_softmax(self.logits(self._features), dim=-1), state

    def value_function(self):
        return torch.sigmoid(self.value(self._features)).squeeze(-1)


class GeluModel(TorchCustomModel):
    """RLlib's wrapped FullyConnectedNetwork with a GELU on its logits: an operation the numpy
    table lacks, so it acts in torch."""

    def forward(self, input_dict, state, seq_lens):
        outputs, state = super().forward(input_dict, state, seq_lens)
        return nn.functional.gelu(outputs), state


BOX = gym.spaces.Box(-2.0, 2.0, (5,), np.float32)
CASES = {  # name: observation space, action space, model keys
    "RLlib's FullyConnectedNetwork, own value tower": (
        BOX, gym.spaces.Discrete(3), {"custom_model": "volley.modelv2:FullyConnectedNetwork"}),
    "wrapped, shared layers, relu, Gaussian": (
        BOX, gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        {"custom_model": TorchCustomModel, "vf_share_layers": True, "fcnet_activation": "relu",
         "fcnet_hiddens": [32, 16]}),
    "Dict observation": (load_example().DictCartPole().observation_space, gym.spaces.Discrete(2),
                         {"custom_model": load_example().DictObsModel}),
    "action mask": (gym.spaces.Dict({"action_mask": gym.spaces.Box(0, 1, (4,), np.float32), "observations": BOX}),
                    gym.spaces.Discrete(4), {"custom_model": MaskedModel}),
    "parametric actions (RLlib's example's pattern)": (*parametric_spaces(), {"custom_model": ParametricActionsModel}),
    "Conv2d on images": (gym.spaces.Box(0, 255, (12, 12, 3), np.uint8), gym.spaces.Discrete(3),
                         {"custom_model": ConvModel}),
    "LSTM (RLlib's RecurrentNetwork example)": (BOX, gym.spaces.Discrete(2), {"custom_model": TorchRNNModel}),
}


def policy_and_batch(name: str, seed: int = 0):
    """The policy of case ``name`` in eval mode (as workers act), a batch of its observations and states."""
    obs_space, action_space, keys = CASES[name]
    pre, policy = build_policy(obs_space, action_space, PPOConfig().training(model=keys).model)
    policy.eval()
    obs_space.seed(seed)
    samples = [obs_space.sample() for _ in range(N)]
    obs = pre({k: np.stack([s[k] for s in samples]) for k in samples[0]} if isinstance(samples[0], dict)
              else np.stack(samples), N)
    if obs.dtype.kind == "f":  # unbounded Boxes sample up to float32's maximum
        np.clip(obs, -10.0, 10.0, out=obs)
    rng = np.random.default_rng(seed)
    if pre.mask is not None:  # every row allows its first action, and some others
        mask = rng.integers(0, 2, (N, action_space.n))
        mask[:, 0] = 1
        obs[:, pre.mask.mask] = mask
    state = [rng.normal(size=(N, *np.shape(s))).astype(np.float32) for s in policy.initial_state()]
    return policy, obs, state


def act_both(policy, obs, state, explore):
    """The traced program's acting and torch's, each from the same random streams."""
    numpy_path = policy.act(obs, state, EnvStreams(3, range(N)), explore)
    in_torch = policy._torch_twin().act(obs, state, EnvStreams(3, range(N)), explore)
    return numpy_path, in_torch


@pytest.mark.parametrize("name", list(CASES))
def test_the_traced_program_acts_as_torch_does(name):
    policy, obs, state = policy_and_batch(name)
    for explore in (True, False):
        (actions, inputs, values, state_out), (actions_t, inputs_t, values_t, state_t) = act_both(
            policy, obs, state, explore)
        assert [p for p in policy.traced.programs.values()] != [None], f"{name} acted in torch"
        if actions.dtype.kind == "f":  # a Gaussian's draw: its mean and log-std to float32 rounding
            np.testing.assert_allclose(actions, actions_t, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(actions, actions_t)
        np.testing.assert_allclose(inputs, inputs_t, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(values, values_t, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(policy.log_prob(inputs, actions), policy.log_prob(inputs_t, actions_t),
                                   rtol=1e-5, atol=1e-5)
        assert len(state_out) == len(state_t) == len(state)
        for s, s_t in zip(state_out, state_t, strict=True):
            np.testing.assert_allclose(s, s_t, rtol=1e-5, atol=1e-6)


def test_each_weight_sync_reaches_the_program():
    policy, obs, state = policy_and_batch("RLlib's FullyConnectedNetwork, own value tower")
    before = policy.act(obs, state, EnvStreams(3, range(N)), False)
    program = next(iter(policy.traced.programs.values()))
    weights = np.random.default_rng(1).normal(size=policy.get_flat_weights().shape).astype(np.float32)
    policy.set_flat_weights(weights)
    after, in_torch = act_both(policy, obs, state, False)
    assert next(iter(policy.traced.programs.values())) is program  # traced once, loaded again
    assert np.abs(after[1] - before[1]).min() > 1e-3
    np.testing.assert_allclose(after[1], in_torch[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after[2], in_torch[2], rtol=1e-5, atol=1e-5)


def train_twice(model: type, monkeypatch, capfd) -> tuple[dict, list[str]]:
    """Two PPO iterations on CartPole with ``model``: the last result, and the log's lines on it."""
    monkeypatch.setattr(traced_module, "_SAID", set())
    config = (PPOConfig().environment("CartPole-v1").resources(engine="local")
              .rollouts(num_envs_per_worker=2, rollout_fragment_length=64)
              .training(train_batch_size=256, minibatch_size=64, model={"custom_model": model}))
    with config.build() as algo:
        before = algo.policy.get_flat_weights()
        algo.train()
        result = algo.train()
        assert np.abs(algo.policy.get_flat_weights() - before).max() > 0  # it learned
    return result, [line for line in capfd.readouterr().err.splitlines() if f"custom model {model.__name__}" in line]


def test_a_model_the_tracer_cannot_take_trains_in_torch_and_says_so_once(monkeypatch, capfd):
    result, lines = train_twice(GeluModel, monkeypatch, capfd)
    assert result["training_iteration"] == 2 and np.isfinite(result["policy_loss"])
    assert lines == ["volley: custom model GeluModel acts in torch (no numpy equivalent of aten.gelu.default)"]


def test_a_traced_model_trains_and_says_it_acts_in_numpy(monkeypatch, capfd):
    result, lines = train_twice(TorchCustomModel, monkeypatch, capfd)
    assert result["training_iteration"] == 2 and np.isfinite(result["policy_loss"])
    assert len(lines) == 1 and lines[0].startswith("volley: custom model TorchCustomModel acts in numpy"), lines


def test_a_program_that_differs_from_torch_on_the_first_batch_is_not_used(monkeypatch, capfd):
    """The check against torch on the first batch: a wrong numpy equivalent (tanh as the identity)
    sends the model to torch, which then acts."""
    monkeypatch.setattr(traced_module, "_SAID", set())
    monkeypatch.setitem(traced_module.NUMPY_OPS, torch.ops.aten.tanh.default, lambda x: x)
    policy, obs, state = policy_and_batch("RLlib's FullyConnectedNetwork, own value tower")
    numpy_path, in_torch = act_both(policy, obs, state, True)
    assert list(policy.traced.programs.values()) == [None]
    np.testing.assert_array_equal(numpy_path[1], in_torch[1])
    assert "custom model FullyConnectedNetwork acts in torch (its numpy program's outputs differ from torch's " \
           "on the first batch)" in capfd.readouterr().err


def test_a_branch_on_the_data_is_not_traced():
    def forward(obs: torch.Tensor) -> list[torch.Tensor]:
        return [obs * 2 if obs.sum() > 0 else obs]
    with pytest.raises(traced_module.NotTraceable, match="tracer stopped"):
        traced_module.trace(forward, nn.Linear(1, 1), [torch.zeros(2, 1)])


def test_bench_sampler_measures_the_custom_model_beside_the_built_in_mlp():
    out = subprocess.run([sys.executable, "-m", "volley", "bench", "sampler", "--seconds", "0.2", "--rounds", "2",
                          "--env", "CartPole-v1", "--custom-model"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1].strip() for line in out.stdout.splitlines() if line.startswith("| CartPole")]
    assert rows == ["CartPole-v1", "CartPole-v1 (custom model)"]
    assert "volley: custom model FullyConnectedNetwork acts in numpy" in out.stderr


def test_the_benchmark_acts_with_each_example_model_traced_and_in_torch():
    """benchmarks/custom_model_acting.py --examples: the four example models, on 1 and 16 rows, each
    traced into numpy (none falls back) and timed against its torch step."""
    script = Path(__file__).parents[2] / "benchmarks" / "custom_model_acting.py"
    out = subprocess.run([sys.executable, str(script), "--examples", "--rounds", "1", "--seconds", "0.05"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line.split("|") for line in out.stdout.splitlines() if line.startswith("| ") and "µs" not in line
            and "---" not in line]
    assert [(r[1].strip().split(" (")[0], r[2].strip()) for r in rows] == [
        (name, n) for name in ("Dict observation", "parametric actions, masked", "recurrent",
                               "autoregressive actions") for n in ("1", "16")]
    assert all(float(r[7]) > 0 for r in rows)
    assert "acts in torch" not in out.stderr and out.stderr.count("acts in numpy") == 5, out.stderr
