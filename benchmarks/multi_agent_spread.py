"""Cooperative navigation with parameter sharing beside RLlib 2.60 (issue 46): mpe2's
``simple_spread_v3``, 3 agents, one PPO policy for all of them, the return after a fixed step budget.

The environment is MAPPO's setting of it (Yu et al. 2022, "The Surprising Effectiveness of PPO in
Cooperative Multi-Agent Games"): 3 agents and 3 landmarks, 25 steps an episode, discrete actions;
``local_ratio`` 0.5 (PettingZoo's default), so each step an agent receives half the team's
reward (minus the sum over landmarks of the nearest agent's distance) and half its own (-1 per
agent it touches). Both libraries wrap ``simple_spread_v3.parallel_env`` in their
``ParallelPettingZooEnv`` and map every agent to the policy ``shared``.

The PPO keys are MAPPO's for this task where they map onto PPO's, taken from the paper's released
code (github.com/marlbenchmark/on-policy: ``onpolicy/scripts/train_mpe_scripts/train_mpe_spread.sh``
and the defaults in ``onpolicy/config.py``): lr 7e-4, gamma 0.99, GAE lambda 0.95, clip 0.2, 10
epochs, entropy 0.01, value loss weight 1, gradient norm clipped at 10, two hidden layers of 64
(tanh: the script passes ``--use_ReLU``, a flag that turns ReLU off), policy and value networks
apart, 128 environments x 25 steps (3,200 env steps, 9,600 agent steps) a batch. What does not
map: MAPPO's value function sees the global state (a centralized critic), PPO with parameter
sharing gives it each agent's own observation, as IPPO does; MAPPO's script runs its recurrent
variant (``rmappo``, a GRU); MAPPO normalises value targets (``use_valuenorm``), clips the value's
change at 0.2 and uses a Huber loss (½e² below 10), has a LayerNorm on inputs and after each layer,
and one minibatch of the whole batch. Here the value loss is ½ the squared error, unclipped, on both
sides (:data:`VALUE_LOSS`: RLlib's loss has no ½, so it gets half volley's ``vf_loss_coeff``), no KL
penalty, and 3 minibatches of 3,200 rows (both libraries refuse a minibatch larger than
``train_batch_size``, which counts env steps). Each library keeps its own way of standardising
advantages (volley per minibatch, RLlib's old stack over the batch) and its own initialisation.

Each run is a fresh process of its own, one after another, seeds interleaved; all of them
in-process (volley's local engine with ``num_workers=0``, RLlib's ``num_env_runners=0``): one
worker stepping 128 environments is MAPPO's layout. RLlib runs on its old API stack (``old``:
``api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)``, the
``MultiAgentEnv`` / ``PolicySpec`` path of RLlib 2.9), its new one (``new``), or both.

What is reported, after the last iteration that reaches the budget: the mean episode return summed
over the 3 agents, over the last 100 episodes (volley's ``episode_reward_mean``; RLlib's
``env_runners/episode_reward_mean`` on the old stack, ``episode_return_mean`` on the new), and per
agent (volley's ``policy_reward_mean["shared"]``, over the last 100 agent-episodes; RLlib's old
stack's ``policy_reward_mean["shared"]``, over every agent of the last 100 episodes; its new
stack's ``agent_episode_returns_mean``, averaged over the 3 agents: its per-module figure,
``module_episode_returns_mean``, sums the agents of an episode that share the module). A uniformly
random policy scores about -86 summed (-28.7 per agent).

    python benchmarks/multi_agent_spread.py                                  # 3 seeds, 200k env steps
    python benchmarks/multi_agent_spread.py --rllib-stacks old --max-env-steps 500000
    python benchmarks/multi_agent_spread.py --quick                          # a smoke run: 2 iterations
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from fresh_process import run_fresh

STARTED = time.time()  # a child's start: wall times include imports and the build
ENV = "simple_spread"
SPREAD: dict[str, Any] = {"N": 3, "local_ratio": 0.5, "max_cycles": 25, "continuous_actions": False}
POLICY = "shared"
NUM_ENVS, FRAGMENT = 128, 25  # MAPPO's n_rollout_threads x episode_length
BATCH = NUM_ENVS * FRAGMENT
MODEL: dict[str, Any] = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}
PPO: dict[str, Any] = {
    "gamma": 0.99, "lr": 7e-4, "lambda_": 0.95, "clip_param": 0.2, "num_epochs": 10, "entropy_coeff": 0.01,
    "grad_clip": 10.0, "use_kl_loss": False, "kl_coeff": 0.0, "train_batch_size": BATCH, "minibatch_size": BATCH}
# The same value loss, spelled per library. volley's is vf_loss_coeff x ½·mean((V - V_targ)²), as MAPPO's
# (value_loss_coef 1 x ``mse_loss(e) = e²/2``, onpolicy/utils/util.py); RLlib's has no ½. Value clipping
# off: volley clips the value's change (None: off), RLlib clamps the squared error (at infinity: off).
VALUE_LOSS: dict[str, dict[str, Any]] = {"volley": {"vf_loss_coeff": 1.0, "vf_clip_param": None},
                                         "rllib": {"vf_loss_coeff": 0.5, "vf_clip_param": float("inf")}}
BUDGET = 200_000
QUICK_BUDGET = 2 * BATCH
LAST = 10  # iterations averaged for a steadier figure than the last one (32,000 env steps)


def shared_policy(agent_id: str, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:
    """Every agent acts with the one policy: parameter sharing."""
    return POLICY


def spread_env(wrapper: Any) -> Any:
    from mpe2 import simple_spread_v3

    return wrapper(simple_spread_v3.parallel_env(**SPREAD))


# -- the children: one library's run each ----------------------------------------------------------


class Run:
    """One library's PPO on simple_spread; ``train()`` reads its iteration alike for all three."""

    def __init__(self, library: str, seed: int) -> None:
        self.library = library
        self.algo = self._build_volley(seed) if library == "volley" else self._build_rllib(seed)

    @staticmethod
    def _build_volley(seed: int) -> Any:
        from volley import ParallelPettingZooEnv, PPOConfig, register_env

        register_env(ENV, lambda env_config: spread_env(ParallelPettingZooEnv))
        return PPOConfig().update(
            env=ENV, engine="local", num_workers=0, num_envs_per_worker=NUM_ENVS, rollout_fragment_length=FRAGMENT,
            model=MODEL, seed=seed, **PPO, **VALUE_LOSS["volley"],
        ).multi_agent(policies={POLICY}, policy_mapping_fn=shared_policy).build()

    def _build_rllib(self, seed: int) -> Any:
        import ray
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
        from ray.tune.registry import register_env

        register_env(ENV, lambda env_config: spread_env(ParallelPettingZooEnv))
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a stale one
        new = self.library == "rllib-new"
        config = (PPOConfig().api_stack(enable_rl_module_and_learner=new, enable_env_runner_and_connector_v2=new)
                  .environment(ENV)
                  .env_runners(num_env_runners=0, num_envs_per_env_runner=NUM_ENVS, rollout_fragment_length=FRAGMENT)
                  .training(**PPO, **VALUE_LOSS["rllib"])
                  .multi_agent(policies={POLICY}, policy_mapping_fn=shared_policy)
                  .debugging(seed=seed))
        if new:
            from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

            return config.learners(num_learners=0).rl_module(model_config=DefaultModelConfig(**MODEL)).build_algo()
        return config.training(model=MODEL).build_algo()

    def train(self) -> dict[str, float]:
        """One iteration; the run's steps and its mean returns (summed over agents, and per agent) after it."""
        result = self.algo.train()
        if self.library == "volley":
            return {"env_steps": result["timesteps_total"], "agent_steps": result["agent_timesteps_total"],
                    "episode_return": result["episode_reward_mean"],
                    "agent_return": result["policy_reward_mean"][POLICY]}
        runners = result["env_runners"]
        if self.library == "rllib-old":
            agent_steps = result["num_agent_steps_sampled_lifetime"]
            episode_return, agent_return = runners["episode_reward_mean"], runners["policy_reward_mean"][POLICY]
        else:
            agent_steps = sum(runners["num_agent_steps_sampled_lifetime"].values())
            episode_return = runners["episode_return_mean"]
            agent_return = statistics.fmean(runners["agent_episode_returns_mean"].values())
        return {"env_steps": int(result["num_env_steps_sampled_lifetime"]), "agent_steps": int(agent_steps),
                "episode_return": float(episode_return), "agent_return": float(agent_return)}

    def stop(self) -> None:
        self.algo.stop()
        if self.library != "volley":
            import ray

            ray.shutdown()


