"""Custom models the tests share, written as RLlib's docs write them (only the imports differ),
and the Dict-observation example's module. Importing this module registers "my_model",
"wrong_shape" and "rnn_model" (what `volley train --import custom_models` does from the command line)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from volley import FullyConnectedNetwork as TorchFC
from volley import ModelCatalog, RecurrentNetwork, TorchModelV2

EXAMPLE = Path(__file__).parents[1] / "examples" / "custom_model_dict_obs.py"


class TorchCustomModel(TorchModelV2, nn.Module):
    """RLlib's custom-model example (custom_env.py): its FullyConnectedNetwork, wrapped."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.torch_sub_model = TorchFC(obs_space, action_space, num_outputs, model_config, name)

    def forward(self, input_dict, state, seq_lens):
        input_dict["obs"] = input_dict["obs"].float()
        fc_out, _ = self.torch_sub_model(input_dict, state, seq_lens)
        return fc_out, []

    def value_function(self):
        return torch.reshape(self.torch_sub_model.value_function(), [-1])


class WrongShape(TorchCustomModel):
    """One output where the action space needs one per action."""

    def forward(self, input_dict, state, seq_lens):
        return super().forward(input_dict, state, seq_lens)[0][:, :1], []


class TorchRNNModel(RecurrentNetwork, nn.Module):
    """RLlib's recurrent custom-model example (examples/models/rnn_model.py): a layer, an LSTM, and
    the action and value branches on its outputs."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, fc_size=16, lstm_state_size=16):
        nn.Module.__init__(self)
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.obs_size = int(np.prod(obs_space.shape))
        self.lstm_state_size = lstm_state_size
        self.fc1 = nn.Linear(self.obs_size, fc_size)
        self.lstm = nn.LSTM(fc_size, lstm_state_size, batch_first=True)
        self.action_branch = nn.Linear(lstm_state_size, num_outputs)
        self.value_branch = nn.Linear(lstm_state_size, 1)
        self._features = None

    def get_initial_state(self):
        return [self.fc1.weight.new(1, self.lstm_state_size).zero_().squeeze(0),
                self.fc1.weight.new(1, self.lstm_state_size).zero_().squeeze(0)]

    def value_function(self):
        return torch.reshape(self.value_branch(self._features), [-1])

    def forward_rnn(self, inputs, state, seq_lens):
        x = nn.functional.relu(self.fc1(inputs))
        self._features, [h, c] = self.lstm(x, [torch.unsqueeze(state[0], 0), torch.unsqueeze(state[1], 0)])
        return self.action_branch(self._features), [torch.squeeze(h, 0), torch.squeeze(c, 0)]


class ParametricActionsModel(TorchModelV2, nn.Module):
    """The parametric-actions pattern of RLlib's example (examples/models/parametric_actions_model.py),
    written here: the observation is a Dict of the actions' embeddings ("avail_actions", ``[n, k]``),
    a mask of the allowed ones and the observation proper ("cart"); an MLP on "cart" gives an intent
    vector ``[k]``, each action's logit is its embedding's dot product with it, and the mask's log,
    floored at float32's minimum, is added."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, embed_size=2):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        original = getattr(obs_space, "original_space", obs_space)
        self.intent_model = TorchFC(original["cart"], action_space, embed_size, model_config, name + "_intent")

    def forward(self, input_dict, state, seq_lens):
        obs = input_dict["obs"]
        intent, _ = self.intent_model({"obs": obs["cart"]})
        logits = torch.sum(obs["avail_actions"] * torch.unsqueeze(intent, 1), dim=2)
        return logits + torch.clamp(torch.log(obs["action_mask"]), min=torch.finfo(torch.float32).min), state

    def value_function(self):
        return self.intent_model.value_function()


def parametric_spaces(n: int = 10, embed_size: int = 2) -> tuple[gym.spaces.Dict, gym.spaces.Discrete]:
    """The observation and action spaces of :class:`ParametricActionsModel` with ``n`` actions."""
    return gym.spaces.Dict({"action_mask": gym.spaces.Box(0.0, 1.0, (n,), np.float32),
                            "avail_actions": gym.spaces.Box(-1.0, 1.0, (n, embed_size), np.float32),
                            "cart": gym.spaces.Box(-10.0, 10.0, (4,), np.float32)}), gym.spaces.Discrete(n)


def load_example() -> ModuleType:
    """examples/custom_model_dict_obs.py as a module (its Dict-observation env and model), from a
    file Ray's workers cannot import: what a user's script or notebook module is."""
    spec = importlib.util.spec_from_file_location("custom_model_dict_obs", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = sys.modules.setdefault("custom_model_dict_obs", importlib.util.module_from_spec(spec))
    if not hasattr(module, "DictObsModel"):
        spec.loader.exec_module(module)
    return module


ModelCatalog.register_custom_model("my_model", TorchCustomModel)
ModelCatalog.register_custom_model("wrong_shape", WrongShape)
ModelCatalog.register_custom_model("rnn_model", TorchRNNModel)
