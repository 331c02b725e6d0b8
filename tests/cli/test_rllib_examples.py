"""RLlib 2.9.3's own example scripts on volley (benchmarks/rllib_examples.py, issue 49): the import
rule, the fast subset of the suite (the wheel comes from PyPI once, cached in ~/.cache/volley), and
Tune's RLlib names running volley's algorithms from a script written as RLlib's are."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import rllib_examples  # noqa: E402  (a script of benchmarks/, not a package)


def test_the_rule_changes_only_imports_of_names_volley_exports():
    source = textwrap.dedent("""\
        import ray
        import ray.rllib.algorithms.ppo as ppo
        from ray.rllib.algorithms import ppo as p2, marwil
        from ray.rllib.algorithms.ppo import PPOConfig, PPOTorchPolicy
        from ray.tune.registry import (
            get_trainable_cls,
            register_env,
        )
        def f():
            from ray.rllib.models import ModelCatalog
            return "from ray.rllib.algorithms.ppo import PPOConfig"
        """)
    exported = {"PPOConfig", "get_trainable_cls", "register_env", "ModelCatalog", "algorithms.ppo"}
    assert rllib_examples.rewrite(source, exported) == textwrap.dedent("""\
        import ray
        import volley.algorithms.ppo as ppo
        from volley.algorithms import ppo as p2
        from ray.rllib.algorithms import marwil
        from volley import PPOConfig
        from ray.rllib.algorithms.ppo import PPOTorchPolicy
        from volley import get_trainable_cls, register_env
        def f():
            from volley import ModelCatalog
            return "from ray.rllib.algorithms.ppo import PPOConfig"
        """)


def test_a_run_counts_as_ok_only_when_volley_trained_and_no_trial_errored():
    volley = ["volley VolleyPPO"]
    assert rllib_examples.classify("s", "single-agent", 0, "done\n", "", volley, 1).status == "ok"
    assert rllib_examples.classify("s", "single-agent", 0, "done\n", "", ["rllib PPO"], 1).detail == \
        "RLlib's Algorithm.train ran, not volley's"
    errored = rllib_examples.classify("s", "single-agent", 0, "Number of errored trials: 1\n",
                                      "volley.errors.EnvError: unknown environment id 'X'\n", volley, 1)
    assert (errored.status, errored.detail) == ("fail", "volley.errors.EnvError: unknown environment id 'X'")
    assert rllib_examples.classify("s", "single-agent", None, "", "", [], 30).status == "timeout"
    own = rllib_examples.classify("s", "single-agent", 1, "", '    new_task = int(np.log10(train_results["episode_reward_'
                                  'mean"]) + 2.1)\nOverflowError: cannot convert float infinity to integer\n', volley, 1)
    assert own.status == "script" and own.detail.endswith(": OverflowError: cannot convert float infinity to integer")


def test_the_helper_modules_load_from_the_2_9_folder_under_the_same_rule(tmp_path):
    """curriculum_learning.py's helper env/curriculum_capable_env.py subclasses 2.9's TaskSettableEnv
    (``from ray.rllib.env.apis.task_settable_env import``), which Ray 2.60 removed; env/multi_agent.py
    imports ``Deprecated`` from where Ray 2.60 no longer has it, and models/shared_weights_model.py
    calls NumPy 1's ``np.product``."""
    helper = tmp_path / "tree" / "ray" / "rllib" / "examples" / "env"
    helper.mkdir(parents=True)
    (helper.parent / "__init__.py").write_text("")
    (helper / "__init__.py").write_text("")
    (helper / "lake.py").write_text("from ray.rllib.env.apis.task_settable_env import TaskSettableEnv, TaskType\n"
                                    "from ray.rllib.utils.deprecation import Deprecated\n"
                                    "import numpy as np\n"
                                    "SIZE = int(np.product((2, 3)))\n"
                                    "class Lake(TaskSettableEnv):\n    pass\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(rllib_examples.SITECUSTOMIZE)
    code = ("from ray.rllib.examples.env.lake import Lake, SIZE, TaskType, Deprecated; "
            "print(Lake.__mro__[1].__module__, TaskType, SIZE, Deprecated.__module__)")
    env = {**rllib_examples.child_env(tmp_path / "site", tmp_path / "tree", tmp_path / "trains.log"),
           "VOLLEY_SUITE_NAMES": " ".join(rllib_examples.volley_names())}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["volley.envs", "typing.Any", "6", "ray._common.deprecation"]
    assert not list(helper.rglob("*.pyc"))  # never cached: the next run's names may differ


@pytest.mark.parametrize("name", rllib_examples.FAST)
def test_the_fast_subset_runs_on_volley(name):
    """Each in its own process with its stop flags; the hook saw volley's Algorithm.train run."""
    row = rllib_examples.run(name, rllib_examples.fetch(), rllib_examples.volley_names(), timeout=170)
    assert (row.status, row.detail) == ("ok", row.detail) and row.detail.endswith("volley train() calls")


SCRIPT = '''
import gymnasium as gym
import ray
from ray import tune
from volley import PPOConfig


class Corridor(gym.Env):
    """Defined in the script: it reaches each trial's process only because volley sends it."""
    observation_space = gym.spaces.Box(0.0, 5.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config):
        self.length = config["length"]

    def reset(self, *, seed=None, options=None):
        self.pos = 0
        return [0.0], {}

    def step(self, action):
        self.pos += 1
        return [float(self.pos)], 1.0, self.pos >= self.length, False, {}


ray.init(num_cpus=2, include_dashboard=False)
config = (PPOConfig().environment(Corridor, env_config={"length": 4}).rollouts(num_rollout_workers=0)
          .training(lr=tune.grid_search([1e-3, 1e-4]), train_batch_size=64, sgd_minibatch_size=32))
run = {"stop": {"training_iteration": 1}, "storage_path": "{storage}", "verbose": 0}
grid = tune.Tuner("PPO", param_space=config, run_config=tune.RunConfig(**run)).fit()
old = tune.run("PPO", config={**config.to_dict(), "lr": 5e-4}, **run)
for result in [*grid, *[t for t in old.trials]]:
    metrics = getattr(result, "metrics", None) or result.last_result
    path = getattr(result, "path", None) or result.path
    print(metrics["config"]["lr"], metrics["episode_len_mean"], (__import__("pathlib").Path(path) / "progress.jsonl").is_file())
'''


def test_tunes_rllib_names_run_volley_with_a_config_or_a_dict(tmp_path):
    """parallel_evaluation_and_training.py and custom_env.py: ``tune.Tuner("PPO", param_space=config)``
    (a config object holding a grid search) and ``tune.run("PPO", config=dict)``, with an environment
    class defined in the script."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.replace("{storage}", str(tmp_path / "runs")))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400, cwd=tmp_path,
                         env={**os.environ, "RAY_ADDRESS": "local"})  # never a cluster running beside it
    assert out.returncode == 0, out.stderr[-3000:]
    rows = sorted(line.split() for line in out.stdout.splitlines() if line.count(" ") == 2)
    # one trial per grid value and the tune.run one; the corridor's episodes (4 steps); volley's log
    assert rows == [["0.0001", "4.0", "True"], ["0.0005", "4.0", "True"], ["0.001", "4.0", "True"]]
