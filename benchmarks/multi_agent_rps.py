"""Rock-paper-scissors against RLlib's two heuristic opponents (issue 46): volley's PPO, feed-forward
and with an LSTM, beside RLlib's published figure.

The setting is RLlib 2.9's ``rock_paper_scissors_multiagent.py`` (``run_heuristic_vs_learned``):
PettingZoo's ``rps_v2`` through ``PettingZooEnv``; ``player_0`` is the learned policy, ``player_1``
plays, per episode, either a heuristic that repeats one random move the whole episode
(``AlwaysSameHeuristic``) or one that plays what beats the learner's last move
(``BeatLastHeuristic``); in-process (``num_rollout_workers=0``), 4 environments, PPO's defaults,
smoothing over 200 episodes. The heuristics here are written anew from that description. The
measure is RLlib's: the learned policy's mean return per episode over the smoothing window
(RLlib's script sums ``hist_stats/policy_learned_reward`` over the window and stops at 1000, a mean
of 5). RLlib's figure, from that script's docstring: "The learned agent should eventually reach a
reward of ~5 with use_lstm=False, and ~7 with use_lstm=True" (the LSTM can tell the two opponents
apart). An episode is 15 rounds (rps_v2's ``max_cycles``), so the return lies in [-15, 15].

    python benchmarks/multi_agent_rps.py --seeds 0 1 2 --max-env-steps 200000

Each run is a process of its own, one after another; the table gives, per seed, the env steps
and seconds until the mean reached 5 and 6, and the mean at the step cap.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from typing import Any

ROCK, PAPER, SCISSORS = 0, 1, 2
THRESHOLDS = (5.0, 6.0)


def run(seed: int, use_lstm: bool, max_env_steps: int) -> dict[str, Any]:
    """One training run in this process; the learned policy's smoothed return as it went."""
    from pettingzoo.classic import rps_v2

    from volley import PettingZooEnv, Policy, PolicySpec, PPOConfig, register_env

    class AlwaysSame(Policy):
        """One random move, repeated all episode (its state)."""

        def get_initial_state(self) -> list[Any]:
            return [random.choice([ROCK, PAPER, SCISSORS])]

        def compute_actions(self, obs_batch: Any, state_batches: Any = None, **kwargs: Any) -> Any:
            return [state_batches[0][i] for i in range(len(obs_batch))], state_batches, {}

    class BeatLast(Policy):
        """What beats the opponent's last move (a random move before there is one)."""

        def compute_actions(self, obs_batch: Any, state_batches: Any = None, **kwargs: Any) -> Any:
            beats = {ROCK: PAPER, PAPER: SCISSORS, SCISSORS: ROCK}
            return [beats.get(int(x), random.choice([ROCK, PAPER, SCISSORS])) for x in obs_batch], [], {}

    def select(agent_id: str, episode: Any, **kwargs: Any) -> str:
        return "learned" if agent_id == "player_0" else random.choice(["always_same", "beat_last"])

    random.seed(seed)
    register_env("RockPaperScissors", lambda config: PettingZooEnv(rps_v2.env()))
    config = (PPOConfig().environment("RockPaperScissors")
              .rollouts(num_rollout_workers=0, num_envs_per_worker=4)
              .multi_agent(policies={"always_same": PolicySpec(AlwaysSame), "beat_last": PolicySpec(BeatLast),
                                     "learned": PolicySpec(config={"model": {"use_lstm": use_lstm}})},
                           policy_mapping_fn=select, policies_to_train=["learned"])
              .reporting(metrics_num_episodes_for_smoothing=200)
              .resources(engine="local").debugging(seed=seed))
    start = time.perf_counter()
    reached: dict[str, dict[str, float]] = {}
    curve = []
    with config.build() as algo:
        while True:
            result = algo.train()
            rewards = result["hist_stats"].get("policy_learned_reward", [])
            mean = sum(rewards) / len(rewards) if rewards else 0.0
            steps, seconds = result["timesteps_total"], time.perf_counter() - start
            curve.append((steps, round(mean, 3)))
            for threshold in THRESHOLDS:
                if mean >= threshold and str(threshold) not in reached:
                    reached[str(threshold)] = {"env_steps": steps, "seconds": round(seconds, 1)}
            if steps >= max_env_steps:
                break
    return {"seed": seed, "use_lstm": use_lstm, "reached": reached, "final_mean": curve[-1][1],
            "env_steps": curve[-1][0], "seconds": round(time.perf_counter() - start, 1), "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=200_000)
    parser.add_argument("--json", help="also write every run's report here")
    parser.add_argument("--child", nargs=3, metavar=("SEED", "LSTM", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        seed, lstm, steps = args.child
        print(json.dumps(run(int(seed), lstm == "1", int(steps))))
        return
    reports = []
    for use_lstm in (False, True):
        for seed in args.seeds:
            out = subprocess.run([sys.executable, __file__, "--child", str(seed), str(int(use_lstm)),
                                  str(args.max_env_steps)], capture_output=True, text=True, check=True)
            reports.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| policy | seed | env steps to 5 (s) | env steps to 6 (s) | mean at the cap | env steps | s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in reports:
        cells = [f"{r['reached'][str(t)]['env_steps']:,} ({r['reached'][str(t)]['seconds']})"
                 if str(t) in r["reached"] else "not reached" for t in THRESHOLDS]
        print(f"| {'LSTM' if r['use_lstm'] else 'feed-forward'} | {r['seed']} | {cells[0]} | {cells[1]} | "
              f"{r['final_mean']:.2f} | {r['env_steps']:,} | {r['seconds']} |")
    for use_lstm in (False, True):
        finals = [r["final_mean"] for r in reports if r["use_lstm"] == use_lstm]
        print(f"{'LSTM' if use_lstm else 'feed-forward'}: median mean return at the cap "
              f"{statistics.median(finals):.2f} (RLlib's figure: ~{7 if use_lstm else 5})")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(reports, file, indent=1)


if __name__ == "__main__":
    main()
