"""RLlib's algorithm methods, result keys, environment classes and PPO's adaptive KL penalty,
called as RLlib's docs spell them, on real environments and real training."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from volley import Algorithm, EnvError, PPOConfig, VolleyError
from volley.algorithms.ppo.loss import adapt_kl_coeff
from volley.envs import env_actions
from volley.logging import PROGRESS, ResultLogger
from volley.named import ENVIRONMENTS


@pytest.fixture(autouse=True)
def torch_threads():
    """The configs here give the learner one thread (num_cpus_for_local_worker=1: small networks on a
    busy machine); put the process's setting back after each test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def small_ppo(**training) -> PPOConfig:
    return (PPOConfig().environment("CartPole-v1").resources(engine="local", num_cpus_for_local_worker=1)
            .env_runners(num_envs_per_env_runner=4)
            .training(train_batch_size=512, minibatch_size=128, **training).debugging(seed=0))


# -- 1. the adaptive KL penalty in training --------------------------------------------------------


def test_penalty_weight_follows_the_rule_each_iteration_and_is_checkpointed(tmp_path):
    algo = small_ppo(kl_coeff=0.2, kl_target=1e-5).build()  # every real KL is > 2 x 1e-5: x1.5
    try:
        first, second = algo.train(), algo.train()
        assert first["kl"] > 2e-5 and second["kl"] > 2e-5
        assert first["kl_coeff"] == 0.2 and second["kl_coeff"] == pytest.approx(0.3)  # the weight used
        assert algo.kl_coeff == pytest.approx(adapt_kl_coeff(0.3, second["kl"], 1e-5)) == pytest.approx(0.45)
        assert second["learners"]["default_policy"]["curr_kl_coeff"] == second["kl_coeff"]
        assert second["info"]["learner"]["default_policy"]["learner_stats"]["cur_kl_coeff"] == second["kl_coeff"]
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        assert restored.kl_coeff == pytest.approx(0.45)
        assert restored.train()["kl_coeff"] == pytest.approx(0.45)
    finally:
        restored.stop()
    halving = small_ppo(kl_coeff=0.2, kl_target=10.0).build()  # every real KL is < 5: x0.5
    try:
        halving.train()
        assert halving.kl_coeff == pytest.approx(0.1)
    finally:
        halving.stop()


def test_penalty_holds_the_policy_closer_to_the_old_one():
    def first_kl(kl_coeff: float) -> float:
        algo = small_ppo(kl_coeff=kl_coeff, lr=0.01).build()
        try:
            return algo.train()["kl"]
        finally:
            algo.stop()

    free, penalised = first_kl(0.0), first_kl(50.0)
    assert penalised < 0.5 * free, (free, penalised)


def test_replicas_adapt_with_the_mean_kl(monkeypatch):
    """MPI allreduce replicas adapt kl_coeff from the KL averaged over the ranks, so all agree: the
    KL the rule sees is the replica mean, not this replica's own."""
    algo = small_ppo(kl_coeff=0.2, kl_target=1.0).build()
    try:
        monkeypatch.setattr(algo.workers, "average_over_replicas", lambda values: np.full_like(values, 5.0))
        result = algo.train()
        assert result["kl"] < 0.5  # this replica's own KL would halve the weight ...
        assert algo.kl_coeff == pytest.approx(0.3)  # ... the mean over replicas (5.0 > 2) raises it
    finally:
        algo.stop()


def test_no_penalty_by_default():
    algo = small_ppo().build()
    try:
        result = algo.train()
        assert result["kl_coeff"] == 0.0 and algo.kl_coeff == 0.0
    finally:
        algo.stop()


# -- 3. environments given as a class or a function -----------------------------------------------


