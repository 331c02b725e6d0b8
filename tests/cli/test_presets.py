"""Tuned presets: every shipped one loads, validates and trains an iteration; mistakes are one line."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from volley.cli import main
from volley.presets import load_preset, preset_names

ROOT = Path(__file__).resolve().parents[2]
MPI = [name for name in preset_names() if load_preset(name).config.get("engine") == "mpi"]
IN_PROCESS = [name for name in preset_names() if name not in MPI]
EXPECTED = {"ppo-cartpole", "ppo-pendulum", "ppo-halfcheetah", "ppo-hopper", "ppo-walker2d", "ppo-humanoid",
            "ppo-pong", "trpo-hopper", "trpo-pong-ram", "pg-pong", "dqn-cartpole", "apex-dqn-cartpole",
            "dqn-pong", "sac-pendulum", "sac-halfcheetah", "ppo-lstm-stateless-cartpole"}


def test_the_issue_s_presets_are_shipped_and_listed(capsys):
    assert set(preset_names()) >= EXPECTED
    assert main(["presets"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in listed) <= 100  # a terminal's table, not markdown (issue 48)
    assert not any(line.startswith("|") for line in listed)
    for name in preset_names():
        preset = load_preset(name)
        (row,) = [i for i, line in enumerate(listed) if line.split()[:1] == [name]]
        assert listed[row].split()[1:3] == [preset.algo, preset.env]
        summary = []  # the measured figures, wrapped under the row, word for word
        for line in listed[row + 1:]:
            if not line.startswith("    "):
                break
            summary.append(line.strip())
        assert " ".join(summary) == " ".join(((preset.result or {}).get("summary") or "not measured yet").split())
    assert "timesteps 1,000,000" in "\n".join(listed)

    assert main(["presets", "--markdown"]) == 0
    markdown = capsys.readouterr().out
    for name in preset_names():
        assert f"| {name} |" in markdown


# A smaller batch for the presets whose first iteration is long (Pong: 10 whole episodes, or
# 10,000 steps); every other key of the preset stays. Only the batch's size changes: pg-pong's
# 2 episodes are still one for each of its 2 workers, trpo-pong-ram's 1,000 steps still a whole
# episode from each (complete_episodes), ppo-pong's 256 steps still come from all 8 of its envs.
SMALLER_BATCH = {"pg-pong": {"batch_episodes": 2}, "trpo-pong-ram": {"train_batch_size": 1000},
                 "ppo-pong": {"train_batch_size": 256}}
# The MPI presets are PPO on MuJoCo on the same engine with nearly the same keys (ppo-humanoid
# adds gather mode, an lr schedule and value clipping); one goes through `volley train` and
# mpiexec (an allreduce one, the mode of three of them), the others build here (below).
THROUGH_MPIEXEC = "ppo-hopper"


@pytest.mark.parametrize("name", IN_PROCESS)
def test_preset_trains_one_iteration(name, ray_session):
    preset = load_preset(name)
    smaller = SMALLER_BATCH.get(name, {})
    assert set(smaller) <= {"batch_episodes", "train_batch_size"}  # a size, never how it trains
    algo = preset.make_config(smaller).build()
    try:
        result = algo.train()  # Ape-X's first iteration waits for its workers' first report
    finally:
        algo.stop()
    assert result["training_iteration"] == 1
    assert result["timesteps_this_iter"] > 0
    assert algo.config.env == preset.env


def test_mpi_preset_starts_its_own_ranks_and_trains_one_iteration(tmp_path):
    """`volley train --preset` of an MPI preset starts mpiexec with the preset's nprocs itself.
    What this shows holds for every MPI preset (the same command path); the others' configs are
    built by test_the_other_mpi_presets_build_as_a_one_rank_job."""
    name = THROUGH_MPIEXEC
    run = subprocess.run([sys.executable, "-m", "volley", "train", "--preset", name, "--max-iters", "1",
                          "--logdir", str(tmp_path), "--name", "run", "--no-tensorboard"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    preset = load_preset(name)
    assert f"engine mpi, {preset.nprocs} worker(s)" in run.stdout
    assert "stopped (reached 1 iterations)" in run.stdout
    assert (tmp_path / "run" / "checkpoint").exists()


@pytest.mark.parametrize("name", [name for name in MPI if name != THROUGH_MPIEXEC])
def test_the_other_mpi_presets_build_as_a_one_rank_job(name):
    """Each other MPI preset's config, unchanged, builds here as a one-rank MPI job (no mpiexec):
    its environment, model, filters and mode; and the model acts. Its iteration is PPO's on the
    MPI engine, which test_mpi_preset_starts_its_own_ranks_and_trains_one_iteration trains
    (allreduce, two ranks) and tests/mpi/test_mpi.py trains in both modes; gather mode on
    Humanoid on two ranks is tests/cli/test_examples.py::test_ppo_humanoid_mpi_runs_on_two_ranks's."""
    preset = load_preset(name)
    algo = preset.make_config().build()
    try:
        assert (algo.config.engine, algo.config.mpi_mode) == ("mpi", preset.config["mpi_mode"])
        assert algo.config.env == preset.env
        action = algo.compute_single_action(algo.observation_space.sample())  # the model fits the env
        assert np.shape(action) == algo.action_space.shape
    finally:
        algo.stop()


