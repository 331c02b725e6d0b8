"""Weights & Biases without a network (``WANDB_MODE=offline``): the offline run's own records,
read back from its ``.wandb`` file, hold the config and the very numbers the run printed."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from test_cli import volley

pytest.importorskip("wandb")  # the optional extra [wandb]

BLOCK = 32768  # the .wandb file is LevelDB's log format: 32 KiB blocks of framed records


def records(path: Path) -> list:
    """Every record of an offline run's ``.wandb`` file, parsed with wandb's own protobuf (wandb
    0.31 ships no Python reader for the file, only the messages)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending, found = 7, b"", []
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last fragment of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            found.append(record)
            pending = b""
    return found


def offline_run(wandb_dir: Path, index: int = -1) -> dict:
    """An offline run's name, project, config, logged rows and media files (``index``: by start)."""
    run_dir = sorted((wandb_dir / "wandb").glob("offline-run-*"))[index]
    run = {"name": "", "project": "", "config": {}, "rows": [], "dir": run_dir}
    for record in records(next(run_dir.glob("run-*.wandb"))):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["name"], run["project"] = record.run.display_name, record.run.project
        elif kind == "config":
            run["config"] |= {item.key: json.loads(item.value_json) for item in record.config.update}
        elif kind == "history":  # a logged media object is a dict, its fields under nested keys
            row: dict = {}
            for item in record.history.item:
                key, *field = [item.key] if item.key else item.nested_key
                value = json.loads(item.value_json)
                row[key] = row.get(key, {}) | {field[0]: value} if field else value
            run["rows"].append(row)
    return run


@pytest.fixture
def offline(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"}
    return tmp_path, env


def test_train_logs_the_config_and_every_row_it_printed(offline):
    tmp_path, env = offline
    out = volley("train", "--engine", "local", "--max-iters", "3", "--eval-every", "2", "--set",
                 "evaluation_duration=2", "--set", "train_batch_size=500", "--set",
                 "minibatch_size=125", "--logdir", str(tmp_path / "runs"), "--name", "run",
                 "--no-tensorboard", "--wandb", "--wandb-project", "volley-test", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = tmp_path / "runs" / "run"
    run = offline_run(tmp_path)
    assert (run["name"], run["project"]) == ("run", "volley-test")
    params = json.loads((run_dir / "params.json").read_text())
    assert run["config"] == {"algorithm": "PPO", **params["config"]}
    progress = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    logged = [row for row in run["rows"] if "episode_reward_mean" in row]
    assert len(logged) == 3
    for row, result in zip(logged, progress, strict=True):
        for key in ("training_iteration", "timesteps_total", "episode_reward_mean", "policy_loss"):
            assert row[key] == result[key], key
    # the evaluation of iteration 2, and the console's reward column to the printed digit
    assert logged[1]["evaluation/episode_reward_mean"] == progress[1]["evaluation"]["episode_reward_mean"]
    assert "evaluation/episode_reward_mean" not in logged[0]
    table = [line.split() for line in out.stdout.splitlines() if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [float(cells[2]) for cells in table] == [round(row["episode_reward_mean"], 1) for row in logged]

    # evaluate --wandb: the returns it printed and its video, in a run of their own
    out = volley("evaluate", str(run_dir / "checkpoint"), "--episodes", "2", "--video",
                 str(tmp_path / "play.gif"), "--wandb", "--wandb-project", "volley-test", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    played = offline_run(tmp_path)
    (row,) = [row for row in played["rows"] if "evaluation/episode_reward_mean" in row]
    printed = float(out.stdout.split("return ")[1].split()[0])
    assert round(row["evaluation/episode_reward_mean"], 2) == printed
    assert row["timesteps_total"] == progress[-1]["timesteps_total"]
    assert row["evaluation/video"]["_type"] == "video-file"
    (video,) = (played["dir"] / "files").rglob("*.gif")
    assert video.read_bytes() == (tmp_path / "play.gif").read_bytes()

    # the checkpoint's config names the callbacks; without --wandb it plays and resumes untracked
    runs = len(list((tmp_path / "wandb").glob("offline-run-*")))
    out = volley("evaluate", str(run_dir / "checkpoint"), "--episodes", "1", env=env)
    assert out.returncode == 0 and "W&B" not in out.stderr, out.stderr[-3000:]
    out = volley("train", "--resume", str(run_dir), "--max-iters", "4", env=env)
    assert out.returncode == 0 and "W&B" not in out.stderr, out.stderr[-3000:]
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == runs


def test_without_wandb_installed_the_flag_says_how_to_get_it(tmp_path):
    blocker = tmp_path / "wandb.py"
    blocker.write_text("raise ImportError('no wandb here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = volley("train", "--engine", "local", "--max-iters", "1", "--logdir", str(tmp_path), "--wandb", env=env)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.strip() == "volley train: error: --wandb needs Weights & Biases: pip install 'volley-rl[wandb]'"


def test_tune_logs_each_trial_through_tunes_wandb_callback(offline):
    tmp_path, env = offline
    out = volley("tune", "--grid", "lr=1e-3,3e-4", "--max-iters", "2", "--num-cpus", "2", "--envs-per-worker",
                 "2", "--set", "train_batch_size=128", "--set", "minibatch_size=64", "--logdir",
                 str(tmp_path / "runs"), "--name", "grid", "--wandb", "--wandb-project", "sweep", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    trials = {json.loads((trial / "params.json").read_text())["lr"]: trial
              for trial in (tmp_path / "runs" / "grid").iterdir() if trial.is_dir()}
    logged = [offline_run(tmp_path, index) for index in range(len(trials))]
    assert {run["project"] for run in logged} == {"sweep"}
    assert sorted(run["config"]["lr"] for run in logged) == sorted(trials)
    for run in logged:
        progress = [json.loads(line) for line in
                    (trials[run["config"]["lr"]] / "progress.jsonl").read_text().splitlines()]
        rows = [row for row in run["rows"] if "episode_reward_mean" in row]
        assert [row["episode_reward_mean"] for row in rows] == [r["episode_reward_mean"] for r in progress]


def test_wandb_callbacks_log_into_the_active_run_from_python(tmp_path):
    """SB3's pattern: wandb.init, then the callbacks; each train() result is one logged row."""
    import wandb

    from volley import PPOConfig
    from volley.tracking import WandbCallbacks

    config = PPOConfig().environment("CartPole-v1").update(
        engine="local", num_workers=0, train_batch_size=256, minibatch_size=64).callbacks(WandbCallbacks)
    run = wandb.init(project="python", mode="offline", dir=tmp_path, settings=wandb.Settings(console="off"))
    try:
        algo = config.build()
        results = [algo.train() for _ in range(2)]
        algo.stop()
    finally:
        run.finish()
    logged = offline_run(tmp_path)
    assert logged["config"]["train_batch_size"] == 256 and logged["config"]["algorithm"] == "PPO"
    rows = [row for row in logged["rows"] if "episode_reward_mean" in row]
    assert [(row["timesteps_total"], row["episode_reward_mean"], row["vf_loss"]) for row in rows] == [
        (r["timesteps_total"], r["episode_reward_mean"], r["vf_loss"]) for r in results]

    # no active run: nothing logged, one warning naming what to call
    with pytest.warns(RuntimeWarning, match=r"call wandb.init\(\) before building"):
        algo = config.build()
    algo.train()
    algo.stop()
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1
