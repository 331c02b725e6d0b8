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
    assert own.status == "fail" and own.detail.endswith(": OverflowError: cannot convert float infinity to integer")
    assert "train_batch_size=4000" in own.detail  # RLlib's default, which the script relies on
    tune = rllib_examples.classify("s", "single-agent", 1, "", "callbacks=[LegacyLoggerCallback(MyPrintLogger)]\n"
                                   "TypeError: 'ABCMeta' object is not iterable\n", [], 1)
    assert tune.status == "script" and "RLlib 2.9.3 itself fails the same way" in tune.detail


def test_a_run_on_rllib_itself_counts_as_ok_only_when_rllib_trained():
    """``--rllib`` runs the scripts unchanged on RLlib 2.9.3, to tell a script that fails on volley
    from one that fails on RLlib too: there volley's train must not have run, and RLlib's must have."""
    ok = rllib_examples.classify("s", "single-agent", 0, "done\n", "", ["rllib PPO"], 1, "rllib")
    assert (ok.status, ok.detail) == ("ok", "1 RLlib train() calls")
    assert rllib_examples.classify("s", "single-agent", 0, "done\n", "", ["volley VolleyPPO"], 1, "rllib").detail == \
        "volley's Algorithm.train ran, not RLlib's"
    assert rllib_examples.classify("s", "single-agent", 0, "done\n", "", [], 1, "rllib").detail == \
        "RLlib's Algorithm.train never ran"


def test_results_keep_a_table_per_ray_version_and_a_run_of_a_few_scripts_updates_their_rows(tmp_path, monkeypatch):
    """The suite runs under Ray 2.9.3 (``--python``, the version the scripts were written for) and
    under the Ray installed: RESULTS.md holds both tables, and what follows the section stays."""
    results = tmp_path / "RESULTS.md"
    results.write_text(f"# Results\n\n{rllib_examples.SECTION}\n\nan older table\n\n## Next section\n\nkept\n")
    monkeypatch.setattr(rllib_examples, "RESULTS", results)
    Row = rllib_examples.Row
    for ray, python, rows in (("2.60.0", sys.executable, [Row("a", "single-agent", "ray-2.60", "removed", 1.0)]),
                              ("2.9.3", "/venv29/bin/python", [Row("a", "single-agent", "ok", "2 calls", 2.0),
                                                               Row("b", "multi-agent", "fail", "E: x", 3.0)]),
                              ("2.9.3", "/venv29/bin/python", [Row("b", "multi-agent", "ok", "1 calls", 4.0)])):
        rllib_examples.write_results(rllib_examples.table(rllib_examples.merged(rows, ray)), ray, python)
    text = results.read_text()
    assert text.startswith("# Results\n\n") and text.endswith("\n\n## Next section\n\nkept\n")
    assert "an older table" not in text and text.index("### Under Ray 2.9.3") < text.index("### Under Ray 2.60.0")
    under_29 = text[text.index("### Under Ray 2.9.3"):text.index("### Under Ray 2.60.0")]
    assert "--write-results --python /venv29/bin/python`" in under_29
    assert "single-agent: **1 of 1 ok**; multi-agent: **1 of 1 ok**" in under_29  # b's row updated, a's kept
    rllib_examples.write_results(rllib_examples.table([Row("a", "single-agent", "ok", "1 calls", 9.0)]), "2.9.3",
                                 "/rllib29/bin/python", "rllib")
    text = results.read_text()
    rllib = text[text.index("### RLlib 2.9.3 itself"):text.index("### Under Ray 2.60.0")]
    assert "--python /rllib29/bin/python --rllib`" in rllib and "| a | single-agent | ok | 1 calls | 9 |" in rllib
    assert "single-agent: **1 of 1 ok**; multi-agent: **1 of 1 ok**" in text[:text.index("### RLlib 2.9.3")]
    rllib_examples.write_results(rllib_examples.table(rllib_examples.merged(  # a second run of one script
        [Row("b", "multi-agent", "fail", "E: y", 5.0)], "2.9.3", "rllib")), "2.9.3", "/rllib29/bin/python", "rllib")
    text = results.read_text()
    assert text.count("### RLlib 2.9.3 itself") == 1 and text.count("### Under Ray 2.60.0") == 1
    assert "| a | single-agent | ok | 1 calls | 9 |" in text and "| b | multi-agent | fail | E: y | 5 |" in text
    assert "| a | single-agent | ray-2.60 | removed | 1 |" in text[text.index("### Under Ray 2.60.0"):]


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
    import ray  # Ray 2.9 has Deprecated where the helper looks, Ray 2.60 where it moved it

    moved = not (Path(ray.__file__).parent / "rllib" / "utils" / "deprecation.py").is_file()
    home = "ray._common.deprecation" if moved else "ray.rllib.utils.deprecation"
    assert out.stdout.split() == ["volley.envs", "typing.Any", "6", home]
    assert not list(helper.rglob("*.pyc"))  # never cached: the next run's names may differ


@pytest.mark.parametrize("name", rllib_examples.FAST)
def test_the_fast_subset_runs_on_volley(name):
    """Each in its own process with its stop flags; the hook saw volley's Algorithm.train run."""
    row = rllib_examples.run(name, rllib_examples.fetch(), rllib_examples.volley_names(), timeout=170)
    assert (row.status, row.detail) == ("ok", row.detail) and row.detail.endswith("volley train() calls")


SCRIPT = '''
import gymnasium as gym
import ray
from ray import air, tune
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
grid = tune.Tuner("PPO", param_space=config, run_config=air.RunConfig(**run)).fit()  # as RLlib 2.9's scripts
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
