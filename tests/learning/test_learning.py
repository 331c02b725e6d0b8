"""Each algorithm reaches its return threshold within a fixed budget of environment steps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from custom_models import TorchCustomModel

from volley import ModelCatalog, PPOConfig


def train_until(algo, reward: float, max_steps: int) -> dict:
    result = {}
    try:
        while not result or (result["timesteps_total"] < max_steps
                             and not result["episode_reward_mean"] >= reward):
            result = algo.train()
    finally:
        algo.stop()
    return result


def test_cartpole_local_engine_reaches_475():
    algo = PPOConfig().environment("CartPole-v1").resources(engine="local").debugging(seed=0).build()
    result = train_until(algo, 475, max_steps=200_000)
    assert result["episode_reward_mean"] >= 475, result


def test_cartpole_with_rllibs_adaptive_kl_penalty_reaches_475():
    """RLlib's quick-start settings for the penalty (lr 0.01, kl_coeff 0.3, kl_target 0.01) on volley's
    PPO: the weight is adapted by the rule after every iteration, and CartPole is solved."""
    import torch

    from volley.algorithms.ppo.loss import adapt_kl_coeff

    algo = (PPOConfig().environment("CartPole-v1").resources(engine="local")
            .training(lr=0.01, kl_coeff=0.3, kl_target=0.01).debugging(seed=1).build())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small minibatches: a second thread on a busy core only waits
    results: list[dict] = []
    try:
        while not results or (results[-1]["timesteps_total"] < 200_000
                              and not results[-1]["episode_reward_mean"] >= 475):
            results.append(algo.train())
    finally:
        torch.set_num_threads(threads)
        algo.stop()
    assert results[-1]["episode_reward_mean"] >= 475, results[-1]
    weights = [r["kl_coeff"] for r in results]
    assert len(set(weights)) > 2, weights  # the penalty was adapted, not left at 0.3
    for before, after in zip(results, results[1:], strict=False):
        assert after["kl_coeff"] == adapt_kl_coeff(before["kl_coeff"], before["kl"], 0.01)


def test_pendulum_continuous_improves_clearly():
    """Random play scores about -1200; trained until 500 better than the first iteration, what
    the test asserts: seed 0 (reproducible on the local engine) started at -1177 and reached
    -647 at 79,480 steps. Before issue 59 it trained on to -250 (at 120,232 steps) to assert the
    same +500."""
    algo = (PPOConfig().environment("Pendulum-v1", observation_filter="MeanStdFilter")
            .resources(engine="local").rollouts(num_envs_per_worker=8)
            .training(train_batch_size=2048, minibatch_size=256, num_epochs=10, lr=1e-3,
                      gamma=0.9, gae_lambda=0.95, model={"log_std_init": -0.5})
            .debugging(seed=0).build())
    first = algo.train()["episode_reward_mean"]
    result = train_until(algo, first + 500, max_steps=150_000)
    assert math.isfinite(first) and first < -900  # random play scores about -1200
    assert result["episode_reward_mean"] >= first + 500, (first, result["episode_reward_mean"])


def test_same_config_and_seed_give_identical_results():
    def run() -> list[dict]:
        algo = (PPOConfig().environment("CartPole-v1").resources(engine="local")
                .rollouts(num_workers=2, num_envs_per_worker=3)
                .training(train_batch_size=600, minibatch_size=100).debugging(seed=3).build())
        try:
            results = [algo.train() for _ in range(3)]
            results.append({"weights": algo.policy.get_flat_weights().tolist()})
        finally:
            algo.stop()
        timing = {"time_this_iter_s", "time_total_s", "sample_time_s", "learn_time_s", "env_steps_per_s"}
        return [{k: v for k, v in r.items() if k not in timing} for r in results]

    first, second = run(), run()
    assert first == second
    different = (PPOConfig().environment("CartPole-v1").resources(engine="local")
                 .rollouts(num_workers=2, num_envs_per_worker=3)
                 .training(train_batch_size=600, minibatch_size=100).debugging(seed=4).build())
    try:
        assert different.train()["episode_reward_mean"] != first[0]["episode_reward_mean"]
    finally:
        different.stop()


def test_pg_gradients_mode_on_two_ray_workers_reaches_195(ray_session):
    from volley import PGConfig

    algo = (PGConfig().environment("CartPole-v1").resources(engine="ray")
            .rollouts(num_workers=2, num_envs_per_worker=2)
            .training(mode="gradients", lr=1e-2, batch_episodes=10, gamma=0.99,
                      model={"fcnet_hiddens": [32]})
            .debugging(seed=0).build())
    result = train_until(algo, 195, max_steps=150_000)
    assert result["episode_reward_mean"] >= 195, result


def test_trpo_cartpole_local_engine_reaches_475():
    from volley import TRPOConfig

    algo = (TRPOConfig().environment("CartPole-v1").resources(engine="local")
            .rollouts(num_envs_per_worker=16).training(max_kl=0.02, train_batch_size=2000)
            .debugging(seed=1).build())
    result = train_until(algo, 475, max_steps=400_000)
    assert result["episode_reward_mean"] >= 475, result
    assert result["kl"] <= 0.02 * 1.5


def test_a2c_cartpole_local_engine_reaches_475():
    """A2C with its defaults (SB3's, as rl-zoo runs them on CartPole: 8 envs x 5 steps an update);
    seed 0 reached 475 at 175k steps (benchmarks/RESULTS.md, A2C on CartPole-v1)."""
    from volley.algorithms.a2c import A2CConfig

    algo = (A2CConfig().environment("CartPole-v1").resources(engine="local")
            .reporting(min_sample_timesteps_per_iteration=1000).debugging(seed=0).build())
    result = train_until(algo, 475, max_steps=250_000)
    assert result["episode_reward_mean"] >= 475, result


def test_dqn_cartpole_local_engine_reaches_475():
    """DQN's update (Ape-X DQN's too) to 475. The local engine is reproducible from a seed (two
    runs of seed 1 matched iteration for iteration, to 12k steps): seed 1 reached 475 at 74,919
    steps, twice; seed 2 was at 406 at 70k; seed 0, this test's seed before issue 59, at 80,552
    in the dqn-cartpole preset's benchmark run (commit 003e9ca)."""
    import torch

    from volley import DQNConfig

    algo = (DQNConfig().environment("CartPole-v1").resources(engine="local").training(n_step=3)
            .debugging(seed=1).build())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # minibatches of 64 are too small to share; a busy 2nd core stalls them
    try:
        result = train_until(algo, 475, max_steps=100_000)
    finally:
        torch.set_num_threads(threads)
    assert result["episode_reward_mean"] >= 475, result


