"""Custom models the tests share, written as RLlib's docs write them (only the imports differ),
and the Dict-observation example's module. Importing this module registers "my_model" and
"wrong_shape" (what `volley train --import custom_models` does from the command line)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from volley import FullyConnectedNetwork as TorchFC
from volley import ModelCatalog, TorchModelV2

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
