"""SAC's slice of RLlib's keys (``SACConfig.RLLIB_KEYS``; the shared ones are in ``volley.rllib_compat``)."""

from __future__ import annotations

from volley.rllib_keys import (
    RLlibKey,
    accepted,
    at_default,
    check_dict,
    refused,
    same,
    sub_keys,
    translated,
)

SAC_KEYS: tuple[RLlibKey, ...] = (
    same("lr", "training", example=1e-3, unset=(None,), note=": a number, or RLlib's schedule `[[timestep, lr], "
         "...]`; SAC: RLlib's None (its new stack's default, where `actor_lr`, `critic_lr` and `alpha_lr` set "
         "every rate) keeps volley's"),
    *[same(name, "training", example=value) for name, value in (
        ("twin_q", False), ("initial_alpha", 0.5), ("target_entropy", -2.0), ("training_intensity", 512.0),
        ("q_model_config", {"fcnet_hiddens": [64, 64]}))],
    *[translated(name, ("training",), lambda value: sub_keys("optimization", check_dict("optimization", value), {
        "actor_learning_rate": "actor_lr", "critic_learning_rate": "critic_lr", "entropy_learning_rate": "alpha_lr"},
        {}), ("actor_lr", "critic_lr", "alpha_lr"),
                 "`actor_learning_rate`, `critic_learning_rate`, `entropy_learning_rate` → `actor_lr`, `critic_lr`, "
                 "`alpha_lr`", example={"actor_learning_rate": 1e-3})
      for name in ("optimization", "optimization_config")],
    refused("_deterministic_loss", ("training",), "volley's SAC samples its actions in the loss, as the paper does"),
    refused("_use_beta_distribution", ("training",), "volley's SAC policy is the paper's squashed Gaussian"),
    refused("minibatch_size", ("training",), "SAC's replay minibatch is train_batch_size, as in RLlib's SAC",
            allowed=(None,), example=128),
    refused("num_epochs", ("training",), "volley's SAC takes each gradient step on a fresh replay minibatch; "
            "set training_intensity or gradient_steps", allowed=(1,), example=4),
    at_default("use_state_preprocessor", ("training",), "deprecated in RLlib's SAC; volley's SAC networks read "
               "the observations directly (model, q_model_config)"),
    at_default("worker_side_prioritization", ("training",), "volley's SAC replays by the learner's TD errors "
               "(prioritized_replay); Ape-X SAC's workers give fresh rows the shard's largest priority"),
    refused("sample_async", ("rollouts",), "volley's SAC samples between its updates; its asynchronous mode is "
            "ApexSACConfig (SACConfig().async_mode())", allowed=(False,)),
)

# Ape-X SAC's own, looked up before SAC's
APEX_SAC_KEYS: tuple[RLlibKey, ...] = (
    accepted("sample_async", ("rollouts",), "Ape-X SAC's acting workers always sample while the learner learns",
             example=True),
)
