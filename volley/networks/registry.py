"""The network kinds that act in numpy, registered once: the flat weights' layout and the twin of
each, which :func:`volley.acting.parameter_shapes` and :class:`volley.acting.NumpyActor` look up
here instead of branching on the kind."""

from __future__ import annotations

from volley.config import ModelConfig, NetworkKind
from volley.networks import actor_critic, lstm, q_network, squashed_gaussian
from volley.networks.numpy_layers import TwinKind

TWIN_KINDS: dict[str, TwinKind] = {
    "actor_critic": actor_critic.KIND,
    "lstm": lstm.KIND,
    "q": q_network.KIND,
    "dueling_q": q_network.DUELING,
    "squashed_gaussian": squashed_gaussian.KIND,
}


def twin_kind(network: NetworkKind, model: ModelConfig) -> TwinKind:
    """The registered kind of ``network`` under ``model`` (an actor-critic with ``use_lstm``: the LSTM's)."""
    return TWIN_KINDS["lstm" if network == "actor_critic" and model.use_lstm else network]
