"""RLlib scripts, tried as a new user would: each runs with only its import changed, as its own
process (tests/cli/rllib_scripts/), on the Ray engine and real environments."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).with_name("rllib_scripts")


def run_script(name: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    """The script in a process of its own; ``HOME`` is a temporary directory, where RLlib's
    (and volley's) ``algo.save()`` without a directory writes."""
    return subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HOME": str(home)})


def test_the_quick_start_trains_five_times_then_evaluates(tmp_path):
    out = run_script("quickstart.py", home=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^episode_return_mean=([\d.]+) num_env_steps_sampled_lifetime=(\d+) "
                      r"curr_kl_coeff=([\d.e-]+)$", out.stdout, re.M)
    assert len(rows) == 5
    steps = [int(s) for _, s, _ in rows]
    assert steps == sorted(steps) and 5 * 3800 <= steps[-1] <= 5 * 4000  # 4000 a batch, less autoresets
    assert float(rows[0][2]) == 0.3  # kl_coeff reached the loss, then adapted each iteration
    assert float(rows[-1][0]) > float(rows[0][0])  # it learns (lr 0.01, gamma 0.9)
    evaluation = ast.literal_eval(out.stdout[out.stdout.index("{"):])  # pprint's dict, after the rows
    assert evaluation["episodes_this_iter"] == 10  # evaluation_duration's default
    assert evaluation["env_runners"]["episode_return_mean"] == evaluation["episode_reward_mean"] > 9


def test_rllib_in_60_seconds_on_taxi(tmp_path):
    workers = "2" if (os.cpu_count() or 1) >= 3 else "1"  # 2 workers and 1 evaluation worker: 3 CPUs
    out = run_script("rllib_in_60s.py", workers, home=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    results = [ast.literal_eval(line.replace("nan", "None")) for line in lines]
    assert [r["training_iteration"] for r in results[:5]] == [1, 2, 3, 4, 5]
    assert all(r["num_workers"] == int(workers) for r in results[:5])
    assert results[4]["env_runners"]["num_env_steps_sampled_lifetime"] == results[4]["timesteps_total"] > 0
    evaluation = results[5]
    assert evaluation["episodes_this_iter"] == 10 and evaluation["evaluation"]["episodes_this_iter"] == 10
    assert evaluation["episode_len_mean"] <= 200  # Taxi-v3's time limit


def test_the_course_exercise_trains_saves_restores_and_plays(tmp_path):
    out = run_script("course_exercise.py", home=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    rewards = [float(r) for r in re.findall(r"^iteration \d+: episode_reward_mean=([\d.]+)", out.stdout, re.M)]
    assert rewards[-1] >= 200, rewards
    saved = re.search(r"^checkpoint saved in directory (.+)$", out.stdout, re.M)
    assert saved is not None and Path(saved[1]).parent.parent == tmp_path / "volley_results"
    assert (Path(saved[1]) / "volley_checkpoint.json").is_file()
    played = re.search(r"^restored policy, iteration (\d+): episode return ([\d.]+)$", out.stdout, re.M)
    assert played is not None and int(played[1]) == len(rewards)
    assert float(played[2]) >= 150  # the restored policy balances (a random one: about 20)


def test_an_env_class_checkpoint_restores_in_a_new_process(tmp_path):
    saved = run_script("custom_env.py", "save", str(tmp_path / "ckpt"), home=tmp_path)
    assert saved.returncode == 0, saved.stderr[-3000:]
    assert re.search(r"^trained on __main__:ParrotEnv: \d+ episodes of 5 steps; saved ", saved.stdout, re.M)
    restored = run_script("custom_env.py", "restore", str(tmp_path / "ckpt"), home=tmp_path)
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert re.search(r"^restored __main__:ParrotEnv at iteration 1; action -?[01]\.\d{3}$", restored.stdout, re.M)
    without = subprocess.run([sys.executable, "-c", "from volley import Algorithm; "
                              f"Algorithm.from_checkpoint({str(tmp_path / 'ckpt')!r})"],
                             capture_output=True, text=True, timeout=300)
    assert without.returncode != 0
    assert ("EnvError: environment '__main__:ParrotEnv' was a class or function given as env in the "
            "process that made this config, and this process has no ParrotEnv in module '__main__'") in without.stderr


@pytest.mark.parametrize("script", sorted(SCRIPTS.glob("*.py")), ids=lambda p: p.name)
def test_each_script_differs_from_rllibs_only_in_its_imports(script):
    """volley appears in a script only as ``from volley import <RLlib's names>``."""
    tree = ast.parse(script.read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and "volley" in node.module]
    assert imports and all(node.module == "volley" for node in imports)
    assert {alias.name for node in imports for alias in node.names} <= {"Algorithm", "PPOConfig", "DQNConfig"}
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Import)
                and any("volley" in alias.name for alias in node.names)]
