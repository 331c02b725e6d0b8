"""Classes on RLlib's own base classes (installed Ray's), as RLlib's example scripts write them; the
tests that import this module skip where ray.rllib cannot be imported."""

from __future__ import annotations

from ray.rllib.algorithms.callbacks import DefaultCallbacks as RLlibCallbacks
from ray.rllib.models.torch.fcnet import FullyConnectedNetwork as RLlibFC
from ray.rllib.models.torch.torch_modelv2 import TorchModelV2
from torch import nn


class RLlibModel(TorchModelV2, nn.Module):
    """RLlib's own base class, with RLlib's own MLP inside."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.mlp = RLlibFC(obs_space, action_space, num_outputs, model_config, name)

    def forward(self, input_dict, state, seq_lens):
        return self.mlp(input_dict)[0], state

    def value_function(self):
        return self.mlp.value_function()


class LengthCallbacks(RLlibCallbacks):
    """RLlib's custom_metrics_and_callbacks.py's way: a metric set in on_episode_end."""

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index=None, **kwargs):
        episode.custom_metrics["length_seen"] = episode.length
