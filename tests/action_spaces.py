"""Environments, a model and a distribution the action-space and masking tests share.

- :class:`ActionMaskModel`: RLlib's action-masking custom model (it masks its own logits).
- :class:`OddMasks`, :class:`FixedContextModel`, :class:`MatrixShapeDist`: bad input, each named in one line.
- :class:`CorrelatedActions`, :class:`AutoregressiveModel`, :class:`BinaryAutoregressiveDist`:
  RLlib's autoregressive action distribution example, written against volley's protocol as an
  RLlib user writes it (only the imports differ).

Importing this module registers the environment (``register_env``), the models and the
distribution (``ModelCatalog``); :func:`load_example` loads an example's module (registering its
environments: "repeat_after_me" of examples/multidiscrete_actions.py, "legal_moves" and
"maskable_legal_moves" of examples/action_masking.py, which raise on a masked action).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Dict, Discrete, Tuple
from torch import nn

from volley import FullyConnectedNetwork as TorchFC
from volley import (
    ModelCatalog,
    TorchCategorical,
    TorchDistributionWrapper,
    TorchModelV2,
    register_env,
)

EXAMPLES = Path(__file__).parents[1] / "examples"

def load_example(name: str) -> ModuleType:
    """examples/<name>.py as a module, from a file Ray's workers cannot import (a user's script)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.setdefault(name, importlib.util.module_from_spec(spec))
    if not hasattr(module, "main"):
        spec.loader.exec_module(module)
    return module


class CorrelatedActions(gym.Env):
    """RLlib's CorrelatedActionsEnv: observe 0 or 1; +5 when a1 matches it, +5 when a2 matches a1."""

    def __init__(self, config: dict | None = None) -> None:
        self.observation_space = Discrete(2)
        self.action_space = Tuple([Discrete(2), Discrete(2)])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.last = int(self.np_random.integers(2))
        return self.last, {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict]:
        self.t += 1
        a1, a2 = action
        reward = 5.0 * (a1 == self.last) + 5.0 * (a1 == a2)
        self.last = int(self.np_random.integers(2))
        done = self.t > 20
        return self.last, reward, done, done, {}


class AutoregressiveModel(TorchModelV2, nn.Module):
    """A context layer (the model's outputs), a value branch, and the action module the
    distribution calls: a1's logits from the context, a2's from a1."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.context_layer = nn.Sequential(nn.Linear(obs_space.shape[0], num_outputs), nn.Tanh())
        self.value_branch = nn.Linear(num_outputs, 1)
        self.a1_logits = nn.Linear(num_outputs, 2)
        self.a2_hidden = nn.Sequential(nn.Linear(1, 16), nn.Tanh())
        self.a2_logits = nn.Linear(16, 2)
        self._context = None

    def action_module(self, context, a1):
        return self.a1_logits(context), self.a2_logits(self.a2_hidden(a1))

    def forward(self, input_dict, state, seq_lens):
        self._context = self.context_layer(input_dict["obs"].float())
        return self._context, state

    def value_function(self):
        return torch.reshape(self.value_branch(self._context), [-1])


class BinaryAutoregressiveDist(TorchDistributionWrapper):
    """P(a1, a2) = P(a1) · P(a2 | a1), a1 drawn first."""

    def _a1(self):
        return TorchCategorical(self.model.action_module(self.inputs, torch.zeros(len(self.inputs), 1))[0])

    def _a2(self, a1):
        return TorchCategorical(self.model.action_module(self.inputs, a1.float().unsqueeze(1))[1])

    def deterministic_sample(self):
        a1 = self._a1().deterministic_sample()
        return a1, self._a2(a1).deterministic_sample()

    def sample(self):
        a1 = self._a1().sample()
        return a1, self._a2(a1).sample()

    def logp(self, actions):
        a1, a2 = actions[:, 0], actions[:, 1]
        return self._a1().logp(a1) + self._a2(a1).logp(a2)

    def entropy(self):
        a1 = self._a1()
        return a1.entropy() + self._a2(a1.sample()).entropy()

    def kl(self, other):
        a1 = self._a1()
        sampled = a1.sample()
        return a1.kl(other._a1()) + self._a2(sampled).kl(other._a2(sampled))

    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return 16


class ActionMaskModel(TorchModelV2, nn.Module):
    """RLlib's action-masking model (examples/models/action_mask_model.py): its own logits on
    ``obs["observations"]``, masked with ``obs["action_mask"]`` at the float minimum."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, **kwargs):
        original = getattr(obs_space, "original_space", obs_space)
        assert isinstance(original, Dict) and "action_mask" in original.spaces and "observations" in original.spaces
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.internal_model = TorchFC(original["observations"], action_space, num_outputs, model_config,
                                      name + "_internal")

    def forward(self, input_dict, state, seq_lens):
        logits, _ = self.internal_model({"obs": input_dict["obs"]["observations"]})
        inf_mask = torch.clamp(torch.log(input_dict["obs"]["action_mask"]), min=torch.finfo(torch.float32).min)
        return logits + inf_mask, state

    def value_function(self):
        return self.internal_model.value_function()


class FixedContextModel(AutoregressiveModel):
    """Ignores num_outputs: its context is always 8 wide, where the distribution asks for 16."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, 8, model_config, name)
        self.num_outputs = num_outputs


class MatrixShapeDist(BinaryAutoregressiveDist):
    @staticmethod
    def required_model_output_shape(action_space, model_config):
        return (3, 4)


class OddMasks(gym.Env):
    """Discrete(4) actions and masks that go wrong as ``env_config["kind"]`` says: ``"short"`` declares
    a mask of 3 entries, ``"half"`` sends 0.5s, ``"none"`` allows no action on the third step;
    ``"method_short"`` and ``"method_text"`` have sb3-contrib's ``action_masks()`` return 3 entries or
    strings; ``"text_actions"`` has a Tuple action space with a Text part."""

    def __init__(self, config: dict) -> None:
        self.kind = config["kind"]
        self.action_space = Discrete(4)
        width = 3 if self.kind == "short" else 4
        self.observation_space = Dict({"action_mask": Box(0.0, 1.0, (width,)), "observations": Box(-1.0, 1.0, (2,))})
        if self.kind.startswith("method"):
            self.observation_space = Box(-1.0, 1.0, (2,))
            self.action_masks = lambda: (np.ones(3, bool) if self.kind == "method_short" else np.array(["yes"] * 4))
        if self.kind == "text_actions":
            self.action_space = Tuple([Discrete(2), gym.spaces.Text(4)])

    def _observe(self) -> Any:
        mask = np.ones(4, np.float32) * (0.5 if self.kind == "half" else 0.0 if self.kind == "none" and self.t == 2 else 1)
        observation = np.zeros(2, np.float32)
        return observation if self.kind.startswith("method") else {"action_mask": mask, "observations": observation}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        return self._observe(), 0.0, False, self.t >= 10, {}


register_env("correlated_actions", lambda config: CorrelatedActions(config))
register_env("odd_masks", lambda config: OddMasks(config))
ModelCatalog.register_custom_model("fixed_context_model", FixedContextModel)
ModelCatalog.register_custom_action_dist("matrix_shape_dist", MatrixShapeDist)
ModelCatalog.register_custom_model("action_mask_model", ActionMaskModel)
ModelCatalog.register_custom_model("autoregressive_model", AutoregressiveModel)
ModelCatalog.register_custom_action_dist("binary_autoreg_dist", BinaryAutoregressiveDist)
