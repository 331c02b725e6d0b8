"""RLlib's custom-metrics recipe: callbacks that track CartPole's pole angle, shown in TensorBoard.

The callbacks class is RLlib's ``custom_metrics_and_callbacks`` example with only the import
changed (``from ray.rllib.algorithms.callbacks import DefaultCallbacks`` becomes ``from volley
import DefaultCallbacks``). Its episode hooks run where the episodes run (each Ray worker,
or this process with ``--workers 0``): every step adds the pole's angle to the episode's
``user_data``, and the episode's end sets its mean as ``episode.custom_metrics["pole_angle"]``
and keeps every angle as ``hist_data``. The driver summarises the last 100 episodes' values
into ``custom_metrics/pole_angle_mean`` (``_min``, ``_max``) and ``hist_stats/pole_angles``,
which ``progress.jsonl`` and TensorBoard record beside the usual results::

    python examples/custom_metrics_callbacks.py                 # 10 iterations on 2 Ray workers
    python examples/custom_metrics_callbacks.py --iters 40      # until CartPole is mastered
    tensorboard --logdir runs/custom_metrics                    # scalars: volley/custom_metrics/...

The angle shrinks as PPO learns: a balanced pole stays near upright.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from volley import DefaultCallbacks, PPOConfig
from volley.run import Stop, train_until


class MyCallbacks(DefaultCallbacks):
    def on_episode_start(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        # Make sure this episode has just been started (only the reset's observation so far).
        assert episode.length == 0, "on_episode_start() should be called right after env reset"
        episode.user_data["pole_angles"] = []
        episode.hist_data["pole_angles"] = []

    def on_episode_step(self, *, worker, base_env, policies=None, episode, env_index, **kwargs):
        # Make sure this episode is ongoing.
        assert episode.length > 0, "on_episode_step() should not be called right after env reset"
        pole_angle = abs(episode.last_observation_for()[2])
        raw_angle = abs(episode.last_raw_obs_for()[2])
        assert pole_angle == raw_angle
        episode.user_data["pole_angles"].append(float(pole_angle))

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        episode.custom_metrics["pole_angle"] = np.mean(episode.user_data["pole_angles"])
        episode.hist_data["pole_angles"] = episode.user_data["pole_angles"]

    def on_sample_end(self, *, worker, samples, **kwargs):
        assert samples.count > 0

    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        result["sum_actions_in_train_batch"] = float(np.sum(train_batch["actions"]))

    def on_train_result(self, *, algorithm, result, **kwargs):
        result["callback_ok"] = True  # a key added here is returned, logged and reported to Tune


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=10, help="training iterations (default: 10)")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers; 0 samples in this process")
    parser.add_argument("--dir", type=Path, default=Path("runs/custom_metrics"),
                        help="run directory: progress.jsonl, TensorBoard events, checkpoints")
    args = parser.parse_args()

    config = (PPOConfig()
              .environment("CartPole-v1")
              .resources(engine="ray" if args.workers else "local", num_cpus=max(args.workers, 1))
              .rollouts(num_rollout_workers=args.workers)
              .callbacks(MyCallbacks))
    with config.build() as algo:
        outcome = train_until(algo, Stop(iterations=args.iters), args.dir)
    result = outcome.result
    metrics = result["custom_metrics"]
    print(f"pole angle over the last {len(result['hist_stats']['episode_reward'])} episodes: mean "
          f"{metrics['pole_angle_mean']:.4f} rad (min {metrics['pole_angle_min']:.4f}, max "
          f"{metrics['pole_angle_max']:.4f}); mean return {result['episode_reward_mean']:.1f}")
    print(f"callback_ok: {result['callback_ok']}; TensorBoard: tensorboard --logdir {args.dir}")


if __name__ == "__main__":
    main()
