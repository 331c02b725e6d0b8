"""What callbacks cost the sampler: one worker's steps per second without a callbacks class,
with one that overrides nothing, with one that overrides only ``on_episode_end`` (custom
metrics, the usual case) and with one that overrides ``on_episode_step`` (a Python call per
environment per step).

A hook nobody overrides is never called, and a worker whose callbacks override no episode
hook follows no episodes (``RolloutWorker.episodes`` is None), so the first two rates should
be the same. Each case is a PPO rollout worker built as ``volley bench sampler`` builds it
(CartPole's native vector of 16 environments by default, an MLP acting in numpy); the cases
take turns for ``--rounds`` rounds of ``--seconds`` each, and the table gives each case's
median and its ratio to no callbacks.

    python benchmarks/callbacks_overhead.py                      # CartPole-v1, 16 envs, 5 x 5 s
    python benchmarks/callbacks_overhead.py --env HalfCheetah-v5 --num-envs 1
"""

from __future__ import annotations

import argparse

import numpy as np

from volley import DefaultCallbacks
from volley.bench import rate, rates_table, sampling_worker


class OverridesNothing(DefaultCallbacks):
    pass


class EpisodeEnd(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["length"] = episode.length


class EpisodeStep(DefaultCallbacks):
    def on_episode_step(self, *, episode, **kwargs):
        pass


class PoleAngle(DefaultCallbacks):
    """RLlib's example: the observation's third value (CartPole's pole angle) every step."""

    def on_episode_start(self, *, episode, **kwargs):
        episode.user_data["angles"] = []

    def on_episode_step(self, *, episode, **kwargs):
        episode.user_data["angles"].append(abs(episode.last_observation_for()[2]))

    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["pole_angle"] = np.mean(episode.user_data["angles"])


CASES = {"no callbacks": None, "overrides nothing": OverridesNothing, "on_episode_end only": EpisodeEnd,
         "on_episode_step (empty)": EpisodeStep, "RLlib's pole-angle example": PoleAngle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    args = parser.parse_args()
    workers = {name: sampling_worker(args.env, args.num_envs, {"callbacks_class": CASES[name]})
               for name in args.cases}
    rates: dict[str, list[float]] = {name: [] for name in args.cases}
    for _ in range(args.rounds):
        for name, (worker, weights, steps) in workers.items():
            rates[name].append(rate(lambda w=worker, x=weights: w.sample(x, None), steps, args.seconds))
    print(f"{args.env}, {args.num_envs} environments, {args.rounds} rounds of {args.seconds:g} s\n")
    print(rates_table(rates, "callbacks"))


if __name__ == "__main__":
    main()