class Corridor(gym.Env):
    """Walk right to the end of a corridor of ``env_config["length"]`` cells; -0.1 a step, +1 at the end."""

    def __init__(self, config: dict | None = None) -> None:
        self.length = (config or {}).get("length", 5)
        self.observation_space = gym.spaces.Box(0.0, float(self.length), (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        done = self.position >= self.length
        return np.array([self.position], np.float32), 1.0 if done else -0.1, done, False, {}


def corridor_config(env, **env_config) -> PPOConfig:
    return (PPOConfig().environment(env=env, env_config=env_config).resources(num_cpus_for_local_worker=1)
            .training(train_batch_size=256, minibatch_size=64).debugging(seed=0))


def test_an_env_class_is_an_env(tmp_path):
    config = corridor_config(Corridor, length=3).resources(engine="local")
    assert config.env == f"{__name__}:Corridor"
    algo = config.build()
    try:
        assert algo.observation_space.high[0] == 3.0  # built with env_config
        result = algo.train()
        assert result["episodes_this_iter"] > 0 and result["episode_len_mean"] >= 3
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    ENVIRONMENTS._given.pop(f"{__name__}:Corridor")  # as in a fresh process: found again in its module
    restored = Algorithm.from_checkpoint(path)
    try:
        assert restored.config.env == f"{__name__}:Corridor" and restored.iteration == 1
        assert restored.observation_space.high[0] == 3.0
    finally:
        restored.stop()


def test_creator_functions_get_names_of_their_own():
    def first(env_config):
        return Corridor(env_config)

    config = corridor_config(lambda env_config: Corridor({"length": 2})).resources(engine="local")
    other = PPOConfig().environment(env=lambda env_config: Corridor({"length": 4}))
    assert config.env.endswith(".<locals>.<lambda>") and other.env.endswith(".<locals>.<lambda>#2")
    assert PPOConfig().environment(first).env.endswith("test_creator_functions_get_names_of_their_own"
                                                       ".<locals>.first")
    algo = config.build()
    try:
        assert algo.observation_space.high[0] == 2.0  # the first lambda, not the second
    finally:
        algo.stop()


def test_a_missing_env_class_is_named_with_what_to_do():
    config = PPOConfig().environment(env=f"{__name__}:NoSuchEnv").resources(engine="local")
    with pytest.raises(EnvError, match=rf"environment '{__name__}:NoSuchEnv' was a class or function given "
                                       r"as env .*has no NoSuchEnv in module .*"
                                       r"config.environment\(env=NoSuchEnv\)\), or register_env"):
        config.build()
    with pytest.raises(VolleyError, match=r"'env' must be a Gymnasium id, a name given to register_env, a "
                                          r"gymnasium.Env subclass or a creator function, got 5"):
        PPOConfig().environment(env=5)


def test_an_env_class_travels_to_ray_workers(ray_session):
    algo = corridor_config(Corridor, length=4).env_runners(num_env_runners=2, num_envs_per_env_runner=2).build()
    try:
        result = algo.train()
        assert result["num_workers"] == 2 and result["episodes_this_iter"] > 0
        assert algo.observation_space.high[0] == 4.0
    finally:
        algo.stop()


def test_normalize_actions_rescales_to_the_bounds():
    box = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    actions = np.array([[-1.0], [0.0], [0.5], [3.0]], np.float32)
    assert env_actions(actions, box, normalize=True, clip=True).ravel().tolist() == [-2.0, 0.0, 1.0, 2.0]
    assert env_actions(actions, box, normalize=False, clip=True).ravel().tolist() == [-1.0, 0.0, 0.5, 2.0]
    assert env_actions(actions, box, normalize=False, clip=False).ravel().tolist() == [-1.0, 0.0, 0.5, 3.0]
    algo = (PPOConfig().environment("Pendulum-v1", normalize_actions=True)
            .resources(engine="local", num_cpus_for_local_worker=1).env_runners(num_envs_per_env_runner=1)
            .training(train_batch_size=256, minibatch_size=64).build())
    try:
        obs = np.array([1.0, 0.0, 0.3], np.float32)
        mean = algo.policy(torch.as_tensor(obs[None]))[0].mode()[0].detach().numpy()
        assert algo.compute_single_action(obs) == pytest.approx(2.0 * np.clip(mean, -1, 1))
        result = algo.train()  # one 200-step episode; each step's reward is at least -16.3
        assert result["episodes_this_iter"] == 1 and -3300 < result["episode_reward_mean"] < 0
    finally:
        algo.stop()


# -- 4. reporting: the steps an iteration samples ---------------------------------------------------


def test_min_sample_timesteps_per_iteration_repeats_the_training_step(monkeypatch):
    algo = small_ppo().reporting(min_sample_timesteps_per_iteration=1200).build()
    steps = []
    training_step = algo.training_step
    monkeypatch.setattr(algo, "training_step", lambda: steps.append(1) or training_step())
    try:
        result = algo.train()
        # a batch is at most 512 valid steps (autoreset steps are dropped): three are needed
        assert len(steps) == 3 and 1200 <= result["timesteps_this_iter"] <= 3 * 512
        assert result["env_runners"]["num_env_steps_sampled"] == result["timesteps_this_iter"]
        assert result["training_iteration"] == 1
    finally:
        algo.stop()


# -- 7. algorithm objects ---------------------------------------------------------------------------


def test_policy_weights_move_between_algorithms(tmp_path):
    source, target = small_ppo().build(), small_ppo().debugging(seed=5).build()
    try:
        source.train()
        weights = source.get_policy().get_weights()
        assert set(weights) == set(source.policy.state_dict()) and all(
            isinstance(w, np.ndarray) for w in weights.values())
        assert np.array_equal(source.get_weights()["default_policy"]["pi_head.weight"], weights["pi_head.weight"])
        observations = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
        assert not np.array_equal(target.policy.get_flat_weights(), source.policy.get_flat_weights())
        target.set_weights(source.get_weights())
        assert np.array_equal(target.policy.get_flat_weights(), source.policy.get_flat_weights())
        assert [source.compute_single_action(o, explore=False) for o in observations] == [
            target.compute_single_action(o, explore=False) for o in observations]
        target.get_policy().set_weights({k: v * 0 for k, v in weights.items()})
        assert not target.policy.get_flat_weights().any()
        with pytest.raises(VolleyError, match=r"weight 'pi_head.weight' has shape \(3, 64\), this network's "
                                              r"has \(2, 64\)"):
            target.get_policy().set_weights({**weights, "pi_head.weight": np.zeros((3, 64))})
        with pytest.raises(VolleyError, match=r"no policy 'p1': volley trains one policy, 'default_policy'"):
            target.set_weights({"p1": weights})
        assert target.iteration == 0 and source.iteration == 1
    finally:
        source.stop()
        target.stop()


def test_save_restore_and_rllibs_checkpoint_spellings(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    algo = small_ppo().build()
    try:
        algo.train()
        saved = algo.save()  # RLlib's default place, under the home directory
        assert saved.checkpoint.path == str(saved)  # RLlib 2.x: algo.save().checkpoint.path
        assert saved.startswith(str(tmp_path / "volley_results" / "PPO_CartPole-v1_"))
        assert saved.endswith("checkpoint_000001")
        other = algo.save_to_path(tmp_path / "explicit")
        weights = algo.policy.get_flat_weights()
    finally:
        algo.stop()
    fresh = small_ppo().debugging(seed=9).build()
    try:
        fresh.restore(saved)
        assert fresh.iteration == 1 and np.array_equal(fresh.policy.get_flat_weights(), weights)
        fresh.restore_from_path(other)
        assert fresh.iteration == 1
    finally:
        fresh.stop()


def test_compute_single_action_is_the_most_likely_action_unless_exploring():
    algo = small_ppo().build()
    try:
        obs = np.array([0.01, -0.2, 0.03, 0.4], np.float32)
        logits = algo.policy(torch.as_tensor(obs[None]))[0].logits[0]
        assert algo.compute_single_action(obs, explore=False) == int(logits.argmax())
        assert {int(algo.compute_single_action(obs, explore=True)) for _ in range(50)} <= {0, 1}
    finally:
        algo.stop()


# -- 8. results: RLlib's nested keys hold the flat numbers; logs keep the flat ones once ------------


def test_nested_results_hold_the_flat_numbers_and_logs_write_them_once(tmp_path):
    algo = small_ppo().evaluation(evaluation_interval=1, evaluation_duration=2).build()
    try:
        result = algo.train()
        runners = result["env_runners"]
        assert runners["episode_return_mean"] == result["episode_reward_mean"]
        assert (runners["episode_return_min"], runners["episode_return_max"]) == (
            result["episode_reward_min"], result["episode_reward_max"])
        assert runners["episode_len_mean"] == result["episode_len_mean"]
        assert runners["num_env_steps_sampled_lifetime"] == result["num_env_steps_sampled_lifetime"] == \
            result["timesteps_total"] == result["timesteps_this_iter"] == runners["num_env_steps_sampled"]
        assert runners["num_episodes"] == result["episodes_this_iter"] > 0
        learner = result["learners"]["default_policy"]
        assert (learner["policy_loss"], learner["vf_loss"], learner["entropy"], learner["mean_kl_loss"]) == (
            result["policy_loss"], result["vf_loss"], result["entropy"], result["kl"])
        assert result["info"]["learner"]["default_policy"]["learner_stats"]["policy_loss"] == result["policy_loss"]
        evaluation = result["evaluation"]
        assert evaluation["env_runners"]["episode_return_mean"] == evaluation["episode_reward_mean"]
        assert evaluation["env_runners"]["num_episodes"] == 2
        assert "evaluation" not in evaluation  # the old stack's wrapper is evaluate()'s alone
        direct = algo.evaluate()
        assert direct["evaluation"]["episode_reward_mean"] == direct["episode_reward_mean"]  # RLlib 2.x old stack
    finally:
        algo.stop()
    logger = ResultLogger(tmp_path, tensorboard=False, out=None)
    logger.log(result)
    logger.close()
    written = json.loads((tmp_path / PROGRESS).read_text())
    assert not {"env_runners", "learners", "info", "num_env_steps_sampled_lifetime"} & set(written)
    assert "env_runners" not in written["evaluation"]
    assert written["episode_reward_mean"] == result["episode_reward_mean"]
    assert written["evaluation"]["episode_reward_mean"] == result["evaluation"]["episode_reward_mean"]
    assert written["policy_loss"] == result["policy_loss"]
