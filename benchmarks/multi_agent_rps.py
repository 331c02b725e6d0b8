"""Rock-paper-scissors against RLlib's two heuristic opponents (issue 46): volley's PPO, feed-forward
and with an LSTM, beside RLlib 2.60 with the same settings, and beside RLlib's published figure.

The setting is RLlib 2.9's ``rock_paper_scissors_multiagent.py`` (``run_heuristic_vs_learned``):
PettingZoo's ``rps_v2`` through each library's ``PettingZooEnv``; ``player_0`` is the learned policy,
``player_1`` plays, per episode, either a heuristic that repeats one random move the whole episode
(``always_same``) or one that plays what beats the learner's last move (``beat_last``); in-process
(volley's local engine, RLlib's ``num_env_runners=0``), 4 environments, PPO's defaults as RLlib 2.9
has them, smoothing over 200 episodes. The heuristics are written here (:func:`heuristics`) from
that description, once for both libraries: Ray 2.60's wheel ships them only as new-stack
``RLModule``s, so RLlib's run gets them as subclasses of its old-stack ``Policy``.

Both libraries get every key written out (:data:`PPO`, :data:`MODEL`, :data:`SAMPLING`): RLlib 2.9's
PPO defaults (also RLlib 2.60's on its old stack): gamma 0.99, lr 5e-5, lambda 1, clip 0.3, 30
epochs of minibatches of 128 over 4,000 env steps (4 envs x 1,000 steps, RLlib's "auto"), KL
penalty 0.2 towards 0.01, no gradient clip, ``vf_clip_param`` 10; two tanh layers of 256, policy
and value apart; the LSTM variant (``use_lstm``, the learned policy's model only, as in RLlib's
script) a cell of 256 over sequences of at most 20 steps. The same value loss is spelled per
library (:data:`VALUE_LOSS`). What stays each library's own: how advantages are standardised
(volley per minibatch, RLlib's old stack over the batch) and the initialisation. RLlib runs on its
old API stack (``api_stack(enable_rl_module_and_learner=False,
enable_env_runner_and_connector_v2=False)``: ``RolloutWorker``, ``Policy``, the ``MultiAgentEnv`` /
``PolicySpec`` path of RLlib 2.9), where hand-written policies live.

The measure is RLlib's: the learned policy's mean return per episode over the smoothing window
(``hist_stats/policy_learned_reward`` averaged: volley's ``hist_stats``, RLlib's
``env_runners/hist_stats``; RLlib's script sums it over the window and stops at 1000, a mean of 5).
RLlib's figure, from that script's docstring: "The learned agent should eventually reach a reward of
~5 with use_lstm=False, and ~7 with use_lstm=True" (the LSTM can tell the two opponents apart). An
episode is 15 rounds (rps_v2's ``max_cycles``), 30 env steps (one per move), so the return lies in
[-15, 15].

    python benchmarks/multi_agent_rps.py                       # 3 seeds x 2 models x 2 libraries, 200k env steps
    python benchmarks/multi_agent_rps.py --libraries volley --seeds 0
    python benchmarks/multi_agent_rps.py --quick               # a smoke run: seed 0, 2 iterations

Each run is a fresh process of its own, one at a time, libraries interleaved by seed (volley, RLlib,
volley, RLlib, ...) so that a noisy machine's drift reaches both alike. The table gives, per run, the
env steps and wall seconds until the mean reached 5 and 6, and the mean at the step cap; wall time
counts from the run's process start (imports, Ray's start, the build), training time from the end of
the build.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from fresh_process import run_fresh

STARTED = time.time()  # a child's start: wall times include imports and the build
ENV = "RockPaperScissors"
LIBRARIES = ("volley", "rllib-old")
ROCK, PAPER, SCISSORS = 0, 1, 2
MOVES = (ROCK, PAPER, SCISSORS)
BEATS = {ROCK: PAPER, PAPER: SCISSORS, SCISSORS: ROCK}
LEARNED, OPPONENTS = "learned", ("always_same", "beat_last")
THRESHOLDS = (5.0, 6.0)
SMOOTHING = 200  # episodes: RLlib's script's metrics_num_episodes_for_smoothing
RLLIB_FIGURE = {False: 5, True: 7}  # use_lstm: RLlib's published mean return
SAMPLING: dict[str, Any] = {"num_envs": 4, "rollout_fragment_length": 1000, "batch_mode": "truncate_episodes"}
MODEL: dict[str, Any] = {
    "fcnet_hiddens": [256, 256], "fcnet_activation": "tanh", "vf_share_layers": False, "use_lstm": False,
    "lstm_cell_size": 256, "max_seq_len": 20, "lstm_use_prev_action": False, "lstm_use_prev_reward": False}
PPO: dict[str, Any] = {
    "gamma": 0.99, "lr": 5e-5, "lambda_": 1.0, "clip_param": 0.3, "vf_clip_param": 10.0, "entropy_coeff": 0.0,
    "use_kl_loss": True, "kl_coeff": 0.2, "kl_target": 0.01, "num_epochs": 30, "minibatch_size": 128,
    "grad_clip": None, "train_batch_size": 4000}
# The same value loss, spelled per library: RLlib's is vf_loss_coeff x mean(min(e², vf_clip_param)),
# volley's has a ½ in front of the mean, so it gets twice RLlib's default weight of 1
VALUE_LOSS: dict[str, dict[str, Any]] = {"volley": {"vf_loss_coeff": 2.0}, "rllib-old": {"vf_loss_coeff": 1.0}}
QUICK_STEPS = 2 * PPO["train_batch_size"]


def select(agent_id: Any, episode: Any = None, worker: Any = None, **kwargs: Any) -> str:
    """The mapping of RLlib's script: the learner is ``player_0``; ``player_1`` is one of the
    heuristics, drawn per episode (both libraries call this once per agent and episode)."""
    return LEARNED if agent_id == "player_0" else random.choice(OPPONENTS)


def last_move(observation: Any) -> int | None:
    """The opponent's last move in an rps_v2 observation (None before the first: rps_v2's 3);
    RLlib's old stack gives a Discrete observation one-hot."""
    value = np.asarray(observation)
    move = int(value) if value.ndim == 0 else int(np.argmax(value))
    return move if move in BEATS else None


