"""RLlib's config keys and config methods, called exactly as RLlib's docs spell them.

Every entry of ``volley.algorithms.rllib_table()`` (the table docs/rllib.md is generated
from) is set through the builder method it names, for every algorithm that takes it, and
must do what the table says: reach the volley key, change nothing, or be refused in one
line that names it.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from volley import (
    ApexDQNConfig,
    APPOConfig,
    ConfigError,
    DQNConfig,
    IMPALAConfig,
    PGConfig,
    PPOConfig,
    TRPOConfig,
)
from volley.algorithms import rllib_table
from volley.algorithms.ppo.loss import adapt_kl_coeff
from volley.config import AlgorithmConfig
from volley.rllib_compat import RLlibKey, takes

CONFIGS = [PPOConfig, TRPOConfig, PGConfig, DQNConfig, ApexDQNConfig, IMPALAConfig, APPOConfig]
CASES = [(entry, cls) for entry in rllib_table() for cls in CONFIGS
         if takes(entry, cls)]


def set_as_rllib(cls: type[AlgorithmConfig], entry: RLlibKey, value: object) -> AlgorithmConfig:
    """``cls()`` with RLlib's key set through the builder method RLlib sets it with."""
    if entry.groups[0] == "model":
        return cls().training(model={entry.name.removeprefix("model."): value})
    method = "env_runners" if entry.groups[0] == "rollouts" else entry.groups[0]
    return getattr(cls(), method)(**{entry.name: value})


def changed(config: AlgorithmConfig) -> dict[str, object]:
    default = type(config)().to_dict()
    return {k: v for k, v in config.to_dict().items() if v != default[k]}


def coerced(cls: type[AlgorithmConfig], key: str, value: object) -> object:
    return getattr(cls().update(**{key: value}), key) if key != "model" else {
        **dataclasses.asdict(cls().model), **value}  # type: ignore[dict-item]


@pytest.mark.parametrize(("entry", "cls"), CASES, ids=[f"{e.name}-{c.__name__}" for e, c in CASES])
def test_every_rllib_key_does_what_the_table_says(entry, cls):
    if entry.kind in ("same", "renamed", "translated"):
        expected = entry.translate(entry.example)
        config = set_as_rllib(cls, entry, entry.example)
        assert set(expected) <= set(entry.sets)
        for key, value in expected.items():
            assert config.to_dict()[key] == coerced(cls, key, value), (key, config.to_dict()[key])
        assert set(changed(config)) <= set(expected)  # nothing else moved
    elif entry.kind == "accepted":
        assert changed(set_as_rllib(cls, entry, entry.example)) == {}
    else:
        with pytest.raises(ConfigError) as refusal:
            set_as_rllib(cls, entry, entry.example)
        message = str(refusal.value)
        assert "\n" not in message and "not supported by volley: " in message
        assert f"{entry.name.removeprefix('model.')}" in message and repr(entry.example)[:20] in message
        for value in entry.allowed:  # what volley does anyway is accepted and changes nothing
            assert changed(set_as_rllib(cls, entry, value)) == {}


def test_every_algorithm_takes_the_keys_a_tutorial_uses():
    taken = {(e.name, c) for e, c in CASES}
    for name in ("num_gpus_per_learner", "evaluation_sample_timeout_s", "eager_tracing", "log_level",
                 "min_sample_timesteps_per_iteration", "model.use_attention", "policies", "callbacks_class"):
        assert all((name, cls) in taken for cls in CONFIGS), name
    assert {(n, c) for n in ("kl_coeff", "kl_target", "clip_param") for c in (PPOConfig,)} <= taken
    assert {(n, c) for n in ("replay_buffer_config", "hiddens", "noisy") for c in (DQNConfig, ApexDQNConfig)} <= taken


# -- 1. PPO's adaptive KL penalty: the names ---------------------------------------------------


