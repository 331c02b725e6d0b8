"""volley's recurrent networks (``use_lstm``, R2D2's), by the names scripts and tests import them:
they live in :mod:`volley.torch_networks.lstm`, beside their numpy twin in
:mod:`volley.networks.lstm`."""

from volley.torch_networks.lstm import LSTMActorCritic, LSTMQNetwork

__all__ = ["LSTMActorCritic", "LSTMQNetwork"]
