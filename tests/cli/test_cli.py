"""The volley command: a full train/evaluate round trip, and one-line errors for mistakes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from volley.cli import main

VOLLEY = os.path.join(os.path.dirname(sys.executable), "volley")


def volley(*args: str, timeout: int = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([VOLLEY, *args], capture_output=True, text=True, timeout=timeout, env=env)


MISTAKES = [
    (["train", "--env", "CartPol-v1"], "unknown environment id 'CartPol-v1'; did you mean"),
    (["train", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
    (["train", "--workers", "-2"], "argument --workers: must be >= 0, got -2"),
    (["train", "--set", "num_worker=2"], "unknown config key 'num_worker'"),
    (["train", "--set", "lr=fast"], "config key 'lr' must be float or list[list[float]], got 'fast'"),
    (["train", "--algo", "ppp"], "unknown algorithm 'ppp'; did you mean 'ppo'?"),
    (["evaluate", "no/such/checkpoint"], "no checkpoint at 'no/such/checkpoint'"),
    (["evaluate", "no/such/checkpoint", "--video", "out.avi"], "unsupported video extension '.avi'"),
    (["plot", "no/such/run"], "no run directory 'no/such/run'"),
    (["plot", ".", "-o", "curves.bmp"], "unsupported plot extension '.bmp'"),
    (["tune", "--grid", "lrr=1e-3,3e-4", "--max-iters", "1"],
     "unknown config key 'lrr' for PPOConfig; did you mean 'lr'?"),
    (["tune", "--grid", "lr", "--max-iters", "1"], "expected KEY=V1,V2,..., got 'lr'"),
    (["tune", "--grid", "lr=fast,1e-3", "--max-iters", "1"], "config key 'lr' must be float or list[list[float]], got 'fast'"),
    (["tune", "--loguniform", "lr=0,1e-3", "--max-iters", "1"], "two numbers LO,HI with 0 < LO < HI"),
    (["tune", "--max-iters", "1"], "nothing to search"),
    (["tune", "--grid", "lr=1e-3", "--asha", "--stop-reward", "100"], "--asha needs --max-iters"),
]


@pytest.mark.parametrize(("args", "message"), MISTAKES)
def test_user_mistakes_get_one_line_and_exit_2(args, message, ray_session, capfd):
    """Each mistake through ``volley.cli.main`` in this process, as the ``volley`` script calls it
    (``sys.exit(main())``; argparse's own errors exit from inside). capfd reads file descriptors 1
    and 2, so a line written below Python (Ray's, torch's) would show too. Ray is up in this
    process (``ray_session``), so `volley train` begins no cluster of its own here: a real process
    that does, and the imports of a fresh process, are
    test_a_real_process_prints_only_the_one_line's."""
    capfd.readouterr()
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    out, err = capfd.readouterr()
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(("args", "message"), [
    MISTAKES[1],  # argparse's error, from inside parse_args, before any import
    MISTAKES[3],  # train on the Ray engine: the cluster begun in the background is shut down unheard
    MISTAKES[14],  # after importing torch and Ray Tune (the most a mistake imports), which print nothing
], ids=["argparse", "ray-cluster-begun", "after-ray-tune-import"])
def test_a_real_process_prints_only_the_one_line(args, message):
    """The ``volley`` script in a fresh process: exit status 2 and nothing on stderr but the line.
    The other mistakes take these same paths (test_user_mistakes_get_one_line_and_exit_2 checks
    each one's line in this process)."""
    out = volley(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_version_is_the_package_version():
    from volley._version import __version__

    out = volley("--version", timeout=60)
    assert out.returncode == 0 and out.stdout == f"volley {__version__}\n", out.stderr


def test_dir_lists_the_public_names_unloaded():
    """Tab completion and dir() show what to import, though PEP 562 loads the names on first use."""
    import volley as package

    names = dir(package)
    assert names == sorted(package.__all__)
    assert {"PPOConfig", "SACConfig", "register_env", "Algorithm"} <= set(names)
    assert "importlib" not in names and "_HOMES" not in names


def test_train_then_evaluate_round_trip(tmp_path):
    start = time.monotonic()
    out = volley("train", "--engine", "local", "--max-iters", "3", "--seed", "1",
                 "--envs-per-worker", "4", "--logdir", str(tmp_path))
    wall = time.monotonic() - start
    assert out.returncode == 0, out.stderr
    assert "stopped (reached 3 iterations) at iteration 3" in out.stdout
    # the training seconds, and the whole command's with start-up (torch's import at least)
    stop = re.search(r"^volley: stopped .*, ([\d.]+) s of training \(([\d.]+) s with start-up\)$", out.stdout, re.M)
    assert stop is not None, out.stdout
    training, in_all = float(stop.group(1)), float(stop.group(2))
    assert training + 0.5 < in_all <= wall + 0.05
    (run_dir,) = tmp_path.iterdir()
    rows = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
    assert rows[-1]["timesteps_total"] > rows[0]["timesteps_total"] > 0
    assert any(p.name.startswith("events.out.tfevents") for p in run_dir.iterdir())
    assert (run_dir / "checkpoint").resolve().name == "checkpoint_000003"

    out = volley("evaluate", str(run_dir / "checkpoint"), "--episodes", "3")
    assert out.returncode == 0, out.stderr
    assert "3 episodes of CartPole-v1: return" in out.stdout


def test_bench_speedup_prints_one_row_per_worker_count():
    out = volley("bench", "speedup", "--algo", "trpo", "--iters", "2", "--warmup", "1", "--workers", "0,1",
                 "--mpi", "1", "--num-cpus", "2", "--set", "train_batch_size=500",
                 "--set", "num_envs_per_worker=2")
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if re.match(r"\| \w+ \| \d", line)]
    assert [(row[0].strip(), int(row[1])) for row in rows] == [("local", 0), ("ray", 1), ("mpi", 1)]
    serial = rows[0]
    for row in rows:  # same seed, one worker holding every env: the very same timed steps
        assert int(row[5]) == int(serial[5]) >= 2 * 500
        wall, sample, learn = (float(cell) for cell in row[2:5])
        assert sample > 0 and learn > 0 and sample + learn <= wall + 0.015, row  # parts of wall, each to 0.01 s
    assert float(serial[7]) == 1.00
    wall, steps, rate = float(rows[1][2]), int(rows[1][5]), float(rows[1][6])
    assert steps / (wall + 0.005) <= rate <= steps / (wall - 0.005)  # steps over wall s, shown to 0.01 s


def on_a_terminal(*args: str, stream: str) -> tuple[str, subprocess.CompletedProcess]:
    """``volley ARGS`` with its ``stream`` ("stdout" or "stderr") on a pseudo-terminal: what the
    terminal showed, and the run (the other stream piped)."""
    import pty

    main, child = pty.openpty()
    other = "stderr" if stream == "stdout" else "stdout"
    proc = subprocess.Popen([VOLLEY, *args], **{stream: child, other: subprocess.PIPE}, text=True)
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child's end closed: it exited
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    piped = getattr(proc, other).read()
    proc.wait(timeout=300)
    return shown.decode(), subprocess.CompletedProcess(proc.args, proc.returncode, piped, piped)


def test_a_budget_on_a_terminal_shows_a_bar_with_the_time_left(tmp_path):
    """train and bench draw a bar with the ETA on a terminal; piped (as every other test runs them),
    their output has none."""
    shown, run = on_a_terminal("train", "--engine", "local", "--max-timesteps", "4096", "--logdir", str(tmp_path),
                               stream="stdout")
    assert run.returncode == 0, run.stderr
    # a batch is 2,048 steps less the resets: the first row is just under halfway
    assert re.search(r"\[#{14}\.{16}\]  4\d%  0:\d\d elapsed, ETA 0:\d\d", shown), shown
    assert "] 100%" in shown
    shown, run = on_a_terminal("bench", "speedup", "--algo", "pg", "--iters", "2", "--warmup", "2", "--workers", "0",
                               "--set", "train_batch_size=200", stream="stderr")
    assert run.returncode == 0 and "| local | 0 |" in run.stdout and "ETA" not in run.stdout, run.stdout
    assert "[########......................]  25%" in shown and "] 100%" in shown, shown


def test_bench_sampler_rows_add_up():
    """One row per environment (an MLP acting in numpy, a CNN in torch), each ratio the one its
    own rates give."""
    out = volley("bench", "sampler", "--seconds", "0.2", "--env", "CartPole-v1", "--env", "ALE/Pong-v5")
    assert out.returncode == 0, out.stderr
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.stdout.splitlines()
            if re.match(r"\| [\w/-]+ \| \d", line)]
    assert [(row[0], int(row[1])) for row in rows] == [("CartPole-v1", 16), ("ALE/Pong-v5", 1)]
    for row in rows:
        raw, forward, floor, sampled = (float(cell.replace(",", "")) for cell in row[2:6])
        assert min(raw, forward, floor, sampled) > 0, row
        assert abs(floor - 1 / (1 / raw + 1 / forward)) <= 1, row  # shown to the step
        for shown, rate in ((float(row[6]), raw), (float(row[7]), floor)):
            low, high = ratio_range(sampled, rate)
            assert low <= shown <= high, row


