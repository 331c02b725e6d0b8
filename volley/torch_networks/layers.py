"""The torch layers volley's networks are made of: initialised linear layers, MLP bodies, the
Nature CNN, and the observation's columns a network reads beside its action mask."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from volley.config import ModelConfig
from volley.observations import ObsMask

# acting's, in torch ("linear" keeps an Identity, so a body's Linears stay its even entries)
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "linear": nn.Identity}


def linear_layer(n_in: int, n_out: int, gain: float, init: str = "orthogonal") -> nn.Linear:
    """Orthogonal weights scaled by ``gain``, as in the PPO implementation details (Huang et al.,
    2022); or with ``init="normal"`` N(0, 1/n_in) whatever the gain, the "Xavier" init of
    Karpathy's Pong network, whose output layer starts a hundred times larger than a 0.01
    policy head (under RMSProp at lr 1e-4 it would take ~700 updates to grow that large).
    Zero biases. With ``init="torch"``, torch's default (uniform in ±1/√n_in, biases too: SB3's SAC)."""
    layer = nn.Linear(n_in, n_out)
    if init == "torch":
        return layer
    if init == "orthogonal":
        nn.init.orthogonal_(layer.weight, gain)
    else:
        nn.init.normal_(layer.weight, 0.0, 1.0 / np.sqrt(n_in))
    nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hiddens: Sequence[int], activation: str, init: str = "orthogonal") -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hiddens:
        layers += [linear_layer(n_in, width, np.sqrt(2), init), ACTIVATIONS[activation]()]
        n_in = width
    return nn.Sequential(*layers)


class NatureCNN(nn.Module):
    """Mnih et al. (2015): three conv layers and a 512-unit layer; uint8 input scaled to [0, 1]."""

    def __init__(self, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.channels_last = len(obs_shape) == 4 or (obs_shape[-1] <= 4 < obs_shape[0])
        channels, height, width = self._chw(obs_shape)
        self.convs = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, channels, height, width)).shape[1]
        self.fc = nn.Sequential(linear_layer(n_flat, 512, np.sqrt(2)), nn.ReLU())
        self.out_features = 512

    def _chw(self, shape: tuple[int, ...]) -> tuple[int, int, int]:
        if len(shape) == 4:  # [stack, H, W, C]
            return shape[0] * shape[3], shape[1], shape[2]
        if self.channels_last:  # [H, W, C]
            return shape[2], shape[0], shape[1]
        return shape[0], shape[1], shape[2]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() / 255.0
        if x.dim() == 5:  # [B, S, H, W, C] -> [B, S*C, H, W]
            x = x.permute(0, 1, 4, 2, 3).flatten(1, 2)
        elif self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.fc(self.convs(x))


def trunk(obs_shape: tuple[int, ...], is_image: bool, model: ModelConfig) -> tuple[nn.Module, int]:
    """The Nature CNN for images, else the MLP of ``model``; and the width of its features."""
    if is_image:
        cnn = NatureCNN(obs_shape)
        return cnn, cnn.out_features
    width = model.fcnet_hiddens[-1] if model.fcnet_hiddens else obs_shape[0]
    return mlp(obs_shape[0], model.fcnet_hiddens, model.fcnet_activation, model.fcnet_init), width


def named_arrays(module: nn.Module) -> dict[str, np.ndarray]:
    """``module``'s parameters by name, as numpy arrays (what :mod:`volley.acting` acts with)."""
    return {name: p.detach().cpu().numpy() for name, p in module.named_parameters()}


def split_mask(obs: torch.Tensor, mask: ObsMask | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The columns of flat observations ``[B, n]`` a network reads, and their action mask (None without one)."""
    if mask is None:
        return obs, None
    net = mask.net if isinstance(mask.net, slice) else torch.as_tensor(mask.net, device=obs.device)
    return obs[:, net], obs[:, mask.mask]
