"""The program ``test_mpi_sampling`` starts under ``mpiexec -n 2``, written as a user's script is:

    python mpi_program.py OUT.npz

Four CartPoles in each environment, agents 0 and 2 acting with "p0", 1 and 3 with "p1", which is
not trained; PPO in gather mode. Rank 0 saves the first gathered sample of both ranks
(``rank/policy/column`` arrays, and ``rank/steps``: environment and agent steps), then trains 2
iterations and prints one JSON line: the counters, the policies with returns, and how far each
policy's weights moved. The test builds the same config on the local engine (:func:`config`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from volley import Algorithm, PPOConfig, make_multi_agent, register_env
from volley.engines.mpi_engine import install_rank_hooks

register_env("four_cartpoles", lambda config: make_multi_agent("CartPole-v1")({"num_agents": 4}))


def by_parity(agent_id: int, episode: Any, worker: Any, **kwargs: Any) -> str:
    return f"p{agent_id % 2}"


def config(engine: str) -> PPOConfig:
    """On 2 workers (MPI: 2 ranks) x 2 environments."""
    return (PPOConfig().environment("four_cartpoles").resources(engine=engine)
            .rollouts(num_workers=2, num_envs_per_worker=2).training(train_batch_size=200, minibatch_size=100)
            .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=by_parity, policies_to_train=["p0"])
            .debugging(seed=3))


def first_sample(algo: Algorithm) -> dict[str, np.ndarray]:
    """Every worker's first sample with the run's weights, as flat arrays by ``rank/policy/column``."""
    weights = {policy_id: learner.policy.get_flat_weights() for policy_id, learner in algo.learners.items()}
    filters = {policy_id: learner.filter_stats for policy_id, learner in algo.learners.items()}
    arrays = {}
    for rank, sample in enumerate(algo.workers.call("sample", weights, filters, None)):
        arrays[f"{rank}/steps"] = np.array([sample.env_steps, sample.agent_steps])
        for policy_id, result in sample.policies.items():
            arrays[f"{rank}/{policy_id}/rows"] = np.array([len(result.batch)])
            arrays.update({f"{rank}/{policy_id}/{key}": column for key, column in result.batch.items()})
    return arrays


def main(out: str) -> None:
    install_rank_hooks()
    with config("mpi").build() as algo:
        if not algo.is_driver:
            algo.serve_forever()
            return
        np.savez(out, **first_sample(algo))
        start = {policy_id: learner.policy.get_flat_weights().copy() for policy_id, learner in algo.learners.items()}
        for _ in range(2):
            result = algo.train()
        moved = {policy_id: float(np.abs(learner.policy.get_flat_weights() - start[policy_id]).max())
                 for policy_id, learner in algo.learners.items()}
        print(json.dumps({"timesteps_total": result["timesteps_total"],
                          "agent_timesteps_total": result["agent_timesteps_total"],
                          "policies": sorted(result["policy_reward_mean"]), "moved": moved}))


if __name__ == "__main__":
    main(sys.argv[1])
