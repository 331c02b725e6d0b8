"""A custom model on the Ray engine: the class travels to the workers (and to Tune's trials),
which act with it as the local reference does; an unpicklable class is named before any starts."""

from __future__ import annotations

import threading

import pytest
from custom_models import load_example
from ray import tune
from reference import assert_samples_and_updates_equal
from torch import nn

from volley import ConfigError, ModelCatalog, PPOConfig, TorchModelV2
from volley.tune import RunConfig, trainable


def dict_obs(engine: str, workers: int, **evaluation) -> PPOConfig:
    return (load_example().config(workers).resources(engine=engine).rollouts(num_envs_per_worker=2)
            .training(train_batch_size=200, minibatch_size=50, num_epochs=2).evaluation(**evaluation)
            .debugging(seed=5))


def test_a_dict_observation_model_samples_on_ray_workers_as_on_the_local_reference(ray_session):
    assert_samples_and_updates_equal(dict_obs("local", 2).build(), dict_obs("ray", 2, evaluation_num_workers=0).build())


def test_evaluation_workers_act_with_the_custom_model(ray_session):
    with dict_obs("ray", 1, evaluation_num_workers=1, evaluation_duration=2).build() as algo:
        stats = algo.evaluate()
        assert stats["episodes_this_iter"] == 2 and stats["episode_reward_mean"] > 0


class Unpicklable(TorchModelV2, nn.Module):
    lock = threading.Lock()  # a class attribute that cannot travel

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        self.logits = nn.Linear(4, num_outputs)
        self.value = nn.Linear(4, 1)

    def forward(self, input_dict, state, seq_lens):
        self._obs = input_dict["obs"]
        return self.logits(self._obs), state

    def value_function(self):
        return self.value(self._obs).squeeze(1)


def test_a_model_class_that_cannot_be_pickled_is_named_before_workers_start(ray_session):
    config = PPOConfig().resources(engine="ray").rollouts(num_workers=1).training(
        model={"custom_model": Unpicklable})
    with pytest.raises(ConfigError, match=r"custom model Unpicklable cannot be pickled for the Ray workers: "
                                          r"TypeError: cannot pickle '_thread.lock' object"):
        config.build()
    with config.copy(copy_frozen=False).resources(engine="local").build() as algo:  # in-process: nothing to ship
        algo.train()


def test_a_tune_trial_builds_the_registered_model_in_its_own_process(ray_session, tmp_path):
    ModelCatalog.register_custom_model("dict_obs_model", load_example().DictObsModel)
    config = dict_obs("local", 0)
    tuner = tune.Tuner(trainable(config), param_space={"lr": tune.grid_search([1e-3])},
                       tune_config=tune.TuneConfig(time_budget_s=240),
                       run_config=RunConfig(storage_path=str(tmp_path), name="custom", verbose=0,
                                            stop={"training_iteration": 1}))
    (result,) = tuner.fit()
    assert result.error is None, result.error
    assert result.metrics["training_iteration"] == 1 and result.metrics["timesteps_total"] > 0
