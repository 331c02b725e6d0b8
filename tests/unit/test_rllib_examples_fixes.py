"""Calls that RLlib 2.9's example scripts make, each as the script named in its docstring makes it
(issue 49), on real environments, torch, Ray and Tune."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing

import pytest
from ray import tune

import volley
from volley import PPO, ConfigError, PPOConfig
from volley.engines.ray_engine import ship_by_value


def test_task_type_comes_from_volley_as_rllib_defines_it():
    """curriculum_learning.py: ``from ray.rllib.env.apis.task_settable_env import TaskSettableEnv,
    TaskType``; the import rule takes both from volley only if volley exports both."""
    from volley import TaskSettableEnv, TaskType

    assert TaskType is typing.Any  # RLlib 2.9: ``TaskType = Any``
    assert {"TaskSettableEnv", "TaskType"} <= set(volley.__all__) and "TaskType" in dir(volley)
    assert TaskSettableEnv.__module__ == "volley.envs"


@pytest.mark.parametrize("name", ["register_env", "ModelCatalog"])
def test_a_ray_script_taking_its_registries_from_volley_gets_volleys_algorithm_from_tune(name):
    """parametric_actions_cartpole.py takes ``register_env`` and ``ModelCatalog`` from volley (the
    import rule) and names its algorithm to Tune only (``tune.Tuner(args.run, ...)``, "PPO")."""
    code = (f"import ray\nfrom volley import {name}\nfrom ray.tune.registry import get_trainable_cls\n"
            "print(get_trainable_cls('PPO').__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "RAY_ADDRESS": "local"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "VolleyPPO"


def experiment(config: dict[str, typing.Any]) -> None:
    """custom_experiment.py's function trainable: ``PPO(config=d)`` from the trial's dict, trained,
    then a second one with ``num_workers=0`` whose local worker's environment is stepped."""
    iterations = config.pop("iterations")  # the script's "train-iterations" (its warning is test_rllib_leniency's)
    algo = PPO(config=config)
    for _ in range(iterations):
        result = algo.train()
    algo.stop()
    config["num_workers"] = 0
    eval_algo = PPO(config=config)
    env = eval_algo.workers.local_worker().env
    obs, _ = env.reset(seed=0)
    _, reward, *_ = env.step(eval_algo.compute_single_action(obs))
    eval_algo.stop()
    tune.report({"trained_steps": result["timesteps_total"], "workers": algo.workers.plan.num_workers,
                 "eval_reward": reward, "obs_size": len(obs)})


