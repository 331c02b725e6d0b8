"""What else real RLlib scripts call (issue 33, part 4), spelled as RLlib's docs spell it: RLlib's
tuned-example YAML files run by ``volley train --config FILE`` (RLlib: ``rllib train file FILE``),
``get_trainable_cls``, ``Algorithm.default_resource_request`` with ``tune.with_resources``, and
``tune.Tuner("PPO", param_space=config)``.

The YAML files under tests/data/rllib_tuned/ are RLlib's own (Apache-2.0, each says where from).
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from ray import tune
from test_cli import volley

from volley import PPO, ConfigError, ModelConfig, PPOConfig, get_trainable_cls
from volley.presets import load_file

TUNED = Path(__file__).parent.parent / "data" / "rllib_tuned"


def progress(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def test_rllibs_cartpole_ppo_file_runs_to_its_stop_criterion(tmp_path):
    """RLlib's tuned CartPole PPO, as it is: stopped by its reward (150) before its step bound (100k)."""
    path = TUNED / "cartpole-ppo.yaml"
    if "linear" not in typing.get_args(typing.get_type_hints(ModelConfig)["fcnet_activation"]):
        out = volley("train", "--config", str(path), "--framework", "torch")
        assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout
        assert "fcnet_activation" in out.stderr and "'linear'" in out.stderr, out.stderr
        # until volley has a linear MLP (another branch): the file with that one line changed
        changed = tmp_path / "cartpole-ppo.yaml"
        changed.write_text(path.read_text().replace("fcnet_activation: linear", "fcnet_activation: tanh"))
        path = changed
    out = volley("train", "--config", str(path), "--framework", "torch", "--engine", "local",
                 "--logdir", str(tmp_path), "--name", "run", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = progress(tmp_path / "run")
    assert rows[-1]["episode_reward_mean"] >= 150 and rows[-1]["timesteps_total"] < 100_000, rows[-1]
    assert all(row["episode_reward_mean"] < 150 for row in rows[:-1] if row["episode_reward_mean"] == row[
        "episode_reward_mean"])  # it stopped at the first iteration that reached it
    params = json.loads((tmp_path / "run" / "params.json").read_text())["config"]
    assert (params["lr"], params["gamma"], params["num_epochs"], params["vf_loss_coeff"],
            params["observation_filter"], params["model"]["fcnet_hiddens"], params["model"]["vf_share_layers"]
            ) == (0.0003, 0.99, 6, 0.01, "MeanStdFilter", [32], True)


def test_rllibs_files_map_onto_volleys_configs():
    preset = load_file(TUNED / "cartpole-dqn.yaml", overrides={"framework": "torch"})
    config = preset.make_config({"framework": "torch"})
    assert (preset.algo, preset.env, preset.stop) == ("DQN", "CartPole-v0", {"reward": 150, "timesteps": 50_000})
    assert (type(config).__name__, config.n_step, config.gamma) == ("DQNConfig", 3, 0.95)
    pendulum = load_file(TUNED / "pendulum-ppo.yaml", overrides={"framework": "torch", "env": "Pendulum-v1"})
    config = pendulum.make_config({"framework": "torch"})
    assert (config.train_batch_size, config.minibatch_size, config.num_epochs, config.gae_lambda,
            config.num_envs_per_worker, config.model.fcnet_hiddens) == (512, 64, 6, 0.1, 20, [256, 256])
    with pytest.raises(ConfigError, match=r"config key 'framework' must be 'torch', got 'tf'"):
        load_file(TUNED / "cartpole-dqn.yaml")  # as RLlib would run it with tf: volley says so


@pytest.mark.parametrize(("text", "message"), [
    ("a: {run: PPO, env: CartPole-v1}\nb: {run: PPO, env: CartPole-v1}\n",
     "holds 2 RLlib experiments (a, b); volley trains one at a time"),
    ("a: {run: PPO, env: CartPole-v1, stop: {episode_len_mean: 100}}\n",
     "RLlib stop criterion 'episode_len_mean' is not supported by volley"),
    ("a: {run: PPO, env: CartPole-v1, num_samples: 4}\n",
     "RLlib experiment key 'num_samples' is not supported by volley"),
    ("a: {run: PPO, env: CartPole-v1, config: {num_gpus_per_worker: 1}}\n",
     "RLlib's num_gpus_per_worker=1 is not supported by volley: rollout workers act on the CPU"),
    ("a: {run: PPOO, env: CartPole-v1}\n", "unknown algorithm 'PPOO'; did you mean one of 'ppo', 'appo'"),
])
def test_a_bad_rllib_file_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_file(path)
    assert message in str(error.value) and f"config file '{path}'" in str(error.value)
    assert "\n" not in str(error.value)


def test_the_cli_prints_no_traceback_for_a_bad_rllib_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("a: {run: PPO, env: CartPole-v1, config: {num_gpus_per_worker: 1}}\n")
    out = volley("train", "--config", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout
    assert out.stderr.strip() == (f"volley train: error: config file '{path}': RLlib's num_gpus_per_worker=1 is not "
                                  "supported by volley: rollout workers act on the CPU; num_gpus gives the "
                                  "learner a GPU"), out.stderr


def test_rllibs_pendulum_file_names_its_retired_environment():
    out = volley("train", "--config", str(TUNED / "pendulum-ppo.yaml"), "--framework", "torch")
    assert out.returncode == 2 and "Traceback" not in out.stderr + out.stdout
    assert "unknown environment id 'Pendulum-v0'; did you mean" in out.stderr and "Pendulum-v1" in out.stderr


def test_get_trainable_cls_and_get_default_config():
    assert get_trainable_cls("PPO") is PPO
    assert get_trainable_cls("APEX").__name__ == "ApexDQN" and get_trainable_cls("DQN").__name__ == "DQN"
    config = get_trainable_cls("PPO").get_default_config().training(lr=1e-4)
    assert isinstance(config, PPOConfig) and config.lr == 1e-4
    with pytest.raises(ConfigError, match=r"unknown algorithm 'PPOO'; did you mean one of 'ppo', 'appo'"):
        get_trainable_cls("PPOO")


def test_default_resource_request_is_what_volleys_tune_trials_reserve():
    config = PPOConfig().env_runners(num_env_runners=2, num_cpus_per_env_runner=0.5)
    request = PPO.default_resource_request(config)
    assert request.bundles == [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]
    assert PPO.default_resource_request(config.to_dict()).bundles == request.bundles  # a dict, as Tune gives
    assert PPO.default_resource_request(PPOConfig()).bundles == [{"CPU": 1.0}]  # "auto": 0 in a trial
    assert PPO.default_resource_request(config.copy().resources(engine="local")).bundles == [{"CPU": 1.0}]


def test_a_function_trainable_with_resources_and_tuner_by_rllibs_name(ray_session, tmp_path):
    config = (PPOConfig().environment("CartPole-v1").env_runners(num_env_runners=0, num_envs_per_env_runner=2)
              .training(train_batch_size=128, minibatch_size=64, num_epochs=1))

    def train_fn(params: dict) -> None:  # RLlib's docs: a function trainable that builds the algorithm
        algo = PPOConfig.from_dict(params).build()
        try:
            for _ in range(2):
                result = algo.train()
                tune.report({"timesteps_total": result["timesteps_total"], "lr": result["lr"]})
        finally:
            algo.stop()

    run = tune.RunConfig(storage_path=str(tmp_path), verbose=0)
    grid = tune.Tuner(tune.with_resources(train_fn, PPO.default_resource_request(config)),
                      param_space=config.to_dict(), run_config=run).fit()
    assert grid.errors == [] and 200 < grid[0].metrics["timesteps_total"] <= 256  # autoreset steps not counted

    import volley.tune  # noqa: F401  RLlib's names as Tune trainables, a config as param_space

    assert tune.Tuner("PPO", param_space=config)._local_tuner.param_space == config.to_dict()  # RLlib's form
    tuned = tune.Tuner("PPO", param_space={**config.to_dict(), "lr": tune.grid_search([1e-3, 1e-4])},
                       run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0,
                                                 stop={"training_iteration": 1})).fit()
    assert tuned.errors == []
    assert sorted(result.metrics["lr"] for result in tuned) == [1e-4, 1e-3]
    assert all(0 < result.metrics["timesteps_total"] <= 128 for result in tuned)
