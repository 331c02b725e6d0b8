"""Multi-agent learning within a fixed step budget (issue 46): RLlib's multi-agent CartPole."""

from __future__ import annotations

from typing import Any

from volley import PPOConfig, make_multi_agent, register_env

register_env("multi_agent_cartpole", lambda config: make_multi_agent("CartPole-v1")(config))


def own_policy(agent_id: int, episode: Any, worker: Any, **kwargs: Any) -> str:
    return f"p{agent_id}"


def test_two_cartpoles_with_a_policy_each_both_reach_400():
    """RLlib's tuned multi-agent CartPole (2 agents, 2 policies, PPO) to its stop reward, 400 per
    agent: 72k environment steps (18 iterations, 127k agent steps) with this seed; the budget is twice that."""
    config = (PPOConfig().environment("multi_agent_cartpole", env_config={"num_agents": 2}).resources(engine="local")
              .training(train_batch_size=4000, num_sgd_iter=10, sgd_minibatch_size=128, lr=3e-4)
              .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=own_policy).debugging(seed=0))
    rewards: dict[str, float] = {}
    result: dict[str, Any] = {}
    with config.build() as algo:
        while not result or (result["timesteps_total"] < 150_000 and min(rewards.values(), default=0) < 400):
            result = algo.train()
            rewards = result["policy_reward_mean"]
    assert sorted(rewards) == ["p0", "p1"] and min(rewards.values()) >= 400, (result["timesteps_total"], rewards)
    assert result["agent_timesteps_total"] > result["timesteps_total"]
