"""Time-to-475 on CartPole-v1: volley's A2C against Stable-Baselines3's A2C.

Both with rl-zoo's CartPole-v1 A2C settings (8 environments, ent_coef 0.0, SB3's defaults
otherwise: 5 steps per environment per update, lr 7e-4, RMSProp), which are volley's A2C
defaults; the budget is rl-zoo's 500k steps. How runs are timed: benchmarks/time_to_475.py.

    python benchmarks/cartpole_a2c.py --seeds 0 1 2          # prints a markdown table
"""

from __future__ import annotations

from time_to_475 import main, sb3_report, sb3_stop_at_threshold, train_volley

BUDGET = 500_000  # rl-zoo's n_timesteps for a2c on CartPole-v1


def run_volley(seed: int) -> dict:
    from volley.algorithms.a2c import A2CConfig

    # 25 updates of 40 steps per train() call: the result dict is not built after every update
    config = (A2CConfig().environment("CartPole-v1").resources(engine="local").debugging(seed=seed)
              .reporting(min_sample_timesteps_per_iteration=1000))
    return train_volley(config.build(), max_steps=BUDGET)


def run_sb3(seed: int) -> dict:
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    # rl-zoo hyperparams/a2c.yml, CartPole-v1
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = A2C("MlpPolicy", env, ent_coef=0.0, seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=BUDGET, callback=sb3_stop_at_threshold())
    return sb3_report(model)


RUNNERS = {"volley-a2c": run_volley, "sb3": run_sb3}


if __name__ == "__main__":
    main(__file__, __doc__.split("\n")[0], RUNNERS)