def learning_child(library: str, seed: int, budget: int) -> dict[str, Any]:
    """Train until ``budget`` env steps; the last iteration's figures and the return after each iteration."""
    run = Run(library, seed)
    built = time.time()
    curve: list[tuple[int, float]] = []
    try:
        while not curve or curve[-1][0] < budget:
            point = run.train()
            curve.append((int(point["env_steps"]), round(point["episode_return"], 3)))
        done = time.time()
    finally:
        run.stop()
    return {**point, "wall_s": done - STARTED, "train_s": done - built, "curve": curve}


# -- the parent: fresh processes, one at a time, the table ---------------------------------------------


def child(python: str, spec: dict[str, Any]) -> dict[str, Any]:
    report = run_fresh(python, __file__, spec)
    print(f"# {spec['library']} seed {spec['seed']}: {({k: v for k, v in report.items() if k != 'curve'})}",
          file=sys.stderr, flush=True)
    return report


def return_at(curve: list[list[float]], env_steps: float) -> float:
    """The return after the first iteration that reached ``env_steps``."""
    return next(ret for steps, ret in curve if steps >= env_steps)


def last_iterations(report: dict[str, Any]) -> float:
    """The return summed over agents, averaged over the run's last :data:`LAST` iterations: each
    iteration's figure is the mean of only ~100 episodes, so one iteration's is noisy."""
    return statistics.fmean(ret for _, ret in report["curve"][-LAST:])


