"""Classes that follow RLlib's protocols whatever their base class: models subclassing RLlib's own
``TorchModelV2``, ``RecurrentNetwork`` and ``DQNTorchModel`` (installed Ray's), RLlib's action
distributions and callbacks; and the rest of the ModelV2 protocol, ``custom_loss`` and ``metrics``,
written as RLlib's example scripts write them (issue 49)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from volley import ConfigError, DQNConfig, PGConfig, PPOConfig, TRPOConfig
from volley import TorchModelV2 as VolleyModelV2

rllib_models = pytest.importorskip("ray.rllib.models.torch.torch_modelv2", reason="ray[rllib] is not installed")
from ray.rllib.algorithms.dqn.dqn_torch_model import DQNTorchModel  # noqa: E402
from ray.rllib.models.torch.fcnet import FullyConnectedNetwork as RLlibFC  # noqa: E402
from ray.rllib.models.torch.recurrent_net import RecurrentNetwork as RLlibRecurrent  # noqa: E402
from ray.rllib.models.torch.torch_action_dist import TorchCategorical as RLlibCategorical  # noqa: E402
from rllib_classes import LengthCallbacks, RLlibModel  # noqa: E402

TorchModelV2 = rllib_models.TorchModelV2


def quick(config_class=PPOConfig, **training):
    """A config that trains in well under a second per iteration on CartPole, in this process."""
    config = config_class().environment("CartPole-v1").resources(engine="local").debugging(seed=3)
    if config_class is PPOConfig:
        training = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 2, **training}
    return config.rollouts(num_rollout_workers=0).training(**training)


def test_a_model_on_rllibs_own_base_class_trains():
    algo = quick(model={"custom_model": RLlibModel, "fcnet_hiddens": [16]}).build()
    model = algo.get_policy().model
    before = [p.detach().clone() for p in model.parameters()]
    result = algo.train()
    assert isinstance(model, TorchModelV2) and not isinstance(model, VolleyModelV2)
    assert result["timesteps_total"] == 128
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    algo.stop()


class RLlibRNN(RLlibRecurrent, nn.Module):
    """RLlib's rnn_model.py example on RLlib's RecurrentNetwork."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, cell=8):
        nn.Module.__init__(self)
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.cell = cell
        self.fc1 = nn.Linear(int(np.prod(obs_space.shape)), 8)
        self.lstm = nn.LSTM(8, cell, batch_first=True)
        self.action_branch = nn.Linear(cell, num_outputs)
        self.value_branch = nn.Linear(cell, 1)

    def get_initial_state(self):
        return [self.fc1.weight.new(1, self.cell).zero_().squeeze(0), self.fc1.weight.new(1, self.cell).zero_().squeeze(0)]

    def value_function(self):
        return torch.reshape(self.value_branch(self._features), [-1])

    def forward_rnn(self, inputs, state, seq_lens):
        self.seen_shapes.append(tuple(inputs.shape))
        x = nn.functional.relu(self.fc1(inputs))
        self._features, [h, c] = self.lstm(x, [state[0].unsqueeze(0), state[1].unsqueeze(0)])
        return self.action_branch(self._features), [h.squeeze(0), c.squeeze(0)]

    seen_shapes: list = []


def test_rllibs_recurrent_network_trains_on_sequences():
    RLlibRNN.seen_shapes = []
    algo = quick(model={"custom_model": RLlibRNN, "max_seq_len": 8}).build()
    result = algo.train()
    assert result["timesteps_total"] == 128
    # acting: one step of each environment; learning: minibatches of padded sequences of 8 steps
    assert (16, 1, 4) in RLlibRNN.seen_shapes
    assert any(shape[1] == 8 and shape[0] > 1 for shape in RLlibRNN.seen_shapes)
    algo.stop()


