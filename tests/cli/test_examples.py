"""The classic-recipe examples run end to end with small settings, and resume."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).parents[2] / "examples"


def run_example(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=300)


def test_pg_pong_runs_checkpoints_and_resumes(tmp_path):
    flags = ["--workers", "0", "--batch-episodes", "1", "--dir", str(tmp_path)]
    first = run_example("pg_pong.py", "--batches", "1", *flags)
    assert first.returncode == 0, first.stderr[-3000:]
    assert re.search(r"batch 1: 1 episodes, \d+ steps, running reward -\d+\.\d\d", first.stdout)
    assert (tmp_path / "checkpoint" / "volley_checkpoint.json").is_file()
    again = run_example("pg_pong.py", "--batches", "1", "--resume", *flags)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "batch 2: 1 episodes" in again.stdout  # the counters went on from the checkpoint


def test_trpo_pong_ram_runs_checkpoints_and_resumes(tmp_path):
    flags = ["--workers", "0", "--batch-steps", "200", "--dir", str(tmp_path)]
    first = run_example("trpo_pong_ram.py", "--batches", "1", *flags)
    assert first.returncode == 0, first.stderr[-3000:]
    assert re.search(r"batch 1: 1 episodes, \d+ steps, running reward -\d+\.\d\d", first.stdout)
    again = run_example("trpo_pong_ram.py", "--batches", "1", "--resume", *flags)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "batch 2: 1 episodes" in again.stdout


def test_ppo_humanoid_mpi_runs_on_two_ranks():
    out = run_example("ppo_humanoid_mpi.py", "--nprocs", "2", "--iters", "1", "--batch-steps", "1024")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("iteration")]
    assert len(lines) == 1 and "over 2 ranks" in lines[0]  # printed once, by rank 0


def test_ppo_frozenlake_times_both_layouts():
    out = run_example("ppo_frozenlake_workers.py", "--iters", "1", "--batch-steps", "256",
                      "--eval-episodes", "5")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^(\d) worker\(s\) x (\d) env\(s\): 1 iterations, (\d+) steps in [\d.]+ s \((\d+) "
                      r"steps/s\); mean return [\d.]+, evaluation success ([\d.]+) \(5 episodes\)$",
                      out.stdout, re.M)
    assert [(w, e) for w, e, *_ in rows] == [("1", "1"), ("2", "2")], out.stdout
    assert all(200 <= int(steps) <= 256 for _, _, steps, _, _ in rows)  # one batch each (minus dropped steps)
    assert all(0.0 <= float(success) <= 1.0 for *_, success in rows)
    assert re.search(r"^2x2 vs 1x1: [\d.]+x faster, [\d.]+x the steps/s$", out.stdout, re.M), out.stdout


def test_dqn_cartpole_async_prints_progress():
    out = run_example("dqn_cartpole_async.py", "--iters", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("iteration")]
    assert len(lines) == 2 and lines[1].startswith("iteration 2: return ")
    assert re.search(r"\d+ learner updates, replay \d+, .* 0 restarts", lines[1])


def test_custom_metrics_callbacks_reach_progress_and_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = run_example("custom_metrics_callbacks.py", "--iters", "2", "--workers", "0", "--dir", str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"^pole angle over the last \d+ episodes: mean 0\.\d{4} rad", out.stdout, re.M), out.stdout
    last = json.loads((tmp_path / "progress.jsonl").read_text().splitlines()[-1])
    assert last["callback_ok"] is True and last["learner_custom_metrics"]["sum_actions_in_train_batch"] > 0
    assert len(last["hist_stats"]["pole_angles"]) == sum(last["hist_stats"]["episode_lengths"])
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "histograms": 0}).Reload()
    angle = events.Scalars("volley/custom_metrics/pole_angle_mean")
    assert [e.step for e in angle][-1] == last["timesteps_total"]
    assert angle[-1].value == np.float32(last["custom_metrics"]["pole_angle_mean"])
    histogram = events.Histograms("volley/hist_stats/pole_angles")[-1].histogram_value
    assert histogram.num == len(last["hist_stats"]["pole_angles"])


def test_the_custom_dict_observation_model_trains_and_acts():
    out = run_example("custom_model_dict_obs.py", "--iters", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line for line in out.stdout.splitlines() if line.startswith("iteration")]
    assert len(lines) == 2 and re.match(r"iteration 2: return [\d.]+, \d+ steps", lines[1]), lines
    assert re.search(r"^pole leaning right: action [01] \(1 pushes the cart right\)$", out.stdout, re.M)


def test_multidiscrete_actions_learn_and_act_back_what_they_are_shown():
    out = run_example("multidiscrete_actions.py", "--iters", "2", "--space", "nested")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^iteration (\d): (\d+) steps, mean return (-?[\d.]+), entropy [\d.]+$", out.stdout, re.M)
    assert [r[0] for r in rows] == ["1", "2"] and int(rows[1][1]) > int(rows[0][1]), out.stdout
    assert re.search(r"^shown \{'a': \(\{'d': .*\nacted \{'a': \(\{'d': .*\nreward -?[\d.]+$", out.stdout, re.M | re.S)


def test_action_masking_never_sends_an_illegal_action():
    out = run_example("action_masking.py", "--iters", "2")  # the environment raises on an illegal one
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"^iteration 2: \d+ steps, mean return [\d.]+ of 20$", out.stdout, re.M), out.stdout
    assert re.search(r"^greedy evaluation: mean return [\d.]+ over 10 episodes; \d+ training steps, no illegal "
                     r"action taken$", out.stdout, re.M), out.stdout


def test_multi_agent_self_play_adds_snapshots_and_evaluates_main():
    out = run_example("multi_agent_self_play.py", "--stop-iters", "3", "--batch-steps", "256", "--minibatch", "64",
                      "--envs-per-worker", "4", "--min-games", "1", "--win-rate-threshold", "0", "--eval-games", "4")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^iteration (\d): (\d+) steps, main's return [+-][\d.]+, win rate against (\S+) ([\d.]+) "
                      r"over (\d+) games$", out.stdout, re.M)
    assert [(i, steps) for i, steps, *_ in rows] == [("1", "256"), ("2", "512"), ("3", "768")], out.stdout
    # a threshold of 0 adds a snapshot after every iteration, and the next one plays main against it
    assert [opponent for _, _, opponent, _, _ in rows] == ["random", "main_v1", "main_v2"], out.stdout
    assert all(int(games) >= 1 for *_, games in rows), out.stdout
    assert re.search(r"^added main_v3: the league is main against random, main_v1, main_v2, main_v3$", out.stdout, re.M)
    assert re.search(r"^main against the random policy: won \d+\.\d% of 4 games \(league of 3 snapshots, 768 "
                     r"steps\)$", out.stdout, re.M), out.stdout
