"""Issue 6, faults 4 and 5: `volley train` killed with SIGKILL mid-run (even mid-checkpoint)
resumes with --resume; SIGTERM and SIGINT write a final checkpoint and leave no process behind."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from volley import Algorithm
from volley.checkpoint import MANIFEST, TENSORS, read_checkpoint
from volley.cli import main
from volley.run import LATEST, numbered_checkpoints

VOLLEY = os.path.join(os.path.dirname(sys.executable), "volley")
TINY = ["--engine", "local", "--envs-per-worker", "2", "--no-tensorboard", "--set", "train_batch_size=64",
        "--set", "minibatch_size=32", "--set", "num_epochs=1"]


def start(*args: str) -> subprocess.Popen:
    """`volley train` in its own session, so every process it starts can be found by session id."""
    return subprocess.Popen([VOLLEY, "train", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def wait_for(condition, process: subprocess.Popen, what: str, timeout: float = 240,
             poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"volley exited ({process.returncode}) before {what}:\n{process.stdout.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(poll)


def linked_iteration(run_dir: Path) -> int:
    """The iteration the `checkpoint` link names (0 while there is none)."""
    try:
        return int(os.readlink(run_dir / LATEST).rsplit("_", 1)[1])
    except (FileNotFoundError, IndexError, ValueError):
        return 0


def progress_iterations(run_dir: Path) -> list[int]:
    return [json.loads(line)["training_iteration"]
            for line in (run_dir / "progress.jsonl").read_text().splitlines()]


def session_members(session: int) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members


def test_sigkill_at_random_moments_then_resume(tmp_path):
    """Five SIGKILLs of a run that checkpoints every iteration, each after a random delay; the
    second and fourth are aimed at a checkpoint write (sent as soon as a hidden temporary
    checkpoint directory appears). After each, the linked checkpoint and every numbered one
    verify, and --resume continues the same run from the linked one."""
    rng = random.Random(6)
    logdir = tmp_path / "runs"
    run_dir: Path | None = None
    args = [*TINY, "--checkpoint-freq", "1", "--keep-checkpoints", "3", "--stop-reward", "1e9"]
    hidden = []  # what each kill left half done: shown with pytest -s
    for kill in range(5):
        resumed_from = linked_iteration(run_dir) if run_dir else 0
        process = start(*args, "--logdir", str(logdir)) if run_dir is None else start("--resume", str(run_dir))
        wait_for(lambda: any(logdir.glob("*/checkpoint")), process, "first checkpoint")
        run_dir = next(logdir.iterdir())
        wait_for(lambda: linked_iteration(run_dir) > resumed_from, process,  # noqa: B023
                 f"a checkpoint after iteration {resumed_from}")
        if kill % 2:
            wait_for(lambda: any(".tmp-" in p.name for p in run_dir.iterdir()), process,  # noqa: B023
                     "a checkpoint write", poll=0.001)
            time.sleep(rng.uniform(0.0, 0.002))
        else:
            time.sleep(rng.uniform(0.0, 0.3))
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL

        _, manifest = read_checkpoint(run_dir / LATEST)
        assert manifest["state"]["iteration"] == linked_iteration(run_dir) > resumed_from
        for path in numbered_checkpoints(run_dir).values():
            read_checkpoint(path)  # renamed into place whole, or not at all
        hidden.append(sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")))
    print("hidden entries after each kill:", hidden)

    assert run_dir is not None
    last = linked_iteration(run_dir)
    out = subprocess.run([VOLLEY, "train", "--resume", str(run_dir), "--max-iters", str(last + 2)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"resuming from {run_dir / f'checkpoint_{last:06d}'} (iteration {last}," in out.stdout
    assert f"stopped (reached {last + 2} iterations) at iteration {last + 2}" in out.stdout
    assert progress_iterations(run_dir) == list(range(1, last + 3))
    steps = [json.loads(line)["timesteps_total"] for line in (run_dir / "progress.jsonl").open()]
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False))
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")]  # leftovers removed
    assert list(numbered_checkpoints(run_dir)) == [last, last + 1, last + 2]  # --keep-checkpoints 3 kept


def test_sigkill_of_a_ray_driver_leaves_no_cluster_process_then_resumes(tmp_path):
    """Issue 14: Ray's node processes die with the driver by themselves, but its agents
    (ray::DashboardAgent, ray::RuntimeEnvAgent) used to outlive a kill -9 by a minute or more."""
    process = start("--engine", "ray", "--workers", "2", "--num-cpus", "2", "--envs-per-worker", "2",
                    "--set", "train_batch_size=256", "--set", "minibatch_size=64", "--no-tensorboard",
                    "--stop-reward", "1e9", "--checkpoint-freq", "1", "--logdir", str(tmp_path))
    wait_for(lambda: any(linked_iteration(run) >= 1 for run in tmp_path.iterdir()), process,
             "a first checkpoint")
    (run_dir,) = tmp_path.iterdir()
    titles = " ".join(" ".join(p.cmdline()) for p in session_members(process.pid))
    for title in ("raylet", "gcs_server", "ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::ActorHost"):
        assert title in titles  # the cluster's processes, in the driver's session
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    killed = time.monotonic()
    while session_members(process.pid) and time.monotonic() < killed + 30:
        time.sleep(0.2)
    print(f"cluster gone {time.monotonic() - killed:.1f} s after the kill")
    assert [" ".join(p.cmdline()) for p in session_members(process.pid)] == []

    last = linked_iteration(run_dir)
    out = subprocess.run([VOLLEY, "train", "--resume", str(run_dir), "--max-iters", str(last + 1)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"resuming from {run_dir / f'checkpoint_{last:06d}'} (iteration {last}," in out.stdout
    assert progress_iterations(run_dir) == list(range(1, last + 2))


@pytest.mark.parametrize("how", ["SIGTERM to the process", "SIGINT to the process group (Ctrl-C)"])
def test_signal_writes_a_final_checkpoint_and_leaves_no_process(tmp_path, how):
    process = start("--engine", "ray", "--workers", "2", "--num-cpus", "2", "--envs-per-worker", "2",
                    "--set", "train_batch_size=256", "--set", "minibatch_size=64", "--no-tensorboard",
                    "--stop-reward", "1e9", "--checkpoint-freq", "1000", "--logdir", str(tmp_path))
    wait_for(lambda: any(p.stat().st_size for p in tmp_path.glob("*/progress.jsonl")), process,
             "a first iteration")
    assert len(session_members(process.pid)) >= 3  # volley, Ray's processes, two workers
    if how.startswith("SIGTERM"):
        process.send_signal(signal.SIGTERM)
    else:
        os.killpg(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    signum = signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT
    assert process.returncode == 128 + signum, output
    assert f"interrupted by {signum.name}: saving a final checkpoint" in output

    (run_dir,) = tmp_path.iterdir()
    algo = Algorithm.from_checkpoint(run_dir / LATEST, engine="local", num_workers=0)
    try:
        assert algo.iteration == progress_iterations(run_dir)[-1] >= 1
    finally:
        algo.stop()
    deadline = time.monotonic() + 30
    while session_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p.name() for p in session_members(process.pid)] == []


def test_resume_mistakes_get_one_line_naming_the_path(tmp_path, capsys):
    def error(*args: str) -> str:
        capsys.readouterr()
        assert main(list(args)) == 2
        captured = capsys.readouterr()
        assert "Traceback" not in captured.out + captured.err
        return captured.err.strip()

    empty = tmp_path / "empty"
    empty.mkdir()
    assert error("train", "--resume", str(empty)) == (
        f"volley train: error: no checkpoint in run directory '{empty}' to resume from")

    assert main(["train", *TINY, "--max-iters", "1", "--logdir", str(tmp_path / "runs")]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert f"--algo dqn but run '{run_dir}' trains PPO" in error("train", "--resume", str(run_dir), "--algo", "dqn")

    checkpoint = run_dir / "checkpoint_000001"
    data = bytearray((checkpoint / TENSORS).read_bytes())
    data[-1] ^= 0xFF
    (checkpoint / TENSORS).write_bytes(bytes(data))
    assert error("train", "--resume", str(run_dir)) == (
        f"volley train: error: checkpoint '{checkpoint}' is corrupt: '{TENSORS}' fails its SHA-256 check")

    manifest = json.loads((checkpoint / MANIFEST).read_text())
    manifest["format_version"] += 1
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))
    assert (f"has format version {manifest['format_version']}, newer than this volley reads"
            in error("evaluate", str(run_dir / LATEST)))