def ratio_range(shown_num: float, shown_den: float) -> tuple[float, float]:
    """What a ratio of two rates may show to 0.01 when the table shows each rate to the step: each
    rate was rounded (off by at most 0.5), then their exact ratio rounded (at most 0.005)."""
    return (shown_num - 0.5) / (shown_den + 0.5) - 0.005, (shown_num + 0.5) / (shown_den - 0.5) + 0.005


def test_sac_trains_resumes_and_evaluates(tmp_path):
    """volley train --algo sac, --resume from its checkpoint (replay contents included), evaluate."""
    small = ["--set", "learning_starts=50", "--set", 'model={"fcnet_hiddens": [16]}',
             "--set", 'q_model_config={"fcnet_hiddens": [16]}', "--set", "checkpoint_replay=true",
             "--set", "min_time_s_per_iteration=0"]
    out = volley("train", "--algo", "sac", "--env", "Pendulum-v1", "--engine", "local", "--max-iters", "2",
                 "--logdir", str(tmp_path), "--name", "run", *small)
    assert out.returncode == 0, out.stderr
    run = tmp_path / "run"
    out = volley("train", "--resume", str(run), "--max-iters", "3")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
    assert rows[2]["timesteps_total"] == 300 and rows[2]["replay_size"] == 300  # 100 steps an iteration
    out = volley("evaluate", str(run / "checkpoint"), "--episodes", "2")
    assert out.returncode == 0, out.stderr
    assert "2 episodes of Pendulum-v1: return" in out.stdout
