"""Time-to-475 on CartPole-v1: volley (local and Ray engines) against Stable-Baselines3 PPO.

SB3 uses rl-zoo's tuned CartPole-v1 hyperparameters; volley uses its defaults, as
``volley train`` does. ``volley-local-rllib-defaults`` is volley with RLlib 2.9's PPO defaults
written out (4,000-step batch of 2 environments x 2,000 steps, lr 5e-5, 30 epochs of 128-row
minibatches, 256x256 tanh network, ...; as benchmarks/multi_agent_rps.py has them): what an RLlib
script that leaves them unset would train with if volley's defaults were RLlib's (docs/rllib.md).
How runs are timed: benchmarks/time_to_475.py.

    python benchmarks/cartpole_ppo.py --seeds 0 1 2          # prints a markdown table
    python benchmarks/cartpole_ppo.py --only volley-ray volley-ray-16   # some runners, and sb3
"""

from __future__ import annotations

from time_to_475 import main, sb3_report, sb3_stop_at_threshold, train_volley


def run_volley(engine: str, seed: int, sample_async: bool = False, envs_per_worker: int | None = None,
               rllib_defaults: bool = False) -> dict:
    """``sample_async``: Ray workers sample the next batch while the learner updates (APPO-style);
    ``envs_per_worker`` replaces the default ("auto": 16 environments shared among the workers);
    ``rllib_defaults``: RLlib 2.9's PPO defaults in place of volley's."""
    from volley import PPOConfig

    config = PPOConfig().environment("CartPole-v1").resources(engine=engine).debugging(seed=seed)
    if rllib_defaults:
        from multi_agent_rps import MODEL, PPO, VALUE_LOSS

        config.training(**PPO, **VALUE_LOSS["volley"], model={**MODEL, "use_lstm": False})
        config.rollouts(num_envs_per_worker=2)  # RLlib's 2 rollout workers of one environment each
    if engine == "ray":
        config.resources(num_cpus=2).rollouts(sample_async=sample_async)
    if envs_per_worker is not None:
        config.rollouts(num_envs_per_worker=envs_per_worker)
    return train_volley(config.build(), max_steps=500_000)


def run_sb3(seed: int) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    def linear(start: float):
        return lambda progress: progress * start

    # rl-zoo hyperparams/ppo.yml, CartPole-v1
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                n_epochs=20, ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2),
                seed=seed, device="cpu", verbose=0)
    model.learn(total_timesteps=100_000, callback=sb3_stop_at_threshold())
    return sb3_report(model)


RUNNERS = {"volley-local": lambda s: run_volley("local", s), "volley-ray": lambda s: run_volley("ray", s),
           "volley-ray-async": lambda s: run_volley("ray", s, sample_async=True),
           # the Ray engine's batch before num_envs_per_worker="auto": 2 workers x 16 envs x 64 steps
           "volley-ray-16": lambda s: run_volley("ray", s, envs_per_worker=16),
           "volley-local-rllib-defaults": lambda s: run_volley("local", s, rllib_defaults=True), "sb3": run_sb3}


if __name__ == "__main__":
    main(__file__, __doc__.split("\n")[0], RUNNERS)