def test_apex_dqn_two_acting_workers_one_shard_reach_200(ray_session):
    """Ape-X on Ray: 2 acting workers, 1 replay shard, the learner in this process, to a mean of
    200 over 100 episodes (random play: about 22); bounded in learner updates (each train() call
    learns for a second, however many that is). Asynchronous runs are not reproducible from a
    seed; on the 2 cores, loaded by other jobs, two runs of each seed reached 200 at 12,105 and
    12,501 learner updates (seed 0), 15,678 and 23,424 (seed 1), 12,360 and 10,999 (seed 2): the
    budget is 2.5 times the slowest. DQN's update to 475 is
    test_dqn_cartpole_local_engine_reaches_475's; Ape-X with these settings to 475 is the
    benchmark's (benchmarks/RESULTS.md: three runs in 43.4k-43.9k updates, two others at 413 and
    465 after their 150k steps), three to four times this test's updates."""
    import torch

    from volley import ApexDQNConfig
    from volley.algorithms.dqn.apex import CARTPOLE

    algo = (ApexDQNConfig().environment("CartPole-v1").rollouts(num_workers=2)
            .training(**CARTPOLE).debugging(seed=0).build())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the learner shares the 2 cores with the workers
    result = {}
    try:
        while not result or (result["learner_updates"] < 60_000
                             and not result["episode_reward_mean"] >= 200):
            result = algo.train()
    finally:
        torch.set_num_threads(threads)
        algo.stop()
    assert result["episode_reward_mean"] >= 200, result
    assert result["num_worker_restarts"] == 0 and result["replay_size"] > 0


# -- a custom model, as RLlib's docs write one (tests/custom_models.py) -----------------------


def test_a_custom_model_learns_cartpole_to_475_on_two_ray_workers(ray_session):
    """PPO with a custom model registered in this process (the workers rebuild it from the
    registry) reaches 475 on 2 Ray workers: seed 0 at 65,117 steps (budget 150k). It holds the assertions of
    two tests it replaced (issue 59): test_cartpole_two_ray_workers_reach_475 (PPO on 2 Ray
    workers reaches 475, num_workers == 2) and this test's local-engine case (the custom model
    learns; the same model and update as here, the local engine's PPO to 475 being
    test_cartpole_local_engine_reaches_475's)."""
    ModelCatalog.register_custom_model("my_model", TorchCustomModel)
    config = (PPOConfig().environment("CartPole-v1").resources(engine="ray").env_runners(num_env_runners=2)
              .training(model={"custom_model": "my_model", "vf_share_layers": False}).debugging(seed=0))
    algo = config.build()
    before = algo.policy.get_flat_weights()
    assert isinstance(algo.policy.model, TorchCustomModel)
    after = None
    try:
        result = {}
        while not result or (result["timesteps_total"] < 150_000 and not result["episode_reward_mean"] >= 475):
            result = algo.train()
        after = algo.policy.get_flat_weights()
    finally:
        algo.stop()
    assert result["episode_reward_mean"] >= 475, result
    assert result["num_workers"] == 2
    assert np.abs(after - before).max() > 0.1  # its weights, trained


