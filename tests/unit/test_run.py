"""A run directory: pruning that never loses the linked checkpoint, and rewinding after a crash."""

import json
import os
import tempfile

import pytest

from volley import CheckpointError, PPOConfig
from volley.checkpoint import TENSORS, read_checkpoint
from volley.run import (
    LATEST,
    Stop,
    latest_checkpoint,
    numbered_checkpoints,
    rewind,
    save_run_checkpoint,
    train_until,
)


@pytest.fixture
def algo():
    config = (PPOConfig().environment("CartPole-v1").resources(engine="local")
              .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
              .rollouts(num_envs_per_worker=2))
    algo = config.build()
    yield algo
    algo.stop()


def _quiet():
    return open(os.devnull, "w")


def test_keep_checkpoints_keeps_the_newest_and_the_link_names_the_last(algo, tmp_path):
    with _quiet() as out:
        outcome = train_until(algo, Stop(iterations=5), tmp_path, checkpoint_freq=1,
                              keep_checkpoints=2, tensorboard=False, out=out)
    assert outcome.reason == "reached 5 iterations"
    assert list(numbered_checkpoints(tmp_path)) == [4, 5]
    assert os.readlink(tmp_path / LATEST) == "checkpoint_000005"
    _, manifest = read_checkpoint(tmp_path / LATEST)
    assert manifest["state"]["iteration"] == 5
    assert json.loads((tmp_path / "params.json").read_text())["run"] == {
        "stop": {"reward": None, "iterations": 5, "timesteps": None, "time_s": None},
        "checkpoint_freq": 1, "keep_checkpoints": 2}


def test_pruning_never_deletes_the_linked_checkpoint(algo, tmp_path):
    algo.train()
    (tmp_path / "checkpoint_000009").mkdir()  # newer by name: left by an abandoned run
    save_run_checkpoint(algo, tmp_path, keep=1)
    assert list(numbered_checkpoints(tmp_path)) == [1]
    assert os.readlink(tmp_path / LATEST) == "checkpoint_000001"
    with pytest.raises(ValueError, match="keep must be >= 1, got 0"):
        save_run_checkpoint(algo, tmp_path, keep=0)


def test_rewind_after_a_kill_between_writing_and_linking(algo, tmp_path):
    with _quiet() as out:
        train_until(algo, Stop(iterations=4), tmp_path, checkpoint_freq=1, tensorboard=False, out=out)
    # The state kill -9 leaves right after checkpoint_000004 was renamed into place but before
    # the link moved, with a half-written checkpoint_000005 and a row cut short:
    os.symlink("checkpoint_000003", tmp_path / ".checkpoint.link-tmp")
    os.replace(tmp_path / ".checkpoint.link-tmp", tmp_path / LATEST)
    partial = tempfile.mkdtemp(prefix=".checkpoint_000005.tmp-", dir=tmp_path)
    with open(os.path.join(partial, TENSORS), "wb") as f:
        f.write((tmp_path / "checkpoint_000004" / TENSORS).read_bytes()[:100])
    os.symlink("checkpoint_000004", tmp_path / ".checkpoint.link-tmp")
    with open(tmp_path / "progress.jsonl", "a") as f:
        f.write('{"training_iteration": 5, "timesteps_')

    path = latest_checkpoint(tmp_path)
    assert path == tmp_path / "checkpoint_000003"
    _, manifest = read_checkpoint(path)
    rewind(tmp_path, manifest["state"]["iteration"])

    assert sorted(p.name for p in tmp_path.iterdir()) == [
        LATEST, "checkpoint_000001", "checkpoint_000002", "checkpoint_000003",
        "params.json", "progress.jsonl"]
    rows = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert [row["training_iteration"] for row in rows] == [1, 2, 3]


def test_latest_checkpoint_without_a_link_and_without_any(algo, tmp_path):
    with pytest.raises(CheckpointError, match=f"no run directory at '{tmp_path / 'nope'}'"):
        latest_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match=f"no checkpoint in run directory '{tmp_path}'"):
        latest_checkpoint(tmp_path)
    algo.train()
    algo.save(tmp_path / "checkpoint_000001")
    algo.train()
    algo.save(tmp_path / "checkpoint_000002")  # killed before its first link was made
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint_000002"
