"""Where RLlib 2.9's own example scripts find RLlib lenient, volley is too (issue 49): each test
does what one of those scripts does (named in its docstring), on real environments and torch."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
from ray import tune

from volley import PPO, Algorithm, CheckpointError, ConfigError, PPOConfig, register_env

TINY = {"train_batch_size": 64, "minibatch_size": 32, "num_sgd_iter": 1}


def local(config: PPOConfig) -> PPOConfig:
    return config.resources(engine="local").rollouts(num_rollout_workers=0, num_envs_per_worker=1).training(**TINY)


def test_a_dict_keeps_a_key_of_the_scripts_own_and_warns_once_naming_the_closest_key():
    """custom_train_fn.py / custom_experiment.py: ``config["train-iterations"] = 2`` in the dict
    given to Tune and to ``PPO.default_resource_request(config)``, popped by the trial later."""
    config = {**PPOConfig().to_dict(), "train-iterations": 2, "trian_batch_size": 64}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = PPOConfig().update_from_dict(config)
        PPOConfig.from_dict(config)  # the same keys again: no second warning
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "config key 'trian_batch_size' is not one of PPOConfig's" in messages[1]
    assert "did you mean one of 'train_batch_size'" in messages[1]  # the closest first
    assert built["train-iterations"] == 2 and "train-iterations" in built
    assert built.to_dict()["train-iterations"] == 2 and built.train_batch_size == 2048  # typo: no effect
    assert PPO.default_resource_request(config).required_resources == {"CPU": 1.0}
    with pytest.raises(ConfigError, match="unknown config key 'trian_batch_size' for PPOConfig; did you mean"):
        PPOConfig().training(trian_batch_size=64)  # the builder methods still refuse a typo
    with pytest.raises(ConfigError, match="config key 'lr' must be float"):
        PPOConfig().update_from_dict({"lr": "fast"})  # a known key is still checked


class SpaceEcho(gym.Env):
    """nested_action_spaces.py's kind of environment: its spaces come from ``env_config``."""

    def __init__(self, config: dict) -> None:
        self.observation_space = config["space"]
        self.action_space = config["space"]
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.steps = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.steps += 1
        return self.observation_space.sample(), float(np.sum(action)), self.steps >= 5, False, {}


def test_env_config_holds_a_gymnasium_space_and_a_checkpoint_asks_for_it_back(tmp_path):
    """nested_action_spaces.py: ``env_config={"space": Box(...)}``; the checkpoint stores the rest
    and restoring without the space names it in one line."""
    register_env("space_echo", SpaceEcho)
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    algo = local(PPOConfig().environment("space_echo", env_config={"space": space, "size": 2})).build()
    try:
        assert algo.train()["episode_len_mean"] == 5  # episodes of SpaceEcho, acting in the given space
        path = algo.save(tmp_path / "ckpt")
    finally:
        algo.stop()
    manifest = json.loads((tmp_path / "ckpt" / "volley_checkpoint.json").read_text())
    assert manifest["config"]["env_config"] == {"size": 2}
    assert manifest["not_stored"] == {"env_config['space']": "Box"}
    with pytest.raises(CheckpointError, match=r"could not store config env_config\['space'\] \(a Box, not JSON "
                                              r"data\): give it again, Algorithm.from_checkpoint\(.*env_config=\.\.\.\)"):
        Algorithm.from_checkpoint(path)
    again = Algorithm.from_checkpoint(path, env_config={"space": space, "size": 2})
    try:
        assert again.iteration == 1 and again.config.env_config["space"] == space
    finally:
        again.stop()
    with pytest.raises(ConfigError, match="config key 'env_config' must hold picklable values"):
        PPOConfig().environment(env_config={"make": lambda: None})


def test_a_tune_search_space_stands_in_a_builder_key_until_tune_resolves_it():
    """checkpoint_by_custom_criteria.py: ``.training(lr=tune.grid_search([...]))``, then
    ``param_space=config.to_dict()``; a model key may hold one too."""
    config = PPOConfig().training(lr=tune.grid_search([0.01, 0.001]), model={"fcnet_hiddens": tune.choice([[8], [16]])})
    assert config.to_dict()["lr"] == {"grid_search": [0.01, 0.001]}
    assert type(config.to_dict()["model"]["fcnet_hiddens"]).__name__ == "Categorical"
    with pytest.raises(ConfigError, match=r"config key 'lr' holds a Tune search space \({'grid_search'"):
        config.build()
    trial = PPOConfig.from_dict({**config.to_dict(), "lr": 0.001, "model": {"fcnet_hiddens": [8]}})
    assert trial.lr == 0.001 and trial.model.fcnet_hiddens == [8] and trial.search_spaces() == {}


