"""The config builder: aliases, validation, suggestions, serialisation."""

import pytest

from volley import ConfigError, PPOConfig


def test_builder_accepts_old_and_new_rllib_names():
    old = (PPOConfig().rollouts(num_rollout_workers=3, num_envs_per_worker=4, rollout_fragment_length=16)
           .training(sgd_minibatch_size=64, num_sgd_iter=5, train_batch_size=512))
    new = (PPOConfig().env_runners(num_env_runners=3, num_envs_per_env_runner=4, rollout_fragment_length=16)
           .training(minibatch_size=64, num_epochs=5, train_batch_size=512))
    assert old.to_dict() == new.to_dict()
    assert (old.num_workers, old.num_envs_per_worker, old.minibatch_size, old.num_epochs) == (3, 4, 64, 5)


def test_issue_example_builder_chain():
    config = (PPOConfig().framework("torch").environment(env="CartPole-v1")
              .rollouts(num_rollout_workers=2, num_envs_per_worker=2).resources(num_gpus=0)
              .training(lr=3e-4, model={"fcnet_hiddens": [32, 32]}).debugging(seed=0))
    assert config.model.fcnet_hiddens == [32, 32]
    assert config.model.fcnet_activation == "tanh"  # the rest of the model keeps its defaults
    config.validate()


def test_unknown_key_suggests_close_match():
    with pytest.raises(ConfigError, match=r"unknown config key 'num_worker'.*did you mean.*'num_workers'"):
        PPOConfig().rollouts(num_worker=2)
    with pytest.raises(ConfigError, match=r"'lamda'.*'lambda'"):
        PPOConfig().training(lamda=0.9)
    with pytest.raises(ConfigError, match=r"unknown model key 'fcnet_hidden'.*'fcnet_hiddens'"):
        PPOConfig().training(model={"fcnet_hidden": [3]})


def test_key_in_the_wrong_builder_names_the_right_one():
    with pytest.raises(ConfigError, match=r"'num_workers' is set with \.rollouts\(\), not \.training\(\)"):
        PPOConfig().training(num_workers=2)


@pytest.mark.parametrize(("key", "value", "pattern"), [
    ("lr", "fast", r"'lr' must be float or list\[list\[float\]\], got 'fast'"),
    ("num_epochs", 2.5, r"'num_epochs' must be int, got 2.5"),
    ("normalize_advantages", 1, r"'normalize_advantages' must be bool, got 1"),
    ("model", [1], r"'model' must be a dict, got \[1\]"),
])
def test_wrong_types_name_key_and_value(key, value, pattern):
    with pytest.raises(ConfigError, match=pattern):
        PPOConfig().update(**{key: value})


def test_literal_values_are_checked_with_suggestion():
    with pytest.raises(ConfigError, match=r"'engine' must be 'local' or 'ray' or 'mpi', got 'rey'; did you mean 'ray'"):
        PPOConfig().resources(engine="rey")


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"num_workers": -1}, r"'num_workers' must be >= 0, got -1"),
    ({"gamma": 1.5}, r"'gamma' must be in \[0, 1\], got 1.5"),
    ({"minibatch_size": 4096, "train_batch_size": 1024}, r"minibatch_size=4096 is larger than train_batch_size=1024"),
    ({"lr_schedule": [[100, 1e-3], [0, 0.0]]}, r"lr_schedule"),
    ({"max_worker_restarts": -1}, r"'max_worker_restarts' must be >= 0, got -1"),
    ({"max_consecutive_skips": 0}, r"'max_consecutive_skips' must be > 0, got 0"),
])
def test_validate_rejects_out_of_range(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        PPOConfig().update(**kwargs).validate()


def test_round_trip_through_dict_and_derived_values():
    config = PPOConfig().update(num_workers=2, num_envs_per_worker=4, train_batch_size=1000, lr=1)
    assert isinstance(config.lr, float)
    again = PPOConfig.from_dict(config.to_dict())
    assert again == config
    assert config.plan().fragment_length == 125  # ceil(1000 / (2 * 4))
    assert PPOConfig().resources(engine="local").plan().num_workers == 0
    assert PPOConfig().update(num_workers=0).plan().num_sampling_workers == 1
    assert config.plan(num_workers=4).fragment_length == 63  # a count the engine imposes (MPI ranks)


@pytest.mark.parametrize("engine, workers, envs, fragment", [
    ("local", "auto", 16, 128), ("ray", 0, 16, 128), ("ray", 2, 8, 128), ("ray", 3, 6, 114),
    ("mpi", 16, 1, 128), ("ray", 32, 1, 64),
])
def test_auto_envs_share_sixteen_among_the_workers(engine, workers, envs, fragment):
    plan = PPOConfig().resources(engine=engine).rollouts(num_workers=workers).plan()
    assert (plan.num_envs_per_worker, plan.fragment_length) == (envs, fragment)  # 2048 steps a batch


def test_a_number_of_envs_is_per_worker_as_in_rllib():
    assert PPOConfig().rollouts(num_workers=2, num_envs_per_worker=16).plan().num_envs_per_worker == 16


def test_fault_tolerance_group_takes_rllib_names():
    config = PPOConfig().fault_tolerance(restart_failed_env_runners=False, max_num_env_runner_restarts=3,
                                         env_errors="raise")
    assert (config.restart_failed_workers, config.max_worker_restarts, config.env_errors) == (False, 3, "raise")
    assert PPOConfig().fault_tolerance(recreate_failed_workers=False).restart_failed_workers is False
    with pytest.raises(ConfigError, match=r"'env_errors' must be 'recreate' or 'raise', got 'recreat'; "
                                          r"did you mean 'recreate'"):
        PPOConfig().fault_tolerance(env_errors="recreat")
    with pytest.raises(ConfigError, match=r"'lr' is set with .training\(\), not .fault_tolerance\(\)"):
        PPOConfig().fault_tolerance(lr=0.1)
