"""The MPI engine under ``mpiexec -n 2``: learning, identical replicas, the same first batch
as the local engine, and a failing rank that ends the job instead of hanging it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")
BIN = Path(sys.executable).parent
MPIEXEC = shutil.which("mpiexec", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
RANKS = Path(__file__).with_name("ranks.py")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")


def mpiexec(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(RANKS), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_ppo_reaches_475_on_two_ranks_in_gather_mode(tmp_path):
    out = subprocess.run([str(BIN / "volley"), "train", "--engine", "mpi", "--nprocs", "2",
                          "--stop-reward", "475", "--max-timesteps", "200000", "--envs-per-worker", "8",
                          "--logdir", str(tmp_path), "--no-tensorboard"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "engine mpi, 2 worker(s) x 8 envs" in out.stdout
    assert out.stdout.count("volley: stopped") == 1  # only rank 0 prints
    progress = next(tmp_path.glob("*/progress.jsonl")).read_text().splitlines()
    last = json.loads(progress[-1])
    assert last["episode_reward_mean"] >= 475, last
    assert last["timesteps_total"] <= 200_000 + 2048


def test_allreduce_mode_keeps_the_replicas_identical():
    out = mpiexec("allreduce")
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(line for line in out.stdout.splitlines() if line.startswith("replicas"))
    words = line.split()
    assert words[1] == "2"
    assert float(words[3]) > 1e-4  # the weights did move
    assert float(words[5]) == 0.0  # and are bit-for-bit the same on both ranks


def test_allreduce_replicas_restored_from_a_checkpoint_stay_identical(tmp_path):
    out = mpiexec("resume_allreduce", str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    words = next(line for line in out.stdout.splitlines() if line.startswith("resumed")).split()
    assert (words[1], words[3]) == ("2", "4")
    assert float(words[5]) == 0.0  # every rank restored the same state and trains in step


def test_volley_train_resumes_an_allreduce_run(tmp_path):
    """Every rank restores the checkpoint (the tuned MuJoCo presets train in this mode)."""
    common = ["--no-tensorboard", "--envs-per-worker", "2"]
    first = subprocess.run([str(BIN / "volley"), "train", "--engine", "mpi", "--nprocs", "2", "--set",
                            "mpi_mode=allreduce", "--max-iters", "2", "--logdir", str(tmp_path), *common],
                           capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = tmp_path.iterdir()
    # no --engine or --nprocs: the run's params.json says MPI on 2 ranks
    again = subprocess.run([str(BIN / "volley"), "train", "--resume", str(run_dir), "--max-iters", "4",
                            *common], capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("volley: resuming from") == 1  # rank 0 alone says it
    assert "engine mpi, 2 worker(s)" in again.stdout
    rows = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4]


def test_allreduce_replicas_adapt_the_kl_penalty_alike():
    """Each rank measures KL on its own data, but all adapt kl_coeff from the mean over the ranks."""
    out = mpiexec("kl_penalty")
    assert out.returncode == 0, out.stderr[-3000:]
    number = r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)"  # the ranks' lines can run into each other in mpiexec's output
    rows = re.findall(rf"rank (\d) kl {number} kl_coeff {number}", out.stdout)
    by_rank = {rank: [(float(kl), float(coeff)) for r, kl, coeff in rows if r == rank] for rank in ("0", "1")}
    assert len(by_rank["0"]) == len(by_rank["1"]) == 3
    assert [kl for kl, _ in by_rank["0"]] != [kl for kl, _ in by_rank["1"]]  # their own data differs
    weights = [coeff for _, coeff in by_rank["0"]]
    assert weights == [coeff for _, coeff in by_rank["1"]]  # bit for bit
    assert weights == pytest.approx([0.2 * 1.5, 0.2 * 1.5 ** 2, 0.2 * 1.5 ** 3])  # every KL > 2 x 1e-4


def test_gather_mode_first_batch_equals_the_local_engine(tmp_path):
    out = mpiexec("first_batch", str(tmp_path / "mpi.npz"))
    assert out.returncode == 0, out.stderr[-3000:]
    from volley import PPOConfig

    local = (PPOConfig().environment("CartPole-v1").resources(engine="local")
             .rollouts(num_workers=2, num_envs_per_worker=3).training(train_batch_size=600, minibatch_size=100)
             .debugging(seed=3).build())
    try:
        expected = local.sample()
    finally:
        local.stop()
    got = np.load(tmp_path / "mpi.npz")
    assert set(got.files) == set(expected)
    for key in ("obs", "actions"):  # same env seeds, same observations, same sampled actions
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    for key in expected:  # network outputs may differ in the last bit between processes
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-6, atol=1e-6, err_msg=key)


def assert_rank_1_ends_the_job(program: str, failure: str) -> None:
    """``program`` fails on rank 1: the job ends within a minute, rank 1 naming ``failure``."""
    start = time.monotonic()
    out = mpiexec(program, timeout=120)
    assert out.returncode != 0
    assert f"rank 1 failed: {failure}" in out.stderr, out.stderr
    assert time.monotonic() - start < 60


def test_an_exception_on_rank_1_ends_the_job_naming_rank_1():
    assert_rank_1_ends_the_job("fail_on_rank_1", "EnvError: the creator registered as 'Flaky' failed with "
                               "env_config {}: RuntimeError: this environment cannot start here")


def test_custom_metrics_of_every_rank_reach_rank_0_in_both_modes():
    out = mpiexec("callbacks")
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [result["mode"] for result in results] == ["gather", "allreduce"]
    for result in results:
        metrics, hist = result["custom_metrics"], result["hist_stats"]
        assert metrics["length_mean"] == pytest.approx(result["episode_len_mean"])
        assert (metrics["rank_min"], metrics["rank_max"]) == (0, 1)
        assert hist["lengths"] == hist["episode_lengths"]


def test_a_callbacks_hook_that_raises_on_rank_1_ends_the_job_naming_it():
    assert_rank_1_ends_the_job("callback_fails_on_rank_1", "CallbackError: FailsOnRank1.on_episode_step "
                               "raised RuntimeError in rollout worker 1: rank 1 says no")


def test_train_until_serves_rank_0_from_the_other_ranks(tmp_path):
    out = mpiexec("train_until", str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = sorted(line for line in out.stdout.splitlines() if line.startswith("rank "))
    assert lines == ["rank 0: reached 2 iterations, iteration 2", "rank 1: served rank 0, iteration 0"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint")) == [
        "checkpoint", "checkpoint_000002"]  # written by rank 0 alone
    assert len((tmp_path / "progress.jsonl").read_text().splitlines()) == 2


def test_training_on_a_rank_other_than_0_is_a_clear_error():
    assert_rank_1_ends_the_job("train_on_rank_1", "VolleyError: MPI rank 1 serves rank 0 and does not "
                               "train or sample itself: call algo.serve_forever() on the ranks other than 0")


def test_nprocs_needs_the_mpi_engine():
    out = subprocess.run([str(BIN / "volley"), "train", "--nprocs", "2"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "--nprocs 2 needs --engine mpi, got --engine ray" in out.stderr


def test_a_worker_count_that_disagrees_with_mpiexec_is_one_line():
    out = subprocess.run([MPIEXEC, "-n", "2", str(BIN / "volley"), "train", "--engine", "mpi", "--workers", "3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == ("volley train: error: num_workers=3 but mpiexec started 2 rank(s): under "
                                  "the MPI engine each rank is one worker; leave num_workers unset or "
                                  "change mpiexec -n")  # said once, by rank 0


def test_allreduce_mode_is_refused_for_trpo():
    from volley import ConfigError, TRPOConfig

    with pytest.raises(ConfigError, match="mpi_mode='allreduce' is for PPO and PG, not TRPO"):
        TRPOConfig().environment("CartPole-v1").resources(engine="mpi", mpi_mode="allreduce").build()


def test_a_custom_model_trains_in_gather_and_allreduce_modes():
    """RLlib's protocol on MPI ranks: the model registered by the script every rank runs, its Dict
    observations restored on every rank, replicas identical in allreduce mode."""
    out = mpiexec("custom_model")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = {line.split()[1]: line.split() for line in out.stdout.splitlines() if line.startswith("custom")}
    assert sorted(lines) == ["allreduce", "gather"]
    for words in lines.values():
        assert float(words[3]) > 1e-4  # the weights moved
    assert lines["allreduce"][5:] == ["0.0", "replicas", "2"]  # bit-for-bit the same on both ranks


def test_masked_and_multidiscrete_actions_gather_on_two_ranks():
    """Each rank's environment raises on a masked action (RLlib's Dict observation, sb3-contrib's
    action_masks()), so a leak on either rank fails the job; rank 0 finds every gathered action
    allowed by the mask gathered with it; MultiDiscrete actions gather as [rows, 4] columns."""
    out = mpiexec("masked")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = {line.split()[1]: line.split() for line in out.stdout.splitlines() if line.startswith("masked")}
    assert sorted(lines) == ["multidiscrete", "rllib", "sb3"]
    for name in ("rllib", "sb3"):
        words = lines[name]
        assert int(words[3]) >= 380 and words[5] == f"({words[3]},)" and words[7] == words[3], words
    assert lines["multidiscrete"][5:7] == [f"({lines['multidiscrete'][3]},", "4)"]
    assert all(words[-1] == "1" for words in lines.values())