def test_a_tune_function_trial_builds_ppo_within_its_request_and_steps_the_local_workers_env(ray_session, tmp_path):
    """custom_experiment.py: ``tune.with_resources(experiment, PPO.default_resource_request(config))``
    with PPOConfig's defaults (``num_workers="auto"``): the trial reserves one bundle, so the
    algorithm it builds samples in its own process, as the request said (it was refused: "needs 2
    CPUs but this placement group (Tune trial) has 0"); then ``algo.workers.local_worker().env``."""
    ship_by_value(experiment)  # this test module is not importable in Ray's workers
    config = PPOConfig().environment("CartPole-v1").training(
        train_batch_size=64, minibatch_size=32, num_sgd_iter=1).to_dict()
    config["iterations"] = 2
    request = PPO.default_resource_request(config)
    assert request.bundles == [{"CPU": 1.0}]
    grid = tune.Tuner(tune.with_resources(experiment, request), param_space=config,
                      run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    assert grid[0].error is None
    metrics = grid[0].metrics
    assert (metrics["trained_steps"], metrics["workers"]) == (128, 0)
    assert (metrics["eval_reward"], metrics["obs_size"]) == (1.0, 4)  # CartPole's reward and observation


class MarkedPPO(PPO):
    """A user's subclass, as RLlib's scripts define one and hand Tune (centralized_critic.py)."""

    def train(self) -> dict[str, typing.Any]:
        return {**super().train(), "marked": 1}


def test_tune_takes_a_volley_algorithm_class_as_rllibs_scripts_hand_it(ray_session, tmp_path):
    """``tune.Tuner(PPO, ...)`` with volley's class (Tune takes only ``Trainable`` subclasses, and
    raised "Second argument must be convertable to Trainable"); a user's subclass trains as itself.
    Run with the subclass only: volley's ``PPO`` takes the same path (``take_algorithm_classes``
    wraps any ``Algorithm`` subclass), so a second trial for it would prove nothing more."""
    algorithm = MarkedPPO
    config = (PPOConfig().environment("CartPole-v1").rollouts(num_rollout_workers=0)
              .training(train_batch_size=128, sgd_minibatch_size=64, num_sgd_iter=1))
    grid = tune.Tuner(algorithm, param_space=config.to_dict(),
                      run_config=tune.RunConfig(stop={"training_iteration": 2}, storage_path=str(tmp_path),
                                                verbose=0)).fit()
    assert grid[0].error is None, grid[0].error
    metrics = grid[0].metrics
    assert metrics.get("marked") == 1
    here = algorithm(config.copy())  # the same run in this process: volley's PPO, seeded alike
    try:
        expected = [here.train() for _ in range(2)][-1]
    finally:
        here.stop()
    assert metrics["training_iteration"] == 2
    assert (metrics["timesteps_total"], metrics["episode_reward_mean"]) == (
        expected["timesteps_total"], expected["episode_reward_mean"])


def test_tune_refuses_a_subclass_with_its_own_rllib_policy_before_any_trial_starts(ray_session, tmp_path):
    """centralized_critic.py hands Tune a PPO subclass whose policy has its own loss: refused in the
    script's process in one line (in its trial, under ``ray.init(local_mode=True)``, Ray 2.9's Tune
    waited forever on the dead trial)."""
    from ray.rllib.algorithms.ppo import PPOTorchPolicy

    class CentralizedLoss(PPOTorchPolicy):
        def loss(self, model, dist_class, train_batch):  # type: ignore[no-untyped-def]
            return super().loss(model, dist_class, train_batch)

    class CentralizedCritic(PPO):
        @classmethod
        def get_default_policy_class(cls, config: typing.Any) -> type:
            return CentralizedLoss

    config = PPOConfig().environment("CartPole-v1").rollouts(num_rollout_workers=0)
    with pytest.raises(ConfigError, match=r"^CentralizedCritic.get_default_policy_class\(\) is .*CentralizedLoss, "
                                          r"which overrides loss of RLlib's PPOTorchPolicy"):
        tune.Tuner(CentralizedCritic, param_space=config.to_dict(),
                   run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    assert not list(tmp_path.rglob("result.json"))  # no trial ran


def test_a_worker_group_without_an_algorithm_names_what_local_worker_needs():
    from volley.engines import make_worker_group

    config = PPOConfig().environment("CartPole-v1").resources(engine="local").rollouts(num_rollout_workers=0)
    group = make_worker_group(config, PPO.postprocess, None)
    try:
        with pytest.raises(ConfigError, match="LocalWorkerGroup has no local worker"):
            group.local_worker()
    finally:
        group.stop()


def test_the_local_worker_has_an_environment_where_rllibs_has_one():
    """RLlib's local worker builds an environment when it samples (``num_workers=0``) or is asked to
    (``create_env_on_local_worker``); otherwise ``algo.env`` says what to set."""
    config = PPOConfig().environment("CartPole-v1").resources(engine="local").rollouts(num_envs_per_worker=1)
    sampling = config.copy().rollouts(num_rollout_workers=0).build()
    try:
        assert sampling.workers.local_worker().env.reset(seed=0)[0].shape == (4,)
    finally:
        sampling.stop()
    remote = config.copy().rollouts(num_rollout_workers=1).build()
    try:
        with pytest.raises(ConfigError, match=r"needs create_env_on_driver=True \(or num_workers=0\)"):
            _ = remote.workers.local_worker().env
    finally:
        remote.stop()


@dataclasses.dataclass
class SingleAgentRLModuleSpec:
    """RLlib 2.9's class of that name, as custom_recurrent_rnn_tokenizer.py builds one (Ray 2.60,
    installed, renamed it RLModuleSpec)."""

    catalog_class: type | None = None


@dataclasses.dataclass
class RLModuleSpec:
    """RLlib 2.60's, which its new API stack (its default) builds."""

    module_class: type | None = None


def test_rllib_29s_module_spec_is_ignored_with_a_warning_as_its_old_stack_does():
    """custom_recurrent_rnn_tokenizer.py and multi_agent_custom_policy.py call ``.rl_module(rl_module_spec=...)``
    without ``_enable_new_api_stack=True``: RLlib 2.9 warns and trains its old stack's network, so
    volley does too; RLlib 2.60's spec, which its RLlib would build, stays refused."""
    with pytest.warns(UserWarning, match=r"rl_module_spec=SingleAgentRLModuleSpec\(\.\.\.\) is ignored, as "
                                         r"RLlib 2\.9 ignores it unless _enable_new_api_stack=True"):
        config = (PPOConfig().environment("CartPole-v1").rollouts(num_rollout_workers=0)
                  .training(model={"use_lstm": True, "lstm_cell_size": 16}, train_batch_size=64, minibatch_size=32)
                  .rl_module(rl_module_spec=SingleAgentRLModuleSpec(catalog_class=dict)))
    assert config.to_dict() == PPOConfig().environment("CartPole-v1").rollouts(num_rollout_workers=0).training(
        model={"use_lstm": True, "lstm_cell_size": 16}, train_batch_size=64, minibatch_size=32).to_dict()
    with config.build() as algo:
        assert algo.train()["timesteps_total"] > 0
    with pytest.raises(ConfigError, match=r"^RLlib's rl_module_spec=RLModuleSpec\(module_class=None\) is not "
                                          r"supported by volley: volley builds its networks from model"):
        PPOConfig().rl_module(rl_module_spec=RLModuleSpec())


class PrintLogger:
    """custom_logger.py's MyPrintLogger, on RLlib 2.9's ``ray.tune.logger.Logger`` protocol (Ray 2.60,
    installed, removed that base class: the protocol counts)."""

    def __init__(self, config, logdir, trial=None):
        self.config, self.logdir, self.calls = config, logdir, []
        LOGGERS.append(self)

    def on_result(self, result):
        self.calls.append(("result", result["training_iteration"]))

    def flush(self):
        self.calls.append(("flush",))

    def close(self):
        self.calls.append(("close",))


LOGGERS: list[PrintLogger] = []


@pytest.mark.parametrize("kind", [PrintLogger, f"{__name__}.PrintLogger"])
def test_logger_config_builds_rllibs_logger_and_gives_it_every_result(kind, tmp_path):
    """custom_logger.py: ``.debugging(logger_config={"type": MyPrintLogger, "prefix": "ABC"})``; RLlib 2.9's
    Algorithm builds ``type(rest of logger_config, logdir=...)``, the class or its dotted path."""
    LOGGERS.clear()
    config = (PPOConfig().environment("CartPole-v1").rollouts(num_rollout_workers=0)
              .training(train_batch_size=64, minibatch_size=32)
              .debugging(logger_config={"type": kind, "prefix": "ABC"}))
    with config.build() as algo:
        algo.results_dir = tmp_path / "run"
        algo.train()
        algo.train()
    (logger,) = LOGGERS
    assert (logger.config, logger.logdir) == ({"prefix": "ABC"}, str(tmp_path / "run"))
    assert logger.calls == [("result", 1), ("result", 2), ("flush",), ("close",)]
    unknown = config.debugging(logger_config={"type": "no_such_module.Logger"})
    with unknown.build() as algo, pytest.raises(ConfigError, match=r"^logger_config type 'no_such_module.Logger' "
                                                                   r"is not a class volley can import"):
        algo.train()