def heuristics(policy_base: Any, view_requirement: Any) -> dict[str, type]:
    """The two opponents, by policy id, as subclasses of a library's hand-written ``Policy`` base
    (volley's or RLlib's; their ``compute_actions`` is the same call), with the library's
    ``ViewRequirement`` class for the state ``always_same`` keeps."""

    class Heuristic(policy_base):
        """A policy that acts by hand: never trained, no weights (RLlib's base asks for them)."""

        def get_weights(self) -> dict[str, Any]:
            return {}

        def set_weights(self, weights: Any) -> None:
            """Nothing to set."""

    class AlwaysSame(Heuristic):
        """One random move, drawn at the episode's first round and repeated all episode: the move is
        the state. It is drawn there, not in ``get_initial_state``: RLlib's old stack takes a policy's
        initial state once, when it builds the policy (its ``StateBufferConnector``)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # RLlib's old stack passes a state only through a column the policy asks for (volley ignores it)
            self.view_requirements["state_in_0"] = view_requirement(
                "state_out_0", shift=-1, space=gym.spaces.Box(ROCK, SCISSORS, shape=(1,), dtype=np.int64))

        def get_initial_state(self) -> list[Any]:
            return [ROCK]  # a placeholder: the first round draws the move

        def is_recurrent(self) -> bool:
            return True

        def compute_actions(self, obs_batch: Any, state_batches: Any = None, **kwargs: Any) -> Any:
            kept = np.asarray(state_batches[0]).reshape(len(obs_batch))  # [B] or [B, 1] by library
            moves = np.array([random.choice(MOVES) if last_move(x) is None else move
                              for x, move in zip(obs_batch, kept, strict=True)], dtype=np.int64)
            return moves, [moves], {}

    class BeatLast(Heuristic):
        """What beats the opponent's last move (a random move before there is one)."""

        def compute_actions(self, obs_batch: Any, state_batches: Any = None, **kwargs: Any) -> Any:
            moves = [last_move(x) for x in obs_batch]
            return np.array([random.choice(MOVES) if m is None else BEATS[m] for m in moves]), [], {}

    return dict(zip(OPPONENTS, (AlwaysSame, BeatLast), strict=True))


