"""volley's networks in torch, by the names scripts and tests import them.

Each network kind is a module of :mod:`volley.torch_networks`, beside its numpy twin in
:mod:`volley.networks`: :class:`ActorCritic` (PPO, PG, TRPO, IMPALA, APPO), :class:`QNetwork`
(DQN), SAC's :class:`SquashedGaussianActor` and :class:`StackedQ`, each a :class:`Policy`, the one
interface workers act with and learners train (:mod:`volley.torch_networks.policy`);
:mod:`volley.catalog` builds them. The distributions learners score actions with live in
:mod:`volley.action_dists`.
"""

from volley.action_dists import Categorical, DiagGaussian, Distribution, EpsilonGreedy
from volley.torch_networks.actor_critic import ActorCritic
from volley.torch_networks.layers import NatureCNN, mlp, trunk
from volley.torch_networks.policy import ActorCriticPolicy, Policy
from volley.torch_networks.q_network import QNetwork
from volley.torch_networks.squashed_gaussian import SquashedGaussianActor, StackedQ

__all__ = ["ActorCritic", "ActorCriticPolicy", "Categorical", "DiagGaussian", "Distribution", "EpsilonGreedy",
           "NatureCNN", "Policy", "QNetwork", "SquashedGaussianActor", "StackedQ", "mlp", "trunk"]