def test_kl_target_is_the_penalty_target_and_target_kl_the_early_stop():
    config = PPOConfig().training(kl_coeff=0.3, kl_target=0.02)
    assert (config.kl_coeff, config.kl_target, config.target_kl) == (0.3, 0.02, None)
    assert PPOConfig().training(target_kl=0.05).target_kl == 0.05
    assert PPOConfig().kl_coeff == 0.0  # off unless asked for: existing runs do not change
    with pytest.raises(ConfigError, match=r"'kl_coeff' must be >= 0, got -0.1"):
        PPOConfig().training(kl_coeff=-0.1).validate()


def test_kl_coeff_moves_by_rllibs_rule_on_hand_made_examples():
    assert adapt_kl_coeff(0.2, 0.03, 0.01) == pytest.approx(0.3)  # KL > 2 x target: x1.5
    assert adapt_kl_coeff(0.2, 0.004, 0.01) == pytest.approx(0.1)  # KL < target / 2: x0.5
    assert adapt_kl_coeff(0.2, 0.01, 0.01) == 0.2
    assert adapt_kl_coeff(0.2, 0.02, 0.01) == 0.2 and adapt_kl_coeff(0.2, 0.005, 0.01) == 0.2  # strict
    # where the paper's constants would act and RLlib's do not: d = 1.6 x d_targ doubles β there
    assert adapt_kl_coeff(0.2, 0.016, 0.01) == 0.2
    coeff = 0.2
    for kl in (0.05, 0.05, 0.001):
        coeff = adapt_kl_coeff(coeff, kl, 0.01)
    assert coeff == pytest.approx(0.2 * 1.5 * 1.5 * 0.5)


# -- 2. evaluation --------------------------------------------------------------------------------


def test_every_rllib_spelling_of_evaluation():
    config = PPOConfig().evaluation(
        evaluation_interval=2, evaluation_num_env_runners=0, evaluation_duration=300,
        evaluation_duration_unit="timesteps", evaluation_sample_timeout_s=120.0,
        evaluation_force_reset_envs_before_iteration=True, evaluation_parallel_to_training=False,
        evaluation_config={"explore": False})
    assert (config.evaluation_interval, config.evaluation_num_workers, config.evaluation_duration,
            config.evaluation_duration_unit) == (2, 0, 300, "timesteps")
    assert PPOConfig().evaluation(evaluation_num_workers=3).evaluation_num_workers == 3
    assert PPOConfig().evaluation(evaluation_num_episodes=7).evaluation_duration == 7  # RLlib 1.x
    # parallel_evaluation_and_training.py: accepted; volley evaluates after the training step either way
    PPOConfig().evaluation(evaluation_parallel_to_training=True, evaluation_interval=2).validate()
    with pytest.raises(ConfigError, match=r"evaluation_force_reset_envs_before_iteration=False is not "
                                          r"supported by volley: volley's evaluation always starts fresh"):
        PPOConfig().evaluation(evaluation_force_reset_envs_before_iteration=False)
    assert PPOConfig().evaluation(evaluation_config={"render_env": True}).evaluation_settings().render_env


# -- 3, 4. environment, debugging, reporting, framework, api_stack, learners, resources ----------


def test_environment_keys():
    config = PPOConfig().environment(env="Pendulum-v1", env_config={"g": 9.0}, render_env=False,
                                     disable_env_checking=True, clip_rewards=5.0, normalize_actions=True,
                                     clip_actions=False, is_atari=False)
    assert (config.env, config.env_config, config.clip_rewards, config.normalize_actions,
            config.clip_actions, config.atari_preprocessing) == ("Pendulum-v1", {"g": 9.0}, 5.0, True,
                                                                 False, "none")
    assert PPOConfig().environment(is_atari=True).atari_preprocessing == "deepmind"
    assert PPOConfig().environment(render_env=True).render_env  # tests/engines/test_rllib_features.py