def policies(policy_spec: Any, opponents: dict[str, type], use_lstm: bool) -> dict[str, Any]:
    """The policies of RLlib's script in a library's ``PolicySpec``: the heuristics, and the learned
    policy with the run's model (``use_lstm`` set for it alone, as RLlib's script does)."""
    return {**{name: policy_spec(policy_class=cls) for name, cls in opponents.items()},
            LEARNED: policy_spec(config={"model": {**MODEL, "use_lstm": use_lstm}})}


# -- the children: one library's run each ----------------------------------------------------------


def build_volley(seed: int, use_lstm: bool) -> Any:
    from pettingzoo.classic import rps_v2

    from volley import PettingZooEnv, Policy, PolicySpec, PPOConfig, register_env
    from volley.rllib_policies import ViewRequirement

    register_env(ENV, lambda config: PettingZooEnv(rps_v2.env()))
    return (PPOConfig().environment(ENV)
            .rollouts(num_rollout_workers=0, num_envs_per_worker=SAMPLING["num_envs"],
                      rollout_fragment_length=SAMPLING["rollout_fragment_length"], batch_mode=SAMPLING["batch_mode"])
            .training(**PPO, **VALUE_LOSS["volley"], model=MODEL)
            .multi_agent(policies=policies(PolicySpec, heuristics(Policy, ViewRequirement), use_lstm),
                         policy_mapping_fn=select, policies_to_train=[LEARNED])
            .reporting(metrics_num_episodes_for_smoothing=SMOOTHING)
            .resources(engine="local").debugging(seed=seed)).build()


def build_rllib(seed: int, use_lstm: bool) -> Any:
    import ray
    from pettingzoo.classic import rps_v2
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv
    from ray.rllib.policy.policy import Policy, PolicySpec
    from ray.rllib.policy.view_requirement import ViewRequirement
    from ray.tune.registry import register_env

    register_env(ENV, lambda config: PettingZooEnv(rps_v2.env()))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a stale one
    return (PPOConfig().api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
            .environment(ENV)
            .env_runners(num_env_runners=0, num_envs_per_env_runner=SAMPLING["num_envs"],
                         rollout_fragment_length=SAMPLING["rollout_fragment_length"],
                         batch_mode=SAMPLING["batch_mode"])
            .training(**PPO, **VALUE_LOSS["rllib-old"], model=MODEL)
            .multi_agent(policies=policies(PolicySpec, heuristics(Policy, ViewRequirement), use_lstm),
                         policy_mapping_fn=select, policies_to_train=[LEARNED])
            .reporting(metrics_num_episodes_for_smoothing=SMOOTHING)
            .debugging(seed=seed)).build_algo()


def learned_mean(library: str, result: dict[str, Any]) -> tuple[int, float]:
    """The run's env steps after an iteration, and the learned policy's mean return over the window."""
    if library == "volley":
        steps, stats = result["timesteps_total"], result["hist_stats"]
    else:
        steps, stats = result["num_env_steps_sampled_lifetime"], result["env_runners"]["hist_stats"]
    returns = stats.get(f"policy_{LEARNED}_reward", [])
    return int(steps), statistics.fmean(returns) if returns else 0.0