@pytest.mark.parametrize("algo_name", ["impala", "appo"])
def test_impala_and_appo_two_ray_workers_reach_475(ray_session, algo_name):
    """The stream of fragments on Ray: 2 workers of 8 environments never waiting for the learner,
    V-trace correcting for the lag (a mean near 2 updates), each algorithm's ``CARTPOLE`` settings.
    The arrival order of fragments is not reproducible, and the steps to 475 spread widely: on a
    machine loaded by a second run, IMPALA took 73k-465k (40 runs of seed 0, median 139k); APPO
    62k-274k (24 runs of seed 0 beside another job, median 107k; at IMPALA's lr 1e-3 one run in
    about 15 fell back and missed the budget). The budget is what a slow run needs; a typical one
    stops at a quarter of it."""
    from volley import APPOConfig, IMPALAConfig
    from volley.algorithms.impala import appo
    from volley.algorithms.impala import learner as impala

    cls, settings = (IMPALAConfig, impala.CARTPOLE) if algo_name == "impala" else (APPOConfig, appo.CARTPOLE)
    algo = (cls().environment("CartPole-v1").rollouts(num_workers=2, num_envs_per_worker=8).update(**settings)
            .reporting(min_time_s_per_iteration=0.5).debugging(seed=0).build())
    result = train_until(algo, 475, max_steps=600_000)
    assert result["episode_reward_mean"] >= 475, result
    assert result["num_workers"] == 2 and result["policy_lag_mean"] > 0  # the data was off-policy


# Pendulum-v1 with small networks: seeds 0-2 reached -200 (the last 10 episodes) at 5.0k-6.7k steps
PENDULUM_SAC = {"lr": 1e-3, "learning_starts": 100, "train_batch_size": 128,
                "model": {"fcnet_hiddens": [64, 64]}, "q_model_config": {"fcnet_hiddens": [64, 64]}}


def test_sac_pendulum_local_engine_reaches_minus_200():
    import torch

    from volley import SACConfig

    algo = (SACConfig().environment("Pendulum-v1").resources(engine="local").training(**PENDULUM_SAC)
            .reporting(metrics_num_episodes_for_smoothing=10).debugging(seed=0).build())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train_until(algo, -200, max_steps=12_000)
    finally:
        torch.set_num_threads(threads)
    assert result["episode_reward_mean"] >= -200, result


def test_apex_sac_pendulum_one_acting_worker_reaches_minus_200(ray_session):
    """Asynchronous SAC: an acting worker and a replay shard on Ray, the learner here; the workers
    at most 500 steps ahead of one update per step, so the budget in environment steps holds."""
    import torch

    from volley import ApexSACConfig

    algo = (ApexSACConfig().environment("Pendulum-v1").rollouts(num_workers=1)
            .training(**PENDULUM_SAC, max_sample_lead=500, weight_sync_interval=64)
            .reporting(metrics_num_episodes_for_smoothing=10).debugging(seed=0).build())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the learner shares the 2 cores with the worker
    try:
        result = train_until(algo, -200, max_steps=15_000)
    finally:
        torch.set_num_threads(threads)
    assert result["episode_reward_mean"] >= -200, result
    # the lead held: learning_starts, the lead, and the two runs of 64 steps queued on the worker
    # (volley/engines/async_actors.py) that may_sample() let start before the steps were reported
    assert result["learner_updates"] >= result["timesteps_total"] - 100 - 500 - 2 * 64, result


def test_lstm_ppo_remembers_what_stateless_cartpole_hides():
    """StatelessCartPole-v1 shows the cart's position and the pole's angle only: the preset's LSTM
    PPO (rl-zoo's RecurrentPPO settings for CartPoleNoVel) reaches 200 (random play: about 22),
    and the same settings without the LSTM stay below 100 in the steps the LSTM took. Seeds 0, 1
    and 2 reached 200 at 29,151, 29,411 and 28,415 steps (the local engine is reproducible from a
    seed); the feed-forward control plateaus near 45 (seed 0 at most 49.5 in 60k steps; seeds 1
    and 2 at most 49.2 and 54.5 in 30k). The run to 475 (a median of 115k steps, 3 seeds) is the
    preset's benchmark (benchmarks/RESULTS.md); past 200 the LSTM's curve is slow and not
    monotone (seed 1: 265 at 39k steps, 196 at 51k, 300 at 85k)."""
    from volley.presets import load_preset

    preset = load_preset("ppo-lstm-stateless-cartpole")
    lstm = train_until(preset.make_config({"seed": 0}).build(), 200, max_steps=60_000)
    assert lstm["episode_reward_mean"] >= 200, lstm
    budget = lstm["timesteps_total"]
    without_memory = {"seed": 0, "model": {**preset.config["model"], "use_lstm": False}}
    feed_forward = train_until(preset.make_config(without_memory).build(), 100, max_steps=budget)
    assert feed_forward["episode_reward_mean"] < 100 and feed_forward["timesteps_total"] >= budget, feed_forward


def test_r2d2_cartpole_reaches_150():
    """R2D2 with its defaults (an LSTM of 64 over a 64-unit MLP, sequences of 20 steps, h-rescaled
    double-Q targets): seed 0 averaged 156 at 20k steps and 191 at 28k."""
    from volley import R2D2Config

    algo = R2D2Config().environment("CartPole-v1").rollouts(num_rollout_workers=0).debugging(seed=0).build()
    result = train_until(algo, 150, max_steps=30_000)
    assert result["episode_reward_mean"] >= 150, result