class MyQModel(DQNTorchModel):
    """A user's subclass of RLlib's DQN model, as parametric_actions_model.py writes one."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, **kw):
        DQNTorchModel.__init__(self, obs_space, action_space, num_outputs, model_config, name, **kw)
        self.body = RLlibFC(obs_space, action_space, num_outputs, model_config, name + "_body")

    def forward(self, input_dict, state, seq_lens):
        return self.body(input_dict, state, seq_lens)


def test_a_subclass_of_rllibs_dqn_model_is_dqns_body():
    algo = quick(DQNConfig, model={"custom_model": MyQModel, "fcnet_hiddens": [32]}, train_batch_size=32,
                 num_steps_sampled_before_learning_starts=64).build()
    assert isinstance(algo.get_policy().body.model, DQNTorchModel)
    result = algo.train()
    while result["timesteps_total"] <= 96:  # past learning_starts: updates
        result = algo.train()
    assert np.isfinite(result["loss"]) and result["loss"] > 0
    algo.stop()


class HotCategorical(RLlibCategorical):
    """RLlib's own TorchCategorical, subclassed as RLlib's docs show a custom distribution."""

    def __init__(self, inputs, model=None, temperature=1.0):
        super().__init__(inputs, model, temperature=2.0)


def test_rllibs_action_distribution_is_a_custom_action_dist():
    algo = quick(model={"custom_model": RLlibModel, "custom_action_dist": HotCategorical,
                        "fcnet_hiddens": [16]}).build()
    dist = algo.get_policy().distribution_of(torch.tensor([[0.0, 2.0]]))
    # the temperature halves the logits: p(1) = sigmoid(1)
    assert torch.exp(dist.log_prob(torch.tensor([1]))).item() == pytest.approx(1 / (1 + np.exp(-1.0)), rel=1e-6)
    assert algo.train()["timesteps_total"] == 128
    algo.stop()


def test_rllibs_own_callbacks_class_runs_its_hooks():
    algo = quick().callbacks(LengthCallbacks).build()
    result = algo.train()
    while result["episodes_total"] < 3:
        result = algo.train()
    assert result["custom_metrics"]["length_seen_mean"] == pytest.approx(result["episode_len_mean"])
    algo.stop()


class Anchored(VolleyModelV2, nn.Module):
    """A model whose custom_loss pulls a parameter of its own toward 3 (an auxiliary loss the
    algorithm's loss knows nothing of), and reports it in metrics()."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        VolleyModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.net = nn.Linear(4, num_outputs)
        self.value = nn.Linear(4, 1)
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, input_dict, state, seq_lens):
        self._obs = input_dict["obs_flat"]
        return self.net(self._obs) + 0.0 * self.anchor, state

    def value_function(self):
        return self.value(self._obs).squeeze(1)

    def custom_loss(self, policy_loss, loss_inputs):
        assert loss_inputs["obs"].shape[1] == 4
        self.aux = (self.anchor - 3.0) ** 2
        return [loss + 10.0 * self.aux for loss in policy_loss]

    def metrics(self):
        return {"anchor": self.anchor, "aux_loss": self.aux.item()}


@pytest.mark.parametrize("config_class, training", [
    (PPOConfig, {"lr": 0.05}),
    (PGConfig, {"lr": 0.05, "batch_episodes": 2}),
])
def test_custom_loss_is_added_and_metrics_reported(config_class, training):
    algo = quick(config_class, model={"custom_model": Anchored}, **training).build()
    for _ in range(5):
        result = algo.train()
    anchor = algo.get_policy().model.anchor.item()
    assert anchor > 0.5  # only the custom loss moves it: forward() multiplies it by zero
    # metrics() after the last update, where RLlib 2.9's torch policy puts them
    assert result["info"]["learner"]["default_policy"]["model"]["anchor"] == pytest.approx(anchor)
    algo.stop()


@pytest.mark.parametrize("config_class", [TRPOConfig, DQNConfig])
def test_an_algorithm_that_does_not_add_custom_loss_says_so(config_class):
    class QAnchored(Anchored):  # DQN's body: its outputs are features
        pass

    with pytest.raises(ConfigError, match=rf"the custom model overrides custom_loss\(\), which "
                                          rf"{config_class.__name__.removesuffix('Config')} does not add"):
        quick(config_class, model={"custom_model": QAnchored}).build()


def test_pg_adds_a_custom_loss_only_where_the_learner_computes_the_loss():
    with pytest.raises(ConfigError, match=r"custom_loss\(\) needs PG's mode='samples'"):
        quick(PGConfig, model={"custom_model": Anchored}, mode="gradients").build()


class TwoLosses(Anchored):
    def custom_loss(self, policy_loss, loss_inputs):
        self.aux = self.anchor ** 2
        return policy_loss + [self.aux]


def test_a_custom_loss_asking_for_a_second_optimizer_is_named():
    algo = quick(model={"custom_model": TwoLosses}).build()
    with pytest.raises(ConfigError, match=r"TwoLosses.custom_loss\(\) returned \[tensor.*one optimizer"):
        algo.train()
    algo.stop()


def test_a_class_without_the_protocol_is_named():
    class NoValue(nn.Module):
        def get_initial_state(self):
            return []

    with pytest.raises(ConfigError, match=r"custom model .*NoValue.* must be a torch.nn.Module with ModelV2's "
                                          r"methods forward, value_function, get_initial_state"):
        quick(model={"custom_model": NoValue}).build()