def learning_child(library: str, seed: int, use_lstm: bool, max_env_steps: int) -> dict[str, Any]:
    """Train to ``max_env_steps``; when the mean first reached each threshold, and the mean as it went."""
    random.seed(seed)  # the mapping's and the heuristics' draws
    algo = build_volley(seed, use_lstm) if library == "volley" else build_rllib(seed, use_lstm)
    built = time.time()
    reached: dict[str, dict[str, float]] = {}
    curve: list[tuple[int, float]] = []
    try:
        while not curve or curve[-1][0] < max_env_steps:
            steps, mean = learned_mean(library, algo.train())
            curve.append((steps, round(mean, 3)))
            for threshold in THRESHOLDS:
                if mean >= threshold and str(threshold) not in reached:
                    reached[str(threshold)] = {"env_steps": steps, "seconds": round(time.time() - STARTED, 1)}
        done = time.time()
    finally:
        algo.stop()
        if library != "volley":
            import ray

            ray.shutdown()
    return {"library": library, "seed": seed, "use_lstm": use_lstm, "reached": reached, "final_mean": curve[-1][1],
            "env_steps": curve[-1][0], "wall_s": round(done - STARTED, 1), "train_s": round(done - built, 1),
            "curve": curve}


# -- the parent: fresh processes, one at a time, the table ---------------------------------------------


def child(spec: dict[str, Any]) -> dict[str, Any]:
    report = run_fresh(sys.executable, __file__, spec)
    print(f"# {spec}: mean {report['final_mean']} at {report['env_steps']:,} env steps, {report['wall_s']} s",
          file=sys.stderr, flush=True)
    return report


def model_name(use_lstm: bool) -> str:
    return "LSTM" if use_lstm else "feed-forward"


def table(reports: list[dict[str, Any]], libraries: list[str], models: list[bool]) -> None:
    print("\n| policy | library | seed | env steps to 5 (wall s) | env steps to 6 (wall s) | mean at the cap | "
          "env steps | wall s | training s |")
    print("| --- |" + " --- |" * 8)
    for r in reports:
        cells = [f"{r['reached'][str(t)]['env_steps']:,} ({r['reached'][str(t)]['seconds']})"
                 if str(t) in r["reached"] else "not reached" for t in THRESHOLDS]
        print(f"| {model_name(r['use_lstm'])} | {r['library']} | {r['seed']} | {cells[0]} | {cells[1]} | "
              f"{r['final_mean']:.2f} | {r['env_steps']:,} | {r['wall_s']} | {r['train_s']} |")
    print()
    for use_lstm in models:
        for library in libraries:
            runs = [r for r in reports if r["use_lstm"] == use_lstm and r["library"] == library]
            print(f"{model_name(use_lstm)}, {library}: median mean return at the cap "
                  f"{statistics.median(r['final_mean'] for r in runs):.2f}, median wall s "
                  f"{statistics.median(r['wall_s'] for r in runs):.1f} (RLlib's figure: ~{RLLIB_FIGURE[use_lstm]})")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        spec = json.loads(sys.argv[2])
        print(json.dumps(learning_child(spec["library"], spec["seed"], spec["use_lstm"], spec["max_env_steps"])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES),
                        help="rllib-old: RLlib 2.60 on its old API stack")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds, libraries interleaved")
    parser.add_argument("--max-env-steps", type=int, default=200_000, help="the step cap of every run")
    parser.add_argument("--models", nargs="+", choices=["feed-forward", "lstm"], default=["feed-forward", "lstm"],
                        help="the learned policy's models to run")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every run's report and the settings")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: seed 0, {QUICK_STEPS:,} env steps")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.max_env_steps = [0], QUICK_STEPS
    models = [model == "lstm" for model in args.models]
    ray_version = metadata.version("ray")  # the parent imports neither library
    print(f"volley beside RLlib {ray_version} ({', '.join(args.libraries)}); rps_v2 against RLlib's two heuristics; "
          f"PPO {PPO}, value loss {VALUE_LOSS}, model {MODEL}, sampling {SAMPLING} in-process, smoothing "
          f"{SMOOTHING} episodes; seeds {args.seeds}, {args.max_env_steps:,} env steps")
    reports = [child({"library": library, "seed": seed, "use_lstm": use_lstm, "max_env_steps": args.max_env_steps})
               for use_lstm in models for seed in args.seeds for library in args.libraries]
    table(reports, args.libraries, models)
    if args.json is not None:
        args.json.write_text(json.dumps({"ray": ray_version, "ppo": PPO, "value_loss": VALUE_LOSS, "model": MODEL,
                                         "sampling": SAMPLING, "smoothing": SMOOTHING, "runs": reports},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
