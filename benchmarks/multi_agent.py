"""Multi-agent CartPole beside RLlib 2.60 (issue 46): agent steps per second, and time to RLlib's stop reward.

Both parts run volley and RLlib 2.60 with the same settings in one invocation, each run a fresh
process of its own, one at a time (never two at once), rounds and seeds interleaved so that a
noisy machine's drift reaches every library alike. RLlib runs on its old API stack (``old``:
``RolloutWorker``, ``Policy``, the ``MultiAgentEnv`` / ``PolicySpec`` path of RLlib 2.9, set by
``api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)``), on
its new one (``new``: ``MultiAgentEnvRunner``, ``RLModule``s, the learner in the driver; RLlib
2.60's default), or both (``--rllib-stacks``). The environment is RLlib's ``MultiAgentCartPole``
(its ``make_multi_agent("CartPole-v1")``) on RLlib's side and volley's ``make_multi_agent
("CartPole-v1")`` on volley's; the policies ``p0`` and ``p1``, agent ``i`` acting with
``p{i % 2}`` (:func:`policy_of`). Both libraries get every PPO key written out (:data:`PPO`,
:data:`MODEL`): RLlib's tuned multi-agent CartPole (rllib/tuned_examples/ppo/
multi_agent_cartpole_ppo.py in Ray's repository; the wheels ship no tuned examples: gamma 0.99,
lr 3e-4, 6 epochs, vf_loss_coeff 0.01, one linear layer of 32 shared by the value head; its stop:
300k env steps, or a return of 400 per agent) with RLlib's PPO defaults for the rest (4000 env steps a
batch, minibatches of 128, lambda 1, clip 0.3, KL penalty 0.2 towards 0.01, no gradient clip,
vf_clip_param 10, which both cap each step's squared value error at). Ray gets 2 CPUs on either
side; volley runs its Ray engine.

``throughput``: 4 agents, 2 policies, 2 workers x ``num_envs_per_worker`` 8 x
``rollout_fragment_length`` 250 (4000 env steps, 16,000 agent steps an iteration). After
``--warmup-iters`` untimed iterations, ``--iters`` timed ones give agent steps per second of
sampling alone (agent steps / the seconds of the iterations' sampling calls: volley's
``sample_time_s``; RLlib's ``synchronous_parallel_sample`` calls in PPO's training step, timed
around them) and of whole iterations (agent steps / the seconds of ``train()``), and volley's
split of an iteration (``sample_time_s`` / ``learn_time_s``). RLlib's old stack and volley compute
GAE on the workers, inside the sampling time; RLlib's new stack computes it in its learner. Agent
steps are each library's own count: volley's and RLlib's new stack's equal the actions their
environments were given (checked with a counting environment), RLlib's old stack counts the rows
of its batches, which came to more than that (about 1.25x in one check on 8 environments x 25
steps); env steps (calls of the multi-agent environment's ``step``) are counted alike by all
three, so the tables give both.

``learning``: RLlib's tuned example (2 agents, 2 policies, 2 workers x 1 env) until the mean return
of every policy (over the last 100 episodes of its agents: volley's ``policy_reward_mean``,
RLlib's ``env_runners/policy_reward_mean`` on the old stack and
``env_runners/module_episode_returns_mean`` on the new) reaches 400, RLlib's stop, or the step cap
(RLlib's: 300k env steps) or ``--max-minutes``. Wall time counts from the run's process start
(imports, Ray's start, the build); training time from the end of the build.

    python benchmarks/multi_agent.py                                   # both parts, RLlib's two stacks
    python benchmarks/multi_agent.py --parts throughput --rounds 3
    python benchmarks/multi_agent.py --parts learning --seeds 0 1 2 --max-env-steps 300000
    python benchmarks/multi_agent.py --quick                           # a smoke run, tiny budgets
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

STARTED = time.time()  # a child's start: wall times include imports and Ray's start-up
ENV = "multi_agent_cartpole"
NUM_CPUS = 2
POLICIES = ("p0", "p1")
THRESHOLD = 400.0  # RLlib's stop: the return of each agent (its tuned example stops the sum at 400 x agents)
MODEL: dict[str, Any] = {"fcnet_hiddens": [32], "fcnet_activation": "linear", "vf_share_layers": True}
PPO: dict[str, Any] = {
    "gamma": 0.99, "lr": 3e-4, "lambda_": 1.0, "clip_param": 0.3, "vf_clip_param": 10.0, "vf_loss_coeff": 0.01,
    "entropy_coeff": 0.0, "use_kl_loss": True, "kl_coeff": 0.2, "kl_target": 0.01, "num_epochs": 6,
    "minibatch_size": 128, "grad_clip": None, "train_batch_size": 4000}
THROUGHPUT = {"num_agents": 4, "num_workers": 2, "num_envs_per_worker": 8, "rollout_fragment_length": 250}
LEARNING = {"num_agents": 2, "num_workers": 2, "num_envs_per_worker": 1, "rollout_fragment_length": 2000}
QUICK_THROUGHPUT_FRAGMENT = 25  # --quick: 400 env steps an iteration


def policy_of(agent_id: int, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:
    """Agent ``i`` acts with ``p{i % 2}`` (with 2 agents: RLlib's tuned ``f"p{aid}"``); RLlib's and
    volley's call, old stack and new."""
    return f"p{agent_id % 2}"


def batch_size(shape: dict[str, int]) -> int:
    return shape["num_workers"] * shape["num_envs_per_worker"] * shape["rollout_fragment_length"]


# -- the children: one library's run each ----------------------------------------------------------


class Run:
    """One library's algorithm, its iterations read alike: ``train()`` gives the env and agent steps
    sampled, the seconds of sampling, and each policy's mean return."""

    def __init__(self, library: str, shape: dict[str, int], seed: int) -> None:
        self.library = library
        self.sample_s = 0.0  # RLlib: its sampling calls' seconds, summed (volley reports its own)
        self.algo = self._build_volley(shape, seed) if library == "volley" else self._build_rllib(shape, seed)

    def _build_volley(self, shape: dict[str, int], seed: int) -> Any:
        from volley import PPOConfig, make_multi_agent, register_env

        register_env(ENV, make_multi_agent("CartPole-v1"))
        return PPOConfig().update(
            env=ENV, env_config={"num_agents": shape["num_agents"]}, engine="ray", num_cpus=NUM_CPUS, seed=seed,
            num_workers=shape["num_workers"], num_envs_per_worker=shape["num_envs_per_worker"],
            rollout_fragment_length=shape["rollout_fragment_length"], model=MODEL,
            **{**PPO, "train_batch_size": batch_size(shape)},
        ).multi_agent(policies=set(POLICIES), policy_mapping_fn=policy_of).build()

    def _build_rllib(self, shape: dict[str, int], seed: int) -> Any:
        import ray
        from ray.rllib.algorithms.ppo import PPOConfig, ppo
        from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole
        from ray.tune.registry import register_env

        self._time_sampling(ppo)
        register_env(ENV, lambda env_config: MultiAgentCartPole(config=env_config))
        ray.init(address="local", num_cpus=NUM_CPUS, include_dashboard=False, log_to_driver=False)  # never a stale one
        new = self.library == "rllib-new"
        config = (PPOConfig().api_stack(enable_rl_module_and_learner=new, enable_env_runner_and_connector_v2=new)
                  .environment(ENV, env_config={"num_agents": shape["num_agents"]})
                  .env_runners(num_env_runners=shape["num_workers"],
                               num_envs_per_env_runner=shape["num_envs_per_worker"],
                               rollout_fragment_length=shape["rollout_fragment_length"])
                  .training(**{**PPO, "train_batch_size": batch_size(shape)})
                  .multi_agent(policies=set(POLICIES), policy_mapping_fn=policy_of)
                  .debugging(seed=seed))
        if new:
            from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

            config = config.learners(num_learners=0).rl_module(model_config=DefaultModelConfig(**MODEL))
        else:
            config = config.training(model=MODEL)
        return config.build_algo()

    def _time_sampling(self, ppo_module: Any) -> None:
        """Time RLlib PPO's sampling calls (both stacks make them through this one function)."""
        sample = ppo_module.synchronous_parallel_sample

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return sample(*args, **kwargs)
            finally:
                self.sample_s += time.perf_counter() - start

        ppo_module.synchronous_parallel_sample = timed

    def train(self) -> dict[str, Any]:
        """One iteration: its seconds, and the run's totals after it."""
        self.sample_s = 0.0
        start = time.perf_counter()
        result = self.algo.train()
        seconds = time.perf_counter() - start
        if self.library == "volley":
            return {"seconds": seconds, "sample_s": result["sample_time_s"], "learn_s": result["learn_time_s"],
                    "env_steps": result["timesteps_total"], "agent_steps": result["agent_timesteps_total"],
                    "policy_returns": result["policy_reward_mean"]}
        runners = result["env_runners"]
        if self.library == "rllib-old":
            agent_steps, returns = result["num_agent_steps_sampled_lifetime"], runners.get("policy_reward_mean", {})
        else:
            agent_steps = sum(runners["num_agent_steps_sampled_lifetime"].values())
            returns = runners.get("module_episode_returns_mean", {})
        return {"seconds": seconds, "sample_s": self.sample_s, "learn_s": seconds - self.sample_s,
                "env_steps": int(result["num_env_steps_sampled_lifetime"]), "agent_steps": int(agent_steps),
                "policy_returns": {p: float(r) for p, r in returns.items()}}

    def stop(self) -> None:
        self.algo.stop()
        if self.library != "volley":
            import ray

            ray.shutdown()


def throughput_child(library: str, shape: dict[str, int], warmup: int, iters: int) -> dict[str, Any]:
    """Agent steps per second over ``iters`` iterations after ``warmup`` untimed ones."""
    run = Run(library, shape, seed=0)
    try:
        before = {"env_steps": 0, "agent_steps": 0}
        for _ in range(warmup):
            before = run.train()
        timed = [run.train() for _ in range(iters)]
    finally:
        run.stop()
    agent_steps = timed[-1]["agent_steps"] - before["agent_steps"]
    seconds, sample_s = sum(t["seconds"] for t in timed), sum(t["sample_s"] for t in timed)
    env_steps = timed[-1]["env_steps"] - before["env_steps"]
    return {"iterations": iters, "env_steps": env_steps, "agent_steps": agent_steps, "seconds": seconds,
            "sample_s": sample_s, "learn_s": sum(t["learn_s"] for t in timed),
            "sampling_rate": agent_steps / sample_s, "iteration_rate": agent_steps / seconds,
            "sampling_env_rate": env_steps / sample_s, "iteration_env_rate": env_steps / seconds}


def learning_child(library: str, shape: dict[str, int], seed: int, max_env_steps: int, max_seconds: float
                   ) -> dict[str, Any]:
    """Train until every policy's mean return reaches :data:`THRESHOLD`, or a cap."""
    run = Run(library, shape, seed)
    built = time.time()
    point: dict[str, Any] = {"env_steps": 0, "agent_steps": 0, "policy_returns": {}}
    sample_s = learn_s = 0.0
    reached = False
    try:
        while True:
            point = run.train()
            sample_s, learn_s = sample_s + point["sample_s"], learn_s + point["learn_s"]
            returns = point["policy_returns"]
            reached = all(returns.get(p, float("nan")) >= THRESHOLD for p in POLICIES)
            if reached or point["env_steps"] >= max_env_steps or time.time() - STARTED >= max_seconds:
                break
        done = time.time()
    finally:
        run.stop()
    return {"reached": reached, "wall_s": done - STARTED, "train_s": done - built, "env_steps": point["env_steps"],
            "agent_steps": point["agent_steps"], "policy_returns": point["policy_returns"],
            "sample_s": sample_s, "learn_s": learn_s}


# -- the parent: fresh processes, one at a time, the tables ---------------------------------------------------


def child(python: str, spec: dict[str, Any]) -> dict[str, Any]:
    report = run_fresh(python, __file__, spec)
    print(f"# {spec['library']} {spec['kind']} {spec.get('seed', '')}: {report}", file=sys.stderr, flush=True)
    return report


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["kind"] == "throughput":
        return throughput_child(spec["library"], spec["shape"], spec["warmup"], spec["iters"])
    return learning_child(spec["library"], spec["shape"], spec["seed"], spec["max_env_steps"], spec["max_seconds"])


def libraries(args: argparse.Namespace) -> list[str]:
    return ["volley", *(f"rllib-{stack}" for stack in args.rllib_stacks)]


def ratio_table(figures: dict[str, dict[str, float]], better: str) -> str:
    """A markdown table of ``volley / <RLlib run>`` for each figure (the medians in ``figures``,
    by run, then by column name); ``better`` says which way favours volley."""
    columns = list(figures["volley"])
    lines = [f"| ratio of medians ({better}) | {' | '.join(columns)} |", "| --- |" + " --- |" * len(columns)]
    for name, values in figures.items():
        if name != "volley":
            lines.append(f"| volley / {name} | "
                         + " | ".join(f"{figures['volley'][c] / values[c]:.2f}" for c in columns) + " |")
    return "\n".join(lines)


def throughput(args: argparse.Namespace, shape: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in libraries(args)}
    for _ in range(args.rounds):
        for name in runs:
            runs[name].append(child(args.rllib_python if name != "volley" else sys.executable,
                                    {"kind": "throughput", "library": name, "shape": shape,
                                     "warmup": args.warmup_iters, "iters": args.iters}))
    print(f"\n### Throughput: {shape['num_agents']} agents, 2 policies, {shape['num_workers']} workers x "
          f"{shape['num_envs_per_worker']} envs x {shape['rollout_fragment_length']} steps "
          f"({batch_size(shape):,} env steps an iteration), {args.iters} timed iterations after {args.warmup_iters}\n")
    print("| run | round | agent steps / iteration | sampling: agent steps/s (env steps/s) | "
          "whole iteration: agent steps/s (env steps/s) | sampling's share of the iteration |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, reports in runs.items():
        for number, r in enumerate(reports, 1):
            print(f"| {name} | {number} | {r['agent_steps'] / r['iterations']:,.0f} | {r['sampling_rate']:,.0f} "
                  f"({r['sampling_env_rate']:,.0f}) | {r['iteration_rate']:,.0f} ({r['iteration_env_rate']:,.0f}) | "
                  f"{r['sample_s'] / r['seconds']:.2f} |")
    columns = {"sampling, agent steps/s": "sampling_rate", "sampling, env steps/s": "sampling_env_rate",
               "whole iteration, agent steps/s": "iteration_rate", "whole iteration, env steps/s": "iteration_env_rate"}
    print()
    print(ratio_table({name: {label: statistics.median(r[key] for r in reports) for label, key in columns.items()}
                       for name, reports in runs.items()}, "above 1: volley faster"))
    volley = runs["volley"]
    seconds, sample_s, learn_s = (sum(r[key] for r in volley) for key in ("seconds", "sample_s", "learn_s"))
    print(f"\nWhere volley's iteration goes (sums over its rounds): sampling {sample_s:.2f} s "
          f"({sample_s / seconds:.0%}, `sample_time_s`: the workers' steps, acting, GAE, and the batches' "
          f"transfer), learning {learn_s:.2f} s ({learn_s / seconds:.0%}, `learn_time_s`: both policies' PPO epochs).")
    return runs


def learning(args: argparse.Namespace, shape: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in libraries(args)}
    for seed in args.seeds:
        for name in runs:
            runs[name].append(child(args.rllib_python if name != "volley" else sys.executable,
                                    {"kind": "learning", "library": name, "shape": shape, "seed": seed,
                                     "max_env_steps": args.max_env_steps, "max_seconds": args.max_minutes * 60}))
    print(f"\n### Learning: {shape['num_agents']} agents, 2 policies, to a mean return of {THRESHOLD:g} for every "
          f"policy (cap {args.max_env_steps:,} env steps or {args.max_minutes:g} min), seeds {args.seeds}\n")
    print("| run | seeds reaching it | median wall s (each seed) | median training s | median env steps | "
          "median agent steps | last returns (each seed) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    medians: dict[str, dict[str, float]] = {}
    for name, reports in runs.items():
        medians[name] = {key: statistics.median(r[key] for r in reports)
                         for key in ("wall_s", "train_s", "env_steps", "agent_steps")}
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in reports)
        last = "; ".join(", ".join(f"{p} {v:.0f}" for p, v in sorted(r["policy_returns"].items())) for r in reports)
        m = medians[name]
        print(f"| {name} | {sum(r['reached'] for r in reports)}/{len(reports)} | {m['wall_s']:.1f} ({walls}) | "
              f"{m['train_s']:.1f} | {m['env_steps']:,.0f} | {m['agent_steps']:,.0f} | {last} |")
    labels = {"wall_s": "wall time", "train_s": "training time", "env_steps": "env steps", "agent_steps": "agent steps"}
    print()
    print(ratio_table({name: {labels[key]: value for key, value in m.items()} for name, m in medians.items()},
                      "below 1: volley faster"))
    if not all(r["reached"] for reports in runs.values() for r in reports):
        print("\nA run that did not reach the threshold counts the time and steps of its whole budget (a lower bound).")
    volley = runs["volley"]
    print(f"\nvolley's training time: sampling {sum(r['sample_s'] for r in volley):.1f} s, learning "
          f"{sum(r['learn_s'] for r in volley):.1f} s (all seeds).")
    return runs


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        print(json.dumps(run_child(json.loads(sys.argv[2]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", choices=["throughput", "learning"], default=["throughput", "learning"])
    parser.add_argument("--rllib-stacks", nargs="+", choices=["old", "new"], default=["old", "new"],
                        help="RLlib's API stacks to run beside volley")
    parser.add_argument("--rounds", type=int, default=3, help="throughput: rounds of every run, interleaved")
    parser.add_argument("--warmup-iters", type=int, default=1, help="throughput: untimed iterations first")
    parser.add_argument("--iters", type=int, default=4, help="throughput: timed iterations")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="learning: seeds, interleaved")
    parser.add_argument("--max-env-steps", type=int, default=300_000, help="learning: a run's step cap (RLlib's)")
    parser.add_argument("--max-minutes", type=float, default=45.0, help="learning: a run's time limit")
    parser.add_argument("--rllib-python", default=sys.executable, help="an interpreter with ray[rllib] 2.60")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every run's report and the settings")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 round of 1+2 iterations of 400 env steps, seed 0 to 8000 env steps")
    args = parser.parse_args()
    throughput_shape, learning_shape = dict(THROUGHPUT), dict(LEARNING)
    if args.quick:
        args.rounds, args.warmup_iters, args.iters, args.seeds = 1, 1, 2, [0]
        args.max_env_steps, args.max_minutes = 8000, min(args.max_minutes, 3.0)
        throughput_shape["rollout_fragment_length"] = QUICK_THROUGHPUT_FRAGMENT
    ray_version = metadata.version("ray")  # the parent imports neither library
    print(f"volley beside RLlib {ray_version} ({', '.join(libraries(args)[1:])}: rllib-old is its old API stack, "
          f"the MultiAgentEnv/PolicySpec path; rllib-new its new one); PPO {PPO}, model {MODEL}")
    report: dict[str, Any] = {"ray": ray_version, "ppo": PPO, "model": MODEL, "quick": args.quick}
    if "throughput" in args.parts:
        report["throughput"] = {"shape": throughput_shape, "runs": throughput(args, throughput_shape)}
    if "learning" in args.parts:
        report["learning"] = {"shape": learning_shape, "threshold": THRESHOLD, "runs": learning(args, learning_shape)}
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
