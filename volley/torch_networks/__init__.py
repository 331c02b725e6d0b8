"""The torch networks, one module per network kind, each beside its numpy twin in
:mod:`volley.networks`: ``actor_critic`` (volley's MLP or Nature-CNN policy and value function),
``q_network`` (DQN's), ``squashed_gaussian`` (SAC's actor and its critics), ``lstm`` (either
with an LSTM after its body: ``use_lstm``, R2D2), on the one network interface of ``policy`` and
the layers of ``layers``; ``custom_model`` puts a user's RLlib ``ModelV2`` (:mod:`volley.modelv2`)
behind that interface.

They are a package of their own, not modules of :mod:`volley.networks`, so that a rollout worker
acting through a numpy twin never imports torch: importing anything of :mod:`volley.networks`
imports nothing of this package (an import-linter contract holds the twins torch-free).
:mod:`volley.catalog` builds every network from a policy spec.
"""