def test_flags_override_the_preset(tmp_path, capsys):
    code = main(["train", "--preset", "ppo-cartpole", "--env", "Acrobot-v1", "--max-iters", "1", "--seed", "7",
                 "--set", "lr=0.01", "--logdir", str(tmp_path), "--name", "r", "--no-tensorboard"])
    assert code == 0
    out = capsys.readouterr().out
    assert "PPO on Acrobot-v1, engine local" in out and "seed 7" in out
    params = (tmp_path / "r" / "params.json").read_text()
    assert '"lr": 0.01' in params and '"reward": 475' in params  # the preset's stop criterion stays


@pytest.mark.parametrize(("args", "message"), [
    (["--preset", "ppo-halfchetah"], "unknown preset 'ppo-halfchetah'; did you mean one of 'ppo-halfcheetah'"),
    (["--config", "{missing}"], "cannot read config file '{missing}'"),
    (["--config", "{bad_yaml}"], "config file '{bad_yaml}' is not valid YAML at line 3"),
    (["--config", "{bad_key}"], "config file '{bad_key}': unknown key 'confg'; did you mean 'config'"),
    (["--config", "{bad_value}"], "config file '{bad_value}': config key 'lr' must be > 0, got -1.0"),
    (["--preset", "ppo-cartpole", "--algo", "dqn"], "--algo dqn but preset 'ppo-cartpole' trains ppo"),
])
def test_a_bad_preset_or_file_is_one_line_naming_it(args, message, tmp_path, capsys):
    files = {"missing": tmp_path / "missing.yaml", "bad_yaml": tmp_path / "bad.yaml",
             "bad_key": tmp_path / "key.yaml", "bad_value": tmp_path / "value.yaml"}
    files["bad_yaml"].write_text("algo: ppo\nenv: [\n")
    files["bad_key"].write_text("algo: ppo\nenv: CartPole-v1\nconfg: {lr: 1}\n")
    files["bad_value"].write_text("algo: ppo\nenv: CartPole-v1\nconfig: {lr: -1}\n")
    args = [a.format(**files) for a in args]
    assert main(["train", *args, "--logdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message.format(**files) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_user_file_runs_like_a_preset(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    path.write_text("algo: dqn\nenv: CartPole-v1\nconfig: {engine: local, lr: 0.0005}\nstop: {iterations: 2}\n")
    assert main(["train", "--config", str(path), "--logdir", str(tmp_path), "--name", "r", "--no-tensorboard"]) == 0
    assert "stopped (reached 2 iterations)" in capsys.readouterr().out
    assert '"lr": 0.0005' in (tmp_path / "r" / "params.json").read_text()


def test_the_wheel_ships_the_presets(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, timeout=300)
    (wheel,) = tmp_path.glob("volley_rl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"volley/tuned/{name}.yaml" for name in preset_names()} <= set(names)


def test_a_run_stopped_far_below_its_preset_s_steps_says_so(tmp_path, capsys):
    """Issue 48: SAC on Pendulum for 3,000 steps ends worse than it began; the preset records
    -200 at a median 5,200 steps, and the run's last line says so."""
    recorded = load_preset("sac-pendulum").result["median_steps"]
    bounded = ["--engine", "local", "--logdir", str(tmp_path), "--no-tensorboard"]
    assert main(["train", "--algo", "sac", "--env", "Pendulum-v1", "--max-iters", "1", *bounded]) == 0
    out = capsys.readouterr().out.splitlines()
    steps = int(out[-3].split(" env steps")[0].rsplit(", ", 1)[1])
    assert out[-1] == (f"volley: note: {steps:,} env steps is far below the {recorded:,} that preset "
                       "'sac-pendulum' took to reach its threshold (median_steps); for a policy that learns, "
                       "give it more steps (volley train --preset sac-pendulum)")
    # no preset for PG on CartPole; a run that reached its reward; a budget near the preset's figure
    assert main(["train", "--algo", "pg", "--max-iters", "1", *bounded]) == 0
    assert main(["train", "--max-iters", "50", "--stop-reward", "15", *bounded]) == 0
    assert "note:" not in capsys.readouterr().out
    from volley.presets import short_run_hint

    assert short_run_hint("SAC", "Pendulum-v1", int(0.75 * recorded)) is None
    assert "5,200" in short_run_hint("SAC", "Pendulum-v1", int(0.75 * recorded) - 1)
    assert "'ppo-pong'" in short_run_hint("PPO", "CartPole-v1", 1000, preset="ppo-pong")  # --preset's own


def test_a_reader_that_goes_away_ends_the_listing_without_a_traceback():
    """`volley presets | head -1`: the reader closes the pipe; volley stops quietly with SIGPIPE's
    status. The pipe's read end is closed before volley starts, so its first write finds it gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    listing = subprocess.run([sys.executable, "-m", "volley", "presets"], stdout=write_end,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(write_end)
    assert listing.returncode == 141 and listing.stderr == "", listing.stderr