def table(runs: dict[str, list[dict[str, Any]]], seeds: list[int], budget: int) -> None:
    marks = [budget // 4, budget // 2]
    print(f"\n### simple_spread_v3, 3 agents, one shared policy, {budget:,} env steps, seeds {seeds}\n")
    print("| run | seed | env steps | agent steps | return, sum over agents | per agent | "
          f"sum, mean of the last {LAST} iterations | " + " | ".join(f"sum at {m:,}" for m in marks)
          + " | wall s | training s |")
    print("| --- |" + " --- |" * (8 + len(marks)))
    for name, reports in runs.items():
        for seed, r in zip(seeds, reports, strict=True):
            print(f"| {name} | {seed} | {r['env_steps']:,} | {r['agent_steps']:,} | {r['episode_return']:.2f} | "
                  f"{r['agent_return']:.2f} | {last_iterations(r):.2f} | "
                  + " | ".join(f"{return_at(r['curve'], m):.2f}" for m in marks)
                  + f" | {r['wall_s']:.0f} | {r['train_s']:.0f} |")
    print(f"\n| run | return, sum over agents: mean of the seeds (min, max) | per agent | the last {LAST} "
          "iterations' | median wall s |")
    print("| --- | --- | --- | --- | --- |")
    for name, reports in runs.items():
        sums = [r["episode_return"] for r in reports]
        print(f"| {name} | {statistics.fmean(sums):.2f} ({min(sums):.2f}, {max(sums):.2f}) | "
              f"{statistics.fmean(r['agent_return'] for r in reports):.2f} | "
              f"{statistics.fmean(last_iterations(r) for r in reports):.2f} | "
              f"{statistics.median(r['wall_s'] for r in reports):.0f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        spec = json.loads(sys.argv[2])
        print(json.dumps(learning_child(spec["library"], spec["seed"], spec["budget"])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rllib-stacks", nargs="*", choices=["old", "new"], default=["old", "new"],
                        help="RLlib's API stacks to run beside volley (none: volley alone)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds, interleaved")
    parser.add_argument("--max-env-steps", type=int, default=BUDGET, help="the step budget of every run")
    parser.add_argument("--rllib-python", default=sys.executable, help="an interpreter with ray[rllib] 2.60")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every run's report and the settings")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: seed 0, {QUICK_BUDGET:,} env steps")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.max_env_steps = [0], QUICK_BUDGET
    libraries = ["volley", *(f"rllib-{stack}" for stack in args.rllib_stacks)]
    ray_version = metadata.version("ray")  # the parent imports neither library
    print(f"volley beside RLlib {ray_version} ({', '.join(libraries[1:]) or 'none'}); simple_spread_v3 {SPREAD}; "
          f"PPO {PPO}, value loss {VALUE_LOSS}, model {MODEL}, {NUM_ENVS} envs x {FRAGMENT} steps in-process")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in libraries}
    for seed in args.seeds:
        for name in libraries:
            runs[name].append(child(args.rllib_python if name != "volley" else sys.executable,
                                    {"library": name, "seed": seed, "budget": args.max_env_steps}))
    table(runs, args.seeds, args.max_env_steps)
    if args.json is not None:
        args.json.write_text(json.dumps({"ray": ray_version, "env": SPREAD, "ppo": PPO, "value_loss": VALUE_LOSS, "model": MODEL,
                                         "seeds": args.seeds, "budget": args.max_env_steps, "runs": runs},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
