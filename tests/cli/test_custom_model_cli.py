"""A custom model from the command line: `--import` the module that registers it
(tests/custom_models.py), then train,
evaluate (with a video), resume; without it, or with a model that does not fit, one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from volley.cli import main

VOLLEY = os.path.join(os.path.dirname(sys.executable), "volley")

TESTS = Path(__file__).parents[1]  # where custom_models.py registers "my_model" and "wrong_shape"


def volley(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`volley` in ``cwd``, where a user's own module would be; tests/ on the path for custom_models."""
    return subprocess.run([VOLLEY, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(TESTS)})


def test_train_evaluate_with_a_video_and_resume_a_custom_model(tmp_path):
    common = ["--import", "custom_models", "--engine", "local", "--no-tensorboard", "--set", "train_batch_size=256",
              "--set", "minibatch_size=64"]
    first = volley("train", *common, "--set", 'model={"custom_model": "my_model"}', "--max-iters", "1",
                   "--logdir", "runs", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    played = volley("evaluate", str(run_dir / "checkpoint"), "--import", "custom_models", "--episodes", "2",
                    "--video", "play.gif", cwd=tmp_path)
    assert played.returncode == 0, played.stderr[-3000:]
    assert "volley: 2 episodes of CartPole-v1" in played.stdout and (tmp_path / "play.gif").stat().st_size > 0
    resumed = volley("train", "--resume", str(run_dir), "--import", "custom_models", "--max-iters", "2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2]
    without = volley("evaluate", str(run_dir / "checkpoint"), cwd=tmp_path)
    assert without.returncode == 2 and "Traceback" not in without.stderr
    assert without.stderr == ("volley evaluate: error: unknown custom model 'my_model' (none is registered in "
                              "this process); ModelCatalog.register_custom_model('my_model', ...)\n")


@pytest.mark.parametrize(("args", "message"), [
    (["--import", "custom_models", "--set", 'model={"custom_model": "wrong_shape"}'],
     "custom model WrongShape returned outputs of shape (2, 1): expected (2, 2), one logit per action"),
    (["--import", "no_such_models"], "--import no_such_models: No module named 'no_such_models'"),
])
def test_custom_model_mistakes_get_one_line_and_exit_2(args, message, tmp_path, monkeypatch, capfd):
    """Through ``volley.cli.main`` in this process (tests/ on the path, as PYTHONPATH puts it for
    the real processes above); a real process's one-line custom-model error is the last step of
    test_train_evaluate_with_a_video_and_resume_a_custom_model."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(TESTS))
    capfd.readouterr()
    code = main(["train", "--engine", "local", "--max-iters", "1", "--logdir", str(tmp_path / "runs"), *args])
    out, err = capfd.readouterr()
    assert code == 2, err[-3000:]
    assert message in err and err.count("\n") == 1 and "Traceback" not in err + out