def test_debugging_reporting_framework_and_api_stack():
    config = (PPOConfig().debugging(log_level="ERROR", seed=7)
              .reporting(min_sample_timesteps_per_iteration=3000, metrics_num_episodes_for_smoothing=5,
                         keep_per_episode_custom_metrics=False)
              .framework("torch", eager_tracing=True)
              .api_stack(enable_rl_module_and_learner=True, enable_env_runner_and_connector_v2=True))
    assert (config.log_level, config.seed, config.min_sample_timesteps_per_iteration,
            config.metrics_num_episodes_for_smoothing, config.framework_str) == ("ERROR", 7, 3000, 5, "torch")
    assert changed(config) == {"log_level": "ERROR", "seed": 7, "min_sample_timesteps_per_iteration": 3000,
                               "metrics_num_episodes_for_smoothing": 5}
    with pytest.raises(ConfigError, match=r"'log_level' must be .*'WARN'.*got 'VERBOSE'"):
        PPOConfig().debugging(log_level="VERBOSE")
    with pytest.raises(ConfigError, match=r"'framework' must be 'torch', got 'tf2'"):
        PPOConfig().framework("tf2")
    assert PPOConfig().reporting(keep_per_episode_custom_metrics=True).keep_per_episode_custom_metrics


def test_learners_and_resources():
    config = PPOConfig().learners(num_learners=0, num_gpus_per_learner=1)
    assert config.num_gpus == 1.0 and changed(config) == {"num_gpus": 1.0}
    config = PPOConfig().resources(num_gpus_per_worker=0, num_cpus_for_local_worker=2)
    assert changed(config) == {"num_cpus_for_driver": 2}
    assert PPOConfig().resources(num_cpus_for_main_process=3).num_cpus_for_driver == 3
    assert PPOConfig().learners(num_cpus_per_learner="auto").num_cpus_for_driver is None
    with pytest.raises(ConfigError, match=r"^RLlib's num_learners=2 is not supported by volley: .*"
                                          r"engine='mpi' with mpi_mode='allreduce'"):
        PPOConfig().learners(num_learners=2)
    with pytest.raises(ConfigError, match=r"^RLlib's num_gpus_per_worker=1 is not supported by volley: "
                                          r"rollout workers act on the CPU; num_gpus gives the learner a GPU$"):
        PPOConfig().resources(num_gpus_per_worker=1)
    with pytest.raises(ConfigError, match=r"'num_cpus_for_driver' must be > 0, got 0"):
        PPOConfig().resources(num_cpus_for_local_worker=0).validate()
    with pytest.raises(ConfigError, match=r"'num_gpus_per_learner' is set with .learners\(\), not .training"):
        PPOConfig().training(num_gpus_per_learner=1)


def test_num_cpus_for_driver_sets_the_learners_torch_threads():
    threads = torch.get_num_threads()
    try:
        algo = (PPOConfig().environment("CartPole-v1").resources(engine="local", num_cpus_for_local_worker=1)
                .build())
        algo.stop()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


# -- 5. DQN's keys ---------------------------------------------------------------------------------


def test_dqn_keys_as_rllib_spells_them_equal_volleys_own():
    rllib = (DQNConfig()
             .training(replay_buffer_config={"type": "MultiAgentPrioritizedReplayBuffer", "capacity": 50_000,
                                             "prioritized_replay_alpha": 0.5, "prioritized_replay_beta": 0.3,
                                             "prioritized_replay_eps": 1e-5},
                       target_network_update_freq=500, double_q=False, dueling=True, n_step=3,
                       hiddens=[64], noisy=False, num_atoms=1)
             .exploration(explore=True, exploration_config={"type": "EpsilonGreedy", "initial_epsilon": 0.9,
                                                            "final_epsilon": 0.05, "epsilon_timesteps": 5000}))
    volley = DQNConfig().update(
        replay_buffer_capacity=50_000, prioritized_replay=True, prioritized_replay_alpha=0.5,
        prioritized_replay_beta=0.3, prioritized_replay_eps=1e-5, target_update_freq=500, double_q=False,
        dueling=True, n_step=3, hiddens=[64], epsilon_start=0.9, epsilon_end=0.05, epsilon_decay_steps=5000)
    assert rllib.to_dict() == volley.to_dict()
    new_stack = DQNConfig().training(
        replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 50_000, "alpha": 0.5,
                              "beta": 0.3}, epsilon=[[0, 0.9], [5000, 0.05]], train_batch_size_per_learner=32)
    assert (new_stack.prioritized_replay_alpha, new_stack.prioritized_replay_beta, new_stack.epsilon_start,
            new_stack.epsilon_end, new_stack.epsilon_decay_steps, new_stack.minibatch_size) == (
        0.5, 0.3, 0.9, 0.05, 5000, 32)
    assert DQNConfig().training(replay_buffer_config={"type": "ReplayBuffer"}).prioritized_replay is False


