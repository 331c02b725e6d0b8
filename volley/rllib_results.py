"""RLlib's result keys: nested views of volley's flat result, holding the same numbers.

``Algorithm.train()`` returns volley's flat keys (``episode_reward_mean``, ``policy_loss``)
and, beside them, RLlib's new stack's nested keys (``env_runners/episode_return_mean``,
``learners/default_policy/policy_loss``) and its old stack's ``info/learner/...``, so
that ported scripts and Tune stop criteria read what they read in RLlib. The logger
writes none of the views (:func:`without_views`): progress.jsonl, TensorBoard and the
console keep the flat names, and no number is written twice. docs/rllib.md's result
table is generated from these functions.
"""

from __future__ import annotations

from typing import Any

DEFAULT_POLICY = "default_policy"

# volley's result key -> (old stack's learner_stats name, new stack's learners/default_policy name)
LEARNER_STATS = {"kl": ("kl", "mean_kl_loss"), "kl_coeff": ("cur_kl_coeff", "curr_kl_coeff"),
                 "explained_variance": ("vf_explained_var", "vf_explained_var"),
                 "lr": ("cur_lr", "default_optimizer_learning_rate"), "loss": ("loss", "qf_loss"),
                 "q_mean": ("mean_q", "qf_mean")}

# keys train() adds beside the flat ones; the logger writes none of them (progress.jsonl,
# TensorBoard and the console keep the flat names, and no number is written twice)
TRAINING_VIEWS = frozenset({"env_runners", "learners", "info", "num_env_steps_sampled_lifetime",
                            "num_episodes_lifetime"})
EVALUATION_VIEWS = frozenset({"env_runners", "evaluation"})


def training_views(result: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """The new stack's nested keys (``env_runners``, ``learners``) and the old stack's ``info``
    of a flat training result, holding the same numbers; ``stats`` are the algorithm's own."""
    def renamed_stats(which: int) -> dict[str, Any]:
        return {LEARNER_STATS[k][which] if k in LEARNER_STATS else k: v for k, v in stats.items()}

    # a custom model's metrics(): where RLlib 2.9's torch policy puts them
    learner_info = {"learner_stats": renamed_stats(0), "model": stats.get("model", {})}
    if "learner_custom_metrics" in result:  # what on_learn_on_batch reported, where RLlib 2.x puts it
        learner_info["custom_metrics"] = result["learner_custom_metrics"]
    return {
        "env_runners": {"episode_return_mean": result["episode_reward_mean"],
                        "episode_return_min": result["episode_reward_min"],
                        "episode_return_max": result["episode_reward_max"],
                        "episode_len_mean": result["episode_len_mean"],
                        "num_episodes": result["episodes_this_iter"],
                        "num_env_steps_sampled": result["timesteps_this_iter"],
                        "num_episodes_lifetime": result["episodes_total"],
                        "num_env_steps_sampled_lifetime": result["timesteps_total"],
                        **_episode_summaries(result)},
        "num_env_steps_sampled_lifetime": result["timesteps_total"],
        "num_episodes_lifetime": result["episodes_total"],
        "learners": {DEFAULT_POLICY: renamed_stats(1)},
        "info": {"learner": {DEFAULT_POLICY: learner_info}},
    }


def _episode_summaries(result: dict[str, Any]) -> dict[str, Any]:
    """The callbacks' custom metrics and histograms, which RLlib 2.10+ (old stack) nests under
    ``env_runners`` (2.9 kept them at the top, as volley's flat keys do)."""
    return {key: result[key] for key in ("custom_metrics", "hist_stats") if key in result}


def evaluation_views(evaluation: dict[str, Any]) -> dict[str, Any]:
    """The new stack's ``env_runners`` of a flat evaluation result, and the old stack's
    ``evaluation`` wrapper that RLlib's ``algo.evaluate()`` returned."""
    return {"env_runners": {"episode_return_mean": evaluation["episode_reward_mean"],
                            "episode_return_min": evaluation["episode_reward_min"],
                            "episode_return_max": evaluation["episode_reward_max"],
                            "episode_len_mean": evaluation["episode_len_mean"],
                            "num_episodes": evaluation["episodes_this_iter"],
                            "num_env_steps_sampled": evaluation["timesteps_this_iter"],
                            **_episode_summaries(evaluation)},
            "evaluation": dict(evaluation)}


def without_views(result: dict[str, Any]) -> dict[str, Any]:
    """A result without the RLlib views (what the logger writes)."""
    flat = {k: v for k, v in result.items() if k not in TRAINING_VIEWS}
    if isinstance(flat.get("evaluation"), dict):
        flat["evaluation"] = {k: v for k, v in flat["evaluation"].items() if k not in EVALUATION_VIEWS}
    return flat
