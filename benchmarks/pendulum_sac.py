"""Time-to--200 on Pendulum-v1: volley SAC (synchronous, and asynchronous with one acting worker
on Ray) against Stable-Baselines3 SAC.

SB3 uses rl-zoo's tuned Pendulum-v1 hyperparameters (hyperparams/sac.yml: SB3's SAC defaults
with lr 1e-3: one env, a gradient step per step on minibatches of 256, 256x256 networks,
learning from step 100, α learned); volley uses the ``sac-pendulum`` preset, the same
settings. A run ends when its last 10 episodes (2,000 steps) average -200, or at rl-zoo's
budget of 20k steps. Every learner uses one torch thread. How runs are timed:
benchmarks/time_to_475.py.

    python benchmarks/pendulum_sac.py --seeds 0 1 2          # prints a markdown table
"""

from __future__ import annotations

from time_to_475 import main, sb3_report, sb3_stop_at_threshold, set_goal, train_volley

MAX_STEPS = 20_000
WINDOW = 10


def one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def preset_config(name: str = "sac-pendulum", seed: int = 0):  # noqa: ANN201 (a volley config)
    from volley.presets import load_preset

    # the goal checked every 100 steps (SB3 checks it at every episode's end, every 200)
    return load_preset(name).make_config({"seed": seed, "metrics_num_episodes_for_smoothing": WINDOW,
                                          "min_sample_timesteps_per_iteration": 100, "min_time_s_per_iteration": 0})


def run_volley_sync(seed: int) -> dict:
    one_thread()
    return train_volley(preset_config(seed=seed).build(), max_steps=MAX_STEPS)


def run_volley_async(seed: int) -> dict:
    one_thread()
    # the worker at most 500 steps ahead of one update per step: on 2 cores the learner would
    # otherwise fall behind it and the replay ratio with it
    config = preset_config(seed=seed).async_mode(engine="ray", num_workers=1, num_cpus=2, max_sample_lead=500,
                                                 min_time_s_per_iteration=0.2)
    return train_volley(config.build(), max_steps=MAX_STEPS)


def run_sb3(seed: int) -> dict:
    from stable_baselines3 import SAC

    one_thread()
    model = SAC("MlpPolicy", "Pendulum-v1", learning_rate=1e-3, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=MAX_STEPS, callback=sb3_stop_at_threshold())
    return sb3_report(model)


RUNNERS = {"volley-sync": run_volley_sync, "volley-async-1": run_volley_async, "sb3": run_sb3}


if __name__ == "__main__":
    set_goal(-200.0, WINDOW)
    main(__file__, __doc__.split("\n")[0], RUNNERS)