def test_unknown_buffer_and_exploration_types_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"replay_buffer_config type 'PrioritizedReplayBufer' is not "
                                          r"supported by volley; did you mean .*'PrioritizedReplayBuffer'"):
        DQNConfig().training(replay_buffer_config={"type": "PrioritizedReplayBufer"})
    with pytest.raises(ConfigError, match=r"replay_buffer_config type 'ReservoirReplayBuffer' is not supported"):
        DQNConfig().training(replay_buffer_config={"type": "ReservoirReplayBuffer"})
    with pytest.raises(ConfigError, match=r"replay_buffer_config key 'capcity' is not supported by volley; "
                                          r"did you mean 'capacity'"):
        DQNConfig().training(replay_buffer_config={"capcity": 10})
    with pytest.raises(ConfigError, match=r"exploration_config type 'EpsilonGredy' .*did you mean 'EpsilonGreedy'"):
        DQNConfig().exploration(exploration_config={"type": "EpsilonGredy"})
    with pytest.raises(ConfigError, match=r"exploration_config type 'GaussianNoise' is not supported"):
        DQNConfig().exploration(exploration_config={"type": "GaussianNoise"})
    with pytest.raises(ConfigError, match=r"exploration_config type 'PerWorkerEpsilonGreedy'"):
        DQNConfig().exploration(exploration_config={"type": "PerWorkerEpsilonGreedy"})  # Ape-X's
    assert ApexDQNConfig().exploration(
        exploration_config={"type": "PerWorkerEpsilonGreedy", "initial_epsilon": 0.4}).epsilon_start == 0.4
    assert changed(PPOConfig().exploration(exploration_config={"type": "StochasticSampling"})) == {}
    with pytest.raises(ConfigError, match=r"^RLlib's noisy=True is not supported by volley: .*ε-greedily"):
        DQNConfig().training(noisy=True)


def test_dqn_hiddens_add_layers_between_body_and_q_values():
    algo = DQNConfig().environment("CartPole-v1").resources(engine="local").training(hiddens=[32]).build()
    try:
        layers = [m for m in algo.policy.hidden if isinstance(m, torch.nn.Linear)]
        assert [(layer.in_features, layer.out_features) for layer in layers] == [(128, 32)]
        assert algo.policy.q_head.in_features == 32
        assert algo.policy.q_values(torch.zeros(5, 4)).shape == (5, 2)
    finally:
        algo.stop()
    plain = DQNConfig().environment("CartPole-v1").resources(engine="local").build()
    try:  # no hiddens: no extra weights, so older checkpoints still load
        assert not any(name.startswith("hidden.") for name in plain.policy.state_dict())
    finally:
        plain.stop()


# -- 6. config objects ------------------------------------------------------------------------------