def test_enable_connectors_false_is_accepted_and_changes_nothing():
    """custom_metrics_and_callbacks.py: ``.rollouts(enable_connectors=False)``."""
    config = local(PPOConfig().environment("CartPole-v1").rollouts(enable_connectors=False))
    assert config.to_dict() == local(PPOConfig().environment("CartPole-v1")).to_dict()


def test_config_model_is_a_dict():
    """cartpole_lstm.py: ``config.model["use_lstm"] = True`` (RLlib's config.model is a dict)."""
    config = local(PPOConfig().environment("CartPole-v1"))
    config.model["use_lstm"] = True
    config.model.update({"lstm_cell_size": 16, "max_seq_len": 8})
    assert config.model["use_lstm"] is True and config["model"]["lstm_cell_size"] == 16
    assert dict(config.model)["max_seq_len"] == 8 and "use_lstm" in config.model
    assert config.model.get("no_such_key", "absent") == "absent"
    with pytest.raises(ConfigError, match="config key 'model.lstm_cell_size' must be int, got 'big'"):
        config.model["lstm_cell_size"] = "big"
    with pytest.raises(ConfigError, match="unknown model key 'use_lstn'; did you mean 'use_lstm'"):
        config.model["use_lstn"] = True
    algo = config.build()
    try:
        assert [s.shape for s in algo.get_policy().get_initial_state()] == [(2, 16)] * 2  # the LSTM, as set
        assert algo.train()["training_iteration"] == 1
    finally:
        algo.stop()


class Corridor(gym.Env):
    """custom_env.py's SimpleCorridor reads where it runs from its config, RLlib's EnvContext."""

    def __init__(self, config: dict) -> None:
        self.where = (config.worker_index, config.vector_index, config.num_workers, config["length"])
        self.observation_space = gym.spaces.Box(0.0, 9.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.pos = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.pos += 1
        return np.full(1, self.pos, np.float32), 1.0, self.pos >= self.where[3], False, {}


def test_an_algorithm_takes_a_dict_and_its_environments_get_rllibs_env_context():
    """custom_experiment.py: ``ppo.PPO(config=config_dict)``; custom_env.py: SimpleCorridor's
    ``config.worker_index``; sb2rllib_rllib_example.py: ``PPO(env="CartPole-v1")``."""
    config = {**local(PPOConfig()).environment(Corridor, env_config={"length": 3}).to_dict(), "train-iterations": 1}
    config["num_envs_per_worker"] = 2
    algo = PPO(config=config)
    try:
        assert algo.train()["episode_len_mean"] == 3
        assert sorted(env.unwrapped.where for env in algo.workers.workers[0].env.envs) == [(0, 0, 0, 3), (0, 1, 0, 3)]
        assert algo.config["train-iterations"] == 1
    finally:
        algo.stop()
    default = PPO(env="CartPole-v1", config={"engine": "local", "num_workers": 0})
    try:
        assert default.config.env == "CartPole-v1" and default.config.lr == PPOConfig().lr
    finally:
        default.stop()


def test_a_trials_resource_request_holds_its_evaluation_workers():
    """parallel_evaluation_and_training.py: ``evaluation_num_workers=2`` in a Tune trial; RLlib's
    request reserves them as volley's now does (else the trial's evaluation actors find no CPU)."""
    request = PPO.default_resource_request({"num_workers": 1, "evaluation_num_workers": 2, "num_cpus_per_worker": 0.5})
    assert request.bundles == [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 0.5}]


def test_evaluation_plays_exactly_its_duration_in_episodes_on_several_workers():
    """parallel_evaluation_and_training.py asserts ``len(hist_stats["episode_lengths"]) == 13`` with
    two evaluation workers (RLlib gives them 7 and 6 episodes)."""
    algo = local(PPOConfig().environment("CartPole-v1")).evaluation(
        evaluation_num_workers=2, evaluation_duration=13).resources(engine="ray", num_cpus=2).build()
    try:
        evaluation = algo.evaluate()["evaluation"]
        assert evaluation["episodes_this_iter"] == len(evaluation["hist_stats"]["episode_lengths"]) == 13
    finally:
        algo.stop()
