"""Time-to-475 on CartPole without velocities: volley's LSTM PPO against sb3-contrib's RecurrentPPO.

The task needs memory: the observation is the cart's position and the pole's angle only.
sb3-contrib's ``RecurrentPPO`` runs with rl-zoo's ``CartPoleNoVel-v1`` settings
(``hyperparams/ppo_lstm.yml``: 8 envs, 32 steps, VecNormalize, an LSTM of 64 and a 64-unit
layer each for the policy and the value function, lr and clip annealed over 100k steps) on
rl-zoo's own environment (velocities zeroed); volley runs its preset
``ppo-lstm-stateless-cartpole`` on ``StatelessCartPole-v1`` (velocities removed, RLlib's) and,
for the plateau a policy without memory reaches, volley's feed-forward PPO with the same
settings and budget. How runs are timed: benchmarks/time_to_475.py.

    python benchmarks/stateless_cartpole_lstm.py --seeds 0 1 2     # prints a markdown table
    python benchmarks/stateless_cartpole_lstm.py --only volley-lstm --seeds 0   # one runner, and sb3
"""

from __future__ import annotations

from time_to_475 import main, sb3_report, sb3_stop_at_threshold, train_volley

BUDGET = 200_000  # env steps: twice the peer's tuned run, whose schedules end at 100k


def run_volley(seed: int, use_lstm: bool = True) -> dict:
    from volley.presets import load_preset

    preset = load_preset("ppo-lstm-stateless-cartpole")
    overrides = {"seed": seed} if use_lstm else {"seed": seed, "model": {**preset.config["model"], "use_lstm": False}}
    return train_volley(preset.make_config(overrides).build(), max_steps=BUDGET)


def run_sb3(seed: int) -> dict:
    import rl_zoo3.import_envs  # noqa: F401  # registers rl-zoo's CartPoleNoVel-v1
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    def linear(start: float):
        return lambda progress: progress * start

    # rl-zoo hyperparams/ppo_lstm.yml, CartPoleNoVel-v1 (normalize: True is VecNormalize with gamma)
    env = VecNormalize(make_vec_env("CartPoleNoVel-v1", n_envs=8, seed=seed), gamma=0.98)
    model = RecurrentPPO(
        "MlpLstmPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
        ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu", verbose=0,
        policy_kwargs={"ortho_init": False, "activation_fn": nn.ReLU, "lstm_hidden_size": 64,
                       "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]}})
    model.learn(total_timesteps=100_000, callback=sb3_stop_at_threshold())
    return sb3_report(model)


RUNNERS = {"volley-lstm": run_volley, "volley-feed-forward": lambda s: run_volley(s, use_lstm=False),
           "sb3": run_sb3}


if __name__ == "__main__":
    main(__file__, __doc__.split("\n")[0], RUNNERS)