def test_config_reads_and_writes_like_a_dict():
    config = PPOConfig().training(lr=0.01).env_runners(num_env_runners=2)
    assert config["lr"] == 0.01 and config.get("lr") == 0.01
    assert config["num_rollout_workers"] == 2 and config["num_env_runners"] == 2  # aliases read their key
    assert PPOConfig().learners(num_gpus_per_learner=1)["num_gpus_per_learner"] == 1.0
    assert config.get("no_such_key") is None and config.get("no_such_key", 7) == 7
    assert "lr" in config and "no_such_key" not in config
    with pytest.raises(KeyError, match=r"PPOConfig has no key 'lrr'; did you mean 'lr'"):
        config["lrr"]  # noqa: B018
    config["env"] = "Pendulum-v1"
    config["lambda"] = 0.9
    assert (config.env, config.gae_lambda) == ("Pendulum-v1", 0.9)
    config.update_from_dict({"lr": 0.001, "lambda": 0.95, "num_env_runners": 3, "kl_coeff": 0.2})
    assert (config.lr, config.gae_lambda, config.num_workers, config.kl_coeff) == (0.001, 0.95, 3, 0.2)
    assert PPOConfig.from_dict(config.to_dict()) == config
    assert PPOConfig().update_from_dict(config.to_dict()).to_dict() == config.to_dict()


def test_frozen_config_refuses_changes_and_copies_thaw_it():
    config = PPOConfig().training(lr=0.01)
    config.freeze()
    for change in (lambda: setattr(config, "lr", 0.1), lambda: config.training(lr=0.1),
                   lambda: config.__setitem__("lr", 0.1)):
        with pytest.raises(ConfigError, match=r"cannot set 'lr': this PPOConfig is frozen .*"
                                              r"config.copy\(copy_frozen=False\)"):
            change()
    assert config.lr == 0.01
    with pytest.raises(ConfigError, match="frozen"):
        config.copy().training(lr=0.1)  # a copy is frozen like its original
    thawed = config.copy(copy_frozen=False).training(lr=0.1)
    assert thawed.lr == 0.1 and config.lr == 0.01
    with pytest.raises(ConfigError, match="frozen"):
        PPOConfig().copy(copy_frozen=True).training(lr=0.1)


def test_validate_and_build_with_env():
    with pytest.raises(ConfigError, match=r"'gamma' must be in \[0, 1\], got 1.5"):
        PPOConfig().training(gamma=1.5).validate()
    config = PPOConfig().resources(engine="local").training(train_batch_size=256, minibatch_size=64)
    algo = config.build(env="Pendulum-v1")
    try:
        assert config.env == "Pendulum-v1" and algo.config.env == "Pendulum-v1"  # set on the config, as RLlib
        assert algo.observation_space.shape == (3,)
        with pytest.raises(ConfigError, match="frozen"):
            algo.config.lr = 1.0  # a built algorithm's config is frozen
    finally:
        algo.stop()
    algo = PPOConfig().environment("CartPole-v1").resources(engine="local").build_algo()
    try:
        assert algo.action_space.n == 2
    finally:
        algo.stop()


# -- 9. what volley does not implement: one line naming the key, never "unknown" -------------------


def on_episode_end(*, episode, **kwargs):
    pass


@pytest.mark.parametrize(("call", "pattern"), [
    (lambda: PPOConfig().resources(num_gpus_per_worker=1), r"num_gpus_per_worker=1 .* num_gpus gives"),
    (lambda: PPOConfig().training(model={"use_attention": True}), r"model\['use_attention'\]=True .* use_lstm=True"),
    (lambda: PPOConfig().multi_agent(policy_map_capacity=5), r"policy_map_capacity=5 .* every policy of a run in memory"),
    (lambda: PPOConfig().callbacks(on_episode_end=on_episode_end),
     r"on_episode_end=.* methods of a DefaultCallbacks subclass .* callbacks_class"),
    (lambda: PPOConfig().rl_module(rl_module_spec="spec"), r"rl_module_spec='spec' .*\(ModelConfig\)"),
    (lambda: PPOConfig().training(use_gae=False), r"use_gae=False .* lambda=1.0"),
    (lambda: DQNConfig().training(training_intensity=8), r"training_intensity=8 .* train_intensity = "),
])
def test_what_volley_lacks_is_refused_in_one_line(call, pattern):
    with pytest.raises(ConfigError) as refusal:
        call()
    message = str(refusal.value)
    assert "\n" not in message and "unknown" not in message and "not supported by volley" in message
    assert re.search(pattern, message), message
